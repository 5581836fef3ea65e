"""The Transformer (docs/methods/baselines.md#the-shared-transformer) and its attention hooks: the
extension points used by group masks (docs/methods/gtransformer.md#attention-masks) and by
position-aware attention (docs/methods/ptransformer.md#position-aware-attention)."""
import math
import re

import pytest
import torch

from docnmt.attention import (
    AttnSpec,
    MultiheadAttention,
    attention_reference,
)
from docnmt.decoder_state import DecoderCache
from docnmt.errors import ConfigError
from docnmt.model import (
    ACTIVATIONS,
    POSITIONS,
    AttentionPolicy,
    AttentionSublayer,
    ModelConfig,
    NoPositions,
    Transformer,
    sinusoidal_table,
)

CFG = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)


def test_sinusoidal_table_follows_spec():
    P = sinusoidal_table(10, 8)
    pos, i = 7, 2
    assert P[pos, 2 * i] == pytest.approx(math.sin(pos / 10000 ** (2 * i / 8)), abs=1e-6)
    assert P[pos, 2 * i + 1] == pytest.approx(math.cos(pos / 10000 ** (2 * i / 8)), abs=1e-6)


# ---- a mask built from sentence tags (docs/methods/gtransformer.md#attention-masks) passed in through the policy ----

def tags_of(tokens, bos=2, pad=0):
    """Cumulative count of sentence starts, 0 on pads (the G-Transformer tag rule,
    docs/methods/gtransformer.md#group-tags)."""
    return torch.cumsum(tokens.eq(bos), 1) * tokens.ne(pad)


class GroupPolicy(AttentionPolicy):
    """Group attention: a tagged query only sees keys of its own sentence (True = blocked)."""

    def encoder_specs(self, src, src_pad):
        g = tags_of(src)
        return {"enc_self": AttnSpec(mask=((g[:, :, None] != g[:, None, :]) & (g[:, :, None] != 0))[:, None])}

    def decoder_specs(self, tgt, src, src_pad, offset):
        gt, gs = tags_of(tgt)[:, offset:], tags_of(src)
        gt_all = tags_of(tgt)
        self_mask = (gt[:, :, None] != gt_all[:, None, :]) & (gt[:, :, None] != 0)
        cross = ((gs[:, None, :] != gt[:, :, None]) & (gt[:, :, None] != 0)) | src_pad[:, None, :]
        return {"dec_self": AttnSpec(mask=self_mask[:, None], is_causal=True), "cross": AttnSpec(mask=cross[:, None])}


def two_sentence_batch():
    # <s> a b c </s> <s> d e </s>  (ids: <s>=2, </s>=3)
    src = torch.tensor([[2, 10, 11, 12, 3, 2, 13, 14, 3]])
    tgt = torch.tensor([[2, 20, 21, 3, 2, 22, 23, 24, 3]])
    return src, tgt


def test_group_mask_isolates_sentences_in_encoder():
    torch.manual_seed(0)
    model = Transformer(CFG, GroupPolicy(CFG)).eval()
    src, _ = two_sentence_batch()
    changed = src.clone()
    changed[0, 6:8] = torch.tensor([30, 31])         # change sentence 2 only
    a, b = model.encode(src).memory, model.encode(changed).memory
    torch.testing.assert_close(a[0, :5], b[0, :5])    # sentence 1 does not see sentence 2
    assert not torch.allclose(a[0, 5:], b[0, 5:])
    plain = Transformer(CFG).eval()
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain.encode(src).memory[0, :5], plain.encode(changed).memory[0, :5])


def test_group_cross_attention_reaches_only_the_same_source_sentence():
    torch.manual_seed(0)
    model = Transformer(CFG, GroupPolicy(CFG)).eval()
    src, tgt = two_sentence_batch()
    changed = src.clone()
    changed[0, 6:8] = torch.tensor([30, 31])
    out_a, out_b = model(src, tgt), model(changed, tgt)
    torch.testing.assert_close(out_a[0, :4], out_b[0, :4])   # target sentence 1 <- source sentence 1 only
    assert not torch.allclose(out_a[0, 4:], out_b[0, 4:])


def test_group_masks_incremental_equal_full():
    torch.manual_seed(0)
    model = Transformer(CFG, GroupPolicy(CFG)).eval()
    src, tgt = two_sentence_batch()
    enc = model.encode(src)
    full = model.decode(tgt, enc)
    cache = DecoderCache()
    steps = torch.cat([model.decode(tgt[:, : t + 1], enc, cache) for t in range(tgt.size(1))], 1)
    torch.testing.assert_close(full, steps, atol=1e-5, rtol=1e-5)


# ---- a query/key-only position addition (docs/methods/ptransformer.md#position-aware-attention) ----

class PositionAwarePolicy(AttentionPolicy):
    """Adds the unscaled sinusoidal table to query and key inputs of every attention."""

    def pe(self, n, offset=0):
        return sinusoidal_table(offset + n, self.cfg.d_model)[offset:]

    def encoder_specs(self, src, src_pad):
        p = self.pe(src.size(1))
        return {"enc_self": AttnSpec(mask=src_pad[:, None, None, :], q_add=p, k_add=p)}

    def decoder_specs(self, tgt, src, src_pad, offset):
        q = self.pe(tgt.size(1) - offset, offset)
        return {"dec_self": AttnSpec(is_causal=True, q_add=q, k_add=q),
                "cross": AttnSpec(mask=src_pad[:, None, None, :], q_add=q, k_add=self.pe(src.size(1)))}


def test_position_addition_reaches_queries_and_keys_but_not_values():
    torch.manual_seed(0)
    attn = MultiheadAttention(16, 2).eval()
    x = torch.randn(1, 5, 16)
    p = sinusoidal_table(5, 16)
    out = attn(x, x, AttnSpec(q_add=p, k_add=p))
    # by hand: Q = (X+P)Wq, K = (X+P)Wk, V = X Wv
    split = lambda t: t.view(1, 5, 2, 8).transpose(1, 2)  # noqa: E731
    q, k, v = split(attn.project(x + p, slice(0, 1))), split(attn.project(x + p, slice(1, 2))), \
        split(attn.project(x, slice(2, 3)))
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1)
    expected = attn.out_proj((w @ v).transpose(1, 2).reshape(1, 5, 16))
    torch.testing.assert_close(out, expected)
    # the values are untouched: with uniform attention weights the output ignores P entirely
    attn.in_proj.weight.data[:16].zero_()
    attn.in_proj.bias.data[:16].zero_()
    torch.testing.assert_close(attn(x, x, AttnSpec(q_add=p, k_add=p)), attn(x, x, AttnSpec()))


def test_position_aware_incremental_equals_full():
    torch.manual_seed(0)
    model = Transformer(CFG, PositionAwarePolicy(CFG)).eval()
    src = torch.randint(4, 50, (2, 6))
    src[1, 4:] = 0
    tgt = torch.randint(4, 50, (2, 5))
    enc = model.encode(src)
    full = model.decode(tgt, enc)
    cache = DecoderCache()
    steps = torch.cat([model.decode(tgt[:, : t + 1], enc, cache) for t in range(5)], 1)
    torch.testing.assert_close(full, steps, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(full, Transformer(CFG).eval().decode(tgt, enc))


# ---- the plain model ---------------------------------------------------------------------------

def test_padding_does_not_change_outputs():
    torch.manual_seed(0)
    model = Transformer(CFG).eval()
    src = torch.randint(4, 50, (1, 6))
    tgt = torch.randint(4, 50, (1, 4))
    padded_src = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], 1)
    padded_tgt = torch.cat([tgt, torch.zeros(1, 2, dtype=torch.long)], 1)
    torch.testing.assert_close(model(src, tgt), model(padded_src, padded_tgt)[:, :4], atol=1e-5, rtol=1e-5)


def test_reference_and_sdpa_models_agree(monkeypatch):
    torch.manual_seed(0)
    model = Transformer(CFG).eval()
    src, tgt = torch.randint(4, 50, (2, 6)), torch.randint(4, 50, (2, 5))
    src[0, 4:] = 0
    fast = model(src, tgt)
    monkeypatch.setattr("docnmt.attention.attention_sdpa", attention_reference)
    torch.testing.assert_close(fast, model(src, tgt), atol=1e-5, rtol=1e-5)


def test_shared_embeddings_and_fused_loss():
    model = Transformer(CFG)
    assert model.encoder.embed.table is model.decoder.embed.table
    src, tgt = torch.randint(4, 50, (2, 6)), torch.randint(4, 50, (2, 5))
    labels = torch.randint(4, 50, (2, 5))
    labels[1, 3:] = 0
    model.eval()
    loss, nll, n = model(src, tgt, labels, 0.1)
    logits = model(src, tgt)[labels.ne(0)]
    assert n == 8
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits, labels[labels.ne(0)],
                                                                       label_smoothing=0.1, reduction="sum"))
    torch.testing.assert_close(nll, torch.nn.functional.cross_entropy(logits, labels[labels.ne(0)], reduction="sum"))
    plain, plain_nll, _ = model(src, tgt, labels)                   # no label smoothing unless asked
    torch.testing.assert_close(plain, plain_nll)


def test_embedding_and_sublayer_options():
    """The architecture options at their lowest level: ``scale_embeddings``, the position table
    and offset a config names, and pre-LN sublayers x + f(LN(x))."""
    from docnmt.model import Embedding, FeedForwardSublayer, State, position_table
    base = dict(vocab_size=50, d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1, dropout=0.0)
    table = torch.nn.Embedding(50, 16)
    assert Embedding(table, ModelConfig(**base)).scale == 4.0
    assert Embedding(table, ModelConfig(**base, scale_embeddings=False)).scale == 1.0
    for kind in ("sinusoidal", "sinusoidal_halves", "sinusoidal_fairseq"):
        for offset in (0, 1):
            emb = Embedding(table, ModelConfig(**base, positions=kind, position_offset=offset))
            torch.testing.assert_close(emb.positions(5), position_table(kind, 5 + offset, 16)[offset:])
    assert not NoPositions(ModelConfig(**base))(5).any()         # no position vectors (what ALiBi puts in place)
    cfg = ModelConfig(**base, pre_norm=True)
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    ffn = FeedForwardSublayer(cfg)
    torch.testing.assert_close(ffn(x, State({})), x + ffn.transform(ffn.norm(x), None))
    attn, state = AttentionSublayer(cfg, "enc_self", "enc.0.self"), State({"enc_self": AttnSpec()})
    torch.testing.assert_close(attn(x, state), x + attn.transform(attn.norm(x), state))


def test_output_bias_over_the_whole_vocabulary():
    """``output_bias`` without ``output_tokens``: every logit gets its token's fixed bias."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**{**vars(CFG), "output_bias": True})).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_()
        hidden = torch.randn(3, CFG.d_model)
        want = hidden @ model.decoder.embed.table.weight.t() + model.final_logits_bias
        torch.testing.assert_close(model.output_projection(hidden), want, rtol=1e-5, atol=1e-5)
        part = Transformer(ModelConfig(**{**vars(CFG), "output_tokens": 40}))
        assert part.output_projection(hidden).shape == (3, CFG.vocab_size)      # ids 40-49 get -inf


def test_config_errors_name_the_choices():
    for key, bad, choices in (("activation", "tanh", ACTIVATIONS), ("positions", "rotary", POSITIONS)):
        want = f"^unknown {key} '{bad}'; choose one of {re.escape(', '.join(choices))}$"
        with pytest.raises(ConfigError, match=want):
            ModelConfig(**{key: bad})
    with pytest.raises(ConfigError, match="^position_offset must be at least 0, not -1$"):
        ModelConfig(position_offset=-1)
    with pytest.raises(ConfigError, match="^output_tokens must be at least 0, not -2$"):
        ModelConfig(output_tokens=-2)


# ---- beams sharing their input's encoder memory (beam search) -------------------------------

def _shared_memory_models():
    from docnmt.methods import context_transformer, gtransformer, ptransformer
    from docnmt.methods.length_bias import LengthAwareScale
    base = dict(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)
    yield "transformer", Transformer(ModelConfig(**base))
    laa = Transformer(ModelConfig(**base))
    laa.add_piece("length_scale", LengthAwareScale())
    yield "length-aware", laa
    yield "p-transformer", ptransformer.build(ModelConfig(**base))
    options = gtransformer.GTransformerOptions(combined_cross=1)
    yield "g-transformer", gtransformer.build(ModelConfig(**base), options, 2, 49)
    yield "context-transformer", context_transformer.build(ModelConfig(**base))


@pytest.mark.parametrize("name", ["transformer", "length-aware", "p-transformer", "g-transformer",
                                  "context-transformer"])
def test_beams_sharing_memory_equal_beams_with_copies(name):
    """Beam search keeps one encoder memory row per input (cross-attention folds the beams into
    its query axis, or copies the keys where the spec differs per row); incremental decoding
    through reorders and dropped inputs gives the states of per-beam copies (and so does the
    context attention, over one padded context row per input)."""
    model = dict(_shared_memory_models())[name].eval()
    if name == "length-aware":
        model.length_scale.set_training_lengths(7.0, 9.0)
    torch.manual_seed(0)
    B, K, T = 3, 4, 7
    src = torch.randint(4, 50, (B, 9))
    src[1, 6:] = 0
    src[:, 0] = 2
    tgt = torch.randint(2, 50, (B * K, T))
    tgt[:, 0] = 2
    ctx = torch.randint(4, 50, (B, B * K))        # as wide as the decoder batch is deep
    ctx[1:, 4:] = 0                               # inputs 1 and 2 have a padded context, input 0 not
    with torch.no_grad():
        enc = model.encode(src, ctx=ctx) if name == "context-transformer" else model.encode(src)
        copies, shared = enc.select(torch.arange(B).repeat_interleave(K)), enc.expand_beams(K)
        assert shared.memory.size(0) == B and copies.memory.size(0) == B * K
        c_copies, c_shared = DecoderCache(), DecoderCache()
        for t in range(T):
            a = model.decode(tgt[:, : t + 1], copies, c_copies)
            b = model.decode(tgt[:, : t + 1], shared, c_shared)
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
            if t == 2:        # beams re-ranked within each input
                order = torch.arange(B * K).view(B, K).flip(1).reshape(-1)
            elif t == 4:      # input 0 finished: its rows leave the batch
                order = torch.arange(K, tgt.size(0))
            else:
                continue
            static = order if t == 4 else None
            tgt = tgt[order]
            if static is not None:
                copies, shared = copies.select(static), shared.select(static)
            c_copies.reorder(order, static)
            c_shared.reorder(order, static, K)


# ---- positions, embeddings and the options of pretrained models -------------------------------

def test_halves_table_is_computed_in_double_precision():
    """Marian computes its table in float64 and stores it in float32: far positions (1,000 and
    more) keep every digit float32 can hold, which a float32 frequency would lose (~1e-5)."""
    from docnmt.model import position_table
    n, d = 1024, 32
    angle = torch.tensor([[p / 10000 ** (2 * i / d) for i in range(d // 2)] for p in range(n)], dtype=torch.float64)
    want = torch.cat([angle.sin(), angle.cos()], 1).float()
    torch.testing.assert_close(position_table("sinusoidal_halves", n, d), want, rtol=0, atol=1e-7)


def test_fairseq_table_of_an_odd_width_ends_with_a_zero_column():
    from docnmt.model import position_table
    table = position_table("sinusoidal_fairseq", 6, 9)
    assert table.shape == (6, 9)
    torch.testing.assert_close(table[:, :8], position_table("sinusoidal_fairseq", 6, 8))
    assert not table[:, 8].any()


@pytest.mark.parametrize("kind, offset", [("sinusoidal", 0), ("sinusoidal_halves", 2), ("sinusoidal_fairseq", 2)])
def test_position_table_grows_past_max_positions(kind, offset):
    """Positions beyond ``max_positions`` (+ ``position_offset``) read the same formula, from a
    table grown on demand; positions read before and after it grows are the same vectors."""
    from docnmt.model import Embedding, position_table
    cfg = ModelConfig(vocab_size=50, d_model=32, positions=kind, max_positions=4, position_offset=offset)
    pos = Embedding(torch.nn.Embedding(50, 32), cfg).positions
    before = pos(3, 1)                                         # positions 1, 2, 3 (of the 4 built)
    first = 3 + offset
    torch.testing.assert_close(pos(10, 3), position_table(kind, first + 10, 32)[first:])    # positions 3 .. 12
    torch.testing.assert_close(pos(3, 1), before)


def test_embedding_scales_tokens_and_drops_out_while_training():
    """sqrt(d)·E[x] + P[pos]; dropout applies unless the caller turns it off (the model's
    ``embed_source`` and ``embed_target`` leave it on: it acts in training mode)."""
    from docnmt.model import Embedding
    torch.manual_seed(0)
    table = torch.nn.Embedding(50, 16)
    tokens = torch.tensor([[5, 6, 7], [8, 9, 10]])
    emb = Embedding(table, ModelConfig(vocab_size=50, d_model=16, dropout=0.5)).eval()
    want = table(tokens) * 4.0 + sinusoidal_table(3, 16)
    torch.testing.assert_close(emb(tokens), want)
    emb.train()
    torch.testing.assert_close(emb(tokens, dropout=False), want)
    dropped = emb(tokens)
    assert (dropped == 0).any() and not torch.allclose(dropped, want)


def test_learned_positions_start_like_the_token_embeddings():
    """A learned position table (trained from scratch) starts as N(0, 1/d), like the embeddings:
    ``reset_parameters`` leaves it alone."""
    torch.manual_seed(0)
    d = 64
    model = Transformer(ModelConfig(vocab_size=50, d_model=d, heads=4, ffn_dim=64, encoder_layers=1,
                                    decoder_layers=1, positions="learned", max_positions=1024))
    weight = model.encoder.embed.positions.weight
    assert weight.shape == (1024, d)
    assert abs(weight.mean().item()) < 0.05 * d ** -0.5
    assert weight.std().item() == pytest.approx(d ** -0.5, rel=0.02)


def test_alibi_adds_to_every_kind_of_bias():
    """ALiBi's distance term adds to a spec's bias whatever it is: none, a tensor, a relative
    term (made dense) or a callable giving either."""
    from docnmt.attention import RelativeLogits
    from docnmt.model import _plus
    torch.manual_seed(0)
    extra, bias = torch.randn(1, 2, 3, 3), torch.randn(2, 2, 3, 3)
    rel = RelativeLogits(torch.randn(2, 2, 3, 4), torch.randn(5, 4), 2, 3, 0.5)
    torch.testing.assert_close(_plus(None, extra), extra)
    torch.testing.assert_close(_plus(bias, extra), bias + extra)
    torch.testing.assert_close(_plus(rel, extra), rel.dense() + extra)
    torch.testing.assert_close(_plus(lambda q, name: rel, extra)(None, "enc.0.self"), rel.dense() + extra)



def test_embedding_norm_and_a_grown_table_in_the_models_dtype():
    """``embed_norm``: LayerNorm(sqrt(d)·E[x] + P[pos]). Positions past the table (grown in
    float32) are added in the embeddings' dtype: a bfloat16 model stays bfloat16."""
    from docnmt.model import Embedding
    torch.manual_seed(0)
    table = torch.nn.Embedding(50, 16)
    tokens = torch.tensor([[5, 6, 7], [8, 9, 10]])
    emb = Embedding(table, ModelConfig(vocab_size=50, d_model=16, embed_norm=True)).eval()
    with torch.no_grad():
        emb.norm.weight.uniform_()
        emb.norm.bias.normal_()
        want = torch.nn.functional.layer_norm(table(tokens) * 4.0 + sinusoidal_table(3, 16), (16,),
                                              emb.norm.weight, emb.norm.bias)
        torch.testing.assert_close(emb(tokens), want)
        short = Embedding(torch.nn.Embedding(50, 16), ModelConfig(vocab_size=50, d_model=16, max_positions=2))
        assert short.eval().to(torch.bfloat16)(tokens).dtype == torch.bfloat16      # 3 positions: the table grew


def test_pre_ln_encoder_and_decoder_end_with_a_layer_norm():
    """Pre-LN sublayers leave the residual stream unnormalised; the encoder and the decoder of a
    pre-LN model end with a LayerNorm (fresh: every state has mean 0 and variance 1)."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**{**vars(CFG), "pre_norm": True})).eval()
    src, tgt = torch.randint(4, 50, (2, 6)), torch.randint(4, 50, (2, 5))
    with torch.no_grad():
        enc = model.encode(src)
        states = enc.memory, model.decode(tgt, enc)
    for h in states:
        torch.testing.assert_close(h.mean(-1), torch.zeros(h.shape[:-1]), rtol=0, atol=1e-5)
        torch.testing.assert_close(h.var(-1, unbiased=False), torch.ones(h.shape[:-1]), rtol=0, atol=1e-3)


def test_source_language_code_after_the_last_token_keeps_the_pad_id():
    """mBART-25 puts the language code after each source's last token; the rows it makes longer
    are padded with the model's pad id (1 in models from fairseq), not 0."""
    model = Transformer(ModelConfig(vocab_size=50, d_model=16, heads=2, ffn_dim=32, encoder_layers=1,
                                    decoder_layers=1, pad_id=1, src_lang_token=40, src_lang_last=True))
    src = torch.tensor([[5, 6, 7], [8, 1, 1]])
    assert model.with_source_language(src).tolist() == [[5, 6, 7, 40], [8, 40, 1, 1]]

# ---- initialisation -----------------------------------------------------------------------------

def test_initialisation_follows_fairseqs_transformer():
    """Token embeddings N(0, 1/d) with a zero pad row (each table when they are not shared);
    every other weight matrix Xavier-uniform, W_Q, W_K and W_V each as its own d×d matrix with
    gain 1/√2; biases zero. A Xavier-uniform matrix fills its bound gain·√(6 / (fan_in + fan_out)):
    its largest entry is within 3% of it (thousands of draws)."""
    torch.manual_seed(0)
    d, vocab = 32, 1000
    model = Transformer(ModelConfig(vocab_size=vocab, d_model=d, heads=4, ffn_dim=64, encoder_layers=1,
                                    decoder_layers=1, share_embeddings=False))
    tables = model.encoder.embed.table, model.decoder.embed.table
    assert tables[0] is not tables[1]
    for table in tables:
        w = table.weight.detach()
        assert not w[0].any()
        assert abs(w[1:].mean().item()) < 0.05 * d ** -0.5
        assert w[1:].std().item() == pytest.approx(d ** -0.5, rel=0.03)

    def xavier(w, gain=1.0):
        bound = gain * math.sqrt(6 / (w.size(0) + w.size(1)))
        return 0.97 * bound < w.abs().max().item() <= bound

    matrices = 0
    for name, p in model.named_parameters():
        if name.endswith("in_proj.weight"):
            assert all(xavier(part, 1 / math.sqrt(2)) for part in p.detach().chunk(3)), name
        elif p.dim() == 2 and "embed" not in name:
            assert xavier(p.detach()), name
        elif name.endswith(".bias") and "norm" not in name:
            assert not p.any(), name
        matrices += p.dim() == 2
    assert matrices == 2 + 3 * 2 + 2 * 2     # tables; W_in, W_out of 3 attentions; fc1, fc2 of 2 feed-forwards
