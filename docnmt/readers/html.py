"""HTML, translated with everything but its text kept: every tag and attribute as written (``alt``
and ``title`` included), comments, the doctype, and the content of ``script``, ``style``, ``code``,
``pre``, ``kbd``, ``samp``, ``textarea``, ``svg`` and ``math`` elements.

Python's own tolerant HTML tokenizer (``html.parser``) finds the text; the text between two block
boundaries (any tag but an inline one such as ``a``, ``b``, ``em``, ``span``, ``br``) is a unit of
:mod:`.kept`: split into sentences, translated, and put back into the same text nodes by the shares
of the source's characters, cut at word boundaries, so a link keeps the middle of the sentence it
was in. Character references are decoded for the model; a node that changes is written with ``&``,
``<`` and ``>`` escaped and other characters as themselves.
"""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from .kept import Layout, Pieces, Splitter, Unit, decode, replace_spans

INLINE = frozenset("a abbr b bdi bdo big br cite code data dfn em font i img ins kbd del mark q s samp small span "
                   "strong sub sup time tt u var wbr".split())
VERBATIM = frozenset("script style code pre kbd samp textarea svg math".split())
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())


class _Events(HTMLParser):
    """Where every piece of a page starts and what it is: "text" (outside verbatim elements),
    "br", "inline" (an inline tag), "block" (any other tag) or "other" (comments, verbatim text)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=False)
        self.starts = [0]
        for line in text.split("\n")[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.events: list[tuple[int, str]] = []
        self.verbatim: list[str] = []

    def _add(self, kind: str) -> None:
        line, col = self.getpos()
        self.events.append((self.starts[line - 1] + col, kind))

    def _text(self, *_):
        self._add("other" if self.verbatim else "text")

    handle_data = handle_entityref = handle_charref = _text

    def _other(self, *_):
        self._add("other")

    handle_comment = handle_decl = handle_pi = unknown_decl = _other

    def handle_starttag(self, tag, attrs):
        self._tag(tag, tag not in VOID)

    def handle_startendtag(self, tag, attrs):
        self._tag(tag, False)

    def handle_endtag(self, tag):
        self._tag(tag, False)
        if tag in self.verbatim:
            del self.verbatim[len(self.verbatim) - 1 - self.verbatim[::-1].index(tag):]

    def _tag(self, tag: str, opens: bool) -> None:
        self._add("br" if tag == "br" else "inline" if tag in INLINE else "block")
        if opens and tag in VERBATIM:
            self.verbatim.append(tag)


def _units(events: list[tuple[int, str]], length: int) -> tuple[list[list[tuple[int, int]]], list[list[str]]]:
    """The text spans of a page grouped into units (split at block tags), with their joiners."""
    spans: list[list[tuple[int, int]]] = [[]]
    joiners: list[list[str]] = [[]]
    joiner, last = "", None
    for (start, kind), (end, _) in zip(events, [*events[1:], (length, "")]):
        if kind == "text" and last == "text":                 # one text node in several events
            spans[-1][-1] = (spans[-1][-1][0], end)
        elif kind == "text":
            if spans[-1]:
                joiners[-1].append(joiner)
            spans[-1].append((start, end))
            joiner = ""
        elif kind == "br":
            joiner = " "
        elif kind == "block" and spans[-1]:
            spans.append([])
            joiners.append([])
        last = kind
    return [s for s in spans if s], [j for s, j in zip(spans, joiners) if s]


def read(data: bytes, name: str, split: Splitter, **_) -> Layout:
    """An HTML page as one document of its text blocks; written back with their text translated."""
    text = decode(data, name)
    events = _Events(text)
    events.feed(text)
    events.close()
    units, joiners = _by_line(text, *_units(events.events, len(text)))
    flat = [s for unit in units for s in unit]
    shown = [html.unescape(text[s:e]) for s, e in flat]

    def build(new: list[list[str]]) -> bytes:
        got = [t for unit in new for t in unit]
        out = [text[s:e] if t.split() == old.split() else html.escape(t, quote=False)   # unchanged: as it was
               for (s, e), t, old in zip(flat, got, shown)]
        return replace_spans(text, flat, out).encode("utf-8")
    pieces = Pieces([Unit([shown[k] for k in range(a, a + len(u))], j)
                     for a, u, j in zip(_offsets(units), units, joiners)], split)
    return Layout(pieces, build)


def _by_line(text: str, units: list[list[tuple[int, int]]], joiners: list[list[str]]):
    """Every text span cut at its line breaks (a part per line, so the lines stay where they were)."""
    out_units, out_joiners = [], []
    for spans, joins in zip(units, joiners):
        parts, glue = [], []
        for k, (s, e) in enumerate(spans):
            lines = [(s + m.start(), s + m.end()) for m in re.finditer(r"[^\n]+", text[s:e])] or [(s, e)]
            glue += ([joins[k - 1]] if k else []) + [" "] * (len(lines) - 1)
            parts += lines
        out_units.append(parts)
        out_joiners.append(glue)
    return out_units, out_joiners


def _offsets(units: list[list]) -> list[int]:
    out, at = [], 0
    for u in units:
        out.append(at)
        at += len(u)
    return out
