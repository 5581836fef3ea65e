"""The WMT test-set format of 2021 on: one file holding a ``<dataset>`` of ``<collection>``s, each
``<doc id=… origlang=…>`` with the source (``<src lang=…>``) and any number of references
(``<ref lang=… translator=…>``; ``<hyp>`` ignored), segments in ``<p>`` paragraphs."""
from __future__ import annotations

import re

from ..errors import DataError
from .markup import DOC_TAG, SEG, XDoc, attr, clean, doc_end, new_docid
from .text import Text

DATASET = re.compile(r"<dataset\b", re.I)
SIDE = re.compile(r"<(src|ref)\b([^>]*)>(.*?)</\1\s*>", re.I | re.S)


def is_wmt(text: str) -> bool:
    """Whether ``text`` (comments removed) is in this format."""
    return bool(DATASET.search(text))


def wmt_docs(f: Text, text: str) -> dict[str, XDoc]:
    """The source segments of each document by seg id; the references, by translator (``A``,
    ``B`` … or their position), in ``meta["references"]``."""
    tags = list(DOC_TAG.finditer(text))
    if not tags:
        raise DataError("no <doc> element in the <dataset>", f.name)
    docs: dict[str, XDoc] = {}
    for k, tag in enumerate(tags):
        line = text.count("\n", 0, tag.start()) + 1
        docid = new_docid(f, docs, attr(tag.group(1), "id"), line, "id")
        doc = XDoc(line, {}, {"references": {}})
        if origlang := attr(tag.group(1), "origlang"):
            doc.meta["origlang"] = origlang
        for side in SIDE.finditer(text, tag.end(), doc_end(text, tags, k)):
            _add_side(f, text, side, doc, docid)
        if not doc.segs:
            raise DataError(f"document {docid!r} has no <src> segments", f.name, line)
        for sid, seg in doc.segs.items():
            if not seg:
                raise DataError(f"empty segment (seg id {sid})", f.name, line)
        docs[docid] = doc
    return docs


def _add_side(f: Text, text: str, side: re.Match, doc: XDoc, docid: str) -> None:
    """One ``<src>`` (the document's segments) or ``<ref>`` (one of its references) into ``doc``."""
    segs: dict[str, str] = {}
    for seg in SEG.finditer(side.group(3)):
        no = text.count("\n", 0, side.start(3) + seg.start()) + 1
        sid = attr(seg.group(1), "id") or str(len(segs) + 1)
        if not seg.group(3):
            raise DataError(f"<seg id={sid}> not closed", f.name, no)
        if sid in segs:
            raise DataError(f"duplicate seg id {sid} in document {docid!r}", f.name, no)
        segs[sid] = clean(seg.group(2))
    if side.group(1).lower() == "src":
        if doc.segs:
            raise DataError(f"document {docid!r} has two <src> elements", f.name, doc.line)
        doc.segs = segs
        doc.meta["src_lang"] = attr(side.group(2), "lang")
    else:
        name = attr(side.group(2), "translator") or str(len(doc.meta["references"]) + 1)
        doc.meta["references"][name] = segs
