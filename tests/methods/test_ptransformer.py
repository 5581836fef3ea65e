"""P-Transformer (docs/methods/ptransformer.md, its "Tests" section): position-aware attention, the
relative term, ablations."""
import math

import pytest
import torch
import torch.nn.functional as F

from _tiny import assert_incremental_equals_full, random_pair, tiny_config, translate_checked
from docnmt.attention import AttnSpec, MultiheadAttention, RelativeLogits, attention_sdpa
from docnmt.config import Config
from docnmt.errors import ConfigError
from docnmt.methods.ptransformer import PositionAwarePolicy, PTransformerOptions, build
from docnmt.model import ModelConfig, Transformer, sinusoidal_table
from docnmt.training import Trainer

CFG = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                  dropout=0.0)
OPTS = PTransformerOptions(rel_max_distance=6)


def opts_with(**kw):
    return PTransformerOptions(**{**vars(OPTS), **kw})


def test_relative_gather_equals_the_explicit_tensor():
    """A = Q Eᵀ gathered at r(i, j) equals q_i · E[r(i, j)] through the explicit
    I×I×d_h tensor, including clipping beyond ±M and a query offset (incremental decoding)."""
    torch.manual_seed(0)
    pol = PositionAwarePolicy(CFG, OPTS)
    M, E = OPTS.rel_max_distance, pol.rel_embed[0].detach()
    q = torch.randn(2, 4, 5, 8, requires_grad=True)
    grad = torch.randn(2, 4, 5, 14)
    for offset, n_keys in ((0, 5), (2, 6), (9, 14), (0, 14)):      # skewed view, and clipped gather
        got = pol.relative_bias(q, "enc.0.self", offset, n_keys).dense()
        i = torch.arange(offset, offset + 5)[:, None]
        j = torch.arange(n_keys)[None, :]
        R = pol.rel_embed[0][(j - i).clamp(-M, M) + M]                  # (I, J, d_h): the explicit form
        want = torch.einsum("bhid,ijd->bhij", q, R) / math.sqrt(8)
        torch.testing.assert_close(got, want)
        g1 = torch.autograd.grad((got * grad[..., :n_keys]).sum(), (q, pol.rel_embed))
        g2 = torch.autograd.grad((want * grad[..., :n_keys]).sum(), (q, pol.rel_embed))
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b)
    got = got.detach()
    clipped = float(q[0, 0, 0].detach() @ E[2 * M]) / math.sqrt(8)       # j − i = 13 > M: row 2M
    assert float(got[0, 0, 0, 13]) == pytest.approx(clipped, rel=1e-5)


@pytest.mark.parametrize("causal, n_q, n_keys, M", [(False, 70, 70, 80), (True, 70, 70, 80),
                                                    (False, 45, 45, 6), (True, 5, 40, 80)])
def test_blocked_relative_attention_equals_the_dense_bias(causal, n_q, n_keys, M):
    """attention_relative (block by block of queries, only the table rows each block needs)
    gives SDPA-with-the-dense-term's outputs and gradients for q, k, v and the table: several
    blocks, key padding, causality with queries aligned to the last keys, clipped distances."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, n, 8, requires_grad=True) for n in (n_q, n_keys, n_keys))
    table = torch.randn(2 * M + 1, 8, requires_grad=True)
    pad = torch.zeros(3, 1, 1, n_keys, dtype=torch.bool)
    pad[1, ..., n_keys - 7:] = True
    rel = RelativeLogits(q, table, M - (n_keys - n_q), n_keys, 8 ** -0.5)
    grad = torch.randn(3, 2, n_q, 8)
    outs = []
    for bias in (rel, rel.dense()):
        out = attention_sdpa(q, k, v, AttnSpec(mask=pad, is_causal=causal, bias=bias))
        outs.append((out, *torch.autograd.grad((out * grad).sum(), (q, k, v, table))))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_positions_reach_queries_and_keys_but_not_values():
    torch.manual_seed(0)
    pol = PositionAwarePolicy(CFG, opts_with(rel_positions=False))
    mha = MultiheadAttention(CFG.d_model, CFG.heads, name="enc.0.self").eval()
    x = torch.randn(2, 6, CFG.d_model)
    spec = pol.encoder_specs(torch.ones(2, 6, dtype=torch.long), torch.zeros(2, 6, dtype=torch.bool))["enc_self"]
    P = sinusoidal_table(6, CFG.d_model)
    W, b = mha.in_proj.weight.chunk(3), mha.in_proj.bias.chunk(3)
    split = lambda t: t.view(2, 6, 4, 8).transpose(1, 2)  # noqa: E731
    q, k, v = split(F.linear(x + P, W[0], b[0])), split(F.linear(x + P, W[1], b[1])), split(F.linear(x, W[2], b[2]))
    want = mha.out_proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 6, -1))
    torch.testing.assert_close(mha(x, x, spec), want, rtol=1e-5, atol=1e-5)


def test_cross_attention_adds_target_positions_to_queries_and_source_positions_to_keys():
    """Eq. 7 for cross-attention, against a hand computation: queries from y + P_t at the
    decoder's own positions (here target tokens 2-4 of an incremental step), keys from
    memory + P_s, values from memory alone."""
    torch.manual_seed(0)
    mha = MultiheadAttention(CFG.d_model, CFG.heads, name="dec.0.cross").eval()
    y, mem = torch.randn(2, 3, CFG.d_model), torch.randn(2, 5, CFG.d_model)
    src, pad = torch.ones(2, 5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.bool)
    spec = PositionAwarePolicy(CFG, OPTS).decoder_specs(torch.ones(2, 4, dtype=torch.long), src, pad, 1)["cross"]
    P = sinusoidal_table(5, CFG.d_model)
    W, b = mha.in_proj.weight.chunk(3), mha.in_proj.bias.chunk(3)
    split = lambda t: t.view(2, -1, 4, 8).transpose(1, 2)  # noqa: E731
    q, k, v = (split(F.linear(y + P[1:4], W[0], b[0])), split(F.linear(mem + P, W[1], b[1])),
               split(F.linear(mem, W[2], b[2])))
    want = mha.out_proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 3, -1))
    torch.testing.assert_close(mha(y, mem, spec), want, rtol=1e-5, atol=1e-5)


ABLATIONS = [{}, {"pos_attn_cross": False}, {"pos_attn_enc_self": False}, {"pos_attn_dec_self": False},
             {"rel_positions": False}, {"rel_sharing": "side"}, {"rel_sharing": "layer"}]


@pytest.mark.parametrize("over", ABLATIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "full")
def test_incremental_decoding_equals_full_forward(over):
    """Both position terms at the right positions while decoding step by step, for
    the full model, every ablation and every table sharing."""
    torch.manual_seed(0)
    assert_incremental_equals_full(build(CFG, opts_with(**over)).eval(), *random_pair())


def test_ablation_switches():
    pol = PositionAwarePolicy(CFG, opts_with(pos_attn_cross=False, pos_attn_enc_self=False, rel_positions=False))
    src, pad = torch.ones(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.bool)
    enc = pol.encoder_specs(src, pad)["enc_self"]
    dec = pol.decoder_specs(torch.ones(1, 3, dtype=torch.long), src, pad, 0)
    assert enc.q_add is None and enc.k_add is None and enc.bias is None and pol.rel_embed is None
    assert dec["cross"].q_add is None and dec["cross"].k_add is None
    assert dec["dec_self"].q_add is not None and dec["dec_self"].bias is None
    full = PositionAwarePolicy(CFG, OPTS).decoder_specs(torch.ones(1, 3, dtype=torch.long), src, pad, 0)
    assert full["cross"].k_add.shape == (4, CFG.d_model) and callable(full["dec_self"].bias)
    assert full["cross"].bias is None                     # the relative term is for self-attention only


def test_decoder_self_attention_switch_and_cross_attention_positions():
    """-dec-self removes P from decoder self-attention only; cross-attention adds the target
    positions to its queries and the source positions to its keys (Eq. 7,
    docs/methods/ptransformer.md#position-aware-attention)."""
    from docnmt.model import sinusoidal_table
    src, pad = torch.ones(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.bool)
    tgt = torch.ones(1, 3, dtype=torch.long)
    pol = PositionAwarePolicy(CFG, opts_with(pos_attn_dec_self=False))
    dec = pol.decoder_specs(tgt, src, pad, 0)
    assert dec["dec_self"].q_add is None and dec["dec_self"].k_add is None and callable(dec["dec_self"].bias)
    assert pol.encoder_specs(src, pad)["enc_self"].q_add is not None
    table = sinusoidal_table(16, CFG.d_model)
    torch.testing.assert_close(dec["cross"].q_add, table[:3])
    torch.testing.assert_close(dec["cross"].k_add, table[:4])
    step = pol.decoder_specs(torch.ones(1, 3, dtype=torch.long), src, pad, 2)     # 3rd target token
    torch.testing.assert_close(step["cross"].q_add, table[2:3])
    assert (float(table[1, 0]), float(table[1, 1])) == pytest.approx((math.sin(1.0), math.cos(1.0)))  # unscaled


@pytest.mark.parametrize("sharing,rows", [("all", [0, 0, 0, 0]), ("side", [0, 0, 1, 1]), ("layer", [0, 1, 2, 3])])
def test_relative_table_sharing(sharing, rows):
    """Which table each self-attention reads: one for all; encoder then decoder; one per layer,
    the encoder's layers first (the order of the saved parameter)."""
    pol = PositionAwarePolicy(CFG, opts_with(rel_sharing=sharing))
    assert pol.rel_embed.shape == (max(rows) + 1, 2 * OPTS.rel_max_distance + 1, 8)
    for name, row in zip(("enc.0.self", "enc.1.self", "dec.0.self", "dec.1.self"), rows):
        assert pol.table(name).data_ptr() == pol.rel_embed[row].data_ptr(), name
    if sharing == "layer":          # 3 encoder layers, 2 decoder layers: the decoder's tables are 3 and 4
        deep = PositionAwarePolicy(ModelConfig(**{**vars(CFG), "encoder_layers": 3}), opts_with(rel_sharing="layer"))
        dec = [deep.table(f"dec.{i}.self").data_ptr() for i in (0, 1)]
        assert dec == [deep.rel_embed[i].data_ptr() for i in (3, 4)]


def test_option_errors_say_what_is_allowed():
    with pytest.raises(ConfigError, match="unknown rel_sharing 'head'; choose one of all, side, layer"):
        PositionAwarePolicy(CFG, opts_with(rel_sharing="head"))
    with pytest.raises(ConfigError, match="rel_max_distance must be at least 1, not 0"):
        opts_with(rel_max_distance=0)
    assert PositionAwarePolicy(CFG, opts_with(rel_max_distance=1)).rel_embed.shape == (1, 3, 8)


def test_relative_table_starts_at_std_one_over_sqrt_d_head():
    """E is initialised N(0, d_h^-1/2) (docs/methods/ptransformer.md#pt-relative-form)."""
    torch.manual_seed(0)
    table = PositionAwarePolicy(CFG, PTransformerOptions()).rel_embed.detach()        # 1025 × 8 values
    assert float(table.std()) == pytest.approx(8 ** -0.5, rel=0.05) and abs(float(table.mean())) < 0.02


def test_self_attention_specs_hold_the_relative_term_and_positions_at_their_offset():
    """The specs' relative term is q_i · E[clip(j − i) + M] / sqrt(d_h) with i the query's own
    position (0 in the encoder, the decoding offset in the decoder), and P of those positions is
    added to both queries and keys."""
    torch.manual_seed(0)
    pol = PositionAwarePolicy(CFG, OPTS)
    M, E = OPTS.rel_max_distance, pol.rel_embed[0].detach()
    P = sinusoidal_table(16, CFG.d_model)

    def explicit(q, first, n_keys):
        i, j = torch.arange(first, first + q.size(2))[:, None], torch.arange(n_keys)[None, :]
        return torch.einsum("bhid,ijd->bhij", q, E[(j - i).clamp(-M, M) + M]) / math.sqrt(8)

    src, pad = torch.ones(2, 9, dtype=torch.long), torch.zeros(2, 9, dtype=torch.bool)
    q = torch.randn(2, 4, 9, 8)
    enc = pol.encoder_specs(src, pad)["enc_self"]
    torch.testing.assert_close(enc.bias(q, "enc.0.self").dense().detach(), explicit(q, 0, 9))
    assert torch.equal(enc.q_add, P[:9]) and torch.equal(enc.k_add, P[:9])
    dec = pol.decoder_specs(torch.ones(2, 7, dtype=torch.long), src, pad, 4)["dec_self"]    # tokens 4-6
    torch.testing.assert_close(dec.bias(q[:, :, :3], "dec.0.self").dense().detach(), explicit(q[:, :, :3], 4, 7))
    assert torch.equal(dec.q_add, P[4:7]) and torch.equal(dec.k_add, P[4:7])


def test_source_padding_changes_nothing():
    """Encoder self-attention and cross-attention never read padded source positions."""
    torch.manual_seed(0)
    model = build(CFG, OPTS).eval()
    src, tgt = random_pair()                        # the second source row is padded
    with torch.no_grad():
        torch.testing.assert_close(model(F.pad(src, (0, 3)), tgt), model(src, tgt), rtol=1e-5, atol=1e-5)


def test_base_preset_adds_the_papers_65_6k_parameters():
    """One (2·512+1) × 64 table for all heads and layers: +65,600 parameters
    (docs/methods/ptransformer.md#pt-table-sharing)."""
    def count(name):
        cfg = Config.load(name)
        cfg.model.vocab_size, cfg.model.pad_id = 100, 0
        model = build(cfg.model, cfg.method) if cfg.method_name == "ptransformer" else Transformer(cfg.model)
        return sum(p.numel() for p in model.parameters())
    assert count("p_transformer_base") - count("transformer_base") == 1025 * 64


@pytest.mark.slow
def test_train_and_translate_documents(tiny_dir, tmp_path):
    data = tiny_dir / "data"
    cfg = tiny_config("doc2doc", max_update=6).override({"method.name": "ptransformer",
                                                         "data.max_instance_tokens": 160})
    Trainer.from_dirs(cfg, data, tmp_path / "m", progress_bar=False).train()
    translate_checked(tmp_path / "m", tiny_dir / "raw/chat.en", 10)


def test_blocked_relative_attention_in_bf16():
    """The bf16 path GPUs take (fp32 softmax and table gradient): close to fp32, gradients in
    each input's own dtype."""
    from docnmt.attention import attention_relative
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 70, 8) for _ in range(3))
    table = torch.randn(161, 8, requires_grad=True)
    res = []
    for dtype in (torch.float32, torch.bfloat16):
        qkv = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        rel = RelativeLogits(qkv[0], table, 80, 70, 8 ** -0.5)
        out = attention_relative(*qkv, AttnSpec(is_causal=True, bias=rel))
        grads = torch.autograd.grad(out.float().sum(), (*qkv, table))
        assert out.dtype == dtype and [g.dtype for g in grads] == [dtype] * 3 + [torch.float32]
        res.append((out, *grads))
    for a, b in zip(*res):
        torch.testing.assert_close(b.float(), a, rtol=0.05, atol=0.05)


def test_trains_under_bf16_autocast_on_the_cpu():
    """Found by the CUDA checks' CPU dry run: under CPU bf16 autocast, attention runs in fp32 but
    the relative term's projected queries stayed bf16 (a dtype error in the relative kernel)."""
    from docnmt.training import forward_loss
    torch.manual_seed(0)
    model = build(CFG).train()
    src, tgt = random_pair(src_len=20, tgt_len=20)
    batch = {"src": src, "tgt_in": tgt, "labels": torch.roll(tgt, -1, 1)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = forward_loss(model, batch, 0.1)
    loss.backward()
    assert torch.isfinite(loss) and model.policy.rel_embed.grad is not None
