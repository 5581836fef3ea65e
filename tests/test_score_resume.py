"""``docnmt score ... -o FILE`` survives being stopped (docnmt.journal): finished chunks of
documents' reference scores are journalled beside the output, and the same command again scores
only the rest, to the output and summary an uninterrupted run writes."""
from __future__ import annotations

import pytest

from docnmt import journal, translate_io

CHUNK = 12       # source sentences per chunk here: the tiny input's 8 chats make several chunks


@pytest.fixture(scope="module")
def pair(tiny_dir, tmp_path_factory):
    """The tiny corpus's first 8 chats, 8 turns each at most, source and reference."""
    from docnmt.readers import read_inputs, write_marker
    docs = read_inputs([str(tiny_dir / "raw" / "chat.en")], "auto")[:8]
    refs = read_inputs([str(tiny_dir / "raw" / "chat.de")], "auto")[:8]
    folder = tmp_path_factory.mktemp("score_resume")
    for d, r in zip(docs, refs):
        d.src, r.src = d.src[:8], r.src[:8]
    write_marker(docs, folder / "chat.en")
    write_marker(refs, folder / "chat.de")
    return folder / "chat.en", folder / "chat.de"


class Stop(Exception):
    """A stop after some chunks (a kill, a crash)."""


def stop_after(monkeypatch, calls: int, stop=Stop) -> list:
    """``reference_scores`` raising ``stop`` on its ``calls + 1``-th call; returns the number of
    documents each call got (the stopped one included)."""
    real, seen = translate_io.reference_scores, []

    def scores(translator, docs, *args, **kwargs):
        seen.append(len(docs))
        if len(seen) > calls:
            raise stop
        return real(translator, docs, *args, **kwargs)
    monkeypatch.setattr(translate_io, "reference_scores", scores)
    monkeypatch.setattr(journal, "CHUNK_SENTENCES", CHUNK)
    return seen


@pytest.mark.parametrize("extra", [["--cxmi"], ["--cxmi", "--output-format", "jsonl"], []])
def test_a_stopped_scoring_resumes_to_the_uninterrupted_output(run_cli, pair, tiny_model, tmp_path, monkeypatch,
                                                               extra):
    model, (src, ref) = tiny_model("doc2sent"), pair
    argv = ["score", model, "--src", src, "--ref", ref, *extra]
    whole = stop_after(monkeypatch, 100)
    status, _, err_whole = run_cli(*argv, "-o", tmp_path / "whole.tsv")
    assert status == 0 and len(whole) > 3                     # it did go chunk by chunk
    assert not journal.journal_path(tmp_path / "whole.tsv").exists()    # removed once the output is written
    out = tmp_path / "out.tsv"
    monkeypatch.undo()
    stop_after(monkeypatch, 2)
    with pytest.raises(Stop):
        run_cli(*argv, "-o", out)
    log = journal.journal_path(out)
    assert not out.exists() and len(log.read_text().splitlines()) == 3        # header + two chunks
    monkeypatch.undo()
    seen = stop_after(monkeypatch, 100)
    status, _, err = run_cli(*argv, "-o", out)
    assert status == 0 and "going on from" in err and "documents scored before the stop" in err
    assert seen == whole[2:]                                  # the two journalled chunks not scored again
    assert out.read_text() == (tmp_path / "whole.tsv").read_text()
    summary = lambda text: [line for line in text.splitlines() if ".partial.jsonl" not in line]  # noqa: E731
    assert summary(err) == summary(err_whole) and "NLL" in err           # the summary (CXMI's too) over all
    assert not log.exists()


def test_chunked_scores_and_cxmi_add_up_to_a_whole_run(run_cli, pair, tiny_model, tmp_path, monkeypatch):
    """Written to a file the scores come chunk by chunk, to stdout whole: the same up to the last bits."""
    import json
    model, (src, ref) = tiny_model("doc2sent"), pair
    argv = ["score", model, "--src", src, "--ref", ref, "--cxmi", "--output-format", "jsonl", "-q"]
    _, whole, _ = run_cli(*argv)
    stop_after(monkeypatch, 100)
    assert run_cli(*argv, "-o", tmp_path / "c.jsonl")[0] == 0
    a = [json.loads(line) for line in whole.splitlines()]
    b = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert [d["id"] for d in a] == [d["id"] for d in b] and len(a) == 8
    for x, y in zip(a, b):
        assert (x["tokens"], x["word_pieces"]) == (y["tokens"], y["word_pieces"])
        assert y["logprob"] == pytest.approx(x["logprob"], abs=1e-3)
        assert y["cxmi_bits"] == pytest.approx(x["cxmi_bits"], abs=1e-4)


def test_a_journal_of_another_scoring_is_refused_then_force_starts_again(run_cli, cli_error, pair, tiny_model,
                                                                         tmp_path, monkeypatch):
    model, (src, ref) = tiny_model("doc2sent"), pair
    out = tmp_path / "out.tsv"
    stop_after(monkeypatch, 1)
    with pytest.raises(Stop):
        run_cli("score", model, "--src", src, "--ref", ref, "-o", out, "-q")
    monkeypatch.undo()
    monkeypatch.setattr(journal, "CHUNK_SENTENCES", CHUNK)
    err = cli_error("score", model, "--src", src, "--ref", ref, "-o", out, "-q", "--cxmi")
    assert "another scoring" in err and "--force" in err and journal.journal_path(out).exists()
    assert "--cxmi or --precision" in err                                 # what the fingerprint holds
    seen = stop_after(monkeypatch, 100)
    assert run_cli("score", model, "--src", src, "--ref", ref, "-o", out, "-q", "--cxmi", "--force")[0] == 0
    assert sum(seen) == 8 and "cxmi_bits" in out.read_text()             # every document scored afresh
    assert not journal.journal_path(out).exists()


def test_ctrl_c_says_where_the_scores_are_and_stdout_keeps_no_journal(run_cli, pair, tiny_model, tmp_path,
                                                                      monkeypatch):
    model, (src, ref) = tiny_model("doc2sent"), pair
    out = tmp_path / "out.tsv"
    stop_after(monkeypatch, 2, KeyboardInterrupt)
    status, _, err = run_cli("score", model, "--src", src, "--ref", ref, "-o", out)
    assert status == 130 and "finished chunks of documents go to" in err
    assert "documents kept in" in err and "the same command goes on" in err and not out.exists()
    monkeypatch.undo()
    stop_after(monkeypatch, 0, KeyboardInterrupt)             # stopped inside the first chunk
    status, _, err = run_cli("score", model, "--src", src, "--ref", ref, "-o", tmp_path / "first.tsv")
    assert status == 130 and "nothing kept, the same command starts again" in err
    assert not journal.journal_path(tmp_path / "first.tsv").exists()
    monkeypatch.undo()
    seen = stop_after(monkeypatch, 100)
    status, text, _ = run_cli("score", model, "--src", src, "--ref", ref, "-q")
    assert status == 0 and seen == [8] and text.startswith("document\t")     # to stdout: scored whole


def test_an_output_is_refused_without_its_journal_and_another_journal_even_for_one_chunk(run_cli, cli_error, pair,
                                                                                         tiny_model, tmp_path):
    import json
    model, (src, ref) = tiny_model("doc2sent"), pair
    out = tmp_path / "out.tsv"
    assert run_cli("score", model, "--src", src, "--ref", ref, "-o", out, "-q")[0] == 0     # one chunk
    assert "exists" in cli_error("score", model, "--src", src, "--ref", ref, "-o", out, "-q")
    other = tmp_path / "other.tsv"
    journal.journal_path(other).write_text(json.dumps({"docnmt_journal": 1, "version": 1, "fingerprint": "x",
                                                       "documents": 8}) + "\n")      # a translation's
    err = cli_error("score", model, "--src", src, "--ref", ref, "-o", other, "-q")
    assert "another translation" in err and not other.exists()
