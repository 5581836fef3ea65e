"""``docnmt translate -i ... -o FILE`` survives being stopped (docnmt.journal): finished chunks of
documents are journalled beside the output, and the same command again translates only the rest,
to the output and coverage report an uninterrupted run writes."""
from __future__ import annotations

import json

import pytest

from docnmt import journal
from docnmt.document import Document
from docnmt.translate import CoverageReport, Translator

CHUNK = 12       # source sentences per chunk here: the tiny input's 12 chats make several chunks
QUICK = ("--beam", "2", "--fallback", "none")      # (the fallback translates each lost sentence again: slow)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(journal, "CHUNK_SENTENCES", CHUNK)


@pytest.fixture(scope="module")
def source(tiny_dir, tmp_path_factory):
    """The tiny corpus's first 8 chats, 8 turns each at most: 5 to 6 chunks of ``CHUNK`` sentences."""
    from docnmt.readers import read_inputs, write_marker
    docs = read_inputs([str(tiny_dir / "raw" / "chat.en")], "auto")[:8]
    for d in docs:
        d.src = d.src[:8]
    path = tmp_path_factory.mktemp("resume") / "chat.en"
    write_marker(docs, path)
    return path


class Stop(Exception):
    """A stop after some chunks (a kill, a crash)."""


def stop_after(monkeypatch, calls: int, stop=Stop) -> list:
    """``Translator.translate`` raising ``stop`` on its ``calls + 1``-th call; returns the list
    of the documents each call got (the calls made, the stopped one included)."""
    real, seen = Translator.translate, []

    def translate(self, docs, *args, **kwargs):
        seen.append([d.docid for d in docs])
        if len(seen) > calls:
            raise stop
        return real(self, docs, *args, **kwargs)
    monkeypatch.setattr(Translator, "translate", translate)
    return seen


def test_chunks_are_whole_documents_of_at_least_the_size():
    docs = [Document(str(k), ["s"] * n) for k, n in enumerate([3, 5, 20, 1, 1, 2])]
    assert journal.chunks(docs, 8) == [range(0, 2), range(2, 3), range(3, 6)]
    assert journal.chunks(docs, 1000) == [range(0, 6)]
    assert journal.chunks([], 8) == []


def test_a_report_added_chunk_by_chunk_counts_as_one(tmp_path):
    a = CoverageReport(documents=2, sentences=5, instances=3, empty_sentences=1, documents_with_problems=["x"],
                       lost={1, 4}, repaired={1}, fallback={"by": "model", "path": None, "sentences": 2})
    b = CoverageReport(documents=1, sentences=4, instances=2, lost={1}, repaired={1},
                       fallback={"by": "model", "path": None, "sentences": 1})
    total = CoverageReport()
    for rep, offset in ((a, 0), (b, 5)):
        total.add(journal.report_from(json.loads(json.dumps(journal.report_state(rep)))), offset)
    d = total.as_dict()
    assert (d["documents"], d["sentences"], d["instances"], d["empty_sentences"]) == (3, 9, 5, 1)
    assert d["repaired_sentences"] == 2 and d["fallback"]["sentences"] == 3      # sentence 1 of each: two
    assert d["documents_fully_recovered"] == 2 and total.lost == {1, 4, 6}


def test_chunked_translation_writes_what_a_whole_one_does(run_cli, source, tiny_model, tmp_path, monkeypatch):
    """The same sentences and coverage report (batched equals unbatched decoding: tests/test_conformance.py)."""
    model = tiny_model("doc2doc")
    whole, chunked = tmp_path / "whole.de", tmp_path / "chunked.de"
    # (with the fallback: the tiny model loses sentences, so the report's repaired sentences add up over chunks)
    assert run_cli("translate", model, "-i", source, "-o", whole, "-q", "--beam", "2",
                   "--report", tmp_path / "w.json")[0] == 0
    monkeypatch.setattr(journal, "CHUNK_SENTENCES", CHUNK)
    seen = stop_after(monkeypatch, 100)
    assert run_cli("translate", model, "-i", source, "-o", chunked, "-q", "--beam", "2",
                   "--report", tmp_path / "c.json")[0] == 0
    assert len(seen) > 2                                   # it did go chunk by chunk
    assert chunked.read_text() == whole.read_text()
    assert json.loads((tmp_path / "c.json").read_text()) == json.loads((tmp_path / "w.json").read_text())
    assert not journal.journal_path(chunked).exists()      # removed once the output is written


@pytest.mark.parametrize("extra", [[], ["--print-scores"], ["--output-format", "jsonl", "--nbest", "2"]])
def test_a_stopped_run_resumes_to_the_uninterrupted_output(run_cli, source, tiny_model, tmp_path,
                                                           monkeypatch, extra):
    model = tiny_model("doc2doc")
    ref, out = tmp_path / "ref.de", tmp_path / "out.de"
    argv = ["translate", model, "-i", source, "-q", *QUICK, *extra]
    # the uninterrupted run, in the same chunks (a whole run's scores may differ in their last bits: its
    # batches hold other instances)
    monkeypatch.setattr(journal, "CHUNK_SENTENCES", CHUNK)
    assert run_cli(*argv, "-o", ref, "--report", tmp_path / "ref.json")[0] == 0
    seen = stop_after(monkeypatch, 2)
    with pytest.raises(Stop):
        run_cli(*argv, "-o", out, "--report", tmp_path / "out.json")
    log = journal.journal_path(out)
    assert not out.exists() and len(log.read_text().splitlines()) == 3       # header + two chunks
    monkeypatch.undo()
    monkeypatch.setattr(journal, "CHUNK_SENTENCES", CHUNK)
    seen = stop_after(monkeypatch, 100)
    status, _, err = run_cli(*[a for a in argv if a != "-q"], "-o", out, "--report", tmp_path / "out.json")
    assert status == 0 and "going on from" in err and "documents translated before the stop" in err
    n_chunks = len(journal.chunks([Document(str(k), s) for k, s in enumerate(chunk_sizes(source))], CHUNK))
    assert len(seen) == n_chunks - 2                         # the two journalled chunks not translated again
    assert out.read_text() == ref.read_text()
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads((tmp_path / "ref.json").read_text())
    assert not log.exists()


def chunk_sizes(source):
    """The source file's documents, as lists of sentences (``<d>`` lines between them)."""
    docs, cur = [], None
    for line in source.read_text().splitlines():
        if line == "<d>":
            cur = []
            docs.append(cur)
        else:
            cur.append(line)
    return docs


def test_a_journal_cut_short_in_its_last_line_loses_only_that_chunk(run_cli, source, tiny_model, tmp_path,
                                                                   small_chunks, monkeypatch):
    model = tiny_model("doc2doc")
    out = tmp_path / "out.de"
    stop_after(monkeypatch, 3)
    with pytest.raises(Stop):
        run_cli("translate", model, "-i", source, "-o", out, "-q", *QUICK)
    log = journal.journal_path(out)
    text = log.read_text()
    log.write_text(text[:-40])                          # the stop fell inside the last chunk's line
    monkeypatch.undo()
    monkeypatch.setattr(journal, "CHUNK_SENTENCES", CHUNK)
    seen = stop_after(monkeypatch, 100)
    assert run_cli("translate", model, "-i", source, "-o", out, "-q", *QUICK)[0] == 0
    assert seen[0] == json_ids(text.splitlines()[3], source)       # chunk 3 again, chunks 1-2 from the journal


def json_ids(line, source):
    """The document ids of a journal line's chunk, as the marker reader numbers them."""
    first, n = json.loads(line)["first"], len(json.loads(line)["docs"])
    from docnmt.readers import read_inputs
    return [d.docid for d in read_inputs([str(source)], "auto")[first:first + n]]


def test_a_journal_of_another_translation_is_refused_then_force_starts_again(run_cli, cli_error, source, tiny_model,
                                                                             tmp_path, small_chunks, monkeypatch):
    model = tiny_model("doc2doc")
    out = tmp_path / "out.de"
    stop_after(monkeypatch, 1)
    with pytest.raises(Stop):
        run_cli("translate", model, "-i", source, "-o", out, "-q", *QUICK)
    monkeypatch.undo()
    monkeypatch.setattr(journal, "CHUNK_SENTENCES", CHUNK)
    err = cli_error("translate", model, "-i", source, "-o", out, "-q", *QUICK, "--beam", "3")
    assert "another translation" in err and "--force" in err and journal.journal_path(out).exists()
    seen = stop_after(monkeypatch, 100)
    assert run_cli("translate", model, "-i", source, "-o", out, "-q", *QUICK, "--beam", "3", "--force")[0] == 0
    assert sum(len(ids) for ids in seen) == len(chunk_sizes(source))      # every document translated afresh
    assert not journal.journal_path(out).exists()


def test_an_existing_output_without_a_journal_is_still_refused_and_stdin_keeps_none(run_cli, cli_error, source,
                                                                                     tiny_model, tmp_path,
                                                                                     small_chunks, monkeypatch):
    model = tiny_model("doc2doc")
    out = tmp_path / "out.de"
    assert run_cli("translate", model, "-i", source, "-o", out, "-q", *QUICK)[0] == 0 and out.exists()
    assert "exists" in cli_error("translate", model, "-i", source, "-o", out, "-q", *QUICK)
    from docnmt.readers import read_inputs, write_jsonl
    write_jsonl(read_inputs([str(source)], "auto"), tmp_path / "in.jsonl")      # read whole from stdin, not streamed
    monkeypatch.setattr("sys.stdin", open(tmp_path / "in.jsonl", encoding="utf-8"))
    seen = stop_after(monkeypatch, 0)
    with pytest.raises(Stop):          # standard input cannot be read again: translated whole, no journal
        run_cli("translate", model, "--format", "jsonl", "-o", tmp_path / "s.de", "-q", *QUICK)
    assert seen == [[d.docid for d in read_inputs([str(source)], "auto")]]
    assert not journal.journal_path(tmp_path / "s.de").exists()


def test_two_pass_decoding_is_translated_whole(run_cli, source, tiny_model, tmp_path, small_chunks, monkeypatch):
    """DocFlat's pass 2 reads batches of consecutive sentences across documents: not chunked."""
    seen = stop_after(monkeypatch, 100)
    assert run_cli("translate", tiny_model("docflat"), "-i", source, "-o", tmp_path / "o.de", "-q")[0] == 0
    assert len(seen) == 1 and len(seen[0]) == len(chunk_sizes(source))


def test_the_same_command_goes_on_with_force_too_and_ctrl_c_says_so(run_cli, source, tiny_model, tmp_path,
                                                                     small_chunks, monkeypatch):
    """A run started with --force (over an old output) and stopped goes on when that command is given
    again: --force starts again only over another translation's journal."""
    model = tiny_model("doc2doc")
    out = tmp_path / "out.de"
    out.write_text("an old output\n")
    argv = ["translate", model, "-i", source, "-o", out, "--force", *QUICK]
    stop_after(monkeypatch, 2, KeyboardInterrupt)
    status, _, err = run_cli(*argv)
    assert status == 130 and "finished chunks of documents go to" in err
    assert "documents kept in" in err and "the same command goes on" in err
    assert out.read_text() == "an old output\n"             # not written before the end
    monkeypatch.undo()
    monkeypatch.setattr(journal, "CHUNK_SENTENCES", CHUNK)
    seen = stop_after(monkeypatch, 100)
    status, _, err = run_cli(*argv)
    assert status == 0 and "going on from" in err
    n_chunks = len(journal.chunks([Document(str(k), s) for k, s in enumerate(chunk_sizes(source))], CHUNK))
    assert len(seen) == n_chunks - 2 and out.read_text() != "an old output\n"
