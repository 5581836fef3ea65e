"""The papers' ablation rows that docnmt offers as presets and settings (each method's docs page,
"The paper's ablations"): G-Transformer's Table 3 and 5 rows, the length-bias paper's
fixed-temperature DLS and ALiBi baseline, DocFlat's data-shuffling ablation and its pass-1
report, P-Transformer's combined "-self-src -self-tgt" row. Each test fails when its ablation is
not applied."""
import logging
from dataclasses import replace

import numpy as np
import pytest
import torch

from _tiny import assert_incremental_equals_full, random_pair
from docnmt import methods
from docnmt.attention import RelativeLogits
from docnmt.checkpoint import WEIGHTS, save_weights
from docnmt.config import Config
from docnmt.errors import ConfigError
from docnmt.methods import alibi, gtransformer, ptransformer
from docnmt.methods.alibi import alibi_slopes
from docnmt.methods.length_bias import dls_probabilities, dls_temperature
from docnmt.model import ModelConfig, NoPositions, Transformer
from docnmt.translate import Translator

PAD, BOS, EOS, EOD = 0, 2, 3, 49
TINY = {"model.d_model": 32, "model.heads": 4, "model.ffn_dim": 64}


def group_doc(*lengths, start=10):
    """A G-Transformer row: <s> w… </s> per sentence, word ids counting up from ``start``."""
    out, w = [], start
    for n in lengths:
        out += [BOS] + list(range(w, w + n)) + [EOS]
        w += n
    return torch.tensor([out])


# ---- G-Transformer: Table 3 (cumulative) and Table 5 (locality) ---------------------------------

def sentence2_changes(preset: str, layers: int, combined: int) -> tuple[bool, bool]:
    """Build the preset's G-Transformer (tiny, ``layers`` per side, the top ``combined`` of each
    attention kind combined) and say whether the decoder states of target sentence 2 change when
    (target sentence 1, source sentence 1) change."""
    opts = replace(Config.load(preset).method, combined_enc_self=combined, combined_dec_self=combined,
                   combined_cross=combined)
    cfg = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=layers, decoder_layers=1,
                      dropout=0.0)
    torch.manual_seed(0)
    model = gtransformer.build(cfg, opts, BOS, EOD).eval()
    src, tgt = group_doc(3, 4), torch.cat([torch.tensor([[EOD]]), group_doc(2, 3, start=20)], 1)
    src2, tgt2 = src.clone(), tgt.clone()
    src2[0, 1:4], tgt2[0, 2:4] = 40, 41                     # words of sentence 1 only, same lengths
    second = slice(tgt.size(1) - 5, None)                    # decoder inputs of target sentence 2
    with torch.no_grad():
        base = model.decode(tgt, model.encode(src))[:, second]
        by_tgt = model.decode(tgt2, model.encode(src))[:, second]
        by_src = model.decode(tgt, model.encode(src2))[:, second]
    return not torch.allclose(base, by_tgt), not torch.allclose(base, by_src)


@pytest.mark.parametrize("preset,sees_target,sees_source", [
    ("g_transformer_small", True, True),                          # the full model (one combined layer)
    ("g_transformer_no_target_ctx_small", False, True),           # Table 3: "- target-side context"
    ("g_transformer_no_target_source_ctx_small", False, False),   # Table 3: "- source-side context", cumulative
])
def test_table_3_rows_remove_target_then_source_context(preset, sees_target, sees_source):
    assert sentence2_changes(preset, layers=1, combined=1) == (sees_target, sees_source)


@pytest.mark.parametrize("preset,sees_target,sees_source", [
    ("g_transformer_small", False, False),                         # group attention only below the top
    ("g_transformer_no_language_locality_small", True, False),     # Table 5: self-attention global
    ("g_transformer_no_translation_locality_small", False, True),  # Table 5: cross-attention global
])
def test_table_5_rows_remove_one_locality(preset, sees_target, sees_source):
    """No combined layer and no encoder layer: a target sentence sees another target sentence
    only through self-attention, another source sentence only through cross-attention."""
    assert sentence2_changes(preset, layers=0, combined=0) == (sees_target, sees_source)


# ---- length bias: fixed-temperature DLS ----------------------------------------------------------

def test_fixed_temperature_draws_uniform_budgets_in_every_epoch():
    for epoch in (1, 2, 7, 30):
        assert dls_temperature(epoch, 5, adaptive=False) == float("inf")
        np.testing.assert_allclose(dls_probabilities(dls_temperature(epoch, 5, adaptive=False), 512), 1 / 512)
    assert dls_temperature(1, 5) == 0.0 and dls_temperature(7, 5) == pytest.approx(np.exp(2))


def test_fixed_temperature_preset_segments_beyond_sentences_from_epoch_1(tiny_corpus):
    """The adaptive schedule's epoch 1 is sentence level; the fixed one already draws long
    segments, and a new segmentation every epoch."""
    fixed, adaptive = Config.load("doc2doc_dls_fixed_laa_small").data, Config.load("doc2doc_dls_laa_small").data
    assert (fixed.dls_adaptive, adaptive.dls_adaptive) == (False, True)
    rows = {e: methods.training_rows(tiny_corpus, fixed, e) for e in (1, 2)}
    sentence_level = methods.training_rows(tiny_corpus, adaptive, 1)
    assert (sentence_level[:, 1] - sentence_level[:, 0] == 1).all()
    assert (rows[1][:, 1] - rows[1][:, 0] > 1).any()
    assert not np.array_equal(rows[1], rows[2])


# ---- length bias: the ALiBi baseline ------------------------------------------------------------

def alibi_model(**over) -> Transformer:
    cfg = Config.load("doc2doc_alibi_small").override({**TINY, **over}).model
    cfg.vocab_size = 50
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    alibi.attach(model)           # what the switch's model_pieces hook does when model.alibi is true
    return model


def test_alibi_slopes_are_the_papers():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -k for k in range(1, 9)]))
    torch.testing.assert_close(alibi_slopes(6), torch.tensor([2.0 ** -k for k in (2, 4, 6, 8, 1, 3)]))


def test_alibi_replaces_position_embeddings_by_distance_biases():
    model = alibi_model()
    assert isinstance(model.encoder.embed.positions, NoPositions)
    src = torch.tensor([[5, 6, 7, 8]])
    specs = model.policy.encoder_specs(src, src.eq(PAD))
    model.alibi.add(specs, "enc", 4, 4)
    m = alibi_slopes(4)
    want = -m[:, None, None] * (torch.arange(4)[:, None] - torch.arange(4)[None]).abs()
    torch.testing.assert_close(specs["enc_self"].bias[0], want)
    dec = model.policy.decoder_specs(src, src, src.eq(PAD), 2)
    model.alibi.add(dec, "dec", 2, 4, offset=2)
    torch.testing.assert_close(dec["dec_self"].bias[0], want[:, 2:])          # queries 2 and 3
    assert dec["cross"].bias is None                                         # no bias across languages


def test_alibi_model_sees_order_only_through_the_biases():
    """Without the biases (and with no position vectors) encoder self-attention is blind to order:
    swapping two source tokens swaps their states. With them it is not; the decoder's
    self-attention has biases of its own."""
    model = alibi_model(**{"model.encoder_layers": 1})
    src, swapped = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[6, 5, 7, 8]])
    with torch.no_grad():
        a, b = model.encode(src).memory, model.encode(swapped).memory
        assert not torch.allclose(a[:, [1, 0, 2, 3]], b, atol=1e-5)
        enc, tgt = model.encode(src), torch.tensor([[2, 9, 10, 11]])
        with_biases = model.decode(tgt, enc)
        model.remove_piece("alibi")
        a, b = model.encode(src).memory, model.encode(swapped).memory
        torch.testing.assert_close(a[:, [1, 0, 2, 3]], b)
        assert not torch.allclose(model.decode(tgt, enc), with_biases)       # the decoder's own biases


def test_alibi_decodes_step_by_step_like_the_full_pass_with_group_and_relative_attention():
    src, tgt = random_pair()
    assert_incremental_equals_full(alibi_model(), src, tgt)
    cfg = Config.load("doc2doc_alibi_small").override(TINY).model
    cfg.vocab_size = 50
    gt = gtransformer.build(cfg, gtransformer.GTransformerOptions(combined_enc_self=1, combined_dec_self=1,
                                                                  combined_cross=1), BOS, EOD).eval()
    alibi.attach(gt)
    assert_incremental_equals_full(gt, group_doc(3, 4), torch.cat([torch.tensor([[EOD]]),
                                                                   group_doc(2, 3, start=20)], 1))
    pt = ptransformer.build(cfg, ptransformer.PTransformerOptions(rel_max_distance=8)).eval()
    alibi.attach(pt)
    assert_incremental_equals_full(pt, src, tgt)                 # with the relative term: both biases add up
    spec = pt.policy.encoder_specs(src, src.eq(PAD))
    pt.alibi.add(spec, "enc", src.size(1), src.size(1))
    q = torch.randn(2, 4, src.size(1), 8)
    rel = pt.policy.relative_bias(q, "enc.0.self", 0, src.size(1))
    assert isinstance(rel, RelativeLogits)
    n = src.size(1)
    torch.testing.assert_close(spec["enc_self"].bias(q, "enc.0.self"), rel.dense() + pt.alibi.bias(n, n))


def test_default_models_have_no_alibi_and_keep_their_state_dict():
    plain = Config.load("doc2doc_small").override(TINY).model
    plain.vocab_size = 50
    torch.manual_seed(0)
    a = Transformer(plain)
    assert "alibi" not in a.pieces and not plain.alibi
    b = alibi_model()
    assert a.state_dict().keys() == b.state_dict().keys()      # ALiBi adds no parameters or saved buffers


def test_the_registry_attaches_alibi_where_the_config_asks(tiny_vocab):
    """The switch's hook: ``model.alibi: true`` gives the built model the biases and no position
    vectors; without it the model keeps its table."""
    cfg = Config.load("doc2doc_alibi_small").override(TINY)
    with_alibi = methods.build_model(cfg, tiny_vocab)
    assert "alibi" in with_alibi.pieces and isinstance(with_alibi.decoder.embed.positions, NoPositions)
    plain = methods.build_model(cfg.override({"model.alibi": False}), tiny_vocab)
    assert not plain.pieces and not isinstance(plain.decoder.embed.positions, NoPositions)


# ---- DocFlat: data shuffling, pass 1 ------------------------------------------------------------

def test_shuffled_data_preset_trains_on_shuffled_batches_and_checks_its_settings():
    cfg = Config.load("docflat_shuffled_small")
    assert cfg.method.shuffled_data and cfg.data.batch_order == "sorted"
    methods.check(cfg)
    # the two messages in full: each names the setting to change and the value to give it
    with pytest.raises(ConfigError) as sorted_alone:
        methods.check(Config.load("docflat_small").override({"data.batch_order": "sorted"}))
    assert str(sorted_alone.value) == (
        "a DocFlat model needs pseudo-documents in ordered batches (data.batch_order: ordered or strict; "
        "sorted only with method.shuffled_data: true, the data-shuffling ablation)")
    with pytest.raises(ConfigError) as shuffled_ordered:
        methods.check(cfg.override({"data.batch_order": "ordered"}))
    assert str(shuffled_ordered.value) == (
        "method.shuffled_data (the data-shuffling ablation) trains on shuffled batches: set data.batch_order: sorted")


def test_shuffled_batches_are_not_runs_of_consecutive_pseudo_documents(tiny_corpus, tiny_vocab):
    from docnmt.data import InstanceSet, build_instances
    runs = {}
    for preset in ("docflat_small", "docflat_shuffled_small"):
        cfg = Config.load(preset)
        joiner = methods.data_joiner(tiny_vocab, cfg.data)
        batches = InstanceSet(tiny_corpus, build_instances(tiny_corpus, cfg.data), joiner).batches(
            400, seed=1, epoch=1, order=cfg.data.batch_order)
        runs[preset] = all(np.array_equal(b, np.arange(b[0], b[0] + len(b))) for b in batches)
    assert runs == {"docflat_small": True, "docflat_shuffled_small": False}


def docflat_translator(tiny_vocab, preset="docflat_small", **over):
    cfg = Config.load(preset).override({**TINY, "model.encoder_layers": 1, "model.decoder_layers": 1,
                                        "decode.beam": 1, "decode.max_len_a": 0, "decode.max_len_b": 3,
                                        "decode.max_sentences": 4, **over})
    torch.manual_seed(0)
    return Translator(methods.build_model(cfg, tiny_vocab), tiny_vocab, cfg)


def test_model_trained_on_shuffled_batches_still_decodes_consecutive_batches(tiny_vocab, chat_docs):
    """The same weights give the same translation under the shuffled preset's config as under
    the ordered one: decoding batches are consecutive sentences either way (FBA sees the batch)."""
    shuffled = docflat_translator(tiny_vocab, "docflat_shuffled_small")
    ordered = Translator(shuffled.model, tiny_vocab, shuffled.cfg.override({"data.batch_order": "ordered",
                                                                            "method.shuffled_data": False}))
    docs = [replace(d, src=d.src[:6]) for d in chat_docs[:2]]
    out, _ = shuffled.translate(docs)
    assert [d.tgt for d in out] == [d.tgt for d in ordered.translate(docs)[0]]
    assert shuffled.cfg.data.batch_order == "sorted"              # the translator's own config is kept


def test_pass_1_is_named_loudly_and_in_the_report(tiny_vocab, chat_docs, tmp_path, caplog):
    tr = docflat_translator(tiny_vocab)
    docs = [replace(d, src=d.src[:3]) for d in chat_docs[:1]]
    with caplog.at_level(logging.WARNING, logger="docnmt.docflat"):
        out, report = tr.translate(docs)
    assert report.walk["first_pass"] == {"by": "model", "path": None}
    assert "pass 1 is translated by this document model itself" in caplog.text and "--first-pass" in caplog.text
    assert "pass 1: this model itself" in report.summary() and report.as_dict()["first_pass"]["by"] == "model"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="docnmt.docflat"):
        _, again = tr.translate(docs)                     # said once per translator (a service: not per request)
    assert "pass 1 is translated" not in caplog.text and again.walk["first_pass"] == {"by": "model", "path": None}
    first = tmp_path / "first.de"
    first.write_text("".join(t + "\n" for t in out[0].tgt))
    caplog.clear()
    _, report = tr.translate(docs, replace(tr.cfg.decode, first_pass=str(first)))
    assert report.as_dict()["first_pass"] == {"by": "file", "path": str(first)} and "pass 1" not in caplog.text
    sent, sent_dir = Config.load("transformer_tiny").override(TINY), tmp_path / "sent"
    sent_model = methods.build_model(sent, tiny_vocab)
    sent_dir.mkdir()
    tiny_vocab.save(sent_dir)
    save_weights(sent_model, sent_dir / WEIGHTS)
    sent.dump(sent_dir / "config.yaml")
    _, report = tr.translate(docs, replace(tr.cfg.decode, first_pass=str(sent_dir)))
    assert report.walk["first_pass"] == {"by": "sentence_model", "path": str(sent_dir)}
    assert f"pass 1: sentence model {sent_dir}" in report.summary()
    _, report = Translator(sent_model, tiny_vocab, sent).translate(docs, replace(sent.decode, max_len_a=0, max_len_b=2))
    assert "first_pass" not in report.as_dict() and "pass 1" not in report.summary()      # one-pass decoding


# ---- P-Transformer: "-self-src -self-tgt" -------------------------------------------------------

def test_combined_self_attention_ablation_removes_both_self_terms_only():
    full, abl = Config.load("p_transformer_small"), Config.load("p_transformer_noselfsrc_noselftgt_small")
    changed = {k for k, v in vars(full.method).items() if vars(abl.method)[k] != v}
    assert changed == {"pos_attn_enc_self", "pos_attn_dec_self"}
    cfg = abl.override(TINY).model
    cfg.vocab_size = 50
    policy = ptransformer.PositionAwarePolicy(cfg, abl.method)
    src, tgt = random_pair()
    enc = policy.encoder_specs(src, src.eq(PAD))
    dec = policy.decoder_specs(tgt, src, src.eq(PAD), 0)
    assert enc["enc_self"].q_add is None and dec["dec_self"].q_add is None
    assert dec["cross"].q_add is not None and dec["cross"].k_add is not None
    assert callable(enc["enc_self"].bias) and callable(dec["dec_self"].bias)      # the relative term stays
