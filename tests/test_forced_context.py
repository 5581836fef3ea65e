"""Earlier translations as context (issue 65 §3, docnmt/forced_context.py): a document continued
after sentences already translated, their translations forced as the target context.

For every method that reads target context (Doc2Doc, MR, Doc2Doc with sliding decoding,
P-Transformer, G-Transformer, DocFlat), as a tiny random model: the new sentences' translations
equal a full decode of the whole document (context and new sentences) in the method's own
instances and walk with the context's translations forced (built here from the walk's rounds and
the translator's forced-prefix decoding); for Doc2Doc also a single beam search of the whole
document with the forced prefix. Methods that read no target context (a sentence model, Doc2Sent,
the context encoder) translate the new sentences as the full document's decode does, the
translations ignored with a warning.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from tqdm.auto import tqdm

from _tiny import chat_documents
from docnmt import methods
from docnmt.config import Config
from docnmt.data import Corpus
from docnmt.document import Document
from docnmt.errors import DataError
from docnmt.search import beam_search
from docnmt.translate import CoverageReport, Translator
from docnmt.vocab import Vocab

TINY = {"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1,
        "model.decoder_layers": 1, "model.dropout": 0.0, "decode.beam": 2, "decode.max_len_a": 0.5,
        "decode.max_len_b": 3, "decode.fallback": "none", "decode.max_sentences": 3}

TARGET = {
    "doc2doc": ("doc2doc_small", {}),
    "mr": ("doc2doc_small", {"data.mode": "mr", "data.max_instance_tokens": 60}),
    "doc2doc_sliding": ("doc2doc_small", {"decode.sliding": True, "data.max_instance_tokens": 60}),
    "ptransformer": ("p_transformer_small", {}),
    "gtransformer": ("g_transformer_small", {}),
    "docflat": ("docflat_small", {}),
}
SOURCE_ONLY = {
    "sent2sent": ("transformer_tiny", {}),
    "doc2sent": ("transformer_tiny", {"data.mode": "doc2sent", "data.context": 2}),
    "context_encoder": ("context_transformer_small", {}),
}


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return Vocab.train([s for d in chat_documents("valid")[:20] for s in d.src + d.tgt], size=300)


def translator(vocab, name: str) -> Translator:
    preset, over = {**TARGET, **SOURCE_ONLY}[name]
    cfg = Config.load(preset).override({**TINY, **over})
    torch.manual_seed(0)
    return Translator(methods.build_model(cfg, vocab), vocab, cfg, device="cpu")


def chat():
    """A chat: its first 3 turns with their reference translations as the context, the next 3 new."""
    d = chat_documents("valid")[1]
    return d.src[:3], d.tgt[:3], d.src[3:6]


def full_decode_forced(tr: Translator, ctx_src, ctx_tgt, new) -> list[str]:
    """The whole document decoded in the method's rounds, every instance's context sentences
    forced from ``ctx_tgt`` and only sentences after the context generated (instances of context
    sentences only left out)."""
    search, n = tr.cfg.decode, len(ctx_src)
    corpus = Corpus.encode([Document("0", ctx_src + new)], tr.vocab)
    outputs = [[ids] for ids in tr.vocab.encode_batch(ctx_tgt, "tgt")] + [[] for _ in new]
    for rows, new_from in methods.decode_walk(tr.cfg, search).rounds(tr, corpus, search):
        keep = rows[:, 1] > n
        tr._decode(corpus, rows[keep], np.maximum(new_from[keep], n), outputs, search, CoverageReport(), set(),
                   tqdm(disable=True))
    return [tr.vocab.decode(out[-1]) for out in outputs[n:]]


def contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[k:k + len(part)] == part for k in range(len(seq) - len(part) + 1))


@pytest.mark.parametrize("name", TARGET)
def test_new_sentences_equal_the_full_decode_with_the_context_forced(vocab, name, monkeypatch):
    from docnmt import translate as tmod
    tr = translator(vocab, name)
    ctx_src, ctx_tgt, new = chat()
    prefixes = []

    def spy(*args, prefix=None, **kw):
        prefixes.extend(prefix or [])
        return beam_search(*args, prefix=prefix, **kw)
    monkeypatch.setattr(tmod, "beam_search", spy)
    out, report = tr.translate([new], context={"src": ctx_src, "tgt": ctx_tgt})
    last = vocab.encode(ctx_tgt[-1], "tgt")
    assert any(contains(p, last) for p in prefixes)        # the last context sentence's translation is forced
    assert out[0].src == new and out[0].tgt == full_decode_forced(tr, ctx_src, ctx_tgt, new)
    assert out[0].meta["context"] == {"src": ctx_src, "tgt": ctx_tgt} and report.sentences == 3
    doc = Document("a", new, None, {"context": {"src": ctx_src, "tgt": ctx_tgt}})     # the same, per document
    assert tr.translate([doc])[0][0].tgt == out[0].tgt


def test_doc2doc_equals_one_beam_search_of_the_whole_document_with_its_prefix(vocab):
    tr = translator(vocab, "doc2doc")
    ctx_src, ctx_tgt, new = chat()
    out, _ = tr.translate([new], context={"src": ctx_src, "tgt": ctx_tgt})
    j, v = tr.joiner, tr.vocab
    src = torch.tensor([j.source(v.encode_batch(ctx_src + new, "src")).tolist()])
    prefix = j.prefix(v.encode_batch(ctx_tgt, "tgt"))
    hyp = beam_search(tr.model, src, tr.cfg.decode, j.start, j.end, banned=tr.banned_ids(False), prefix=[prefix],
                      sentences=torch.tensor([len(new)]))[0][0]
    sents, _ = j.split(prefix + hyp.tokens, 6)
    assert out[0].tgt == [v.decode(s) for s in sents[3:]]
    other, _ = tr.translate([new], context={"src": ctx_src, "tgt": ["Ja.", "Nein.", "Vielleicht."]})
    assert other[0].tgt != out[0].tgt          # the context's translation is what is forced


@pytest.mark.parametrize("name", SOURCE_ONLY)
def test_models_without_target_context_use_the_source_context_and_say_so(vocab, name, caplog):
    tr = translator(vocab, name)
    ctx_src, ctx_tgt, new = chat()
    with caplog.at_level(logging.WARNING, logger="docnmt.translate"):
        out, _ = tr.translate([new], context={"src": ctx_src, "tgt": ctx_tgt})
    assert "reads no target context" in caplog.text
    whole, _ = tr.translate([ctx_src + new])
    assert out[0].tgt == whole[0].tgt[3:] == full_decode_forced(tr, ctx_src, ctx_tgt, new)
    if name == "sent2sent":
        assert out[0].tgt == tr.translate([new])[0][0].tgt


def test_a_source_context_alone_is_translated_and_dropped(vocab):
    tr = translator(vocab, "doc2doc")
    ctx_src, _, new = chat()
    out, report = tr.translate([new], context={"src": ctx_src})
    whole, _ = tr.translate([ctx_src + new])
    assert out[0].tgt == whole[0].tgt[3:] and report.sentences == 3


def test_bad_contexts_are_one_line_errors(vocab):
    tr = translator(vocab, "doc2doc")
    with pytest.raises(DataError, match="2 source sentences but 1 translations"):
        tr.translate([["Hi."]], context={"src": ["A.", "B."], "tgt": ["A."]})
    with pytest.raises(DataError, match=r"context.src\[0\]: empty sentence"):
        tr.translate([["Hi."]], context={"src": [" "], "tgt": ["A."]})


def test_cli_context_files(vocab, tmp_path, run_cli, cli_error):
    from test_fallback import save
    tr = translator(vocab, "doc2doc")
    model = save(tr, tmp_path / "model")
    ctx_src, ctx_tgt, new = chat()
    files = {}
    for name, lines in (("ctx.en", ctx_src), ("ctx.de", ctx_tgt), ("new.en", new), ("short.de", ctx_tgt[:2])):
        files[name] = tmp_path / name
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    status, out, _ = run_cli("translate", str(model), "-i", str(files["new.en"]), "-q", "--context-src",
                             str(files["ctx.en"]), "--context-tgt", str(files["ctx.de"]))
    expected, _ = tr.translate([new], context={"src": ctx_src, "tgt": ctx_tgt})
    assert status == 0 and out.splitlines() == expected[0].tgt
    assert "3 source sentences but 2 translations" in cli_error(
        "translate", str(model), "-i", str(files["new.en"]), "--context-src", str(files["ctx.en"]),
        "--context-tgt", str(files["short.de"]))
    assert "--context-tgt needs --context-src" in cli_error("translate", str(model), "-i", str(files["new.en"]),
                                                            "--context-tgt", str(files["ctx.de"]))
    srt = tmp_path / "new.srt"                      # a kept format comes back whole: no context before it
    srt.write_text("1\n00:00:01,000 --> 00:00:02,000\nHello there.\n", encoding="utf-8")
    assert "not a kept format" in cli_error("translate", str(model), "-i", str(srt), "-o", str(tmp_path / "o.srt"),
                                            "--context-src", str(files["ctx.en"]),
                                            "--context-tgt", str(files["ctx.de"]))
    assert not (tmp_path / "o.srt").exists()
    for name, text in (("blank.en", "I would like the fish.\n\nAnd you?\n"), ("marker.en", "<d>\nHello.\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")   # was "src[1]: empty sentence"; <d> a sentence
        line = cli_error("translate", str(model), "-i", str(files["new.en"]), "--context-src", str(tmp_path / name))
        assert f"{name}:{2 if name == 'blank.en' else 1}:" in line and "one a line" in line


def test_the_service_forces_the_context_and_counts_repairs(vocab):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from docnmt.serve import Served, Service, Settings, create_app
    tr = translator(vocab, "doc2doc")
    ctx_src, ctx_tgt, new = chat()
    with TestClient(create_app(Service({"m": Served("m", "m", [tr])}, Settings()))) as client:
        r = client.post("/v1/translate", json={"sentences": new, "context": {"src": ctx_src, "tgt": ctx_tgt},
                                               "options": {"scores": False, "fallback": "none"}})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["translation"] == tr.translate([new], context={"src": ctx_src, "tgt": ctx_tgt})[0][0].tgt
        assert body["coverage"]["sentences"] == 3 and body["coverage"]["repaired_sentences"] == 0
        r = client.post("/v1/translate", json={"sentences": new, "context": {"src": ctx_src, "tgt": ctx_tgt[:1]}})
        assert r.status_code == 422 and "3 source sentences but 1 translations" in r.json()["error"]
        r = client.post("/v1/translate", json={"sentences": new, "context": {"tgt": ctx_tgt}})
        assert r.status_code == 422 and "context.src" in r.json()["error"]
        r = client.post("/v1/translate", json={"sentences": new, "options": {"fallback": "always"}})
        assert r.status_code == 422 and "options.fallback" in r.json()["error"]
        r = client.post("/v1/translate", json={"sentences": new, "options": {"fallback": "sentence", "scores": False}})
        rows = r.json()["sentences"]
        assert r.json()["coverage"]["repaired_sentences"] == sum(row["repaired"] for row in rows) > 0


def test_the_fallback_leaves_a_source_context_alone(vocab):
    """A source context is decoded and dropped: the fallback translated its lost sentences again
    too (the report said "4 lost sentences translated again" for 2 new ones), work thrown away;
    and its sentences left empty do not count against the document."""
    tr = translator(vocab, "doc2doc")
    ctx_src, _, new = chat()
    tr.cfg.decode.fallback = "sentence"
    out, report = tr.translate([new], context={"src": ctx_src})
    assert report.sentences == len(new) and report.fallback["sentences"] <= len(new)
    assert report.repaired_sentences <= len(new) and len(out[0].tgt) == len(new)
    assert report.empty_sentences == 0 and report.documents_fully_recovered == 1     # its context's gaps not counted
