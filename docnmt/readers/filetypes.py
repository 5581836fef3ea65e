"""The formats whose files come back whole, only their text translated (docs/formats.md): SRT and
WebVTT subtitles, DOCX, Markdown, HTML and plain text in paragraphs. Each file is one document
(:class:`~.kept.Layout`); ``docnmt translate`` and ``docnmt serve`` write it back in its own format.

A new such format is a module with ``read(data: bytes, name, split, **options) -> Layout`` and
one line in :data:`KEPT`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

from ..errors import DataError
from . import docx, html, markdown, paragraphs, subtitles
from .formats import BY_EXTENSION
from .kept import Layout, splitter


def _srt(data: bytes) -> bool:
    lines = [x.strip() for x in data.lstrip(b"\xef\xbb\xbf \t\r\n")[:200].decode("utf-8", "replace").splitlines()]
    return bool(lines) and (bool(subtitles.SRT_TIME.match(lines[0])) or (
        lines[0].isdigit() and len(lines) > 1 and bool(subtitles.SRT_TIME.match(lines[1]))))


def _html(data: bytes) -> bool:
    return re.match(rb"(\xef\xbb\xbf)?\s*<(!doctype\s+html|html)\b", data[:200], re.I) is not None


@dataclass(frozen=True)
class Kept:
    """A format read as a :class:`Layout` and written back whole."""

    read: Callable[..., Layout]
    media: str                                     # the Content-Type of its files
    extensions: tuple[str, ...] = ()               # fmt="auto" picks it for these endings
    sniff: Callable[[bytes], bool] | None = None   # ... else for this content
    binary: bool = False


KEPT: dict[str, Kept] = {
    "srt": Kept(subtitles.read, "application/x-subrip", (".srt",), _srt),
    "vtt": Kept(lambda *a, **k: subtitles.read(*a, vtt=True, **k), "text/vtt", (".vtt",),
                lambda d: d.lstrip(b"\xef\xbb\xbf").startswith(b"WEBVTT")),
    "docx": Kept(docx.read, "application/vnd.openxmlformats-officedocument.wordprocessingml.document", (".docx",),
                 lambda d: d[:4] == b"PK\x03\x04", binary=True),
    "markdown": Kept(markdown.read, "text/markdown", (".md", ".markdown")),
    "html": Kept(html.read, "text/html", (".html", ".htm", ".xhtml"), _html),
    "text": Kept(paragraphs.read, "text/plain"),     # only when asked for: .txt files are read as lines
}
BY_ENDING = {ext: name for name, k in KEPT.items() for ext in k.extensions}


def kept_format(name: str, data: bytes | None, fmt: str = "auto") -> str | None:
    """The kept format a file is read in: ``fmt`` itself, or for "auto" its extension's, else (a
    name no other format claims) its content's; None: a format of the format table."""
    if fmt != "auto":
        return fmt if fmt in KEPT else None
    ext = os.path.splitext(name)[1].lower()
    if ext in BY_ENDING:
        return BY_ENDING[ext]
    if ext in BY_EXTENSION or data is None:
        return None
    return next((k for k, f in KEPT.items() if f.sniff and f.sniff(data)), None)


def read_kept(data: bytes, name: str, fmt: str, lang: str | None = "en", max_line_chars: int | None = None) -> Layout:
    """A file in kept format ``fmt`` as a :class:`Layout`, its text split into sentences of
    ``lang`` (None: a paragraph is a sentence); an error naming ``name`` when it is damaged or has
    no text."""
    if max_line_chars is not None and max_line_chars < 1:
        raise DataError(f"--max-line-chars (max_line_chars) {max_line_chars}: give a positive number")
    if max_line_chars is not None and fmt not in ("srt", "vtt"):
        raise DataError(f"--max-line-chars (max_line_chars) is only for SRT and WebVTT subtitles, not {fmt}")
    layout = KEPT[fmt].read(data, name, splitter(lang), max_line_chars=max_line_chars)
    if not layout.sentences:
        raise DataError("no text to translate", name)
    return layout
