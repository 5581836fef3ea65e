"""What the XML/SGML readers share: the lenient regular expressions for ``<doc>`` and ``<seg>``
elements, attribute values, and the cleaning of segment text (references unescaped, CDATA
unwrapped, whitespace collapsed)."""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

from ..errors import DataError
from .text import Text

COMMENT = re.compile(r"<!--.*?-->", re.S)
DOC_TAG = re.compile(r"<doc\b([^>]*)>", re.I)
SEG = re.compile(r"<seg\b([^>]*)>(.*?)(</seg\s*>|(?=<seg\b|<doc\b|</doc\s*>)|\Z)", re.I | re.S)
ENTITY = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.S)
ZERO_WIDTH = {0x200B: " ", 0xFEFF: " "}  # zero-width spaces count as whitespace (newstest2012)


@dataclass
class XDoc:
    """One ``<doc>`` element: the line it starts on, its segments by seg id, its metadata."""

    line: int
    segs: dict[str, str]
    meta: dict


def attr(attrs: str, name: str) -> str | None:
    """Attribute ``name`` in a tag's attribute text, quoted with ", ' or not at all."""
    m = re.search(rf"""(?<![\w-]){name}\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", attrs, re.I)
    return None if m is None else clean(next(g for g in m.groups() if g is not None))


def clean(s: str) -> str:
    """Unescape ``&...;`` references (a bare ``&`` stays) outside ``<![CDATA[...]]>`` sections,
    which are unwrapped as they are; collapse and strip whitespace."""
    parts = CDATA.split(s)   # even indices: markup text, odd: CDATA contents
    s = "".join(p if k % 2 else ENTITY.sub(lambda m: html.unescape(m.group()), p) for k, p in enumerate(parts))
    return " ".join(s.translate(ZERO_WIDTH).split())


def without_comments(f: Text) -> str:
    """The text of ``f`` with comments blanked out, keeping their line breaks (line numbers stay true)."""
    return COMMENT.sub(lambda m: "\n" * m.group().count("\n"), f.text)


def doc_end(text: str, tags: list, k: int) -> int:
    """Where the ``k``-th ``<doc>`` element's text ends: at the next ``<doc>`` tag, else the end."""
    return tags[k + 1].start() if k + 1 < len(tags) else len(text)


def new_docid(f: Text, docs: dict, docid: str | None, line: int, attribute: str) -> str:
    """``docid``, checked to be given and not seen before in ``docs``."""
    if not docid:
        raise DataError(f"<doc> without {attribute}", f.name, line)
    if docid in docs:
        raise DataError(f"duplicate document id {docid!r}", f.name, line)
    return docid
