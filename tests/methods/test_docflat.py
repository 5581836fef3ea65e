"""DocFlat (docs/methods/docflat.md, its "Tests" section): flat-batch attention, context gate, pseudo-documents, ordered
batches, rank-aligned decoder FBA and two-pass decoding."""
import re
from dataclasses import replace

import numpy as np
import pytest
import torch

from _tiny import history, tiny_config
from docnmt import translate as translate_module
from docnmt.data import Corpus, InstanceSet, ModeConfig, build_instances, token_batches
from docnmt.decoder_state import DecoderCache
from docnmt.errors import ConfigError, DataError
from docnmt.methods import docflat, docflat_map, two_pass
from docnmt.methods.docflat import GlobalIndexJoiner
from docnmt.model import ModelConfig, State
from docnmt.search import beam_search
from docnmt.training import Trainer
from docnmt.translate import Translator
from docnmt.vocab import Vocab

CFG = ModelConfig(vocab_size=60, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)
OPTS = docflat.DocFlatOptions()


def cfg_with(**kw):
    """DocFlat's settings with ``kw`` changed."""
    return docflat.DocFlatOptions(**{**vars(OPTS), **kw})


def batch(seed=0, n=3, m=6, e=32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, m, e, generator=g)
    pad = torch.zeros(n, m, dtype=torch.bool)
    pad[1, 4:] = True
    pad[2, 2:] = True
    return x, pad


def fba(opts, side="enc"):
    torch.manual_seed(0)
    return docflat.FlatBatchSublayer(CFG, side, opts).eval()


def run(sub, x, pad, private=None):
    kind = f"{sub.side}_fba"
    specs = {kind: docflat.AttnSpec(mask=pad[:, None, None, :])}
    if private is not None:
        specs[f"{kind}_private"] = docflat.AttnSpec(mask=private[:, None, None, :])
    return sub.transform(x, State(specs))


# ---- flat-batch attention ---------------------------------------------------------------------

def test_flatten_unflatten_round_trip():
    x, pad = batch()
    flat, idx = docflat.flatten_batch(x, pad)
    assert flat.shape == (1, int((~pad).sum()), 32)
    back = docflat.unflatten_batch(flat, idx, x.shape)
    torch.testing.assert_close(back[~pad], x[~pad])
    assert back[pad].abs().sum() == 0


@pytest.mark.parametrize("side,m", [("enc", 6), ("dec", 6), ("enc", 40)])
def test_pads_are_never_attended(side, m):
    """Also for instances longer than the model width (m = 40 > d = 32)."""
    sub = fba(OPTS, side)
    x, pad = batch(m=m)
    y = x.clone()
    y[pad] = 100 * torch.randn(int(pad.sum()), 32)        # whatever sits at pad positions
    a, b = run(sub, x, pad), run(sub, y, pad)
    torch.testing.assert_close(a[~pad], b[~pad])
    assert a[pad].abs().sum() == 0 and (a[~pad].abs().sum(-1) > 0).all()     # every real token gets Ĥ


def test_encoder_fba_mixes_instances():
    sub = fba(OPTS, "enc")
    x, pad = batch()
    y = x.clone()
    y[2, 0] += 1.0                                        # change only instance 2
    a, b = run(sub, x, pad), run(sub, y, pad)
    assert not torch.allclose(a[0], b[0])                 # instance 0 sees instance 2


def test_decoder_mask_options():
    """Flattened causal: an instance sees every token of earlier instances and none of later
    ones. Time-aligned: (j, t) sees (j', t') iff t' <= t, in every instance."""
    x, pad = batch()
    pad[:] = False
    flat, aligned = fba(OPTS, "dec"), fba(cfg_with(flat_dec_mask="time_aligned"), "dec")
    y = x.clone()
    y[1, 5] += 1.0                                        # the last token of instance 1
    for sub in (flat, aligned):
        a, b = run(sub, x, pad), run(sub, y, pad)
        torch.testing.assert_close(a[0, :5], b[0, :5])    # earlier time steps never see it
    a, b = run(flat, x, pad), run(flat, y, pad)
    torch.testing.assert_close(a[0], b[0])               # an earlier instance never sees a later one
    assert not torch.allclose(a[2, 0], b[2, 0])          # a later instance sees all of an earlier one
    a, b = run(aligned, x, pad), run(aligned, y, pad)
    assert not torch.allclose(a[0, 5], b[0, 5])          # same time step of another instance: seen
    torch.testing.assert_close(a[2, :5], b[2, :5])


def test_discrete_gate_straight_through():
    s = torch.tensor([-1.0, 0.2, 3.0], requires_grad=True)
    g = docflat.discrete_gate(torch.sigmoid(s), 0.5)
    assert g.tolist() == [0.0, 1.0, 1.0]
    assert docflat.discrete_gate(torch.tensor([0.5, 0.49]), 0.5).tolist() == [1.0, 0.0]      # g ≥ γ opens
    g.sum().backward()
    torch.testing.assert_close(s.grad, torch.sigmoid(s) * (1 - torch.sigmoid(s)))
    model = docflat.build(CFG, cfg_with(flat_gate="discrete"))
    src = torch.randint(4, 60, (3, 7))
    tgt = torch.randint(4, 60, (3, 5))
    loss, _, _ = model(src, tgt, tgt, 0.1)
    loss.backward()
    gate = model.encoder.layers[0].inserted["0"].gate
    assert gate.weight.grad.abs().sum() > 0               # the gate learns through the indicator


@pytest.mark.parametrize("gate", ["continuous", "discrete", "identity"])
def test_context_gate_is_computed_from_the_flat_batch_output(gate):
    """The neural context gate reads Ĥ, the flat-batch attention's output, not the embeddings H:
    g = σ(ψ(Ĥ)) (1[g ≥ γ] when discrete), H' = LN((1 − g) ⊙ H + g ⊙ Ĥ), by hand; DocFlat_I has
    no gate: H' = LN(H + Ĥ)."""
    sub = fba(cfg_with(flat_gate=gate), "enc")
    x, pad = batch()
    state = State({"enc_fba": docflat.AttnSpec(mask=pad[:, None, None, :])})
    with torch.no_grad():
        h_hat = sub.transform(x, state)
        if gate == "identity":
            assert not hasattr(sub, "gate")
            torch.testing.assert_close(sub(x, state), sub.norm(x + h_hat))
            return
        g = torch.sigmoid(sub.gate(h_hat))
        if gate == "discrete":
            g = (g >= OPTS.flat_gamma).float()
            assert 0 < g.mean() < 1                        # open and closed channels both occur
        torch.testing.assert_close(sub(x, state), sub.norm((1 - g) * x + g * h_hat))


def test_closed_gate_makes_instances_independent():
    """With a gate that never opens the flat-batch context is cut: an instance translates the
    same alone and in a batch (a Doc2Doc model behind a LayerNorm of its embeddings)."""
    model = docflat.build(CFG, cfg_with(flat_gate="discrete", flat_gamma=2.0)).eval()
    src = torch.randint(4, 60, (3, 7))
    tgt = torch.randint(4, 60, (3, 5))
    with torch.no_grad():
        together = model(src, tgt)
        alone = torch.cat([model(src[i: i + 1], tgt[i: i + 1]) for i in range(3)])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    open_model = docflat.build(CFG, cfg_with(flat_gate="discrete", flat_gamma=0.0)).eval()
    open_model.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert not torch.allclose(open_model(src, tgt), torch.cat([open_model(src[i: i + 1], tgt[i: i + 1])
                                                                   for i in range(3)]))


@pytest.mark.parametrize("bias", [0.0, -30.0])
def test_a_large_negative_gate_bias_starts_the_context_gate_shut(bias):
    """``method.flat_gate_bias`` (docs/methods/docflat.md#df-gate-bias): ψ's bias after the model's
    own initialisation; with a large negative one no instance sees the others, with 0 they do."""
    model = docflat.build(CFG, cfg_with(flat_gate="discrete", flat_gate_bias=bias)).eval()
    biases = [m.gate.bias for m in model.modules() if isinstance(m, docflat.FlatBatchSublayer)]
    assert len(biases) == 2 and all(torch.all(b == bias) for b in biases)
    torch.manual_seed(4)
    src, tgt = torch.randint(4, 60, (3, 7)), torch.randint(4, 60, (3, 5))
    with torch.no_grad():
        together = model(src, tgt)
        alone = torch.cat([model(src[i: i + 1], tgt[i: i + 1]) for i in range(3)])
    assert torch.allclose(together, alone, atol=1e-5) == (bias < 0)


@pytest.mark.parametrize("kw", [{}, {"flat_dec_mask": "time_aligned"}, {"flat_scope": "current"},
                                {"flat_block": "abd", "flat_sides": "encoder"}, {"flat_block": "mbe"}])
def test_rows_apart_computes_every_row_of_a_batch_as_if_alone(kw):
    """``docnmt.model.rows_apart`` (teacher-forced scoring, ``score_alone``): flat-batch attention
    and the ABD / MBE baselines keep each row to itself, so a batch scores what every instance
    scores in a batch of its own; outside it the rows see each other again."""
    from docnmt.model import rows_apart
    model = docflat.build(CFG, cfg_with(flat_gate="continuous", **kw), SEPS, mean_token=1).eval()
    torch.manual_seed(2)
    src = torch.randint(4, 50, (3, 7))
    src[:, 0], src[::2, 3] = SEPS[0], SEPS[0] + 1
    src[1, 5:] = 0
    tgt = torch.randint(4, 50, (3, 5))
    tgt[:, 0], tgt[0, 2] = SEPS[0], SEPS[0] + 1
    tgt[2, 4:] = 0
    with torch.no_grad():
        alone = torch.cat([model(src[i: i + 1], tgt[i: i + 1]) for i in range(3)])
        with rows_apart(model):
            apart = model(src, tgt)
        together = model(src, tgt)
    real = tgt.ne(0)
    torch.testing.assert_close(apart[real], alone[real], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(together[real], alone[real], atol=1e-4)


def test_closed_gate_decodes_each_instance_like_a_doc2doc_model_alone():
    """With the gate closed, beam search over a batch (ragged prefixes forced, as in two-pass
    decoding) gives every instance what a Doc2Doc Transformer with the same weights -- behind the
    gate's LayerNorm of its embeddings -- gives it decoded alone, hypotheses and scores."""
    from docnmt.model import AttentionPolicy, Transformer
    from docnmt.search import SearchConfig
    torch.manual_seed(0)
    model = docflat.build(CFG, cfg_with(flat_gate="discrete", flat_gamma=2.0)).eval()
    plain = CFG
    doc2doc = Transformer(plain, AttentionPolicy(plain)).eval()
    missing, unexpected = doc2doc.load_state_dict(model.state_dict(), strict=False)
    assert not missing and unexpected and all(".inserted." in k for k in unexpected)
    for side in ("encoder", "decoder"):
        norm = getattr(model, side).layers[0].inserted["0"].norm
        getattr(doc2doc, side).embed.register_forward_hook(lambda m, a, out, norm=norm: norm(out))
    src = torch.randint(4, 60, (3, 8), generator=torch.Generator().manual_seed(3))
    src[2, 6:] = 0
    prefix = [[], [7, 8, 9, 10], [11, 12]]
    cfg = SearchConfig(beam=3, max_len_b=6, nbest=3)
    together = beam_search(model, src, cfg, 2, 3, banned=[0], prefix=prefix)
    for i in range(3):
        n = int(src[i].ne(0).sum())
        alone = beam_search(doc2doc, src[i: i + 1, :n], cfg, 2, 3, banned=[0], prefix=[prefix[i]])[0]
        assert [h.tokens for h in together[i]] == [h.tokens for h in alone]
        assert [h.score for h in together[i]] == pytest.approx([h.score for h in alone], abs=1e-5)
    opened = docflat.build(CFG, cfg_with(flat_gate="discrete", flat_gamma=0.0)).eval()
    opened.load_state_dict(model.state_dict())
    assert [[h.score for h in n] for n in beam_search(opened, src, cfg, 2, 3, banned=[0], prefix=prefix)] != \
        [[h.score for h in n] for n in together]                     # an open gate: the batch matters


@pytest.mark.parametrize("beams,scope", [(1, "all"), (2, "all"), (2, "current")])
def test_incremental_time_aligned_decoding_equals_full_forward_per_rank(beams, scope):
    """Time-aligned decoder FBA decodes incrementally exactly as the full forward of each beam
    rank's rows (rank r of an instance attends to rank r of the others, docs/methods/docflat.md#df-beams),
    also when only the other instances' current sentences are visible
    (docs/methods/docflat.md#df-flatten-scope)."""
    model = docflat.build(CFG, cfg_with(flat_dec_mask="time_aligned", flat_scope=scope), SEPS).eval()
    torch.manual_seed(1)
    B, T = 3, 6
    src = torch.randint(4, 50, (B, 7))
    src[1, 5:] = 0
    src[:, 0], src[::2, 3] = SEPS[0], SEPS[0] + 1        # current sentences start at 3, 0, 3
    tgt = torch.randint(4, 50, (B * beams, T))
    tgt[:, 0] = SEPS[0]
    tgt[::2, 3] = SEPS[0] + 1                             # some hypotheses have reached it, some not
    with torch.no_grad():
        enc = model.encode(src)
        shared = enc.expand_beams(beams)
        cache = DecoderCache()
        steps = torch.cat([model.decode(tgt[:, : t + 1], shared, cache) for t in range(T)], 1)
        for r in range(beams):
            rows = torch.arange(B) * beams + r
            full = model.decode(tgt[rows], enc)
            torch.testing.assert_close(steps[rows], full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mask,beams", [("flattened", 1), ("flattened", 2), ("time_aligned", 2)])
def test_a_multi_token_first_step_equals_step_by_step(mask, beams):
    """Beam search feeds the forced prefix in one first step: the decoder FBA must give every
    token what it sees step by step (under the flattened-causal mask, the earlier instances'
    prefixes only as far as they exist when the token is generated)."""
    model = docflat.build(CFG, cfg_with(flat_dec_mask=mask)).eval()
    torch.manual_seed(3)
    B, T, m = 3, 7, 4
    src = torch.randint(4, 60, (B, 7))
    tgt = torch.randint(4, 60, (B * beams, T))
    with torch.no_grad():
        enc = model.encode(src).expand_beams(beams)
        c1 = DecoderCache()
        steps = torch.cat([model.decode(tgt[:, : t + 1], enc, c1) for t in range(T)], 1)
        c2 = DecoderCache()
        first = model.decode(tgt[:, :m], enc, c2)
        rest = torch.cat([first] + [model.decode(tgt[:, : t + 1], enc, c2) for t in range(m, T)], 1)
    torch.testing.assert_close(rest, steps, rtol=1e-4, atol=1e-5)


def test_incremental_flattened_decoding_is_causal_over_instances():
    model = docflat.build(CFG, OPTS).eval()
    torch.manual_seed(2)
    src = torch.randint(4, 60, (3, 7))
    tgt = torch.randint(4, 60, (3, 5))
    other = tgt.clone()
    other[2] = torch.randint(4, 60, (5,))                 # only the last instance differs
    with torch.no_grad():
        enc = model.encode(src)
        a = [model.decode(tgt[:, : t + 1], enc, ca) for ca in [DecoderCache()] for t in range(5)]
        b = [model.decode(other[:, : t + 1], enc, cb) for cb in [DecoderCache()] for t in range(5)]
    for x, y in zip(a, b):
        torch.testing.assert_close(x[:2], y[:2])
        assert x[0].shape == (1, 32)


def test_unknown_options_are_config_errors():
    for key, allowed in (("flat_gate", docflat.GATES), ("flat_dec_mask", docflat.DEC_MASKS),
                         ("flat_sides", docflat.SIDES), ("flat_block", docflat.BLOCKS), ("flat_scope", docflat.SCOPES)):
        with pytest.raises(ConfigError, match=f"^unknown {key} 'x'; choose one of {re.escape(', '.join(allowed))}$"):
            docflat.build(CFG, cfg_with(**{key: "x"}))
    with pytest.raises(ConfigError, match=r"^the ABD baseline is an encoder-side block: set method.flat_sides: enc"):
        cfg_with(flat_block="abd")
    with pytest.raises(ConfigError, match=r"^flat_scope: current needs the ids of the index tokens <sepj> "
                                          r"\(docflat.build\(..., sep_range\)\)$"):
        docflat.build(CFG, cfg_with(flat_scope="current"))      # the current sentence is found by its index token


@pytest.mark.parametrize("sides", docflat.SIDES)
def test_build_follows_the_options(sides):
    """FBA blocks on the sides asked for (first layer only), the policy's scope and index
    tokens, the FBA's name and the model's layer-norm placement."""
    model = docflat.build(CFG, cfg_with(flat_sides=sides, flat_scope="current"), SEPS)
    for side, layers in (("enc", model.encoder.layers), ("dec", model.decoder.layers)):
        on = sides in ("both", "encoder" if side == "enc" else "decoder")
        assert [list(layer.inserted) for layer in layers] == [["0"] if on else [], []]
        if on:
            assert layers[0].inserted["0"].attn.name == f"{side}.fba"
    assert (model.policy.scope, model.policy.sep_range) == ("current", SEPS)
    pre = docflat.FlatBatchSublayer(ModelConfig(**{**vars(CFG), "pre_norm": True}), "enc")
    assert pre.pre_norm is True
    mbe = docflat.build(CFG, cfg_with(flat_block="mbe", flat_sides=sides), mean_token=1)
    assert (mbe.on_src, mbe.on_tgt) == (sides != "decoder", sides != "encoder")


SEPS = (50, 59)       # the index tokens <sep1> … <sep10> of the tiny vocabulary below


def test_current_sentence_starts_at_the_last_index_token():
    policy = docflat.DocFlatPolicy(CFG, SEPS, "current")
    tokens = torch.tensor([[50, 7, 8, 2, 51, 9, 2],
                           [52, 7, 2, 53, 9, 2, 0],
                           [7, 8, 9, 2, 0, 0, 0]])            # no index token: all current
    private = policy.encoder_specs(tokens, tokens.eq(0))["enc_fba_private"].mask[:, 0, 0]
    assert private.tolist() == [[True] * 4 + [False] * 3, [True] * 3 + [False] * 4, [False] * 7]
    tgt = torch.tensor([[50, 7, 2, 51, 9],
                        [52, 7, 9, 8, 8],                 # <sep53> not reached yet: all context
                        [7, 8, 9, 5, 0]])
    private = policy.decoder_specs(tgt, tokens, tokens.eq(0), 0)["dec_fba_private"].mask[:, 0, 0]
    assert private.tolist() == [[True] * 3 + [False] * 2, [True] * 5, [False] * 5]
    assert "enc_fba_private" not in docflat.DocFlatPolicy(CFG, SEPS).encoder_specs(tokens, tokens.eq(0))
    # the first and the last index token of the range count; a target that starts with the current one
    edges = torch.tensor([[7, 2, 50, 9, 2, 0, 0],
                          [58, 7, 2, 59, 9, 2, 0],
                          [52, 7, 2, 0, 0, 0, 0]])
    private = policy.encoder_specs(edges, edges.eq(0))["enc_fba_private"].mask[:, 0, 0]
    assert private.tolist() == [[True] * 2 + [False] * 5, [True] * 3 + [False] * 4, [False] * 7]
    tgt = torch.tensor([[7, 2, 50, 9], [58, 7, 2, 59], [52, 7, 9, 2]])
    private = policy.decoder_specs(tgt, edges, edges.eq(0), 0)["dec_fba_private"].mask[:, 0, 0]
    assert private.tolist() == [[True] * 2 + [False] * 2, [True] * 3 + [False], [False] * 4]


@pytest.mark.parametrize("side", ["enc", "dec"])
def test_current_scope_mask_by_hand(side):
    """Under ``flat_scope: current`` query i may not see key j when j is another instance's
    context token; on the decoder side (flattened mask) nor when j comes after i in the flattened
    batch; the encoder side is otherwise unrestricted."""
    sub = fba(cfg_with(flat_scope="current"), side)
    x, pad = batch(n=3, m=4)
    private = torch.zeros(3, 4, dtype=torch.bool)
    private[:, :2] = True
    specs = {f"{side}_fba": docflat.AttnSpec(mask=pad[:, None, None, :]),
             f"{side}_fba_private": docflat.AttnSpec(mask=private[:, None, None, :])}
    flat, idx = docflat.flatten_batch(x, pad)
    got = sub.flat_spec(x, idx, State(specs)).mask[0, 0]
    inst, hidden = idx // 4, private.reshape(-1)[idx]
    T = len(idx)
    want = torch.tensor([[bool(hidden[j] and inst[j] != inst[i]) or (side == "dec" and j > i) for j in range(T)]
                         for i in range(T)])
    assert torch.equal(got, want)


@pytest.mark.parametrize("side", ["enc", "dec"])
def test_current_scope_hides_the_context_of_other_instances(side):
    """An instance sees all of its own tokens but only the current sentence of the others
    (docs/methods/docflat.md#df-flatten-scope)."""
    sub = fba(cfg_with(flat_scope="current"), side)
    x, pad = batch()
    pad[:] = False
    private = torch.zeros(3, 6, dtype=torch.bool)
    private[:, :3] = True                                 # tokens 0-2 of every instance are context
    y = x.clone()
    y[0, 1] += 1.0                                        # context of instance 0
    a, b = run(sub, x, pad, private), run(sub, y, pad, private)
    torch.testing.assert_close(a[1:], b[1:])              # hidden from instances 1 and 2
    assert not torch.allclose(a[0, 1:], b[0, 1:])         # but seen by instance 0 itself
    z = x.clone()
    z[0, 4] += 1.0                                        # current sentence of instance 0
    c = run(sub, z, pad, private)
    assert not torch.allclose(a[2], c[2])                 # seen by a later instance
    everything = fba(OPTS, side)
    assert not torch.allclose(run(everything, x, pad)[1:], run(everything, y, pad)[1:])   # scope all: seen


@pytest.mark.parametrize("side,scope,dec_mask", [("dec", "all", "time_aligned"), ("enc", "current", "flattened"),
                                                  ("dec", "current", "flattened"), ("dec", "current", "time_aligned")])
def test_masked_fba_spec_as_a_flex_mask(side, scope, dec_mask):
    """The FBA masks that are not plain causal also come as a FlexAttention mask_mod (the CUDA
    path, which skips blocked tiles): the same attention as the dense mask (run eagerly here)."""
    import warnings

    from docnmt.attention import attention_flex, attention_reference
    sub = fba(cfg_with(flat_scope=scope, flat_dec_mask=dec_mask), side)
    x, pad = batch(n=4, m=40)
    pad[1, 30:] = True
    private = torch.zeros(4, 40, dtype=torch.bool)
    private[:, :17] = True
    specs = {f"{side}_fba": docflat.AttnSpec(mask=pad[:, None, None, :])}
    if scope == "current":
        specs[f"{side}_fba_private"] = docflat.AttnSpec(mask=private[:, None, None, :])
    flat, idx = docflat.flatten_batch(x, pad)
    spec = sub.flat_spec(x, idx, State(specs))
    assert spec.visible is not None and 0 < spec.mask.float().mean() < 1
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, len(idx), 8, generator=g) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(attention_flex(q, k, v, spec), attention_reference(q, k, v, spec),
                                   rtol=1e-5, atol=1e-5)


# ---- data ---------------------------------------------------------------------------------------

def test_pseudodoc_instances_and_global_index_format(tiny_dir):
    data = tiny_dir / "data"
    vocab = Vocab.load(data)
    corpus = Corpus.load(data, "train")
    mode = ModeConfig(mode="pseudodoc", context=3, separator="global_index", batch_order="ordered")
    rows = build_instances(corpus, mode)
    assert len(rows) == corpus.n_sents
    d1 = int(corpus.doc_offsets[1])                       # the second document's first sentence
    assert rows[d1].tolist() == [d1, d1 + 1, d1] and rows[d1 + 5].tolist() == [d1 + 2, d1 + 6, d1 + 2]
    joiner = GlobalIndexJoiner(vocab)
    iset = InstanceSet(corpus, rows, joiner)
    k = d1 + 5                                            # sentences 3..6 of document 2
    src = iset.source(k)
    s = [corpus.src[i].tolist() for i in range(d1 + 2, d1 + 6)]
    want = sum(([vocab.sep(3 + j)] + s[j] + [vocab.eos] for j in range(4)), [])
    assert src.tolist() == want and len(src) == iset.src_lens[k]
    tgt_in, labels = iset.target(k)
    t = [corpus.tgt[i].tolist() for i in range(d1 + 2, d1 + 6)]
    body = sum(([vocab.sep(3 + j)] + t[j] + [vocab.eos] for j in range(4)), [])
    assert tgt_in.tolist() == body[:-1] and labels.tolist() == body[1:] and len(labels) == iset.tgt_lens[k]
    prefix = joiner.prefix(t[:3], 3)
    assert [vocab.sep(3)] + prefix == body[: len(prefix) + 1] and prefix[-1] == vocab.sep(6)
    assert joiner.split(prefix + t[3], 4) == (t, True)


def test_ordered_batches_are_runs_of_consecutive_instances():
    lens = np.random.default_rng(0).integers(5, 40, 200)
    b1 = token_batches(lens, lens, 300, seed=1, epoch=1, order="ordered")
    b2 = token_batches(lens, lens, 300, seed=1, epoch=2, order="ordered")
    for b in b1:
        assert b.tolist() == list(range(b[0], b[-1] + 1)) and len(b) * lens[b].max() <= 300
    assert sorted(map(tuple, map(list, b1))) == sorted(map(tuple, map(list, b2)))   # same batches ...
    assert [b[0] for b in b1] != [b[0] for b in b2]                                   # ... new order
    strict = token_batches(lens, lens, 300, seed=1, epoch=1, order="strict")
    assert np.concatenate(strict).tolist() == list(range(200))
    with pytest.raises(ConfigError):
        ModeConfig(batch_order="random")


# ---- training and two-pass translation ----------------------------------------------------------

@pytest.mark.slow
def test_fine_tune_from_a_sentence_model_and_translate_in_two_passes(tiny_dir, tiny_model, tmp_path, monkeypatch):
    data, sent_dir = tiny_dir / "data", tiny_model("sent2sent")
    cfg = tiny_config("pseudodoc", max_update=20).override(
        {"method.name": "docflat", "data.separator": "global_index", "data.batch_order": "ordered",
         "data.context": 2, "train.word_dropout": 0.1, "decode.max_sentences": 4, "decode.beam": 2})
    trainer = Trainer.from_dirs(cfg, data, tmp_path / "df", init_from=sent_dir, progress_bar=False)
    fresh = {n for n, _ in trainer.model.named_parameters()} - set(trainer.pretrained)
    assert fresh and all(".inserted.0." in n for n in fresh)        # FBA + gate + LN are the new parts
    trainer.train()
    tr = Translator.load(tmp_path / "df", device="cpu")
    docs = [["Hello there.", "How are you today?", "I am fine, thanks.", "And you?", "Good."], ["Yes."]]
    calls = []

    def spy(model, src, cfg, bos, eos, prefix=None, **kw):
        calls.append((bos.tolist(), prefix))
        return beam_search(model, src, cfg, bos, eos, prefix=prefix, **kw)

    monkeypatch.setattr(translate_module, "beam_search", spy)
    out, report = tr.translate(docs)
    assert [len(d.tgt) for d in out] == [5, 1]
    assert report.instances == 12                                   # 6 sentences, two passes
    assert report.empty_sentences == 0     # a forced context's </s> used to end the search (empty output)
    v = tr.vocab
    assert len(calls) == 4                                          # batches of 4 consecutive instances, two passes
    bos1, bos2 = calls[0][0] + calls[1][0], calls[2][0] + calls[3][0]
    pre2 = calls[2][1] + calls[3][1]
    assert bos1 == [v.sep(j) for j in (1, 2, 3, 4, 5, 1)] and calls[0][1] is None and calls[1][1] is None
    assert bos2 == [v.sep(j) for j in (1, 1, 1, 2, 3, 1)]           # context of up to 2 sentences
    assert pre2[0] == [] and pre2[5] == []
    for k, n_ctx in ((1, 1), (2, 2), (3, 2), (4, 2)):               # the context is forced, then <sep current>
        assert pre2[k][-1] == v.sep(k + 1) and sum(t == v.eos for t in pre2[k]) == n_ctx
    search = tr.cfg.decode.__class__(**{**vars(tr.cfg.decode), "first_pass": str(sent_dir)})
    calls.clear()
    out2, report2 = tr.translate(docs, search)
    assert [len(d.tgt) for d in out2] == [5, 1] and report2.instances == 6
    # pass 1 read from a file of the sentence model's translations: the same two-pass output
    sent = Translator.load(sent_dir, device="cpu")      # with the search settings pass 1 used above
    first, _ = sent.translate(docs, replace(search, max_sentences=sent.cfg.decode.max_sentences,
                                            max_tokens=sent.cfg.decode.max_tokens))
    (tmp_path / "first.de").write_text("".join("<d>\n" + "".join(t + "\n" for t in d.tgt) for d in first),
                                       encoding="utf-8")
    out3, _ = tr.translate(docs, replace(search, first_pass=str(tmp_path / "first.de")))
    assert [d.tgt for d in out3] == [d.tgt for d in out2]
    (tmp_path / "short.de").write_text("one line\n", encoding="utf-8")
    with pytest.raises(DataError, match="1 lines, the input 6 sentences"):
        tr.translate(docs, replace(search, first_pass=str(tmp_path / "short.de")))


@pytest.mark.slow
@pytest.mark.parametrize("gate", ["continuous", "discrete"])
def test_bf16_autocast_training_moves_the_gate(tiny_dir, tmp_path, gate):
    """DocFlat trains under bf16 autocast (the CUDA default; here CPU autocast runs the same code):
    finite losses, and the gate ψ of both FBA blocks is updated, through the straight-through
    estimator for the discrete gate."""
    data = tiny_dir / "data"
    cfg = tiny_config("pseudodoc", max_update=4, precision="bf16", log_interval=1).override(
        {"method.name": "docflat", "method.flat_gate": gate, "data.separator": "global_index",
         "data.batch_order": "ordered", "data.context": 2})
    trainer = Trainer.from_dirs(cfg, data, tmp_path / "df", progress_bar=False)
    assert trainer.amp_dtype == torch.bfloat16
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if ".gate." in n}
    assert len(before) == 4                                     # weight and bias, encoder and decoder FBA
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert all(not torch.equal(before[n], after[n].detach()) for n in before)
    losses = [row["loss"] for row in history(tmp_path / "df") if "loss" in row]
    assert losses and all(np.isfinite(losses))


def test_docflat_needs_pseudodocs_in_ordered_batches():
    from docnmt.config import Config
    from docnmt.methods import build_model, check
    cfg = Config.load("docflat_small").override({"data.batch_order": "sorted"})
    with pytest.raises(ConfigError, match=r"^a DocFlat model needs pseudo-documents in ordered batches \(data"):
        build_model(cfg, type("V", (), {"__len__": lambda s: 60, "pad": 0})())
    check(cfg.override({"data.batch_order": "ordered"}))
    check(cfg.override({"data.batch_order": "strict"}))
    with pytest.raises(ConfigError, match=r"^a DocFlat model needs pseudo-documents \(data.mode: pseudodoc\)$"):
        check(cfg.override({"data.mode": "doc2doc", "data.batch_order": "ordered"}))
    assert two_pass.uses_two_pass(cfg, cfg.decode) and not two_pass.uses_two_pass(Config.load("doc2doc_small"), None)


def test_global_index_format_edges(tiny_vocab):
    """Sentence indices start at 1 by default; every part is int32; no sentences, no tokens."""
    joiner = GlobalIndexJoiner(tiny_vocab)
    one = joiner.join([np.array([10, 11], dtype=np.int64)])
    assert one.tolist() == [tiny_vocab.sep(1), 10, 11, tiny_vocab.eos] and one.dtype == np.int32
    assert joiner.source([[12]]).tolist() == [tiny_vocab.sep(1), 12, tiny_vocab.eos]
    assert [t.tolist() for t in joiner.decoder_io([[12]])] == [[tiny_vocab.sep(1), 12], [12, tiny_vocab.eos]]
    assert joiner.prefix([[12]]) == [12, tiny_vocab.eos, tiny_vocab.sep(2)]
    empty = joiner.join([])
    assert empty.dtype == np.int32 and empty.shape == (0,)


def test_global_index_restarts_after_the_largest_index_token(tiny_vocab):
    """A document longer than the reserved index tokens (a parliament sitting has thousands of
    sentences) numbers on from <sep1>: neighbours keep distinct, ordered tokens instead of all
    sharing the last one."""
    joiner, top = GlobalIndexJoiner(tiny_vocab), tiny_vocab.max_sep
    ids = joiner.join([[10]] * 3, first=top)
    assert ids[0::3].tolist() == [tiny_vocab.sep(top), tiny_vocab.sep(1), tiny_vocab.sep(2)]
    assert joiner.start_for(2 * top + 5) == tiny_vocab.sep(5)
    assert joiner.prefix([[10]], first=top) == [10, tiny_vocab.eos, tiny_vocab.sep(1)]
    assert joiner.sentence_ids(torch.tensor(ids[None])).tolist() == [[0, 0, 0, 1, 1, 1, 2, 2, 2]]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["docflat", "mbe"])
def test_scoring_keeps_the_instances_of_a_batch_apart(tiny_dir, tiny_model, kind):
    """Teacher-forced scoring (suites, CXMI, attention entropy) of a model that looks across its
    batch: batches of many pseudo-documents score what batches of one do, per-sentence
    log-probabilities and each attention kind's entropy (flat-batch attention's too); without
    keeping them apart they would not."""
    import warnings
    from dataclasses import replace as replace_record

    from docnmt.readers import read_documents
    from docnmt.scoring import attention_entropy, document_logprobs
    tr = Translator.load(tiny_model(kind), device="cpu")
    docs = read_documents(str(tiny_dir / "raw/chat.en"), str(tiny_dir / "raw/chat.de"), fmt="marker")[:2]
    for d in docs:
        d.src, d.tgt = d.src[:8], d.tgt[:8]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                          # every instance over 1 token: a batch each
        one = document_logprobs(tr, docs, max_tokens=1), attention_entropy(tr, docs, max_tokens=1)
    many = document_logprobs(tr, docs, max_tokens=4000), attention_entropy(tr, docs, max_tokens=4000)
    assert np.asarray(many[0], dtype=float) == pytest.approx(np.asarray(one[0], dtype=float), abs=1e-3)
    if kind == "docflat":
        assert {"enc_fba", "dec_fba"} <= many[1]["entropy_bits"].keys()
    assert many[1]["entropy_bits"] == pytest.approx(one[1]["entropy_bits"], abs=1e-4)
    assert many[1]["self_distance_tokens"] == pytest.approx(one[1]["self_distance_tokens"], abs=1e-4)
    tr.method = replace_record(tr.method, score_alone=False)         # the rows see each other
    mixed = document_logprobs(tr, docs, max_tokens=4000)
    assert np.asarray(mixed, dtype=float) != pytest.approx(np.asarray(one[0], dtype=float), abs=1e-3)


@pytest.mark.slow
def test_fba_map_cli(tiny_dir, tiny_model, tmp_path, run_cli):
    """The sentence-level map of the encoder FBA: every query sentence's weights, times the key
    sentences' token counts, sum to 1; the PNG is written and never overwritten."""
    model, raw = tiny_model("docflat"), tiny_dir / "raw/chat.en"           # pseudodoc, context 2, global_index
    tr = Translator.load(model, device="cpu")
    from docnmt.readers import read_documents
    doc = read_documents(str(raw), fmt="marker")[1]
    weights, sents = docflat_map.sentence_attention_map(tr, doc, start=4, batch=6)
    assert sents == list(range(3, 11)) and weights.shape == (8, 8)    # sentences 5-10 and their context 3-4
    corpus = Corpus.encode([doc], tr.vocab)
    # the pseudo-documents holding sentence i
    copies = torch.tensor([min(i + 2, 9) - max(i, 4) + 1 for i in range(2, 10)], dtype=torch.float)
    tokens = torch.tensor([len(corpus.src[i]) + 2 for i in range(2, 10)], dtype=torch.float)
    torch.testing.assert_close(weights @ (copies * tokens), torch.ones(8), rtol=1e-4, atol=1e-4)
    assert weights[7, 1] > 0                  # sentence 10 sees sentence 4, context of the pseudo-docs of 5 and 6
    tr.model.policy.scope = "current"         # now only their current sentences are visible to the others
    current, _ = docflat_map.sentence_attention_map(tr, doc, start=4, batch=6)
    assert current[7, 1] == 0 and current[7, 6] > 0
    torch.testing.assert_close(current @ (copies * tokens), torch.ones(8), rtol=1e-4, atol=1e-4)
    out = tmp_path / "map.png"
    status, text, _ = run_cli("fba-map", model, "-i", raw, "--doc", 2, "--start", 5,
                              "--batch-size", 6, "-o", out)
    assert status == 0 and out.stat().st_size > 1000 and "sentences 3-10" in text
    status, _, err = run_cli("fba-map", model, "-i", raw, "-o", out)
    assert status == 2 and "exists" in err


def test_abd_baseline_pools_instances_and_attends_across_them():
    sub = fba(cfg_with(flat_block="abd", flat_sides="encoder"), "enc")
    x, pad = batch()
    pad[2, 1:] = True                                     # an instance of one real token
    out = run(sub, x, pad)
    pooled = torch.stack([x[j][~pad[j]].mean(0) for j in range(3)])     # mean over each instance's real tokens
    with torch.no_grad():
        mixed = sub.attn(pooled[None], pooled[None], docflat.AttnSpec())[0]
    for j in range(3):
        torch.testing.assert_close(out[j][~pad[j]], mixed[j].expand(int((~pad[j]).sum()), -1))
    assert out[pad].abs().sum() == 0
    for j in range(3):                                    # one vector per instance, on its real tokens
        real = out[j][~pad[j]]
        torch.testing.assert_close(real, real[:1].expand_as(real))
    y = x.clone()
    y[2, 0] += 1.0
    assert not torch.allclose(run(sub, y, pad)[0], out[0])     # instances see each other
    with pytest.raises(ConfigError):
        docflat.build(CFG, cfg_with(flat_block="abd"))              # encoder side only


@pytest.mark.parametrize("sides", ["both", "encoder", "decoder"])
def test_mbe_baseline_prepends_the_batch_mean_embedding(sides):
    """MBE (docs/methods/docflat.md#the-papers-baselines): position 0 of the source and/or target
    is the mean source token embedding of the whole batch; callers see the usual shapes; decoding
    step by step (with beams) equals the full forward pass."""
    from docnmt.model import Transformer
    model = docflat.build(CFG, cfg_with(flat_block="mbe", flat_sides=sides), mean_token=1).eval()
    torch.manual_seed(3)
    src = torch.randint(4, 60, (3, 7))
    src[1, 5:] = 0
    tgt = torch.randint(4, 60, (3, 5))
    with torch.no_grad():
        logits = model(src, tgt)
        assert logits.shape == (3, 5, 60)
        embed = model.encoder.embed
        real = src[src.ne(0)]
        expected = embed.table(real).mean(0) * embed.scale + embed.positions(1)[0]
        torch.testing.assert_close(model.encode(src).extra["mbe"], expected.expand(3, -1))
        alone = torch.tensor([[9, 0, 0]])                 # a batch of one real token
        want = embed.table.weight[9] * embed.scale + embed.positions(1)[0]
        torch.testing.assert_close(model.batch_mean(alone)[0], want)
        if sides != "encoder":            # the decoder reads [mean, tgt…]; its state at the mean is dropped
            enc = model.encode(src)
            full = Transformer.decode(model, model._prepend(tgt), enc)
            torch.testing.assert_close(model.decode(tgt, enc), full[:, 1:])
        if sides != "decoder":
            torch.testing.assert_close(model.embed_source(model._prepend(src), {})[:, 0], expected.expand(3, -1))
        other = src.clone()
        other[2, :3] = torch.randint(4, 60, (3,))         # only instance 2's source changes
        assert not torch.allclose(model(other, tgt)[0], logits[0])      # instance 0 sees the batch mean
        padded = torch.nn.functional.pad(src, (0, 2))     # more padding changes nothing
        torch.testing.assert_close(model(padded, tgt), logits, rtol=1e-4, atol=1e-5)
        beams = 2
        enc = model.encode(src)
        shared = enc.expand_beams(beams)
        rows = tgt.repeat_interleave(beams, 0)
        cache = DecoderCache()
        steps = torch.cat([model.decode(rows[:, : t + 1], shared, cache) for t in range(5)], 1)
        torch.testing.assert_close(steps, model.decode(rows, shared), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(steps[::beams], model.decode(tgt, enc), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_mbe_preset_trains_and_translates(tiny_model):
    from docnmt.config import Config
    assert Config.load("mbe_small").method.flat_block == "mbe"
    tr = Translator.load(tiny_model("mbe"), device="cpu")          # pseudodoc, context 2, flat_block mbe
    assert isinstance(tr.model, docflat.MeanBatchEmbedding)
    search = replace(tr.cfg.decode, max_sentences=3, beam=2)
    out, report = tr.translate([["Hello there.", "How are you today?", "I am fine.", "And you?"]], search)
    assert len(out[0].tgt) == 4 and report.instances == 8           # two passes
