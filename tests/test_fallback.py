"""Every sentence guaranteed (issue 65 §2): the sentences a document output lost, and only those,
translated again alone (docnmt/fallback.py).

A stand-in search copies each instance's source as its "translation" (so every sentence's expected
output is known) and loses a sentence on purpose: in an instance of several sentences it drops the
first separator, merging sentences 1 and 2 into sentence 1 and leaving sentence 2 empty; an
instance of one sentence (the fallback's) comes back reversed, so a sentence translated again is
told apart from one left as it was.
"""
from __future__ import annotations

import json

import pytest
import torch

from _tiny import chat_documents
from docnmt import fallback, methods
from docnmt import translate as tmod
from docnmt.checkpoint import WEIGHTS, save_weights
from docnmt.config import Config
from docnmt.data import Joiner
from docnmt.methods.gtransformer import GroupJoiner
from docnmt.search import Hypothesis
from docnmt.translate import Translator
from docnmt.vocab import Vocab

TINY = {"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1,
        "model.decoder_layers": 1, "model.dropout": 0.0, "decode.beam": 1}


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return Vocab.train([s for d in chat_documents("valid")[:20] for s in d.src + d.tgt], size=300)


def translator(vocab, preset="doc2doc_small", **over) -> Translator:
    cfg = Config.load(preset).override({**TINY, **over})
    torch.manual_seed(0)
    return Translator(methods.build_model(cfg, vocab), vocab, cfg, device="cpu")


def documents() -> list[list[str]]:
    return [d.src[:4] for d in chat_documents("valid")[:2]]


def stand_in(vocab, doubled_by=None):
    """A beam search that copies the source (see the module doc); a model whose width is
    ``doubled_by`` writes every sentence twice instead (the other model of --fallback-model)."""
    def search(model, src, cfg, bos, eos, prefix=None, **kw):
        out = []
        for b, row in enumerate(src.tolist()):
            ids = [t for t in row if t not in (vocab.pad, vocab.eos)]
            seps = [k for k, t in enumerate(ids) if t in vocab.sep_ids]
            if model.cfg.d_model == doubled_by:
                ids = ids + ids
            elif seps:
                del ids[seps[0]]                # sentences 1 and 2 merged, sentence 2 lost
            else:
                ids = ids[::-1]                 # alone: the fallback's translation
            out.append([Hypothesis(ids[len(prefix[b]) if prefix else 0:], 0.0)])
        return out
    return search


def texts(vocab, doc, reverse=()) -> list[str]:
    ids = vocab.encode_batch(doc, "tgt")
    return [vocab.decode(x[::-1] if k in reverse else x) for k, x in enumerate(ids)]


def test_lost_sentences_are_the_empty_the_merged_and_the_doubly_filled(vocab):
    j = Joiner(vocab, "index")
    a, b, c = vocab.encode("Hello"), vocab.encode("there"), vocab.encode("friend")
    s1, s2 = vocab.sep(1), vocab.sep(2)
    assert fallback.lost_sentences(j, a + [s1] + b + [s2] + c, 3) == set()
    assert fallback.lost_sentences(j, a + b + [s2] + c, 3) == {0, 1}          # separator missing: merged, empty
    assert fallback.lost_sentences(j, a + [s1] + b + [s1] + c, 3) == {1, 2}   # sentence 2 twice, 3 empty
    assert fallback.lost_sentences(j, a + [s1] + b, 3) == {1, 2}              # stopped early
    g = GroupJoiner(vocab, "group")
    frame = [vocab.bos, *a, vocab.eos, vocab.bos, *b, vocab.eos]
    assert fallback.lost_sentences(g, frame, 2) == set()
    assert fallback.lost_sentences(g, frame, 3) == {1, 2}
    assert fallback.lost_sentences(g, frame + frame, 3) == {2}               # extra sentences appended to the last


def test_fallback_fills_exactly_the_lost_sentences_and_counts_them(vocab, monkeypatch):
    monkeypatch.setattr(tmod, "beam_search", stand_in(vocab))
    tr = translator(vocab)
    docs = documents()
    out, report = tr.translate(docs)
    for d, o in zip(docs, out):
        assert o.tgt == texts(vocab, d, reverse={0, 1})        # 1 and 2 again alone; 3 and 4 untouched
        assert o.meta["repaired"] == [0, 1]
    assert report.repaired_sentences == 4 and report.fallback == {"by": "model", "path": None, "sentences": 4}
    assert report.documents_fully_recovered == 2 and report.empty_sentences == 0
    assert report.malformed_instances == 2 and "4 repaired" in report.summary()
    assert report.as_dict()["repaired_sentences"] == 4

    gap, report = tr.translate(docs, tr.cfg.override({"decode.fallback": "none"}).decode)
    x = vocab.encode_batch(docs[0], "tgt")
    merged = vocab.decode(x[0] + x[1])
    assert gap[0].tgt[1] == "" and gap[0].tgt[0] == merged and gap[0].tgt[2:] == texts(vocab, docs[0][2:])
    assert report.repaired_sentences == 0 and report.fallback is None and report.documents_fully_recovered == 0
    assert "repaired" not in gap[0].meta


def test_auto_is_off_for_sentence_models_and_sentence_turns_it_on(vocab, monkeypatch):
    monkeypatch.setattr(tmod, "beam_search", lambda model, src, *a, **kw: [[Hypothesis([], 0.0)]] * src.size(0))
    tr = translator(vocab, "transformer_tiny")
    _, report = tr.translate(documents())
    assert report.fallback is None and report.empty_sentences == 8
    _, report = tr.translate(documents(), tr.cfg.override({"decode.fallback": "sentence"}).decode)
    assert report.fallback["sentences"] == 8 and report.repaired_sentences == 0      # tried, still empty


def save(tr, directory):
    directory.mkdir()
    tr.vocab.save(directory)
    tr.cfg.dump(directory / "config.yaml")
    save_weights(tr.model, directory / WEIGHTS)
    return directory


def test_fallback_model_translates_the_lost_sentences_instead(vocab, monkeypatch, tmp_path, run_cli):
    other = save(translator(vocab, "transformer_tiny", **{"model.d_model": 16}), tmp_path / "sentence")
    model = save(translator(vocab), tmp_path / "doc")
    monkeypatch.setattr(tmod, "beam_search", stand_in(vocab, doubled_by=16))
    docs = documents()
    tr = Translator.load(model, device="cpu")
    out, report = tr.translate(docs, tr.cfg.override({"decode.fallback_model": str(other)}).decode)
    twice = [vocab.decode(x + x) for x in vocab.encode_batch(docs[0][:2], "tgt")]
    again = [vocab.decode(x) for x in vocab.encode_batch(twice, "tgt")]      # its text, in this model's pieces
    assert out[0].tgt[:2] == again and out[0].tgt[2:] == texts(vocab, docs[0][2:])
    assert report.fallback == {"by": "sentence_model", "path": str(other), "sentences": 4}

    src = tmp_path / "in.txt"
    src.write_text("\n".join(docs[0]) + "\n", encoding="utf-8")
    for flags, repaired in ((["--fallback-model", str(other)], 2), (["--fallback", "none"], 0)):
        rep = tmp_path / f"report{repaired}.json"
        status, stdout, _ = run_cli("translate", str(model), "-i", str(src), "-q", "--report", str(rep), *flags)
        assert status == 0
        assert json.loads(rep.read_text())["repaired_sentences"] == repaired
        assert (stdout.splitlines()[:2] == again) == bool(repaired)


def test_a_bad_fallback_is_one_error_line(cli_error, tmp_path, vocab):
    model = save(translator(vocab), tmp_path / "doc")
    src = tmp_path / "in.txt"
    src.write_text("Hello.\n", encoding="utf-8")
    assert "auto, sentence or none" in cli_error("translate", str(model), "-i", str(src), "--fallback", "always")
    assert "not a docnmt model directory" in cli_error("translate", str(model), "-i", str(src), "--fallback-model",
                                                       str(tmp_path))
    # a document model as the fallback model (it can lose sentences too), and a model given with the fallback off
    assert "a doc2doc model can lose sentences too" in cli_error("translate", str(model), "-i", str(src),
                                                                  "--fallback-model", str(model))
    other = save(translator(vocab, "transformer_tiny"), tmp_path / "sentence")
    assert "--fallback is none" in cli_error("translate", str(model), "-i", str(src), "--fallback", "none",
                                             "--fallback-model", str(other))


def test_a_stream_counts_the_repairs_of_every_document(vocab, monkeypatch, tmp_path, run_cli):
    import io
    import sys
    model = save(translator(vocab), tmp_path / "doc")
    monkeypatch.setattr(tmod, "beam_search", stand_in(vocab))
    docs = documents()
    text = "".join("<d>\n" + "".join(s + "\n" for s in d) for d in docs)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    rep = tmp_path / "report.json"
    status, out, _ = run_cli("translate", str(model), "-q", "--report", str(rep))
    assert status == 0 and out.splitlines()[1:5] == texts(vocab, docs[0], reverse={0, 1})
    report = json.loads(rep.read_text())
    assert report["repaired_sentences"] == 4 and report["fallback"]["sentences"] == 4
    assert report["documents_fully_recovered"] == 2
