"""Format detection for ``fmt="auto"``: by the file name's extension (the format table's
``extensions``), else by the content."""
from __future__ import annotations

import os
import re

from .formats import BY_EXTENSION
from .text import DOC_MARK, Text

XML_START = re.compile(r"<(\?xml|doc\b|refset|srcset|tstset|mteval|dataset\b)", re.I)


def detect_format(f: Text) -> str:
    """The format ``read_documents(fmt="auto")`` reads ``f`` as: by its name's extension, else by
    its content (marker, blankline, plain, xml, jsonl, bcontrast)."""
    if fmt := BY_EXTENSION.get(os.path.splitext(f.name)[1].lower()):
        return fmt
    stripped = [line.strip() for line in f.lines]
    first = next((line for line in stripped if line), "")
    if first.startswith("{"):                            # content, for stdin and unusual names
        return "jsonl"
    if XML_START.match(first):
        return "xml"
    if DOC_MARK in stripped:
        return "marker"
    full = [k for k, s in enumerate(stripped) if s]
    return "blankline" if full and "" in stripped[full[0]:full[-1]] else "plain"
