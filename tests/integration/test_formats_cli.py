"""``docnmt translate -i FILE -o FILE`` with a tiny trained model, one file of each kept format:
the output is the same format with the same structure, only its text translated (docs/formats.md)."""
from __future__ import annotations

import io
import json
import re

import pytest

from test_formats_docx import paragraphs, sample
from test_formats_markup import HTML, MARKDOWN, TEXT
from test_formats_subtitles import SRT, VTT

pytest.importorskip("docx")
pytest.importorskip("markdown_it")


def timing_lines(data: bytes) -> list[str]:
    return [x for x in data.decode().splitlines() if "-->" in x or x.strip("\ufeff").isdigit() or x.isupper()]


def tags(data: bytes) -> list[str]:
    """The tags as written, the values of the attributes that are translated left out."""
    return [re.sub(r'\b(alt|title|placeholder|aria-label)="[^"]*"', r"\1", t)
            for t in re.findall(r"<[^>]*>", data.decode())]


def same_docx(a: bytes, b: bytes) -> bool:
    """The same paragraphs in the same places and styles, the same runs with the same formatting."""
    return [(w, st, [(bold, it) for _, bold, it in runs]) for w, st, runs, _ in paragraphs(a)] == [
        (w, st, [(bold, it) for _, bold, it in runs]) for w, st, runs, _ in paragraphs(b)]


def markdown_kept(src: bytes, out: bytes) -> bool:
    kept = ["---\ntitle: Front matter stays\n---\n# ", '```python\nprint("code is never translated")\n```\n',
            "    indented code stays too\n\n[ref]: https://example.com/ref\n", "`inline code`",
            '](https://example.com/a_b "', "https://example.org/raw", "|------|-------|\n|", "\n> "]
    return all(k in out.decode() for k in kept) and out.count(b"\n") == src.count(b"\n")


CASES = [("talk.srt", SRT, [], lambda a, b: timing_lines(a) == timing_lines(b)),
         ("talk.vtt", VTT, [], lambda a, b: timing_lines(a) == timing_lines(b) and b"NOTE written by hand," in b),
         ("report.docx", sample(), [], same_docx),
         ("notes.md", MARKDOWN, [], markdown_kept),
         ("page.html", HTML, [], lambda a, b: tags(a) == tags(b) and b"pre text stays" in b and b'class="big"' in b),
         ("story.txt", TEXT, ["--format", "text"], lambda a, b: a.count(b"\n") == b.count(b"\n"))]


@pytest.mark.parametrize("name,data,flags,kept", CASES, ids=[c[0] for c in CASES])
def test_a_file_comes_back_in_its_own_format(run_cli, tiny_model, tmp_path, name, data, flags, kept):
    src, out = tmp_path / name, tmp_path / f"out-{name}"
    src.write_bytes(data)
    status, _, err = run_cli("translate", tiny_model("sent2sent"), "-i", src, "-o", out, "--greedy", *flags)
    assert status == 0, err
    assert kept(data, out.read_bytes()) and out.read_bytes() != data
    assert "sentences" in err                                          # the coverage report
    status, _, _ = run_cli("translate", tiny_model("sent2sent"), "-i", src, "-o", tmp_path / "o.jsonl", "--greedy",
                           "--output-format", "jsonl", "-q", *flags)
    doc = json.loads((tmp_path / "o.jsonl").read_text())
    assert status == 0 and doc["id"] == name and len(doc["tgt"]) == len(doc["src"]) > 0


def test_max_line_chars_through_the_cli(run_cli, tiny_model, tmp_path):
    src, out = tmp_path / "talk.srt", tmp_path / "out.srt"
    src.write_bytes(SRT)
    status, _, err = run_cli("translate", tiny_model("sent2sent"), "-i", src, "-o", out, "--greedy", "-q",
                             "--max-line-chars", "10")
    assert status == 0, err
    lines = [re.sub(r"<[^>]*>|\{[^}]*\}", "", x) for x in out.read_text().splitlines()
             if x.strip() and "-->" not in x and not x.strip("\ufeff").isdigit()]
    assert lines and all(len(x) <= 10 or " " not in x for x in lines)
    assert timing_lines(out.read_bytes()) == timing_lines(SRT)


def test_standard_input_in_a_named_format(run_cli, tiny_model, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(VTT), encoding="utf-8"))
    status, out, err = run_cli("translate", tiny_model("sent2sent"), "--format", "vtt", "--greedy", "-q")
    assert status == 0, err
    assert timing_lines(out.encode()) == timing_lines(VTT) and out.startswith("WEBVTT - a talk\n\nSTYLE")
