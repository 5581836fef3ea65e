"""G-Transformer (docs/methods/gtransformer.md, its "Tests" section): tags, group masks, combined
attention, frame decoding, decoding that forgets finished sentences."""
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from _tiny import history, tiny_config
from docnmt.attention import _blocked, attention_reference, group_mask
from docnmt.decoder_state import DecoderCache
from docnmt.errors import ConfigError
from docnmt.methods import build_model, gtransformer
from docnmt.methods.gtransformer import (
    ABLATIONS,
    METHOD,
    CombinedAttentionSublayer,
    FrameConstraint,
    GroupAttentionPolicy,
    GroupJoiner,
    GTransformerOptions,
    build,
    group_tags,
    positions_in_sentence,
)
from docnmt.methods.length_bias import LengthAwareScale
from docnmt.model import AttentionSublayer, ModelConfig, State
from docnmt.readers import read_documents
from docnmt.search import SearchConfig, beam_search
from docnmt.training import Trainer
from docnmt.translate import Translator

PAD, BOS, EOS, EOD = 0, 2, 3, 49
CFG = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=3, decoder_layers=3,
                  dropout=0.0)
OPTS = GTransformerOptions(combined_enc_self=2, combined_dec_self=2, combined_cross=2)


def doc(*lengths, start=10):
    """A group-format token row: <s> w… </s> per sentence, word ids counting up from ``start``."""
    out, w = [], start
    for n in lengths:
        out += [BOS] + list(range(w, w + n)) + [EOS]
        w += n
    return out


def padded(rows):
    width = max(map(len, rows))
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


# ---- tags (docs/methods/gtransformer.md#group-tags) -------------------------------------------

def test_tags_reproduce_spec_examples():
    a, b, c = 10, 11, 12
    src = torch.tensor([[BOS, a, b, EOS, BOS, c, EOS, PAD, PAD]])
    assert group_tags(src, BOS, PAD, EOD).tolist() == [[1, 1, 1, 1, 2, 2, 2, 0, 0]]
    tgt_in = torch.tensor([[EOD, BOS, a, b, EOS, BOS, c, EOS]])
    assert group_tags(tgt_in, BOS, PAD, EOD).tolist() == [[0, 1, 1, 1, 1, 2, 2, 2]]
    labels = torch.tensor([[BOS, a, b, EOS, BOS, c, EOS, EOD]])
    assert group_tags(labels, BOS, PAD, EOD).tolist() == [[1, 1, 1, 1, 2, 2, 2, 0]]


def test_tags_equal_the_papers_rule_on_well_formed_rows():
    """Paper: tags start at 1 and increase by one after each </s>."""
    row = torch.tensor([doc(3, 1, 4, 2)])
    paper = 1 + torch.cat([torch.zeros(1, 1, dtype=torch.long), row.eq(EOS).cumsum(1)[:, :-1]], 1)
    assert torch.equal(group_tags(row, BOS, PAD, EOD), paper)


# ---- masks (docs/methods/gtransformer.md#attention-masks) -------------------------------------

def specs_for(src, tgt_in, offset=0):
    pol = GroupAttentionPolicy(CFG, BOS, EOD)
    pad = src.eq(PAD)
    return pol.encoder_specs(src, pad) | pol.decoder_specs(tgt_in, src, pad, offset)


def full_blocked(spec, nq, nk):
    """The dense blocked-mask a spec stands for (padding, causality and groups)."""
    blocked = _blocked(spec, nq, nk, "cpu")
    return torch.zeros(1, 1, nq, nk, dtype=torch.bool) if blocked is None else blocked


def test_every_query_row_sees_a_key_and_cross_stays_in_its_sentence():
    src = padded([doc(3, 2, 4), doc(2, 5)])
    tgt_in = padded([[EOD] + doc(2, 3, 3), [EOD] + doc(4, 1)])
    specs = specs_for(src, tgt_in)
    S, T = src.size(1), tgt_in.size(1)
    for kind, (nq, nk) in {"enc_self": (S, S), "dec_self": (T, T), "cross": (T, S), "enc_self_global": (S, S),
                           "dec_self_global": (T, T), "cross_global": (T, S)}.items():
        blocked = full_blocked(specs[kind], nq, nk).expand(2, 1, nq, nk)
        assert (~blocked).any(-1).all(), kind
    s_tags, t_tags = group_tags(src, BOS, PAD, EOD), group_tags(tgt_in, BOS, PAD, EOD)
    visible = ~full_blocked(specs["cross"], T, S)[:, 0]
    for b in range(2):
        for i in range(T):
            if t_tags[b, i] > 0:
                keys = visible[b, i].nonzero().squeeze(1)
                assert (s_tags[b, keys] == t_tags[b, i]).all() and len(keys) == (s_tags[b] == t_tags[b, i]).sum()
    # global attention: padding and causality only
    assert torch.equal(specs["cross_global"].mask[:, 0, 0], src.eq(PAD))
    assert specs["dec_self_global"].mask is None and specs["dec_self_global"].is_causal
    assert all(specs[k].groups is None for k in ("enc_self_global", "dec_self_global", "cross_global"))


def test_incremental_masks_are_rows_of_the_full_masks():
    src = padded([doc(3, 2), doc(2, 2)])
    tgt_in = padded([[EOD] + doc(2, 3), [EOD] + doc(4, 1)])
    full = specs_for(src, tgt_in)
    for t in range(1, tgt_in.size(1)):
        step = specs_for(src, tgt_in[:, : t + 1], offset=t)
        for kind, nk in (("dec_self", tgt_in.size(1)), ("cross", src.size(1))):
            want = full_blocked(full[kind], tgt_in.size(1), nk).expand(2, 1, -1, -1)[:, :, t: t + 1]
            if kind == "dec_self":
                want = want[..., : t + 1]
            got = full_blocked(step[kind], 1, t + 1 if kind == "dec_self" else nk).expand_as(want)
            assert torch.equal(got, want), (kind, t)


def test_group_mask_of_tag_zero_query_is_open():
    tags = torch.tensor([[0, 1, 1, 2]])
    m = group_mask(tags, tags)[0, 0]
    assert not m[0].any() and m[1].tolist() == [True, False, False, True]


# ---- layers and ablations (docs/methods/gtransformer.md#layer-structure-combined-attention) ----

def kinds_of(model):
    out = []
    for layer in list(model.encoder.layers) + list(model.decoder.layers):
        for sub in layer.sublayers:
            if isinstance(sub, AttentionSublayer):
                out.append(("C" if isinstance(sub, CombinedAttentionSublayer) else "G") + ":" + sub.kind)
    return out


@pytest.mark.parametrize("ablation,want", [
    ("none", ["G:enc_self", "C:enc_self", "C:enc_self",
              "G:dec_self", "G:cross", "C:dec_self", "C:cross", "C:dec_self", "C:cross"]),
    ("only_group", ["G:enc_self"] * 3 + ["G:dec_self", "G:cross"] * 3),
    ("only_global", ["G:enc_self", "G:enc_self_global", "G:enc_self_global",
                     "G:dec_self", "G:cross", "G:dec_self_global", "G:cross_global",
                     "G:dec_self_global", "G:cross_global"]),
    ("no_target_context", ["G:enc_self", "C:enc_self", "C:enc_self",
                           "G:dec_self", "G:cross", "G:dec_self", "C:cross", "G:dec_self", "C:cross"]),
    ("no_source_context", ["G:enc_self"] * 3 + ["G:dec_self", "G:cross", "C:dec_self", "G:cross",
                                                "C:dec_self", "G:cross"]),
])
def test_ablation_switches_choose_the_layers(ablation, want):
    assert kinds_of(build(CFG, GTransformerOptions(group_ablation=ablation), BOS, EOD)) == want


def test_unknown_ablation_is_a_config_error():
    want = f"^unknown group_ablation 'nope'; choose one of {re.escape(', '.join(ABLATIONS))}$"
    with pytest.raises(ConfigError, match=want):
        build(CFG, GTransformerOptions(group_ablation="nope"), BOS, EOD)


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_every_attention_has_its_own_name_and_side(ablation):
    """Whatever the ablation, every attention module is named after its layer and kind (the
    key of its decoding cache and of the entropy probe), cross-attention reads the encoder
    memory, self-attention its own states, and the attention dropout setting reaches them all."""
    cfg = ModelConfig(**{**vars(CFG), "attention_dropout": 0.25})
    model = build(cfg, GTransformerOptions(group_ablation=ablation), BOS, EOD)
    for side, layers in (("enc", model.encoder.layers), ("dec", model.decoder.layers)):
        for i, layer in enumerate(layers):
            subs = [sub for sub in layer.sublayers if isinstance(sub, AttentionSublayer)]
            for sub, kind in zip(subs, ("self", "cross")):
                assert (sub.attn.name, sub.cross, sub.attn.dropout) == (f"{side}.{i}.{kind}", kind == "cross", 0.25)
                if isinstance(sub, CombinedAttentionSublayer):
                    assert (sub.attn_global.name, sub.attn_global.dropout) == (f"{side}.{i}.{kind}.global", 0.25)
    assert CombinedAttentionSublayer(CFG, "enc_self", "enc.0.self").cross is False


def test_source_padding_changes_nothing():
    """Padded source positions are hidden from the global attention branches (encoder self- and
    cross-attention) and from the decoder's start token, which group masks leave open."""
    torch.manual_seed(0)
    model = build(CFG, OPTS, BOS, EOD).eval()
    src = padded([doc(3, 2), doc(2, 2, 1)])
    tgt = padded([[EOD] + doc(2, 3), [EOD] + doc(1, 1, 2)])
    with torch.no_grad():
        torch.testing.assert_close(model(F.pad(src, (0, 3), value=PAD), tgt), model(src, tgt), rtol=1e-5, atol=1e-5)


def test_combined_gate_mixes_local_and_global_per_position_and_channel():
    torch.manual_seed(0)
    model = build(CFG, OPTS, BOS, EOD).eval()
    sub = model.encoder.layers[-1].sublayers[0]
    src = padded([doc(3, 2), doc(4)])
    state = State(model.policy.encoder_specs(src, src.eq(PAD)))
    x = torch.randn(2, src.size(1), CFG.d_model)
    local = sub.attn(x, x, state.specs["enc_self"])
    glob = sub.attn_global(x, x, state.specs["enc_self_global"])
    g = torch.sigmoid(sub.gate(torch.cat([local, glob], -1)))
    assert g.shape == x.shape and ((g > 0) & (g < 1)).all()
    torch.testing.assert_close(sub.transform(x, state), g * local + (1 - g) * glob)
    with torch.no_grad():
        sub.gate.bias.fill_(50.0)
    torch.testing.assert_close(sub.transform(x, state), local)


def test_sentences_do_not_see_each_other_below_the_combined_layers():
    """With only group attention, changing sentence 2 of the source leaves the encoder states
    of sentence 1 unchanged, and the decoder states of target sentence 1 too."""
    torch.manual_seed(0)
    model = build(CFG, GTransformerOptions(group_ablation="only_group"), BOS, EOD).eval()
    a = torch.tensor([doc(3, 2)])
    b = a.clone()
    b[0, -2] = 40
    ea, eb = model.encode(a), model.encode(b)
    torch.testing.assert_close(ea.memory[:, :5], eb.memory[:, :5])
    assert not torch.allclose(ea.memory[:, 5:], eb.memory[:, 5:])
    tgt = torch.tensor([[EOD] + doc(2, 2)])
    da, db = model.decode(tgt, ea), model.decode(tgt, eb)
    torch.testing.assert_close(da[:, 1:5], db[:, 1:5])    # position 0 (EOD, tag 0) sees every sentence


# ---- positions (docs/methods/gtransformer.md#positions) --------------------------------------

def test_sentence_positions_count_as_the_plain_sentence_format():
    """Source words from 0 (plain source ``x </s>``; the sentence's ``<s>`` shares 0), the
    decoder's ``<s>`` at 0 (plain decoder input ``<s> y``), the leading EOD at 0."""
    src = torch.tensor([doc(3, 2)])
    assert positions_in_sentence(src, BOS, first_word=0).tolist() == [[0, 0, 1, 2, 3, 0, 0, 1, 2]]
    tgt = torch.tensor([[EOD] + doc(1, 2)[:-1]])
    assert positions_in_sentence(tgt, BOS, first_word=1).tolist() == [[0, 0, 1, 2, 0, 1, 2]]


@pytest.mark.parametrize("positions", ["sentence", "document"])
def test_with_sentence_positions_every_sentence_starts_as_if_alone(positions):
    """With ``sentence_positions: true`` (docs/methods/gtransformer.md#positions) and the
    sentence-index vectors still at zero, group attention computes the second sentence of a
    document exactly as the same sentence alone in a one-sentence document; with the paper's
    document positions it does not, and once the sentence-index vectors move, neither."""
    torch.manual_seed(0)
    model = build(CFG, GTransformerOptions(group_ablation="only_group", sentence_positions=positions == "sentence"),
                  BOS, EOD).eval()
    src, tgt = torch.tensor([doc(3, 4)]), torch.tensor([[EOD] + doc(2, 3)[:-1]])
    alone_src, alone_tgt = src[:, 5:], torch.cat([tgt[:, :1], tgt[:, 5:]], 1)     # <s> x2 </s>; EOD <s> y2
    with torch.no_grad():
        enc, alone_enc = model.encode(src), model.encode(alone_src)
        in_document, alone = model.decode(tgt, enc)[:, 5:], model.decode(alone_tgt, alone_enc)[:, 1:]
        same = torch.allclose(enc.memory[:, 5:], alone_enc.memory, atol=1e-5) and \
            torch.allclose(in_document, alone, atol=1e-5)
        assert same == (positions == "sentence")
        if positions == "sentence":
            torch.nn.init.normal_(model.sentence_embed.weight)
            assert not torch.allclose(model.decode(tgt, model.encode(src))[:, 5:], alone, atol=1e-3)


def test_sentence_positions_follow_a_source_language_code():
    """An imported model's language code before the source (``lang x </s>`` in its sentence
    training): every sentence's first word at position 1, its ``<s>`` at 0."""
    from dataclasses import replace
    model = build(replace(CFG, src_lang_token=7), GTransformerOptions(sentence_positions=True), BOS, EOD).eval()
    src = model.with_source_language(torch.tensor([doc(3, 2)]))          # lang <s> w w w </s> <s> w w </s>
    embed = model.encoder.embed
    with torch.no_grad():
        x = model.embed_source(src, {})
        for i, p in [(2, 1), (3, 2), (7, 1), (8, 2)]:
            want = embed.table.weight[src[0, i]] * embed.scale + embed.positions(3)[p]
            torch.testing.assert_close(x[0, i], want)


@pytest.mark.parametrize("bias", [0.0, 30.0])
def test_a_large_gate_bias_starts_every_combined_attention_on_its_local_attention(bias):
    """``method.gate_bias`` (docs/methods/gtransformer.md#gate-bias): set after the model's own
    initialisation; with a large bias the global attention's weights do not matter, with 0 they do."""
    torch.manual_seed(0)
    model = build(CFG, GTransformerOptions(gate_bias=bias), BOS, EOD).eval()
    gates = [m.gate.bias for m in model.modules() if hasattr(m, "attn_global")]
    assert gates and all(torch.all(b == bias) for b in gates)
    src, tgt = torch.tensor([doc(3, 4)]), torch.tensor([[EOD] + doc(2, 3)[:-1]])
    with torch.no_grad():
        before = model(src, tgt)
        for m in model.modules():
            if hasattr(m, "attn_global"):
                torch.nn.init.normal_(m.attn_global.in_proj.weight)
        after = model(src, tgt)
    assert torch.allclose(before, after, atol=1e-4) == (bias > 0)


def test_sentence_positions_is_a_method_setting():
    cfg = tiny_config("doc2doc").override({"method.name": "gtransformer", "data.separator": "group",
                                           "method.sentence_positions": "true"})
    assert cfg.method.sentence_positions is True and cfg.model.positions == "sinusoidal"
    from docnmt.methods import check
    with pytest.raises(ConfigError, match="^method.sentence_positions does not follow a target language token"):
        check(cfg.override({"model.tgt_lang_token": 7}))
    check(cfg.override({"model.src_lang_token": 7}))


# ---- incremental decoding with dynamic tags equals the full pass -----------------------------

def count_calls(monkeypatch, kernel: str) -> list:
    """Record every call of ``docnmt.attention.<kernel>`` (one of the kernels ``attention_sdpa``
    dispatches to); returns the list the calls are appended to."""
    import docnmt.attention as attention
    calls, fn = [], getattr(attention, kernel)
    monkeypatch.setattr(attention, kernel, lambda *a, **kw: calls.append(a[0].shape) or fn(*a, **kw))
    return calls


@pytest.mark.parametrize("length_aware,positions", [(False, "document"), (True, "document"), (False, "sentence")])
def test_incremental_decoding_equals_full_forward(length_aware, positions, monkeypatch):
    """Step by step (one query: the explicit softmax) equals the full teacher-forced pass through
    the sentence-block kernel (``attention_grouped``, which training uses: gradients enabled),
    also with length-aware attention on top (G-Trans + LAA,
    docs/methods/length_bias.md#g-transformer-with-dls-and-laa) and with positions that restart
    in every sentence (taken from the whole prefix at every step)."""
    torch.manual_seed(0)
    model = build(CFG, GTransformerOptions(combined_enc_self=2, combined_dec_self=2, combined_cross=2,
                                           sentence_positions=positions == "sentence"), BOS, EOD).eval()
    if positions == "sentence":
        torch.nn.init.normal_(model.sentence_embed.weight)       # trained sentence-index vectors
    if length_aware:
        model.add_piece("length_scale", LengthAwareScale())
        model.set_training_lengths(9, 14)
    src = padded([doc(3, 2, 2), doc(2, 4)])
    tgt = padded([[EOD] + doc(2, 3, 1), [EOD] + doc(3, 2)])[:, :9]
    grouped = count_calls(monkeypatch, "attention_grouped")
    with torch.no_grad():
        enc = model.encode(src)
        cache = DecoderCache()
        steps = torch.cat([model.decode(tgt[:, : t + 1], enc, cache) for t in range(tgt.size(1))], 1)
    assert grouped == []                                # one query per step: the reference form
    full = model.decode(tgt, enc)                       # gradients on: the block-by-block kernel
    assert len(grouped) == 2 * CFG.decoder_layers       # group self- and cross-attention of every layer
    torch.testing.assert_close(steps, full.detach(), rtol=1e-4, atol=1e-5)


def test_beam_search_keeps_the_source_keys_once_per_input():
    """Group cross-attention folds the beams into its query axis, their query tags along (each
    beam may be in another sentence): its keys are stored once per input like the global ones,
    not copied to every beam (docs/performance.md#document-models), and the beams still get
    the states of per-beam copies."""
    torch.manual_seed(0)
    model = build(CFG, OPTS, BOS, EOD).eval()
    B, K = 2, 3
    src = padded([doc(3, 2, 2), doc(2, 4)])
    # the beams of an input part at the second sentence's <s> (step 5): other tags, same keys
    tgt = torch.tensor([[EOD, BOS, 5, 6, EOS, BOS, 7], [EOD, BOS, 5, 6, 7, 8, 9], [EOD, BOS, 5, EOS, BOS, 6, 7]])
    tgt = tgt.repeat(B, 1)
    with torch.no_grad():
        enc = model.encode(src)
        copies, shared = enc.select(torch.arange(B).repeat_interleave(K)), enc.expand_beams(K)
        c_copies, c_shared = DecoderCache(), DecoderCache()
        for t in range(tgt.size(1)):
            a = model.decode(tgt[:, : t + 1], copies, c_copies)
            b = model.decode(tgt[:, : t + 1], shared, c_shared)
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    cross = [n for n in c_shared._static if ".cross" in n]
    assert len(cross) == 2 * CFG.decoder_layers - 1 and all(c_shared.static(n)[0].size(0) == B for n in cross)


# ---- the frame decoder (docs/methods/gtransformer.md#decoding-the-sentence-frame) -------------

def test_frame_decoding_keeps_the_source_sentence_structure():
    torch.manual_seed(1)
    model = build(CFG, OPTS, BOS, EOD).eval()
    src = padded([doc(3, 1, 2), doc(2), doc(1, 1, 1, 1)])
    frame = FrameConstraint(src, BOS, EOS, PAD, EOD)
    hyps = beam_search(model, src, SearchConfig(beam=3, nbest=3), EOD, EOD, banned=[PAD],
                       processors=[frame], max_len=frame.max_len())
    n_words = [[3, 1, 2], [2], [1, 1, 1, 1]]
    for nbest, words in zip(hyps, n_words):
        assert nbest
        for h in nbest:
            sents, cur = [], None
            for t in h.tokens:
                if t == BOS:
                    assert cur is None
                    cur = []
                elif t == EOS:
                    sents.append(cur)
                    cur = None
                else:
                    assert cur is not None and t not in (PAD, EOD)
                    cur.append(t)
            assert cur is None and len(sents) == len(words)
            for s, n in zip(sents, words):
                assert 1 <= len(s) <= int(1.2 * n + 10)


def test_word_dropout_only_in_its_first_epochs(tiny_dir, tmp_path):
    cfg = tiny_config("doc2doc", max_update=1).override({"train.word_dropout": 0.5, "train.word_dropout_epochs": 2})
    tr = Trainer.from_dirs(cfg, tiny_dir / "data", tmp_path / "m", progress_bar=False)
    batch = tr.epoch_batches(1)[0]
    clean = tr.train_set.collate(batch)
    for epoch, dropped in ((1, True), (2, True), (3, False)):
        out = tr.collate(batch, epoch, 0)
        assert (not torch.equal(out["src"], clean["src"])) == dropped, epoch
        assert torch.equal(out["labels"], clean["labels"])            # labels never


def test_frame_keeps_every_sentence_past_the_training_positions():
    """A whole document may need more target positions than the model was trained with: the
    search is not cut at max_positions, so no sentence comes back empty."""
    cfg = ModelConfig(**{**vars(CFG), "max_positions": 32})
    torch.manual_seed(0)
    model = build(cfg, OPTS, BOS, EOD).eval()
    with torch.no_grad():                              # words likely, </s> unlikely: long sentences
        model.decoder.embed.table.weight[EOS] -= 5
    src = torch.tensor([doc(*[4] * 8)])                 # 48 source tokens, frame limit 8 × 14 words
    frame = FrameConstraint(src, BOS, EOS, PAD, EOD)
    hyp = beam_search(model, src, SearchConfig(beam=2), EOD, EOD, banned=[PAD],
                      processors=[frame], max_len=frame.max_len())[0][0]
    assert len(hyp.tokens) > 32 and hyp.tokens.count(EOS) == 8 and hyp.tokens.count(BOS) == 8


def test_frame_limits_follow_the_source_sentences():
    """⌊a·n_k + b⌋ words for source sentence k of n_k words (a = 1.2, b = 10), none for sentences
    a row does not have; max_len fits every sentence at its maximum with its marks, and EOD."""
    frame = FrameConstraint(padded([doc(3, 1, 2), doc(5)]), BOS, EOS, PAD, EOD)
    assert frame.max_words.tolist() == [[13, 11, 12], [16, 0, 0]]
    assert frame.max_len().tolist() == [36 + 6 + 1, 16 + 2 + 1]


def test_frame_counts_the_words_of_each_rows_current_sentence():
    """Rows are checked against their own source row and current sentence (the last one too):
    sentence 2 of source row 0 may take 3 words, source row 1's only sentence 2 (a = 1, b = 0)."""
    frame = FrameConstraint(padded([doc(1, 3), doc(2)]), BOS, EOS, PAD, EOD, a=1.0, b=0)
    tokens = torch.tensor([[EOD, BOS, 20, EOS, BOS, 21, 22],     # 2 of 3 words: free, </s> allowed
                           [EOD, BOS, 23, 24, 25, 26, 27]])      # 5 of 2 words: </s> forced
    lprobs = torch.zeros(2, 50)
    frame(6, tokens, lprobs, torch.tensor([0, 1]), torch.tensor([99, 99]))
    assert torch.isfinite(lprobs[0, [EOS, 30]]).all() and not torch.isfinite(lprobs[0, [BOS, EOD]]).any()
    assert torch.isfinite(lprobs[1]).nonzero().squeeze(1).tolist() == [EOS]
    lprobs = torch.zeros(1, 50)                                  # the official start: <s> is token 0
    frame(1, torch.tensor([[BOS, 20]]), lprobs, torch.tensor([1]), torch.tensor([99]))
    assert torch.isfinite(lprobs[0, [EOS, 30]]).all()            # one word written: </s> allowed


def test_frame_forces_a_token_whatever_its_id():
    """A forced token may have id 0 (an imported vocabulary's <s>)."""
    bos, eos, pad, eod = 0, 3, 1, 49
    frame = FrameConstraint(torch.tensor([[bos, 10, eos]]), bos, eos, pad, eod)
    lprobs = torch.zeros(1, 50)
    frame(1, torch.tensor([[eod]]), lprobs, torch.tensor([0]), torch.tensor([99]))
    assert torch.isfinite(lprobs[0]).nonzero().squeeze(1).tolist() == [bos]


def test_group_format_round_trip(tiny_vocab):
    """<s> x </s> per sentence on both sides (int32 ids), EOD to start and end the target;
    overhead counts those marks; a forced prefix is the same sentences; split inverts it."""
    v = tiny_vocab
    joiner, eod = GroupJoiner(v), v.id("<eod>")
    src = joiner.source([np.array([10, 11], dtype=np.int32), np.array([12], dtype=np.int32)])
    assert src.tolist() == [v.bos, 10, 11, v.eos, v.bos, 12, v.eos] and src.dtype == np.int32
    assert joiner.overhead(np.array([1, 2]), "src").tolist() == [2, 4]
    assert joiner.overhead(np.array([1, 2]), "tgt").tolist() == [3, 5]          # and EOD
    assert joiner.prefix([[10, 11], [12]]) == src.tolist() and joiner.prefix([]) == []
    assert joiner.split(src.tolist() + [eod], 2) == ([[10, 11], [12]], True)
    assert joiner.split([v.bos, 10, v.eos, v.bos, 12], 3) == ([[10], [12], []], False)
    assert (joiner.start, joiner.end, joiner.sep_ids) == (eod, eod, set())


def test_start_token_follows_the_official_start_setting():
    """Decoding settings at their defaults start from the format's token; ``official_start`` from ``<s>``."""
    from docnmt.config import section_class
    tr = type("T", (), {"vocab": type("V", (), {"bos": BOS})()})()
    assert METHOD.start_token(tr, section_class("decode")(), 1) is None
    assert METHOD.start_token(tr, section_class("decode")(official_start=True), 1) == BOS


def test_frame_needs_a_word_in_every_sentence():
    frame = FrameConstraint(torch.tensor([doc(2, 2)]), BOS, EOS, PAD, EOD)
    lprobs = torch.zeros(1, 50)
    frame(2, torch.tensor([[EOD, BOS]]), lprobs, torch.tensor([0]), torch.tensor([99]))
    assert not torch.isfinite(lprobs[0, [EOS, BOS, EOD]]).any() and torch.isfinite(lprobs[0, 20])


def test_frame_forces_sentence_end_at_the_maximum():
    src = torch.tensor([doc(1)])
    frame = FrameConstraint(src, BOS, EOS, PAD, EOD, a=1.0, b=1)      # at most 2 words
    tokens = torch.tensor([[EOD, BOS, 20, 21]])
    lprobs = torch.zeros(1, 50)
    frame(3, tokens, lprobs, torch.tensor([0]), torch.tensor([99]))
    assert torch.isfinite(lprobs[0]).nonzero().squeeze(1).tolist() == [EOS]
    lprobs = torch.zeros(1, 50)
    frame(4, torch.tensor([[EOD, BOS, 20, 21, EOS]]), lprobs, torch.tensor([0]), torch.tensor([99]))
    assert torch.isfinite(lprobs[0]).nonzero().squeeze(1).tolist() == [EOD]     # no sentence left


def test_block_kernels_agree_with_the_reference_attention(monkeypatch):
    """The model through the kernels training takes (gradients on: ``attention_grouped`` for the
    group attention, SDPA for the global branches) equals it through the explicit softmax
    reference, logits and parameter gradients."""
    torch.manual_seed(0)
    model = build(CFG, OPTS, BOS, EOD).eval()
    src = padded([doc(3, 2), doc(2, 2, 1)])
    tgt = padded([[EOD] + doc(2, 3), [EOD] + doc(1, 1, 2)])
    weight = torch.randn(*tgt.shape, CFG.vocab_size)
    params = [p for p in model.parameters()]
    grouped = count_calls(monkeypatch, "attention_grouped")
    fast = model(src, tgt)
    assert len(grouped) == CFG.encoder_layers + 2 * CFG.decoder_layers     # every group attention
    fast_grads = torch.autograd.grad((fast * weight).sum(), params)
    monkeypatch.setattr("docnmt.attention.attention_sdpa", attention_reference)
    ref = model(src, tgt)
    ref_grads = torch.autograd.grad((ref * weight).sum(), params)
    assert len(grouped) == CFG.encoder_layers + 2 * CFG.decoder_layers     # no kernel on the reference path
    torch.testing.assert_close(fast, ref, rtol=1e-4, atol=1e-4)
    for a, b in zip(fast_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


# ---- end to end on real text: train, translate batched and unbatched --------------------------

@pytest.mark.slow
def test_train_and_translate_documents(tiny_dir, tmp_path):
    data = tiny_dir / "data"
    cfg = tiny_config("doc2doc", max_update=8).override({
        "method.name": "gtransformer", "data.separator": "group", "method.combined_enc_self": 1,
        "method.combined_dec_self": 1, "method.combined_cross": 1, "data.max_instance_tokens": 160})
    Trainer.from_dirs(cfg, data, tmp_path / "m", progress_bar=False).train()
    valid = [row for row in history(tmp_path / "m") if "valid_loss" in row]
    kinds = {k[len("valid_entropy_"):] for k in valid[-1] if k.startswith("valid_entropy_")}
    assert kinds == {"enc_self", "enc_self_global", "dec_self", "dec_self_global", "cross", "cross_global"}
    assert valid[-1]["valid_entropy_cross"] < valid[-1]["valid_entropy_cross_global"]   # groups: fewer keys
    tr = Translator.load(tmp_path / "m", device="cpu")
    docs = [d for d in read_documents(str(tiny_dir / "raw/chat.en"), fmt="marker")[:2]]
    for d in docs:
        d.src = d.src[:12]
    search = tr.cfg.decode.__class__(**{**vars(tr.cfg.decode), "beam": 2, "max_sentences": 8})
    out, report = tr.translate(docs, search)
    assert [len(d.tgt) for d in out] == [len(d.src) for d in docs]
    assert report.instances > 2 and report.malformed_instances == 0     # the frame guarantees it
    single, _ = tr.translate(docs, tr.cfg.decode.__class__(**{**vars(search), "max_sentences": 1}))
    assert [d.tgt for d in single] == [d.tgt for d in out]
    # the official generator's start token (<s>): the frame still holds
    official, report = tr.translate(docs, tr.cfg.decode.__class__(**{**vars(search), "official_start": True}))
    assert [len(d.tgt) for d in official] == [len(d.src) for d in docs] and report.malformed_instances == 0
    # whole documents, one instance each, when asked
    tr.cfg = tr.cfg.override({"data.max_instance_tokens": 0})
    whole, report = tr.translate(docs, search)
    assert report.instances == len(docs) and report.malformed_instances == 0
    assert [len(d.tgt) for d in whole] == [len(d.src) for d in docs]


def test_official_start_decodes_from_the_sentence_start(tiny_dir, monkeypatch):
    """``decode.official_start``: every search starts from ``<s>``, as the official generator
    does (docs/methods/gtransformer.md#gt-decoder-start); by default from EOD, as in training.
    The frame holds either way."""
    from dataclasses import replace

    from docnmt import translate as translate_module
    from docnmt.vocab import Vocab
    cfg = tiny_config("doc2doc").override({"method.name": "gtransformer", "data.separator": "group",
                                           "method.combined_enc_self": 1, "method.combined_dec_self": 1,
                                           "method.combined_cross": 1})
    vocab = Vocab.load(tiny_dir / "data")
    torch.manual_seed(0)
    tr = Translator(build_model(cfg, vocab), vocab, cfg)
    starts, search = [], translate_module.beam_search
    monkeypatch.setattr(translate_module, "beam_search", lambda model, src, c, bos, *a, **kw:
                        starts.append(bos.tolist()) or search(model, src, c, bos, *a, **kw))
    docs = [["Hello there.", "How are you?"], ["Yes."]]
    for official, token in ((False, vocab.id("<eod>")), (True, vocab.bos)):
        starts.clear()
        out, _ = tr.translate(docs, replace(cfg.decode, beam=2, max_len_b=3, official_start=official))
        assert [len(d.tgt) for d in out] == [2, 1]
        assert sorted({t for s in starts for t in s}) == [token] and sum(map(len, starts)) == 2


def test_group_format_is_required():
    cfg = tiny_config("doc2doc").override({"method.name": "gtransformer"})
    with pytest.raises(ConfigError, match=r"^a G-Transformer needs the group data format \(data.separator: group\)$"):
        build_model(cfg, type("V", (), {"__len__": lambda s: 50, "pad": 0, "bos": 2,
                                        "id": lambda s, x: 49})())


@pytest.mark.slow
def test_fine_tuning_from_a_sentence_model(tiny_dir, tmp_path):
    """Fine-tuning (docs/methods/gtransformer.md#fine-tuning-from-a-sentence-model): the
    sentence model's attention becomes the local attention, global attention
    and gates stay fresh, the two groups train at lr and 0.2·lr, and a resumed run keeps them."""
    from safetensors.torch import load_file
    data = tiny_dir / "data"
    sent = tiny_config("sent2sent", max_update=3).override({"data.separator": "group"})
    Trainer.from_dirs(sent, data, tmp_path / "sent", progress_bar=False).train()
    doc_cfg = tiny_config("doc2doc", max_update=4, save_interval_updates=2, pretrained_lr_scale=0.2).override({
        "method.name": "gtransformer", "data.separator": "group", "method.combined_enc_self": 1,
        "method.combined_dec_self": 1, "method.combined_cross": 1})
    tr = Trainer.from_dirs(doc_cfg, data, tmp_path / "gt", progress_bar=False, init_from=tmp_path / "sent")
    weights = load_file(str(tmp_path / "sent" / "model.safetensors"))
    params = dict(tr.model.named_parameters())
    local = "decoder.layers.1.sublayers.1.attn.in_proj.weight"          # a combined cross-attention's local part
    assert torch.equal(params[local], weights[local])
    assert "decoder.layers.1.sublayers.1.attn_global.in_proj.weight" not in weights
    assert set(tr.pretrained) == set(weights) & set(params)
    lrs = [g["initial_lr"] for g in tr.optimizer.param_groups]
    assert lrs == pytest.approx([tr.cfg.train.lr, 0.2 * tr.cfg.train.lr])
    assert len(tr.optimizer.param_groups[1]["params"]) == len(tr.pretrained)
    fresh = len(params) - len(tr.pretrained)                             # what was copied is in train.log
    assert f"initialised {len(tr.pretrained)} parameters from {tmp_path / 'sent' / 'model.safetensors'}; " \
           f"{fresh} fresh: " in (tmp_path / "gt" / "train.log").read_text()
    tr.train()
    ratio = [g["lr"] for g in tr.optimizer.param_groups]
    assert ratio[1] == pytest.approx(0.2 * ratio[0])                     # one schedule, two scales
    # resumed with bf16 autocast: two parameter groups and mixed precision together
    # (docs/methods/gtransformer.md#gt-mixed-precision)
    resumed = Trainer.from_dirs(doc_cfg.override({"train.max_update": 6, "train.precision": "bf16"}), data,
                                tmp_path / "gt", progress_bar=False)
    assert resumed.pretrained == tr.pretrained and len(resumed.optimizer.param_groups) == 2
    resumed.train()
    assert resumed.progress.updates == 6


def test_init_from_a_model_of_another_size_is_a_clear_error(tiny_dir, tiny_model, tmp_path):
    from docnmt.errors import DocnmtError
    bigger = tiny_config("sent2sent", max_update=1).override({"model.d_model": 48})
    with pytest.raises(DocnmtError, match="do not fit"):
        Trainer.from_dirs(bigger, tiny_dir / "data", tmp_path / "b", progress_bar=False,
                          init_from=tiny_model("sent2sent"))


def test_attention_entropy_probe_matches_its_definition():
    """Entropy (docs/methods/discourse.md#attention-entropy) in bits of head-averaged weights, per
    query; uniform attention over m keys has log2(m) bits; group attention over sentences of 3 and
    2 tokens has less than global."""
    from docnmt.attention import AttentionProbe, AttnSpec, MultiheadAttention, module_kind
    torch.manual_seed(0)
    mha = MultiheadAttention(CFG.d_model, CFG.heads, name="enc.0.self")
    with torch.no_grad():
        mha.in_proj.weight.zero_()          # all logits 0: uniform weights
    x = torch.randn(1, 5, CFG.d_model)
    tags = torch.tensor([[1, 1, 1, 2, 2]])
    with AttentionProbe() as probe:
        mha(x, x, AttnSpec())
        mha(x, x, AttnSpec(groups=(tags, tags)))
    full, group = probe.entropy["enc.0.self"]
    torch.testing.assert_close(full, torch.full((1, 5), math.log2(5)))
    torch.testing.assert_close(group, torch.tensor([[math.log2(3)] * 3 + [1.0] * 2]))
    assert AttentionProbe.active is None
    assert [module_kind(n) for n in ("enc.2.self", "dec.0.self", "dec.1.cross", "dec.1.cross.global")] == \
        ["enc_self", "dec_self", "cross", "cross_global"]


# ---- decoding forgets finished sentences (docs/performance.md#document-models): group self-attention's
# cache drops the keys before the earliest current sentence (AttnSpec.first_key) ----------------------

DCFG = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=3,
                   dropout=0.0)


def test_first_key_is_the_earliest_current_sentence_and_the_cut_spec_is_the_full_ones_columns():
    """The keys before ``first_key`` are blocked for every query of the step (and the cut spec's
    mask is the rest of the full one: causality stays aligned to the last keys, with one query
    and with several); none while a query has tag 0 or in a full pass."""
    pol = GroupAttentionPolicy(DCFG, BOS, EOD)
    src = padded([doc(2, 2, 2)] * 3)
    tgt = torch.tensor([[EOD] + doc(2, 3, 1)[:-1], [EOD] + doc(3, 1, 2)[:-1], [EOD] + doc(1, 7)[:-1]])
    # the rows' current sentences start at 10, 9 (their third <s>) and 4 (row 2's second)
    for offset, want in [(tgt.size(1) - 1, 4), (tgt.size(1) - 2, 4), (0, None)]:
        spec = pol.decoder_specs(tgt, src, src.eq(PAD), offset)["dec_self"]
        assert spec.first_key == want
        if want is None:
            continue
        nq, nk = tgt.size(1) - offset, tgt.size(1)
        full = spec.blocked(nq, nk, "cpu")
        assert full[..., :want].all()
        assert torch.equal(spec.keys_from(want).blocked(nq, nk - want, "cpu"), full[..., want:])
    start = pol.decoder_specs(tgt[:, :2], src, src.eq(PAD), 1)["dec_self"]           # the first <s>: from 1
    assert start.first_key == 1
    tagged_zero = torch.cat([tgt[:, :3], torch.tensor([[EOD], [5], [5]])], 1)        # a query of tag 0
    assert pol.decoder_specs(tagged_zero, src, src.eq(PAD), 3)["dec_self"].first_key is None
    assert all(s.first_key is None for k, s in pol.decoder_specs(tgt, src, src.eq(PAD), 5).items() if k != "dec_self")


@pytest.mark.parametrize("options, prefix", [
    (GTransformerOptions(1, 2, 1), None),
    (GTransformerOptions(1, 2, 1, sentence_positions=True), None),
    (GTransformerOptions(1, 1, 1), [doc(1, start=20), doc(2, 1, start=20)[:-1], []]),
])
def test_beam_search_forgetting_finished_sentences_gives_the_same_hypotheses(options, prefix, monkeypatch):
    """Three documents of several sentences, 3 beams, with and without forgetting: the same
    tokens and the same scores, and the self-attention caches did drop keys."""
    torch.manual_seed(0)
    model = build(DCFG, options, BOS, EOD).eval()
    src = padded([doc(3, 1, 2, 2, 1), doc(2, 2), doc(1, 3, 1, 1)])
    kept, forget = [], DecoderCache.forget
    monkeypatch.setattr(DecoderCache, "forget", lambda self, name, first: kept.append(
        (self._kv[name].n, forget(self, name, first))) or kept[-1][1])

    def run():
        frame = FrameConstraint(src, BOS, EOS, PAD, EOD, a=1.0, b=2)
        return beam_search(model, src, SearchConfig(beam=3, nbest=3), EOD, EOD, banned=[PAD], prefix=prefix,
                           processors=[frame], max_len=frame.max_len())

    forgetting = run()
    assert max(lo for _, lo in kept) > 10 and sum(n - lo for n, lo in kept) < 0.5 * sum(n for n, _ in kept)
    monkeypatch.setattr(gtransformer, "first_key", lambda tags, offset: None)
    kept.clear()
    keeping = run()
    assert not kept
    for a, b in zip(forgetting, keeping):
        assert len(a) == 3 and [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == [h.score for h in b]
    assert max(h.tokens.count(BOS) for nbest in forgetting for h in nbest) >= 4      # several sentences
