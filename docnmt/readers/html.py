"""HTML, translated with everything but its text kept: every tag and attribute as written but the
human-readable attributes (``alt``, ``title``, ``placeholder``, ``aria-label``, and ``content`` of
``<meta name="description">``), comments, the doctype, and the content of ``script``, ``style``,
``code``, ``pre``, ``kbd``, ``samp``, ``textarea``, ``svg`` and ``math`` elements (attributes of
tags inside them included; a verbatim element's own attributes are translated: a ``textarea``'s
placeholder, an ``svg``'s label).

Python's own tolerant HTML tokenizer (``html.parser``) finds the text; the text between two block
boundaries (any tag but an inline one such as ``a``, ``b``, ``em``, ``span``, ``br``) is a unit of
:mod:`.kept`: split into sentences, translated, and put back into the same text nodes by the shares
of the source's characters, cut at word boundaries, so a link keeps the middle of the sentence it
was in. Each translated attribute value is a unit of its own, in the order of the page (a value
that is empty or only whitespace is left alone). Character references are decoded for the model; a
node that changes is written with ``&``, ``<`` and ``>`` escaped and other characters as themselves,
an attribute value also with its own quote character escaped (an unquoted value is quoted only
where the new one needs it).
"""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser, attrfind_tolerant, tagfind_tolerant

from .kept import Layout, Pieces, Splitter, Unit, decode, replace_spans

INLINE = frozenset("a abbr b bdi bdo big br cite code data dfn em font i img ins kbd del mark q s samp small span "
                   "strong sub sup time tt u var wbr".split())
VERBATIM = frozenset("script style code pre kbd samp textarea svg math".split())
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
TRANSLATED = frozenset("alt title placeholder aria-label".split())     # attributes a reader reads


class _Events(HTMLParser):
    """Where every piece of a page starts and what it is: "text" (outside verbatim elements),
    "br", "inline" (an inline tag), "block" (any other tag) or "other" (comments, verbatim text);
    and where the values of the attributes to translate lie, with their quote characters."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=False)
        self.text = text
        self.starts = [0]
        for line in text.split("\n")[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.events: list[tuple[int, str]] = []
        self.verbatim: list[str] = []
        self.attributes: list[tuple[int, int, str]] = []

    def _at(self) -> int:
        line, col = self.getpos()
        return self.starts[line - 1] + col

    def _add(self, kind: str) -> None:
        self.events.append((self._at(), kind))

    def _text(self, *_):
        self._add("other" if self.verbatim else "text")

    handle_data = handle_entityref = handle_charref = _text

    def _other(self, *_):
        self._add("other")

    handle_comment = handle_decl = handle_pi = unknown_decl = _other

    def handle_starttag(self, tag, attrs):
        self._attributes(tag, attrs)
        self._tag(tag, tag not in VOID)

    def handle_startendtag(self, tag, attrs):
        self._attributes(tag, attrs)
        self._tag(tag, False)

    def _attributes(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Notes the values of the tag's attributes to translate (none inside a verbatim element,
        nor in a tag this reading of it does not give the parser's attributes for)."""
        wanted = _translated(tag, attrs)
        start, raw = self._at(), self.get_starttag_text() or ""
        if self.verbatim or not wanted or self.text[start:start + len(raw)] != raw:
            return
        found = _values(raw)
        if [(name, html.unescape(value) if value else value) for name, value, *_ in found] != attrs:
            return
        self.attributes += [(start + s, start + e, quote) for k, (_, _, s, e, quote) in enumerate(found)
                            if k in wanted]

    def handle_endtag(self, tag):
        self._tag(tag, False)
        if tag in self.verbatim:
            del self.verbatim[len(self.verbatim) - 1 - self.verbatim[::-1].index(tag):]

    def _tag(self, tag: str, opens: bool) -> None:
        self._add("br" if tag == "br" else "inline" if tag in INLINE else "block")
        if opens and tag in VERBATIM:
            self.verbatim.append(tag)


def _translated(tag: str, attrs: list[tuple[str, str | None]]) -> set[int]:
    """Which of a tag's attributes are read by people: ``TRANSLATED`` ones and the content of
    ``<meta name="description">``, each with a value that is not only whitespace."""
    described = tag == "meta" and ("name", "description") in [(n, (v or "").strip().lower()) for n, v in attrs]
    return {k for k, (name, value) in enumerate(attrs) if value and html.unescape(value).strip()
            and (name in TRANSLATED or described and name == "content")}


def _values(raw: str) -> list[tuple[str, str | None, int, int, str]]:
    """A start tag's attributes as ``html.parser`` reads them (its own expressions): name, value
    as written, where the value lies in ``raw`` (inside its quotes) and its quote character."""
    out = []
    at = tagfind_tolerant.match(raw, 1).end()
    while at < len(raw) and (m := attrfind_tolerant.match(raw, at)):
        name, rest, value = m.group(1, 2, 3)
        s, e = m.span(3)
        quote = value[:1] if rest and value[:1] in "'\"" and value[-1:] == value[:1] else ""
        if not rest:
            value = None
        elif quote:
            value, s, e = value[1:-1], s + 1, max(s + 1, e - 1)
        out.append((name.lower(), value, s, e, quote))
        at = m.end()
    return out


def _attribute(new: str, quote: str) -> str:
    """A translated attribute value as written between its quote characters (``quote``), or with
    quotes added where an unquoted one needs them."""
    out = html.escape(new, quote=False)
    if quote:
        return out.replace(quote, "&quot;" if quote == '"' else "&#x27;")
    if not out or re.search(r"[\s\"'=<>`]", out):
        return '"' + out.replace('"', "&quot;") + '"'
    return out


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
    spans, joiners = _units(events.events, len(text))
    quotes: list[str | None] = [None] * len(spans)                 # None: text nodes, else an attribute's quote
    for s, e, quote in events.attributes:
        spans.append([(s, e)])
        joiners.append([])
        quotes.append(quote)
    order = sorted(range(len(spans)), key=lambda k: spans[k][0])   # the page's order
    units, joiners = _by_line(text, [spans[k] for k in order], [joiners[k] for k in order])
    flat = [s for unit in units for s in unit]
    quoted = [quotes[k] for k, unit in zip(order, units) for _ in unit]
    shown = [html.unescape(text[s:e]) for s, e in flat]

    def build(new: list[list[str]]) -> bytes:
        got = [t for unit in new for t in unit]
        out = [text[s:e] if t.split() == old.split()                                      # unchanged: as it was
               else html.escape(t, quote=False) if q is None else _attribute(t, q)
               for (s, e), t, old, q in zip(flat, got, shown, quoted)]
        places = sorted(range(len(flat)), key=flat.__getitem__)      # an attribute's unit may lie inside a text's
        return replace_spans(text, [flat[k] for k in places], [out[k] for k in places]).encode("utf-8")
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
