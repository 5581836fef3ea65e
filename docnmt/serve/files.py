"""Documents in and out of ``docnmt serve``: text split into sentences and joined back, and uploaded
files in the formats ``prepare`` reads, written back in the same format, and in the formats kept
whole (SRT, WebVTT, DOCX, Markdown, HTML, text: :mod:`docnmt.readers.filetypes`), read from the
uploaded bytes and written back as bytes.

Every upload format of ``prepare`` is handled here and only here: a new one is a name in
``UPLOAD_FORMATS`` (and its media type in ``MEDIA``), its reading in :func:`read_upload` and its
writing in :func:`write_back`; a format kept whole comes with its table line. Nothing a request
names is ever opened as a path: an upload is written only into a fresh temporary directory under a
sanitised name and removed after reading (a kept format is read from memory).
"""
from __future__ import annotations

import base64
import io
import re
import tempfile
from pathlib import Path

from .. import readers
from ..document import Document
from ..errors import DataError
from ..readers.filetypes import KEPT, kept_format, read_kept
from ..readers.kept import Layout, splitter

UPLOAD_FORMATS = ("auto", "marker", "plain", "blankline", "xml", "sgml", "jsonl", *KEPT)
MEDIA = {"jsonl": "application/jsonl", "xml": "application/xml", "sgml": "application/xml",
         **{name: k.media for name, k in KEPT.items()}}


def split_text(text: str, split: str, lang: str) -> tuple[list[str], list[int]]:
    """``text`` as sentences and the paragraph (blank-line separated block) each is in."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n").replace("\r", "\n")) if p.strip()]
    if not paragraphs:
        raise DataError("empty document: the text has no sentences")
    segment = splitter(lang) if split == "sentences" else None
    sents, paras = [], []
    for k, p in enumerate(paragraphs):
        parts = segment(" ".join(p.split())) if segment else p.split("\n")
        for s in parts:
            if s.strip():
                sents.append(" ".join(s.split()))
                paras.append(k)
    return sents, paras


def join_text(sentences: list[str], paragraphs: list[int], split: str) -> str:
    """Translated sentences put back together the way ``split_text`` took the source apart."""
    out: list[list[str]] = []
    last = None
    for s, p in zip(sentences, paragraphs):
        if p != last:
            out.append([])
            last = p
        out[-1].append(s)
    if split == "sentences":        # an empty translation leaves no stray space
        return "\n\n".join(" ".join(s for s in p if s) for p in out)
    return "\n\n".join("\n".join(p) for p in out)


def safe_name(filename: str | None) -> str:
    """An uploaded file's name reduced to its last component of safe characters (never a path)."""
    base = re.split(r"[\\/]", filename or "")[-1]
    base = re.sub(r"[^\w.-]", "_", base, flags=re.ASCII).lstrip(".")[:100]     # ASCII: it goes into a header
    return base or "upload.txt"


def translated_name(name: str) -> str:
    """The name of the translated file: ``talk.xml`` -> ``talk.translated.xml``."""
    stem, dot, ext = name.rpartition(".")
    return f"{stem}.translated.{ext}" if dot else f"{name}.translated"


def read_upload(data: bytes, filename: str, fmt: str, lang: str = "en",
                max_line_chars: int | None = None) -> tuple[list[Document], str, str | Layout]:
    """Documents of an uploaded file, its format and its text (a :class:`Layout` for SRT, WebVTT,
    DOCX, Markdown, HTML and text paragraphs, split into sentences of ``lang``); DataError naming
    ``filename``."""
    if fmt not in UPLOAD_FORMATS:
        raise DataError(f"format {fmt!r}: use one of {', '.join(UPLOAD_FORMATS)}")
    if kept := kept_format(filename, data, fmt):
        layout = read_kept(data, filename, kept, lang, max_line_chars)
        return [Document(filename, layout.sentences)], kept, layout
    with tempfile.TemporaryDirectory(prefix="docnmt-upload-") as tmp:
        path = Path(tmp) / filename
        path.write_bytes(data)
        try:
            text = readers.read_text(path)
            fmt = readers.detect_format(text) if fmt == "auto" else fmt
            if fmt == "bcontrast":
                raise DataError("BConTrasT JSON cannot be written back: convert it to JSONL first")
            docs = readers.read_documents(path, fmt=fmt)
        except DataError as e:
            raise DataError(e.message, filename, e.line) from None
    return docs, fmt, text.text


def write_back(docs: list[Document], fmt: str, original: str | Layout) -> str | bytes:
    """The translation in the input's format: ``<d>`` lines (plain and blank-line input as
    ``docnmt translate`` writes them), JSONL with ``tgt``, the XML/SGML file with every
    segment's text replaced by its translation (``srcset`` renamed ``tstset``), or the file of a
    kept format (bytes) with its text translated."""
    buf = io.StringIO()
    if isinstance(original, Layout):
        return original.write(docs[0].tgt)
    if fmt == "jsonl":
        readers.write_jsonl([Document(d.docid, d.src, d.tgt, _public_meta(d.meta)) for d in docs], buf)
    elif fmt in ("xml", "sgml"):
        return readers.replace_segments(original, [t for d in docs for t in d.tgt])
    else:
        readers.write_marker(docs, buf, side="tgt", allow_empty=True)
    return buf.getvalue()


def media_type(fmt: str) -> str:
    """The Content-Type of a translated file in format ``fmt``."""
    return MEDIA.get(fmt, "text/plain") + ("" if fmt in KEPT and KEPT[fmt].binary else "; charset=utf-8")


def file_fields(content: str | bytes, fmt: str) -> dict:
    """A translated file in a JSON answer: ``file`` (base64 for a binary format, ``encoding`` says
    so) and its ``media_type``."""
    if isinstance(content, bytes) and fmt in KEPT and KEPT[fmt].binary:
        return {"file": base64.b64encode(content).decode("ascii"), "encoding": "base64", "media_type": media_type(fmt)}
    text = content.decode("utf-8") if isinstance(content, bytes) else content
    return {"file": text, "encoding": "utf-8", "media_type": media_type(fmt)}


def _public_meta(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k not in ("problem", "scores")}
