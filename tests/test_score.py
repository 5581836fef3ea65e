"""Reference scores in the model's own input format (``docnmt score``, ``translate --print-scores``)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from docnmt.data import Corpus
from docnmt.document import Document
from docnmt.readers import read_documents
from docnmt.scoring import context_usage, document_logprobs, sentence_logprobs
from docnmt.translate import Translator

MODELS = ["sent2sent", "doc2doc", "gtransformer", "doc2sent", "context", "docflat"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_each_sentence_scored_once_in_its_own_instance(tiny_dir, tiny_model, name):
    """The last sentence's score equals the contrastive scorer's (the same sentence in the same
    context); a changed reference sentence changes its own score; every sentence has tokens."""
    tr = Translator.load(tiny_model(name), device="cpu")
    docs = read_documents(str(tiny_dir / "raw/chat.en"), str(tiny_dir / "raw/chat.de"), fmt="marker")
    short = [Document(f"{k}", d.src[:4], d.tgt[:4]) for k, d in enumerate(docs[:2])]
    scores = document_logprobs(tr, short)
    assert [len(s) for s in scores] == [4, 4]
    both, words = document_logprobs(tr, short, with_words=True), document_logprobs(tr, short, words_only=True)
    assert [[s[:2] for s in doc] for doc in both] == scores and [[s[2:] for s in doc] for doc in both] == words
    assert all(s[3] < s[1] for doc in both for s in doc)          # the format's own tokens are left out
    assert all(lp < 0 and n >= 2 for doc in scores for lp, n in doc)
    last = sentence_logprobs(tr, short)
    np.testing.assert_allclose([doc[-1][0] for doc in scores], last, rtol=1e-4, atol=1e-3)
    changed = [Document(d.docid, d.src, d.tgt[:1] + ["Völlig anders als vorher."] + d.tgt[2:]) for d in short]
    other = document_logprobs(tr, changed)
    assert all(o[1] != s[1] for o, s in zip(other, scores))
    if name in ("sent2sent", "doc2sent", "context"):      # no target context: the others stay
        assert all(o[k] == pytest.approx(s[k], abs=1e-4) for o, s in zip(other, scores) for k in (0, 2, 3))


@pytest.mark.parametrize("mode, over", [
    ("doc2sent", {"data.context": 2}), ("doc2doc", {"data.max_instance_tokens": 120}),
    ("doc2doc", {"method.name": "gtransformer", "data.separator": "group", "data.max_instance_tokens": 120}),
    ("pseudodoc", {"method.name": "docflat", "data.separator": "global_index", "data.context": 2,
                   "data.batch_order": "ordered"})])
def test_probe_numbers_target_sentences_as_the_source_sentences_they_translate(tiny_dir, mode, over):
    """The sentences the attention probe is given: source sentences a..b-1 of an instance are
    0..b-a-1, and target sentence t+j is t-a+j, the number of the source sentence it translates
    (Doc2Sent's one target sentence is its source's last); the tokens of the whole instance are
    -1: G-Transformer's start token EOD, the separator formats' decoder start <s> and source end
    </s>; DocFlat's every token is in a sentence."""
    from _tiny import tiny_config
    from docnmt.data import build_instances
    from docnmt.methods import build_model
    from docnmt.scoring import teacher_forced
    from docnmt.vocab import Vocab
    cfg, vocab = tiny_config(mode).override(over), Vocab.load(tiny_dir / "data")
    torch.manual_seed(0)
    tr = Translator(build_model(cfg, vocab), vocab, cfg)
    doc = read_documents(str(tiny_dir / "raw/chat.en"), str(tiny_dir / "raw/chat.de"), fmt="marker")[0]
    corpus = Corpus.encode([Document(doc.docid, doc.src[:8], doc.tgt[:8])], vocab)
    rows = build_instances(corpus, cfg.data, training=False)
    seen = 0
    for idx, batch, _, probe in teacher_forced(tr, corpus, rows, probe=True):
        for i, k in enumerate(idx):
            a, b, t = (int(x) for x in rows[k])
            src = probe.sentences["src"][i][batch["src"][i].ne(vocab.pad)]
            tgt = probe.sentences["tgt_in"][i][batch["tgt_in"][i].ne(vocab.pad)]
            separated = "data.separator" not in over
            assert set(src.tolist()) - {-1} == set(range(b - a))
            assert src.eq(-1).nonzero().flatten().tolist() == ([len(src) - 1] if separated else [])
            assert set(tgt.tolist()) - {-1} == set(range(t - a, b - a)), (rows[k], tgt.tolist())
            assert tgt.eq(-1).nonzero().flatten().tolist() == ([] if over.get("method.name") == "docflat" else [0])
            seen += t > a or b - a > 1
    assert seen                                   # some instance had several sentences


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_context_usage_is_zero_without_context_and_measured_with_it(tiny_dir, tiny_model, name):
    """CXMI: a sentence model's scores are the same alone (0 for every sentence); a model
    without context for a document's first sentence (Doc2Sent, the context encoder) scores it
    the same alone, and every document model's scores move somewhere; the totals are the
    per-sentence triples summed; every format counts a sentence's word pieces, nothing else."""
    tr = Translator.load(tiny_model(name), device="cpu")
    docs = read_documents(str(tiny_dir / "raw/chat.en"), str(tiny_dir / "raw/chat.de"), fmt="marker")
    short = [Document(f"{k}", d.src[:4], d.tgt[:4]) for k, d in enumerate(docs[:3])]
    usage = context_usage(tr, short)
    triples = [t for doc in usage["documents"] for t in doc]
    assert [len(d) for d in usage["documents"]] == [4, 4, 4] and usage["sentences"] == 12
    pieces = Corpus.encode(short, tr.vocab).tgt
    assert [k for _, _, k in triples] == [len(pieces[i]) for i in range(12)]
    gaps = np.array([w - a for w, a, _ in triples])
    assert usage["tokens"] == sum(k for _, _, k in triples)
    assert usage["cxmi_bits_per_token"] == pytest.approx(gaps.sum() / usage["tokens"] / np.log(2))
    assert usage["sentences_more_likely_with_context"] == pytest.approx(np.mean(gaps > 0))
    firsts = np.array([doc[0][0] - doc[0][1] for doc in usage["documents"]])
    if name == "sent2sent":
        np.testing.assert_allclose(gaps, 0, atol=1e-4)
        assert usage["cxmi_bits_per_token"] == pytest.approx(0, abs=1e-5)
    else:
        assert np.abs(gaps).max() > 1e-3                      # the context changes some score
    if name in ("doc2sent", "context"):                       # nothing before a first sentence
        np.testing.assert_allclose(firsts, 0, atol=1e-4)
    pos = usage["cxmi_by_position"]
    assert set(pos) == {"1", "2", "3", "4+"}
    assert pos["1"] == pytest.approx(firsts.sum() / sum(d[0][2] for d in usage["documents"]) / np.log(2))


@pytest.mark.slow
def test_score_cxmi_columns_and_summary(tiny_dir, tiny_model, run_cli, tmp_path):
    model, raw = tiny_model("doc2sent"), tiny_dir / "raw"
    args = ("score", str(model), "--src", str(raw / "chat.en"), "--ref", str(raw / "chat.de"))
    status, plain, _ = run_cli(*args)
    status2, out, err = run_cli(*args, "--cxmi")
    assert status == status2 == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0][-4:] == ["word_pieces", "logprob_words", "logprob_words_alone", "cxmi_bits"]
    assert [r[:5] for r in rows[1:]] == [line.split("\t") for line in plain.splitlines()[1:]]
    for r in rows[1:]:
        tokens, pieces, words, alone, cxmi = int(r[3]), int(r[5]), float(r[6]), float(r[7]), float(r[8])
        assert cxmi == pytest.approx((words - alone) / pieces / np.log(2), abs=2e-4)
        if r[1] != "*":       # a Doc2Sent target: its word pieces and </s>
            assert pieces == tokens - 1 and words > float(r[2])
    assert all(float(r[8]) == pytest.approx(0, abs=1e-3) for r in rows[1:] if r[1] == "1")
    assert any(abs(float(r[8])) > 1e-3 for r in rows[1:] if r[1] not in ("1", "*"))
    assert "CXMI" in err and "bits per word piece" in err
    status, _, _ = run_cli(*args, "--cxmi", "--output-format", "jsonl", "-o", str(tmp_path / "s.jsonl"), "-q")
    objs = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    doc_rows = [r for r in rows[1:] if r[1] == "*"]
    assert status == 0 and objs[0]["cxmi_bits"] == pytest.approx(float(doc_rows[0][8]), abs=1e-3)
    assert objs[0]["sentences"][0]["logprob_words_alone"] == pytest.approx(float(rows[1][7]), abs=1e-3)
    assert objs[0]["word_pieces"] == int(doc_rows[0][5])


@pytest.mark.slow
def test_score_command_tsv_and_jsonl(tiny_dir, tiny_model, run_cli, tmp_path):
    model, raw = tiny_model("doc2doc"), tiny_dir / "raw"
    status, out, err = run_cli("score", str(model), "--src", str(raw / "chat.en"), "--ref", str(raw / "chat.de"))
    assert status == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0] == ["document", "sentence", "logprob", "tokens", "nll_per_token"]
    sent_rows = [r for r in rows[1:] if r[1] != "*"]
    doc_rows = [r for r in rows[1:] if r[1] == "*"]
    docs = read_documents(str(raw / "chat.en"))
    n_docs, n_sents = len(docs), sum(len(d) for d in docs)
    assert len(doc_rows) == n_docs and len(sent_rows) == n_sents
    first_doc = [r for r in sent_rows if r[0] == doc_rows[0][0]]
    assert float(doc_rows[0][2]) == pytest.approx(sum(float(r[2]) for r in first_doc), abs=1e-3)
    assert int(doc_rows[0][3]) == sum(int(r[3]) for r in first_doc)
    assert "nats/token" in err and "perplexity" in err
    status, _, _ = run_cli("score", str(model), "--src", str(raw / "chat.en"), "--ref", str(raw / "chat.de"),
                           "--output-format", "jsonl", "-o", str(tmp_path / "s.jsonl"))
    objs = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert status == 0 and len(objs) == n_docs
    assert objs[0]["logprob"] == pytest.approx(float(doc_rows[0][2]), abs=1e-3)
    assert len(objs[0]["sentences"]) == len(first_doc)


@pytest.mark.slow
def test_translate_print_scores_and_nbest_plain_output(tiny_dir, tiny_model, run_cli, tmp_path):
    model, raw = tiny_model("sent2sent"), tiny_dir / "raw"
    docs = read_documents(str(raw / "chat.en"))[:2]
    src = tmp_path / "in.en"
    src.write_text("".join("<d>\n" + "".join(s + "\n" for s in d.src[:3]) for d in docs), encoding="utf-8")
    status, plain, _ = run_cli("translate", str(model), "-i", str(src), "--beam", "2", "-q")
    status2, scored, _ = run_cli("translate", str(model), "-i", str(src), "--beam", "2", "-q", "--print-scores")
    assert status == status2 == 0
    lines = scored.splitlines()
    assert len(lines) == len(plain.splitlines()) == 8
    assert [line.split("\t")[1] for line in lines if not line.startswith("<d>")] == \
        [line for line in plain.splitlines() if line != "<d>"]
    doc_lines = [line for line in lines if line.startswith("<d>\t")]
    assert len(doc_lines) == 2 and all(float(line.split("\t")[1]) < 0 for line in doc_lines)
    # the sentence scores are those `docnmt score` gives the translation as a reference
    hyp = tmp_path / "hyp.de"
    hyp.write_text(plain, encoding="utf-8")
    _, table, _ = run_cli("score", str(model), "--src", str(src), "--ref", str(hyp), "-q")
    want = [float(r.split("\t")[4]) for r in table.splitlines()[1:] if r.split("\t")[1] != "*"]
    got = [-float(line.split("\t")[0]) for line in lines if not line.startswith("<d>")]
    np.testing.assert_allclose(got, want, atol=2e-4)
    # n-best: Moses lines, N per sentence, best first and equal to the 1-best output
    status, nbest, _ = run_cli("translate", str(model), "-i", str(src), "--beam", "3", "--nbest", "3", "-q")
    rows = [line.split(" ||| ") for line in nbest.splitlines()]
    assert status == 0 and [int(r[0]) for r in rows] == [i for i in range(6) for _ in range(3)]
    assert all(float(a[2]) >= float(b[2]) for a, b in zip(rows, rows[1:]) if a[0] == b[0])
    _, best, _ = run_cli("translate", str(model), "-i", str(src), "--beam", "3", "-q")
    assert [r[1] for r in rows[::3]] == [line for line in best.splitlines() if line != "<d>"]
    # plain text (no <d> line): the scored output keeps the input's lines, no document line
    plain_src = tmp_path / "plain.en"
    plain_src.write_text("".join(s + "\n" for s in docs[0].src[:3]), encoding="utf-8")
    status, scored, _ = run_cli("translate", str(model), "--src", str(plain_src), "-q", "--print-scores")
    assert status == 0 and len(scored.splitlines()) == 3 and not scored.startswith("<d>")
    status, _, err = run_cli("translate", str(model), "-i", str(src), "--nbest", "2", "--print-scores")
    assert status == 2 and "--output-format jsonl" in err and len(err.strip().splitlines()) == 1


class Pipe:
    """Standard input that hands out its lines one at a time and records, before giving each
    line, what had been written to standard output by then."""

    def __init__(self, lines: list[str], out):
        self.lines, self.out, self.seen = [line.encode() for line in lines], out, []
        self.buffer = self

    def readline(self) -> bytes:
        self.seen.append(self.out.getvalue())
        return self.lines.pop(0) if self.lines else b""

    def read(self) -> bytes:
        rest, self.lines = b"".join(self.lines), []
        return rest


@pytest.mark.slow
@pytest.mark.parametrize("name", ["doc2doc", "sent2sent"])
def test_translate_from_a_pipe_writes_each_document_as_soon_as_it_is_complete(name, tiny_dir, tiny_model,
                                                                              monkeypatch, tmp_path):
    import io
    import sys

    from docnmt.cli import main
    model = tiny_model(name)
    docs = read_documents(str(tiny_dir / "raw/chat.en"))[:2]
    lines = ["<d>\n", *(s + "\n" for s in docs[0].src[:3]), "<d>\n", *(s + "\n" for s in docs[1].src[:2])]
    out = io.StringIO()
    pipe = Pipe(lines, out)
    monkeypatch.setattr(sys, "stdin", pipe)
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["translate", str(model), "--beam", "2", "-q"]) == 0
    result = out.getvalue().splitlines()
    assert len(result) == len(lines) and result[0] == result[4] == "<d>"
    # the second <d> line completes the first document: its three translations are out before
    # the next line is read
    assert pipe.seen[5].splitlines() == result[:5]
    if name == "sent2sent":       # no context: every line as soon as it is read
        assert pipe.seen[2].splitlines() == result[:2]
    # the same translations as reading the whole input at once
    whole = tmp_path / "in.en"
    whole.write_text("".join(lines), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert main(["translate", str(model), "-i", str(whole), "--beam", "2", "-q"]) == 0
    assert sys.stdout.getvalue().splitlines() == result


@pytest.mark.slow
def test_score_refuses_a_kept_format_file_in_one_line(cli_error, tiny_model, tmp_path):
    """An SRT (or DOCX, Markdown...) given to score was read as lines, its cue numbers and timings
    scored as sentences ("3 sentences" for one cue): it is one line naming the file and the way."""
    srt = b"1\n00:00:01,000 --> 00:00:02,000\nHello there.\n"
    (tmp_path / "talk.srt").write_bytes(srt)
    (tmp_path / "talk.de.srt").write_bytes(srt)
    line = cli_error("score", tiny_model("sent2sent"), "--src", tmp_path / "talk.srt",
                     "--ref", tmp_path / "talk.de.srt")
    assert "talk.srt" in line and "srt" in line and "--output-format jsonl" in line


@pytest.mark.parametrize("verb", ["score", "score-contrastive"])
def test_a_write_that_fails_halfway_leaves_the_old_output_whole(verb, tiny_dir, tiny_model, cli_error, tmp_path,
                                                                 monkeypatch):
    """The output (score's -o, score-contrastive's --json and --scores) goes to a temporary file
    renamed over the old one: a disk that fills halfway through the write leaves the old file as it
    was, no half-written one that a rerun without --force would refuse, and one error line."""
    import builtins
    import io
    model, raw = tiny_model("sent2sent"), tiny_dir / "raw"
    if verb == "score":
        outs = [tmp_path / "s.tsv"]
        argv = ["score", model, "--src", raw / "chat.en", "--ref", raw / "chat.de", "-o", outs[0], "--force", "-q"]
    else:
        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps([{"src": "Hi . _eos Hello .", "dst": ["Hallo . _eos Hallo .",
                                                                          "Hallo . _eos Tschüss ."],
                                      "true_ind": 0, "ctx_dist": 1}]), encoding="utf-8")
        outs = [tmp_path / "r.json", tmp_path / "r.jsonl"]
        argv = ["score-contrastive", model, suite, "--json", outs[0], "--scores", outs[1], "--force", "-q"]
    for out in outs:
        out.write_text("the old output\n", encoding="utf-8")
    real_open = builtins.open

    class FullDisk(io.TextIOWrapper):
        def write(self, text):
            super().write(text[: len(text) // 2])
            self.flush()
            raise OSError(28, "No space left on device")

    def full_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if "w" in mode and "b" not in mode and Path(file).parent == tmp_path:
            return FullDisk(f.detach(), encoding="utf-8")
        return f

    monkeypatch.setattr(builtins, "open", full_open)
    monkeypatch.setattr(io, "open", full_open)       # Path.write_text's
    line = cli_error(*argv)
    monkeypatch.undo()
    assert "No space left on device" in line and str(outs[0].name) in line
    for out in outs:
        assert out.read_text(encoding="utf-8") == "the old output\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
