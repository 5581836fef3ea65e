"""Any bytes in a kept format (docs/formats.md) give a layout or one error line naming the file; a
layout written back with its own sentences is the file (whitespace runs inside a line collapsed),
and with any translations at all it is written without an error."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from docnmt.errors import DataError
from docnmt.readers.filetypes import KEPT, read_kept
from test_formats_docx import sample

pytest.importorskip("pysbd")

# derandomized: the same examples in every run (a test run's verdict never depends on a random draw)
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
PIECES = st.sampled_from([
    b"1\n", b"00:00:01,000 --> 00:00:02,000\n", b"00:01.000 --> 00:02.000 align:start\n", b"WEBVTT\n", b"NOTE x\n",
    b"\n", b"\r\n", b"Hello there. ", b"Mr. Smith ", b"went home.\n", b"<i>", b"</i>", b"{\\an8}", b"<v Roger>",
    b"# ", b"> ", b"- ", b"| a | b |\n", b"|---|---|\n", b"```\n", b"    ", b"`code`", b"[link](http://x.y/z)",
    b"**", b"_", b"\\*", b"<p>", b"</p>", b"<br>", b"<script>", b"</script>", b"<!-- c -->", b"&amp;", b"&",
    b"\xff", b"\xc3", b"\xef\xbb\xbf", b"\t", "caf\u00e9 \u4f60\u597d\u3002".encode(), b"---\n",
    b'<img alt="A &amp; b" src=x>', b"<a title='it' href=y>", b"<input placeholder=Type>", b'![a dog](d.png "T")'])
FILES = st.one_of(st.binary(max_size=120), st.lists(PIECES, max_size=40).map(b"".join))
WORDS = st.lists(st.text(max_size=12), max_size=60)


def squeezed(data: bytes) -> list[str]:
    return [" ".join(line.split()) for line in data.decode("utf-8").splitlines()]


@FUZZ
@example(data=b"\x00\t<", fmt="html", words=[])             # a bare "<" among whitespace: once written as "&lt;"
@example(data=b"\xc2\x80\x0b\x00", fmt="html", words=[])   # a vertical tab: once written as a space
@given(data=FILES, fmt=st.sampled_from(sorted(set(KEPT) - {"docx"})), words=WORDS)
def test_any_text_file_gives_a_layout_or_one_error_naming_it(data, fmt, words):
    try:
        layout = read_kept(data, "in.x", fmt)
    except DataError as e:
        assert "\n" not in str(e) and e.path == "in.x"
        return
    assert squeezed(layout.write(layout.sentences)) == squeezed(data)
    tgt = [" ".join(words[k::len(layout.sentences)]) for k in range(len(layout.sentences))]
    layout.write(tgt).decode("utf-8")                       # any translation, empty ones included


DOCX = sample()


@settings(FUZZ, max_examples=80)
@given(cut=st.integers(0, 20000), flip=st.binary(min_size=1, max_size=8), words=WORDS)
def test_a_damaged_docx_gives_a_layout_or_one_error_naming_it(cut, flip, words):
    data = DOCX
    cut %= len(data)
    damaged = data[:cut] + flip + data[cut + len(flip):]
    try:
        layout = read_kept(damaged, "in.docx", "docx")
    except DataError as e:
        assert "\n" not in str(e) and e.path == "in.docx"
        return
    layout.write([" ".join(words[k::len(layout.sentences)]) for k in range(len(layout.sentences))])
