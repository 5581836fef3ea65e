"""SRT and WebVTT subtitles, translated with everything but their text kept: cue numbers and
identifiers, timings and cue settings, the WebVTT header, NOTE, STYLE and REGION blocks, line
endings, and every tag (``<i>``, ``{\\an8}``, ``<v Speaker>``, ``<b>`` inside a line).

The whole file is one document: the text of every cue, in order, split into sentences, so a
sentence that runs over several cues is translated once; its translation is cut over the lines it
came from (and, inside a line, over the text between its tags) by :mod:`.kept`'s rule: shares of
the source's characters, at word boundaries. A line whose text comes back empty is left out. With
``max_line_chars`` every cue's text is wrapped anew into lines of at most that many characters
besides tags (a longer word alone on its line).

A small parser of our own rather than a subtitle library: libraries write cues back in their own
spelling (timings, numbering, line endings), and everything but the text must come back as it was.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

from ..errors import DataError
from .kept import Layout, Line, Pieces, Splitter, Unit, decode, lines_of, replace_spans

SRT_TIME = re.compile(r"^\s*\d+:\d{1,2}:\d{1,2}[,.]\d{1,3}\s*-->\s*\d+:\d{1,2}:\d{1,2}[,.]\d{1,3}")
VTT_TIME = re.compile(r"^\s*(\d+:)?\d{2}:\d{2}\.\d{3}\s+-->\s+(\d+:)?\d{2}:\d{2}\.\d{3}(\s|$)")
TAG = re.compile(r"<[^>]*>|\{[^}]*\}")


@dataclass
class Cue:
    """A cue's text lines, each with the ``[start, end)`` of its text between tags (in the line)."""

    lines: list[Line]
    runs: list[list[tuple[int, int]]]


def _blocks(lines: list[Line]) -> list[list[tuple[int, Line]]]:
    """Runs of non-blank lines, each line with its 0-based number."""
    blocks, block = [], []
    for no, line in enumerate(lines):
        if line.text.strip():
            block.append((no, line))
        elif block:
            blocks.append(block)
            block = []
    return blocks + ([block] if block else [])


def _runs(text: str) -> list[tuple[int, int]]:
    """The text of a cue line between its tags."""
    out, at = [], 0
    for m in TAG.finditer(text):
        out += [(at, m.start())] if m.start() > at else []
        at = m.end()
    return out + ([(at, len(text))] if len(text) > at else [])


def _cues(text: str, name: str, vtt: bool) -> list[Cue]:
    """The cues of an SRT or WebVTT file; a block that is no cue is an error naming its line."""
    timing = VTT_TIME if vtt else SRT_TIME
    blocks = _blocks(lines_of(text))
    if vtt:
        if not blocks or not blocks[0][0][1].text.lstrip("\ufeff").startswith("WEBVTT"):
            raise DataError("not a WebVTT file: no WEBVTT line first", name, 1)
        blocks = [b for b in blocks[1:] if b[0][1].text.split(" ")[0] not in ("NOTE", "STYLE", "REGION")]
    cues = []
    for block in blocks:
        at = next((k for k, (_, line) in enumerate(block[:2]) if timing.match(line.text)), None)
        if at is None:
            numbered = not vtt and len(block) > 1 and block[0][1].text.strip().lstrip("\ufeff").isdigit()
            no, line = next((x for x in block[:2] if "-->" in x[1].text), block[1] if numbered else block[0])
            raise DataError(f"broken cue: no timing line ('00:00:01{'.' if vtt else ','}000 --> ...') "
                            f"but {line.text.strip()[:40]!r}", name, no + 1)
        text_lines = [line for _, line in block[at + 1:]]
        cues.append(Cue(text_lines, [_runs(line.text) for line in text_lines]))
    if not cues:
        raise DataError("no subtitle cues", name)
    return cues


def read(data: bytes, name: str, split: Splitter, vtt: bool = False, max_line_chars: int | None = None) -> Layout:
    """An SRT (``vtt``: WebVTT) file as one document; written back with its cues' text translated."""
    text = decode(data, name)
    cues = _cues(text, name, vtt)
    raw = [[line.text[s:e] for s, e in runs] for cue in cues for line, runs in zip(cue.lines, cue.runs)]
    shown = [[html.unescape(r) if vtt else r for r in line] for line in raw]
    joiners = [" " if k and not j else "" for k, line in enumerate(shown) for j, _ in enumerate(line)][1:]
    newline = "\r\n" if "\r\n" in text else "\n"

    def build(new: list[list[str]]) -> bytes:
        runs = iter(zip(new[0], (r for line in raw for r in line), (r for line in shown for r in line)))
        spans, texts = [], []
        for cue in cues:
            lines = []
            for line, cuts in zip(cue.lines, cue.runs):
                got = [_written(*next(runs), vtt) for _ in cuts]
                if "".join(got).strip() or not "".join(line.text[s:e] for s, e in cuts).strip():
                    lines.append(replace_spans(line.text, cuts, got))
            if cue.lines and not lines:         # every line empty: the cue keeps its number and timing only
                spans.append((cue.lines[0].start - len(newline), cue.lines[-1].end))
                texts.append("")
            elif cue.lines:
                spans.append((cue.lines[0].start, cue.lines[-1].end))
                texts.append(newline.join(_wrapped(" ".join(lines), max_line_chars) if max_line_chars else lines))
        return replace_spans(text, spans, texts).encode("utf-8")
    return Layout(Pieces([Unit([r for line in shown for r in line], joiners)], split), build)


def _written(new: str, old: str, shown: str, vtt: bool) -> str:
    """A run's new text as written: WebVTT escapes ``&<>`` (an unchanged run stays as it was)."""
    return old if new == shown else html.escape(new, quote=False) if vtt else new


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters besides its tags, broken at spaces outside
    tags (a longer word alone on its line)."""
    hidden = TAG.sub(lambda m: m.group().replace(" ", "\0"), text)
    lines, words, size = [], [], 0
    for word in hidden.split():
        seen = len(TAG.sub("", word.replace("\0", " ")))
        if words and size + 1 + seen > width:
            lines.append(" ".join(words))
            words, size = [], 0
        size += seen + (1 if words else 0)
        words.append(word)
    return [x.replace("\0", " ") for x in [*lines, " ".join(words)]]
