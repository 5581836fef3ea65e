"""Markdown, translated with everything but its text kept: block structure (headings, lists, quotes,
tables), line breaks, code blocks and fenced code, HTML blocks, YAML front matter, link reference
definitions, and inside the text inline code, link and image targets, images, autolinks, inline
HTML, bare URLs, escapes and emphasis markers.

markdown-it-py (CommonMark with tables) finds the blocks that hold text; each such block (a
paragraph, a heading, a table cell) is a unit of :mod:`.kept`: its text between the kept inline
pieces, over all its lines, is split into sentences and the translation goes back into the same
gaps by the shares of the source's characters, cut at word boundaries. The kept pieces are not
shown to the model (``Run `ls` to list.`` is translated as ``Run to list.``).
"""
from __future__ import annotations

import bisect
import itertools
import re

from ..errors import DataError
from .kept import Layout, Pieces, Splitter, Unit, decode, lines_of, replace_spans

KEEP = re.compile(r"""
    (`+).*?(?<!`)\1(?!`)            # inline code
  | !\[[^\]]*\]\([^)]*\)            # an image, alt text and all
  | \]\([^)]*\) | \]\[[^\]]*\]      # a link's target: inline or a reference
  | <[^<>\n]+>                      # an autolink or inline HTML
  | (?:https?|ftp)://[^\s<>()]+     # a bare URL
  | \\[!-/:-@\[-`{-~]               # an escaped character
  | \*+ | ~~ | (?<!\w)_+ | _+(?!\w) # emphasis markers
  | \[(?=[^\[\]]*\][(\[])              # a link's opening bracket
""", re.X | re.S)
FRONT = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(?:.*\r?\n)*?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)")


def _parser():
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        raise DataError("reading Markdown needs markdown-it-py: pip install 'docnmt[formats]'") from None
    return MarkdownIt("commonmark").enable("table")


def _located(token, lines, cursor: dict) -> list[tuple[int, int]]:
    """Where each line of an inline token's content lies in the file (``[start, end)``)."""
    out = []
    for k, content in enumerate(token.content.split("\n")):
        no = token.map[0] + k
        content = content.strip()
        if not content or no >= len(lines):
            continue
        line = lines[no]
        at = line.text.find(content, cursor.get(no, 0))
        if at >= 0:
            cursor[no] = at + len(content)
            out.append((line.start + at, line.start + at + len(content)))
    return out


def _runs(text: str, located: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[str]]:
    """The text runs (``[start, end)`` in the file) of a block's lines between the kept inline
    pieces, which may run over a line break (a code span), and the joiners between the runs."""
    shown = "\n".join(text[s:e] for s, e in located)
    starts = list(itertools.accumulate((e - s + 1 for s, e in located[:-1]), initial=0))
    runs, gaps, at = [], [], 0
    for m in [*KEEP.finditer(shown), None]:
        end = len(shown) if m is None else m.start()
        for p in re.finditer(r"[^\n]+", shown[at:end]):
            gaps.append(shown[runs[-1][1]:at + p.start()] if runs else "")
            runs.append((at + p.start(), at + p.end()))
        at = end if m is None else m.end()
    spans = []
    for s, e in runs:
        line = bisect.bisect_right(starts, s) - 1
        spans.append((located[line][0] + s - starts[line], located[line][0] + e - starts[line]))
    return spans, [" " if "\n" in g else "" for g in gaps[1:]]


def read(data: bytes, name: str, split: Splitter, **_) -> Layout:
    """A Markdown file as one document of its text blocks; written back with their text translated."""
    text = decode(data, name)
    front = FRONT.match(text)
    shown = text if front is None else re.sub(r"[^\n]", " ", front.group()) + text[front.end():]
    lines = lines_of(text)
    spans, units, cursor = [], [], {}
    for token in _parser().parse(shown):
        if token.type != "inline" or not token.map:
            continue
        located = _located(token, lines, cursor)
        runs, joiners = _runs(text, located) if located else ([], [])
        if runs:
            spans += runs
            units.append(Unit([text[s:e] for s, e in runs], joiners))

    def build(new: list[list[str]]) -> bytes:
        return replace_spans(text, spans, [t for unit in new for t in unit]).encode("utf-8")
    return Layout(Pieces(units, split), build)
