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
  | [\[\]]                          # a link's brackets
""", re.X)
FRONT = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(?:.*\r?\n)*?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)")


def _parser():
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        raise DataError("reading Markdown needs markdown-it-py: pip install 'docnmt[formats]'") from None
    return MarkdownIt("commonmark").enable("table")


def _runs(line: str, start: int, end: int) -> list[tuple[int, int]]:
    """The text between the kept inline pieces of ``line[start:end]``, as ``[start, end)``."""
    out, at = [], start
    for m in KEEP.finditer(line, start, end):
        if m.start() > at:
            out.append((at, m.start()))
        at = m.end()
    return out + ([(at, end)] if end > at else [])


def _unit_spans(token, lines, cursor: dict) -> list[list[tuple[int, int]]]:
    """Per line of an inline token's content, the spans (in the file) of its text runs."""
    out = []
    for k, content in enumerate(token.content.split("\n")):
        no = token.map[0] + k
        content = content.strip()
        if not content or no >= len(lines):
            continue
        line = lines[no]
        at = line.text.find(content, cursor.get(no, 0))
        if at < 0:
            continue
        cursor[no] = at + len(content)
        out.append([(line.start + s, line.start + e) for s, e in _runs(line.text, at, at + len(content))])
    return out


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
        per_line = _unit_spans(token, lines, cursor)
        flat = [s for line in per_line for s in line]
        if not flat:
            continue
        joiners = [" " if k and j == 0 else "" for k, line in enumerate(per_line) for j, _ in enumerate(line)][1:]
        spans += flat
        units.append(Unit([text[s:e] for s, e in flat], joiners))

    def build(new: list[list[str]]) -> bytes:
        return replace_spans(text, spans, [t for unit in new for t in unit]).encode("utf-8")
    return Layout(Pieces(units, split), build)
