"""``model.sentence_positions`` (docs/methods/baselines.md#sentence-positions): positions restart in
every sentence of a multi-sentence instance, so a document model fine-tuned from a sentence model
reads the position vectors that model was trained with."""
import numpy as np
import pytest
import torch

from _tiny import assert_incremental_equals_full
from docnmt.config import Config
from docnmt.errors import ConfigError, DocnmtError
from docnmt.methods import build_model, make_joiner
from docnmt.model import positions_in_sentence

TINY = {"model.d_model": 32, "model.ffn_dim": 64, "model.heads": 2, "model.encoder_layers": 2,
        "model.decoder_layers": 2}


def model_for(preset: str, vocab, sentence_positions: bool = True, **over):
    cfg = Config.load(preset).override({**TINY, "model.sentence_positions": sentence_positions, **over})
    torch.manual_seed(0)
    return build_model(cfg, vocab).eval(), cfg


def ids(a) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.int64))[None]


def test_positions_restart_in_every_sentence_of_each_format(tiny_vocab):
    """Doc2Doc's ``x₁ <sep1> x₂ </s>`` / ``<s> y₁ <sep1> y₂`` and DocFlat's ``<sepj> x </s>``:
    source words from 0, decoder words from 1 after their opener (``<s>``, ``<sepI>``) at 0."""
    v = tiny_vocab
    model, _ = model_for("doc2doc_small", v)
    x1, x2 = np.array([10, 11, 12]), np.array([13, 14])
    doc = make_joiner(v, "index")
    assert model._positions(ids(doc.source([x1, x2])), 0).tolist() == [[0, 1, 2, 0, 0, 1, 2]]
    tgt = ids([v.bos, *doc.join([x1, x2])])
    assert model._positions(tgt, 1).tolist() == [[0, 1, 2, 3, 0, 1, 2]]
    flat = make_joiner(v, "global_index")
    assert model._positions(ids(flat.source([x1, x2], first=7)), 0).tolist() == [[0, 0, 1, 2, 3, 0, 0, 1, 2]]
    assert model._positions(ids(flat.join([x1, x2], first=7)[:-1]), 1).tolist() == [[0, 1, 2, 3, 4, 0, 1, 2]]
    # without the switch the positions are the paper's: none computed, the embedding counts 0, 1, 2, …
    assert model_for("doc2doc_small", v, sentence_positions=False)[0]._positions(tgt, 1) is None
    assert positions_in_sentence(tgt, v.bos, 1).tolist() == [[0, 1, 2, 3, 4, 5, 6]]   # <s> only: one sentence


@pytest.mark.parametrize("sentence_positions", [True, False])
def test_a_later_sentence_is_embedded_as_the_sentence_model_embeds_it(tiny_vocab, sentence_positions):
    """A Doc2Doc model with the sentence model's weights gives the words of an instance's second
    sentence the input vectors the sentence model gives them alone (source and decoder input);
    with the paper's document positions it does not."""
    v = tiny_vocab
    sent, _ = model_for("sent2sent_small", v, sentence_positions=False)
    doc, _ = model_for("doc2doc_small", v, sentence_positions=sentence_positions)
    doc.load_state_dict(sent.state_dict())
    x1, x2, y1, y2 = [10, 11, 12, 20], [13, 14, 15], [30, 31], [32, 33, 34]
    joiner = make_joiner(v, "index")
    src = ids(joiner.source([np.array(x1), np.array(x2)]))
    tgt = ids([v.bos, *joiner.join([np.array(y1), np.array(y2)])])
    with torch.no_grad():
        doc_src, alone_src = doc.embed_source(src, {}), sent.embed_source(ids(x2 + [v.eos]), {})
        doc_tgt, alone_tgt = doc.embed_target(tgt, 0, None), sent.embed_target(ids([v.bos] + y2), 0, None)
        steps = torch.cat([doc.embed_target(tgt[:, : t + 1], t, None) for t in range(tgt.size(1))], 1)
    torch.testing.assert_close(steps, doc_tgt)                       # one token at a time: the same vectors
    same_src = torch.allclose(doc_src[0, len(x1) + 1:], alone_src[0])
    same_tgt = torch.allclose(doc_tgt[0, len(y1) + 2:], alone_tgt[0, 1:])
    assert same_src == same_tgt == sentence_positions


@pytest.mark.parametrize("preset", ["doc2doc_small", "docflat_d_small"])
def test_incremental_decoding_equals_the_full_pass_with_sentence_positions(tiny_vocab, preset):
    v = tiny_vocab
    model, cfg = model_for(preset, v)
    joiner = make_joiner(v, cfg.data.separator)
    x = [np.array([10, 11, 12]), np.array([13, 14]), np.array([15, 16, 17, 18])]
    y = [np.array([20, 21]), np.array([22, 23, 24]), np.array([25])]
    src = torch.cat([ids(joiner.source(x, first=3)), ids(joiner.source(x[::-1], first=3))])
    start = joiner.start_for(3)
    body = joiner.join(y, first=3)
    body = body[1:] if cfg.data.separator == "global_index" else body      # DocFlat starts from <sep3>
    tgt = torch.cat([ids([start, *body]), ids([start, *body[::-1]])])
    if preset.startswith("docflat"):      # its flat-batch attention reads the other rows: one at a time
        src, tgt = src[:1], tgt[:1]
    assert_incremental_equals_full(model, src, tgt)


@pytest.mark.parametrize("preset,message", [
    ("p_transformer_small", r"^model.sentence_positions is not for a P-Transformer"),
    ("g_transformer_small", r"^a G-Transformer restarts its positions with method.sentence_positions"),
])
def test_methods_that_read_positions_their_own_way_refuse_it(tiny_vocab, preset, message):
    with pytest.raises(ConfigError, match=message):
        model_for(preset, tiny_vocab)


def test_a_source_language_code_moves_every_first_word_to_one(tiny_vocab):
    """An imported model's language code before the source: the sentence model read ``lang x </s>``."""
    v = tiny_vocab
    model, _ = model_for("doc2doc_small", v, **{"model.src_lang_token": 7})
    src = model.with_source_language(ids(make_joiner(v, "index").source([np.array([10, 11]), np.array([12])])))
    lead = int(model.cfg.src_lang_token >= 0)
    assert model._positions(src, lead).tolist() == [[0, 1, 2, 0, 1, 2]]
    with torch.no_grad():
        x = model.embed_source(src, {})
        torch.testing.assert_close(x[0, 4], model.encoder.embed(ids([12]), 1, dropout=False)[0, 0])


@pytest.mark.parametrize("over,message", [
    ({"data.separator": "uniform"}, r"^sentence_positions needs numbered separators"),
    ({"model.alibi": True}, r"^sentence_positions .*not with ALiBi"),
    ({"model.tgt_lang_token": 7}, r"^sentence_positions .*not with a target language token"),
])
def test_settings_where_restarting_positions_means_nothing_are_refused(tiny_vocab, over, message):
    with pytest.raises(ConfigError, match=message):
        model_for("doc2doc_small", tiny_vocab, **over)
    model_for("doc2doc_small", tiny_vocab, sentence_positions=False, **over)


def test_export_hf_refuses_a_model_with_sentence_positions(tiny_vocab):
    from docnmt.hf import _exportable
    cfg = Config.load("doc2doc_small").override({"model.sentence_positions": True})
    with pytest.raises(DocnmtError, match="sentence positions"):
        _exportable(cfg, tiny_vocab, native=False)
    _exportable(Config.load("doc2doc_small"), tiny_vocab, native=False)
