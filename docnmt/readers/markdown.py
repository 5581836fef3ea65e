"""Markdown, translated with everything but its text kept: block structure (headings, lists, quotes,
tables), line breaks, code blocks and fenced code, HTML blocks, YAML front matter, link reference
definitions, and inside the text inline code, link and image targets, images (but their alt
text), autolinks, inline HTML, bare URLs, escapes and emphasis markers. An image's alt text
(``![alt](src)``) and an inline link's or image's title (``[text](href "title")``) are translated,
each a unit of its own after its block's text, when they are plain text on one line (no escapes,
entities or emphasis: else they are kept as written); a translation is written with the characters
that would end or change them backslash-escaped.

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
    return [_in_file(located, starts, s, e) for s, e in runs], [" " if "\n" in g else "" for g in gaps[1:]]


def _in_file(located: list[tuple[int, int]], starts: list[int], s: int, e: int) -> tuple[int, int]:
    """Where ``[s, e)`` of a block's lines joined (one line of them) lies in the file."""
    line = bisect.bisect_right(starts, s) - 1
    return located[line][0] + s - starts[line], located[line][0] + e - starts[line]


ALT = re.compile(r"!\[([^\]\n]+)\]")
TITLE = re.compile(r"""\s(?:"([^"\n]+)"|'([^'\n]+)')\s*\)\Z""")


def _labels(text: str, located: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """The alt texts of a block's images and the titles of its links and images: where they lie in
    the file and what ends them (``]`` or the title's quote character)."""
    shown = "\n".join(text[s:e] for s, e in located)
    starts = list(itertools.accumulate((e - s + 1 for s, e in located[:-1]), initial=0))
    out = []
    for m in KEEP.finditer(shown):
        if (alt := ALT.match(m.group())) is not None:
            out.append((*_in_file(located, starts, m.start() + alt.start(1), m.start() + alt.end(1)), "]"))
        if m.group().endswith(")") and (title := TITLE.search(m.group())) is not None:
            k = 1 if title.group(1) is not None else 2
            out.append((*_in_file(located, starts, m.start() + title.start(k), m.start() + title.end(k)),
                        title.group()[1]))
    return out


def _plain(token) -> set[str]:
    """The alt texts and titles of an inline token that markdown-it reads as plain text (written
    without escapes, entities or emphasis): the only ones translated."""
    out = set()
    for child in token.children or []:
        if child.type == "image" and all(c.type == "text" for c in child.children or []):
            out.add("".join(c.content for c in child.children or []))
        if child.type in ("image", "link_open") and child.attrs.get("title"):
            out.add(str(child.attrs["title"]))
    return out


def _escaped(new: str, end: str) -> str:
    """A translated alt text (``end`` is ``]``) or title (``end`` its quote) as Markdown that reads it
    back: the characters that would end or change it backslash-escaped."""
    special = "\\[]*_`<&!" if end == "]" else "\\&" + end
    return "".join("\\" + c if c in special else c for c in new)


def read(data: bytes, name: str, split: Splitter, **_) -> Layout:
    """A Markdown file as one document of its text blocks; written back with their text translated."""
    text = decode(data, name)
    front = FRONT.match(text)
    shown = text if front is None else re.sub(r"[^\n]", " ", front.group()) + text[front.end():]
    lines = lines_of(text)
    spans, units, ends, cursor = [], [], [], {}
    for token in _parser().parse(shown):
        if token.type != "inline" or not token.map:
            continue
        located = _located(token, lines, cursor)
        runs, joiners = _runs(text, located) if located else ([], [])
        labels = [(s, e, end) for s, e, end in _labels(text, located) if text[s:e] in _plain(token)]
        if runs:
            spans += runs
            units.append(Unit([text[s:e] for s, e in runs], joiners))
            ends += [None] * len(runs)
        for s, e, end in labels:
            spans.append((s, e))
            units.append(Unit([text[s:e]]))
            ends.append(end)

    def build(new: list[list[str]]) -> bytes:
        got = [t for unit in new for t in unit]
        out = [t if end is None or t.split() == text[s:e].split() else _escaped(t, end)
               for (s, e), t, end in zip(spans, got, ends)]
        places = sorted(range(len(spans)), key=spans.__getitem__)   # a block's labels lie among its runs
        return replace_spans(text, [spans[k] for k in places], [out[k] for k in places]).encode("utf-8")
    return Layout(Pieces(units, split), build)
