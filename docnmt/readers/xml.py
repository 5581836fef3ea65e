"""IWSLT mteval XML and WMT SGML: ``<doc docid=…>`` elements holding ``<seg id=…>`` segments, read
leniently with regular expressions; two files (source and target) are paired by docid, then by seg
id. A file in the WMT format of 2021 on (:mod:`.wmt`) holds both sides itself."""
from __future__ import annotations

import html
import re
import warnings

from ..document import Document
from ..errors import DataError
from .markup import COMMENT, DOC_TAG, SEG, XDoc, attr, clean, doc_end, new_docid, without_comments
from .text import Text, load, read_text
from .wmt import is_wmt, wmt_docs


def xml_docs(f: Text) -> dict[str, XDoc]:
    """The documents of an XML/SGML file by docid, their segments by seg id, in file order."""
    text = without_comments(f)
    if is_wmt(text):
        return wmt_docs(f, text)
    tags = list(DOC_TAG.finditer(text))
    if not tags:
        raise DataError("no <doc> element", f.name)
    if stray := SEG.search(text, 0, tags[0].start()):
        raise DataError("<seg> outside any <doc> element", f.name, text.count("\n", 0, stray.start()) + 1)
    docs: dict[str, XDoc] = {}
    line, pos = 1, 0

    def line_at(p: int) -> int:  # line numbers counted incrementally: one pass over the text
        nonlocal line, pos
        line, pos = line + text.count("\n", pos, p), p
        return line

    for k, tag in enumerate(tags):
        doc = XDoc(line_at(tag.start()), {}, {})
        docid = new_docid(f, docs, attr(tag.group(1), "docid"), doc.line, "docid")
        if origlang := attr(tag.group(1), "origlang"):
            doc.meta["origlang"] = origlang
        for seg in SEG.finditer(text, tag.end(), doc_end(text, tags, k)):
            _add_seg(f, doc, docid, seg, line_at(seg.start()))
        if not doc.segs:
            raise DataError(f"document {docid!r} has no <seg>", f.name, doc.line)
        docs[docid] = doc
    return docs


def _add_seg(f: Text, doc: XDoc, docid: str, seg: re.Match, no: int) -> None:
    sid = attr(seg.group(1), "id") or str(len(doc.segs) + 1)
    if not seg.group(3):
        raise DataError(f"<seg id={sid}> not closed", f.name, no)
    if sid in doc.segs:
        raise DataError(f"duplicate seg id {sid} in document {docid!r}", f.name, no)
    doc.segs[sid] = clean(seg.group(2))
    if not doc.segs[sid]:
        raise DataError(f"empty segment (seg id {sid})", f.name, no)


def read(a: Text, b: Text | None, docids_path=None, allow_empty: bool = False) -> list[Document]:
    """The documents of ``a``, paired with those of ``b`` when given (``docids_path`` and
    ``allow_empty`` do not apply)."""
    da = xml_docs(a)
    if b is None:
        return [_one_side(docid, d) for docid, d in da.items()]
    docs, dropped = _paired(a, da, b, xml_docs(b))
    if dropped:
        warnings.warn(f"{a.name} / {b.name}: dropped {dropped} segments whose seg id is on one "
                      "side only (see meta['unpaired_segs'])", stacklevel=3)
    return docs


def _one_side(docid: str, d: XDoc) -> Document:
    """A document of one file; in the WMT 2021+ format, the first reference is its target."""
    refs = d.meta.pop("references", None)
    doc = Document(docid, list(d.segs.values()), None, d.meta)
    if refs:
        aligned = {name: [r.get(sid, "") for sid in d.segs] for name, r in refs.items()}
        doc.tgt = next(iter(aligned.values()))
        doc.meta["references"] = aligned
    return doc


def _paired(a: Text, da: dict[str, XDoc], b: Text, db: dict[str, XDoc]) -> tuple[list[Document], int]:
    """Documents with the segments whose seg id both sides have, and how many were dropped."""
    for (f, dx), (g, dy) in (((a, da), (b, db)), ((b, db), (a, da))):
        for docid, d in dx.items():
            if docid not in dy:
                raise DataError(f"document {docid!r} is not in {g.name}", f.name, d.line)
    docs, dropped = [], 0
    for docid, d in da.items():
        sa, sb = d.segs, db[docid].segs
        ids = [i for i in sa if i in sb]
        if not ids:
            raise DataError(f"document {docid!r} has no seg id in common with {b.name}",
                            a.name, d.line)
        doc = Document(docid, [sa[i] for i in ids], [sb[i] for i in ids], d.meta)
        if unpaired := len(sa) + len(sb) - 2 * len(ids):
            doc.meta["unpaired_segs"] = unpaired
            dropped += unpaired
        docs.append(doc)
    return docs, dropped


def doc_line(f: Text, doc: int, sent: int) -> tuple[int, bool]:
    """The line where document ``doc`` starts (see ``sentence_line``)."""
    return list(xml_docs(f).values())[doc].line, False


def replace_segments(text: str, translations: list[str]) -> str:
    """``text`` (XML/SGML as :func:`read_xml` reads it) with the contents of its ``<seg>``
    elements, in reading order, replaced by ``translations``."""
    blank = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)   # same offsets, no comments
    spans = []
    tags = list(DOC_TAG.finditer(blank))
    for k, tag in enumerate(tags):
        spans.extend(seg.span(2) for seg in SEG.finditer(blank, tag.end(), doc_end(blank, tags, k)))
    if len(spans) != len(translations):
        raise DataError(f"{len(spans)} segments but {len(translations)} translations")
    out, pos = [], 0
    for (a, b), t in zip(spans, translations):
        out += [text[pos:a], html.escape(t, quote=False)]
        pos = b
    out.append(text[pos:])
    return re.sub(r"(</?)srcset\b", r"\1tstset", "".join(out))


def read_xml(src_path, tgt_path=None) -> list[Document]:
    """Read IWSLT XML / WMT SGML; two sides are paired by docid and seg id."""
    return read(read_text(src_path), load(tgt_path))
