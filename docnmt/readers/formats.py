"""The format table: every input format ``read_documents`` reads, by name, with what it accepts.

A new format is one module (a ``read(src, tgt, docids_path=None, allow_empty=False)`` function
taking decoded :class:`~.text.Text` and returning documents) plus one line in :data:`TABLE`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..document import Document
from . import bcontrast, jsonl, lines, xml
from .text import Text


@dataclass(frozen=True)
class Format:
    """How ``read_documents`` reads one format."""

    read: Callable[..., list[Document]]      # read(src: Text, tgt: Text | None, docids_path, allow_empty, **keys)
    one_file: bool = False                   # both sides (and ids) in one file: no target or docids file
    docids_file: bool = False                # takes a file of document ids, one a line
    keys: bool = False                       # takes read_jsonl's key names (src_key, tgt_key, id_key)
    extensions: tuple[str, ...] = ()         # fmt="auto" picks it for files with these endings
    line_of: Callable[[Text, int, int], tuple[int | None, bool]] | None = None   # for sentence_line
    as_marker: bool = False                  # read_sentences reads it as a marker file


TABLE: dict[str, Format] = {
    "marker": Format(lines.marker, docids_file=True, line_of=lines.marker_line, as_marker=True),
    "blankline": Format(lines.blankline, docids_file=True, line_of=lines.blankline_line, as_marker=True),
    "xml": Format(xml.read, extensions=(".xml", ".sgm", ".sgml"), line_of=xml.doc_line),
    "sgml": Format(xml.read, line_of=xml.doc_line),                     # another name for xml
    "jsonl": Format(jsonl.read, one_file=True, keys=True, extensions=(".jsonl",), line_of=jsonl.line_of),
    "bcontrast": Format(bcontrast.read, one_file=True, extensions=(".json",)),
    "plain": Format(lines.plain, line_of=lines.plain_line, as_marker=True),
}

FORMATS = ("auto", *TABLE)
BY_EXTENSION = {ext: name for name, f in TABLE.items() for ext in f.extensions}
