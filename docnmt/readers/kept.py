"""What the formats that keep their file (subtitles, DOCX, Markdown, HTML, text paragraphs) share:
a file's text taken apart into :class:`Unit` s, the units' text split into sentences, and each
sentence's translation put back over the pieces of text it came from.

A unit is text the reader sees as one run of prose: a paragraph (its lines, its DOCX text runs,
its Markdown text between inline code and links) or, for subtitles, the whole file (every line of
every cue). Its parts are the pieces of the file that hold the text; whatever lies between them
(markup, cue timings, inline code) is never shown to the model and never changed.

The rule that puts a translation back (docs/formats.md): a sentence whose source lies in several
parts has its translation cut into as many pieces, at word boundaries (at characters where the
translation has no spaces), each part getting the share of the translation that its share of the
source sentence's characters gives. A part keeps its own leading and trailing whitespace; a part
holding only whitespace is kept as it is. A sentence translated as itself goes back exactly where
it was, so a translation that is the source gives back the file (whitespace runs inside a line
collapsed).
"""
from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass, field
from typing import Callable

from ..errors import DataError
from .text import decode as decode  # the one place input is decoded; readers of kept formats take it here

Splitter = Callable[[str], list[str]]


@dataclass
class Unit:
    """Text in parts; ``joiners[k]`` is what the model sees between part k and k + 1 (" " across a
    line break, "" between DOCX runs of one word)."""

    parts: list[str]
    joiners: list[str] = field(default_factory=list)

    def __post_init__(self):
        if not self.joiners:
            self.joiners = [" "] * (len(self.parts) - 1)


@dataclass
class _Sentence:
    unit: int
    text: str
    parts: list[int]        # the parts it lies in
    cuts: list[int]         # where the next part starts, in characters from the sentence's start
    glued: bool             # no space between it and the sentence before (``.json`` split after ".")


def splitter(lang: str | None) -> Splitter:
    """Sentences of a text: pysbd's rules for ``lang`` (a language code); None: one sentence a text."""
    if lang is None:
        return lambda text: [text]
    try:
        import pysbd
        from pysbd.languages import LANGUAGE_CODES
    except ImportError:
        raise DataError("splitting text into sentences needs pysbd: pip install 'docnmt[formats]'") from None
    if lang not in LANGUAGE_CODES:
        raise DataError(f"lang {lang!r}: no sentence splitter for it; use one of {', '.join(sorted(LANGUAGE_CODES))}")
    return pysbd.Segmenter(language=lang, clean=False).segment


def _normalised(unit: Unit) -> tuple[str, list[tuple[int, int]]]:
    """The unit's text with whitespace collapsed, and each part's ``[start, end)`` in it (a part
    after whitespace starts at that space)."""
    out: list[str] = []
    length, pending, spans = 0, False, []
    for k, part in enumerate(unit.parts):
        start = length
        for chunk in re.split(r"(\s+)", (unit.joiners[k - 1] if k else "") + part):
            if not chunk:
                continue
            if chunk.isspace():
                pending = length > 0
            else:
                if pending:
                    out.append(" ")
                    length += 1
                    pending = False
                out.append(chunk)
                length += len(chunk)
        spans.append((start, length))
    return "".join(out), spans


CHUNK = 1000
SAFE_END = re.compile(r"[^\W\d]{3,}[.!?…][\"'”’)\]]*(?= [^\W\d])|[。！？]")   # a sentence end, seldom an abbreviation


def _chunks(text: str) -> list[tuple[int, str]]:
    """``text`` in pieces of about ``CHUNK`` characters or more, cut after a sentence end (the
    splitter takes time faster than the length of what it is given)."""
    out, at = [], 0
    while len(text) - at > 2 * CHUNK:
        m = SAFE_END.search(text, at + CHUNK)
        if m is None:
            break
        out.append((at, text[at:m.end()]))
        at = m.end()
    return out + [(at, text[at:])]


SIMPLE_END = re.compile(r".+?(?:[.!?…。！？]+[\"'”’)\]]*(?= |$)|$)")


def _sentence_spans(text: str, split: Splitter) -> list[tuple[int, int]]:
    """``[start, end)`` of each sentence of ``text``; where the splitter gives a sentence that is
    not in the text as it was, the rest of the chunk is split after every ``.!?``."""
    spans = []
    for offset, chunk in _chunks(text):
        at = 0
        for s in split(chunk):
            s = s.strip()
            k = chunk.find(s, at) if s else at
            if k < 0:
                spans += [(offset + m.start() + len(m.group()) - len(m.group().lstrip()), offset + m.end())
                          for m in SIMPLE_END.finditer(chunk, at) if m.group().strip()]
                break
            if s:
                spans.append((offset + k, offset + k + len(s)))
                at = k + len(s)
    return spans


class Pieces:
    """Units taken apart into sentences (``sentences``, in order: one document), and put back."""

    def __init__(self, units: list[Unit], split: Splitter):
        self.units = units
        self._sentences: list[_Sentence] = []
        for u, unit in enumerate(units):
            text, parts = _normalised(unit)
            ends = [b for _, b in parts]
            for s, e in _sentence_spans(text, split):
                inside = list(itertools.takewhile(lambda k: parts[k][0] < e,
                                                  range(bisect.bisect_right(ends, s), len(parts))))
                inside = [k for k in inside if min(e, parts[k][1]) > max(s, parts[k][0])]
                cuts = [max(parts[k][0], s) - s for k in inside[1:]]
                self._sentences.append(_Sentence(u, text[s:e], inside, cuts, 0 < s and text[s - 1] != " "))

    @property
    def sentences(self) -> list[str]:
        return [s.text for s in self._sentences]

    def fill(self, translations: list[str]) -> list[list[str]]:
        """Each unit's new parts, holding ``translations`` (one per sentence; one that is its
        source goes back exactly where it came from)."""
        got: list[list[list[str]]] = [[[] for _ in unit.parts] for unit in self.units]
        for sent, tgt in zip(self._sentences, translations, strict=True):
            tgt = " ".join(tgt.split())
            if tgt == sent.text:
                bounds = [0, *sent.cuts, len(tgt)]
                pieces = [tgt[a:b].strip() for a, b in zip(bounds, bounds[1:])]
            else:
                scale = len(tgt) / max(len(sent.text), 1)
                pieces = distribute(tgt, [round(c * scale) for c in sent.cuts])
                _punctuation_back(pieces, [self.units[sent.unit].parts[k] for k in sent.parts])
            spaced = _after_space(tgt, pieces)
            unit = self.units[sent.unit]
            for n, (k, piece) in enumerate(zip(sent.parts, pieces)):
                if piece:
                    joint = got[sent.unit][k] and not (n == 0 and sent.glued)
                    joint = joint or (n > 0 and spaced[n] and pieces[n - 1] and _touching(unit, k))
                    got[sent.unit][k].append(" " + piece if joint else piece)
        return [[_with_space(p, "".join(new)) for p, new in zip(unit.parts, new_parts)]
                for unit, new_parts in zip(self.units, got)]


CLOSING = re.compile(r"^[,.;:!?…)\]}»”’]+")


def _punctuation_back(pieces: list[str], parts: list[str]) -> None:
    """Closing punctuation a cut left at the start of a piece goes back to the end of the piece
    before, unless the source's part starts with punctuation too: ``Hello everyone,</i> and`` gave
    ``monde</i> , et`` (the part keeps its leading space), now ``monde,</i> et``."""
    for n in range(1, len(pieces)):
        m = CLOSING.match(pieces[n])
        before = next((p for p in range(n - 1, -1, -1) if pieces[p]), None)     # the last piece with text
        if m and before is not None and not CLOSING.match(parts[n].strip()):
            pieces[before] += m.group()
            pieces[n] = pieces[n][m.end():].lstrip()


def _after_space(text: str, pieces: list[str]) -> list[bool]:
    """For each piece (consecutive stripped pieces of ``text``): whether a space of ``text`` stands
    just before it, i.e. the cut that started it dropped one."""
    out, at = [], 0
    for piece in pieces:
        k = text.find(piece, at) if piece else at
        out.append(k > 0 and text[k - 1] == " ")
        at = k + len(piece)
    return out


def _touching(unit: Unit, k: int) -> bool:
    """Whether parts k - 1 and k of ``unit`` meet with nothing between them (no whitespace, no line
    break or tab): a space the cut dropped there must be put back, or two words run together
    (``Thank you</c>, merci`` translated ``Merci, c'est</c>la merci``)."""
    before, after = unit.parts[k - 1], unit.parts[k]
    return (unit.joiners[k - 1] == "" and before != "" and not before[-1].isspace()
            and after != "" and not after[0].isspace())


def _with_space(part: str, text: str) -> str:
    """``text`` in the place of ``part``, with ``part``'s leading and trailing whitespace."""
    if not part.strip():
        return part
    return part[:len(part) - len(part.lstrip())] + text + part[len(part.rstrip()):]


def _cost(a: str, b: str) -> float | None:
    """How dear a cut between characters ``a`` and ``b`` is: before a space 0, between a letter or
    digit and another character 0.5 (``link|.``), between two such others 0.75 (``(|,``); None
    inside a word or just after a space."""
    if b == " ":
        return 0
    if a == " " or (a.isalnum() and b.isalnum()):
        return None
    return 0.5 if a.isalnum() or b.isalnum() else 0.75


UNSPACED = re.compile("[\u0e00-\u0eff\u1000-\u109f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# scripts written without spaces (Thai, Lao, Myanmar, kana, CJK): a text of them may be cut anywhere


def distribute(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut into ``len(cuts) + 1`` pieces, each cut moved to the nearest word boundary
    (a space, dropped; less gladly a place beside punctuation: :func:`_cost` adds to the distance);
    anywhere where ``text`` has no space and is of a script written without spaces (``UNSPACED``;
    a one-word translation, ``Oui.``, is not cut inside its word). Every piece gets something while ``text`` has enough
    boundaries; pieces are stripped."""
    if not cuts:
        return [text]
    if " " in text or not UNSPACED.search(text):
        cost = {k: c for k in range(1, len(text)) if (c := _cost(text[k - 1], text[k])) is not None}
    else:
        cost = {k: 0 for k in range(1, len(text))}
    spare = len(cost) >= len(cuts)                  # else too few words: some pieces stay empty
    if not spare:
        cost.update({0: 2, len(text): 2})
    inner = sorted(cost)
    pieces, last, lo = [], 0, 0
    for i, cut in enumerate(cuts):
        hi = len(inner) - (len(cuts) - i) if spare else len(inner) - 1     # a boundary left for every later cut
        j = min(range(lo, hi + 1), key=lambda j: (abs(inner[j] - cut) + cost[inner[j]], j))
        pieces.append(text[last:inner[j]].strip())
        last, lo = inner[j], j + 1 if spare else j
    pieces.append(text[last:].strip())
    return pieces


@dataclass
class Layout:
    """A file taken apart: ``sentences`` to translate (one document, in order) and ``write``,
    the file with their translations in place."""

    pieces: Pieces
    build: Callable[[list[list[str]]], bytes]     # each unit's new parts -> the file

    @property
    def sentences(self) -> list[str]:
        return self.pieces.sentences

    def write(self, translations: list[str]) -> bytes:
        return self.build(self.pieces.fill(translations))


@dataclass(frozen=True)
class Line:
    """A line of a text file: where its text starts and ends (before its LF or CRLF)."""

    start: int
    end: int
    text: str


def lines_of(text: str) -> list[Line]:
    """The lines of ``text`` with their places in it."""
    out, at = [], 0
    for raw in text.split("\n"):
        body = raw[:-1] if raw.endswith("\r") else raw
        out.append(Line(at, at + len(body), body))
        at += len(raw) + 1
    return out


def replace_spans(text: str, spans: list[tuple[int, int]], new: list[str]) -> str:
    """``text`` with each ``[start, end)`` of ``spans`` (in order, not overlapping) replaced."""
    out, at = [], 0
    for (s, e), t in zip(spans, new, strict=True):
        out += [text[at:s], t]
        at = e
    return "".join(out) + text[at:]
