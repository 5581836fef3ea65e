"""Read and write document-level parallel data.

Formats read (every file UTF-8, decoded strictly; a leading BOM is dropped; LF or CRLF endings):

``marker``
    Maruf et al. (2019): one sentence per line, a line holding only ``<d>`` starts a document
    (lines before the first ``<d>`` form a document too); optional ``.docids`` file, one id a line.
``blankline``
    One sentence per line, documents separated by one or more blank lines (PDC zh-en).
``xml`` / ``sgml``
    IWSLT mteval XML and WMT SGML: ``<doc docid=...>`` elements holding ``<seg id=...>``
    segments, parsed leniently with regular expressions (``&...;`` references unescaped,
    ``<![CDATA[...]]>`` unwrapped, whitespace collapsed; a ``<seg>`` before the first ``<doc>``
    is an error). Two sides are paired by docid, then by seg id. The WMT test-set format of 2021
    on (``<dataset><collection><doc id=...>`` with ``<src>`` and several ``<ref translator=...>``,
    segments in ``<p>`` paragraphs) holds both sides in one file: the source, the first reference
    as the target, every reference in ``meta["references"]``.
``jsonl``
    One JSON object a line: ``{"id": ..., "src": [...], "tgt": [...], "meta": {...}}``.
``bcontrast``
    BConTrasT JSON (WMT20 chat task): each conversation a document, each turn a sentence,
    oriented source=English, target=German.
``plain``
    One sentence per line, no documents: one document per file, ``meta["sentence_level"]``.

A document read without its own ``<d>`` line has ``meta["unmarked"]``.

Line-based formats strip whitespace around each sentence. :func:`write_marker` and
:func:`write_jsonl` are the inverses of the matching readers. Every problem with the input
raises :class:`docnmt.errors.DataError` naming the file and, when known, the 1-based line.
"""
from __future__ import annotations

import html
import json
import os
import re
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .document import Document
from .errors import ConfigError, DataError

__all__ = ["FORMATS", "read_text", "read_marker", "read_blankline", "read_xml", "read_jsonl",
           "read_bcontrast_json", "read_plain", "read_documents", "read_inputs", "write_marker", "write_jsonl"]

FORMATS = ("auto", "marker", "blankline", "xml", "sgml", "jsonl", "bcontrast", "plain")
DOC_MARK = "<d>"
STDIN = "-"
# BConTrasT: the language each role writes in (customers write German, agents English).
BCONTRAST_LANG = {"agent": "en", "customer": "de"}

Split = list[tuple[int, list[str]]]  # documents as (line where each starts, sentences)


@dataclass(frozen=True)
class Text:
    """A decoded input file: the name errors use and its whole text."""

    name: str
    text: str

    @cached_property
    def lines(self) -> list[str]:
        """The lines, without their LF or CRLF ending."""
        lines = self.text.split("\n")
        if lines[-1] == "":
            lines.pop()
        return [line[:-1] if line.endswith("\r") else line for line in lines]

    @property
    def base(self) -> str:
        """The file name without its folder, for default document ids."""
        return "stdin" if self.name == "<stdin>" else os.path.basename(self.name)


def read_text(path: str | os.PathLike) -> Text:
    """Read ``path`` (``"-"``: standard input) as strict UTF-8: the one place input is decoded."""
    stdin = str(path) == STDIN
    name = "<stdin>" if stdin else str(path)
    try:
        data = sys.stdin.buffer.read() if stdin else Path(path).read_bytes()
    except FileNotFoundError:
        raise DataError("no such file", name) from None
    except OSError as e:
        raise DataError(f"cannot read file: {e.strerror or e}", name) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"invalid UTF-8 (byte 0x{data[e.start]:02x})", name, line) from None
    return Text(name, text[1:] if text.startswith("\ufeff") else text)


def _load(path) -> Text | None:
    return None if path is None else read_text(path)


# ---------------------------------------------------------------- line-based formats

def _split_marker(f: Text, mark: str | None = DOC_MARK, allow_empty: bool = False) -> Split:
    """Documents of a marker file; with ``mark=None`` the whole file is one document.
    ``allow_empty`` accepts empty lines as empty sentences (system outputs may have them)."""
    docs: Split = []
    for no, line in enumerate(f.lines, 1):
        s = line.strip()
        if s == mark or not docs:
            docs.append((no, []))
            if s == mark:
                continue
        if not s and not allow_empty:
            raise DataError("empty sentence", f.name, no)
        docs[-1][1].append(s)
    for no, sents in docs:
        if not sents:
            raise DataError(f"empty document ({DOC_MARK} followed by no sentence)", f.name, no)
    return docs


def _split_blankline(f: Text) -> Split:
    docs: Split = []
    blank = True
    for no, line in enumerate(f.lines, 1):
        s = line.strip()
        if s and blank:
            docs.append((no, []))
        if s:
            docs[-1][1].append(s)
        blank = not s
    return docs


def _check_lines(a: Text, da: Split, b: Text, db: Split, mark: str | None = DOC_MARK) -> None:
    """Both sides have ``mark`` lines at the same line numbers and as many lines."""
    for no, (x, y) in enumerate(zip(a.lines, b.lines), 1):
        if (x.strip() == mark) != (y.strip() == mark):
            has, lacks = (a, b) if x.strip() == mark else (b, a)
            raise DataError(f"{mark} here but not at line {no} of {lacks.name}", has.name, no)
    na, nb = len(a.lines), len(b.lines)
    if na != nb:
        longer = a if na > nb else b
        raise DataError(f"line counts differ: {a.name} has {na} lines, {b.name} has {nb}",
                        longer.name, min(na, nb) + 1)


def _check_structure(a: Text, da: Split, b: Text, db: Split) -> None:
    """Both sides have as many documents, each with as many sentences."""
    for k, ((sa, xa), (sb, xb)) in enumerate(zip(da, db), 1):
        if len(xa) != len(xb):
            f, start = (a, sa) if len(xa) > len(xb) else (b, sb)
            raise DataError(f"document {k} has {len(xa)} sentences in {a.name} but {len(xb)} "
                            f"in {b.name}", f.name, start + min(len(xa), len(xb)))
    if len(da) != len(db):
        f, docs = (a, da) if len(da) > len(db) else (b, db)
        raise DataError(f"{a.name} has {len(da)} documents but {b.name} has {len(db)}",
                        f.name, docs[min(len(da), len(db))][0])


def _check_unique(ids: Iterable[tuple[str, int | None]], name: str) -> None:
    seen: dict[str, int | None] = {}
    for docid, no in ids:
        if docid in seen:
            raise DataError(f"duplicate document id {docid!r}", name, no)
        seen[docid] = no


def _docids(path, n: int, base: str) -> list[str]:
    if path is None:
        return [f"{base}:{k}" for k in range(n)]
    f = read_text(path)
    ids = [line.strip() for line in f.lines]
    if "" in ids:
        raise DataError("empty document id", f.name, ids.index("") + 1)
    if len(ids) != n:
        raise DataError(f"{len(ids)} document ids for {n} documents", f.name,
                        n + 1 if len(ids) > n else None)
    _check_unique(zip(ids, range(1, n + 1)), f.name)
    return ids


def _read_lined(split: Callable[[Text], Split], check: Callable[..., None], a: Text,
                b: Text | None, docids_path=None) -> list[Document]:
    da = split(a)
    if not da:
        raise DataError("empty input: no sentences", a.name)
    db = None
    if b is not None:
        db = split(b)
        check(a, da, b, db)
    ids = _docids(docids_path, len(da), a.base)
    tgts = [None] * len(da) if db is None else [sents for _, sents in db]
    return [Document(i, s, t) for i, (_, s), t in zip(ids, da, tgts)]


def _marker(a: Text, b: Text | None, docids_path=None, allow_empty: bool = False) -> list[Document]:
    split = (lambda f: _split_marker(f, allow_empty=True)) if allow_empty else _split_marker
    docs = _read_lined(split, _check_lines, a, b, docids_path)
    if a.lines[0].strip() != DOC_MARK:
        docs[0].meta["unmarked"] = True   # write_marker adds no <d> line
    return docs


def _blankline(a: Text, b: Text | None, docids_path=None) -> list[Document]:
    return _read_lined(_split_blankline, _check_structure, a, b, docids_path)


def _plain(a: Text, b: Text | None) -> list[Document]:
    (doc,) = _read_lined(partial(_split_marker, mark=None), partial(_check_lines, mark=None), a, b)
    doc.docid, doc.meta["sentence_level"], doc.meta["unmarked"] = a.base, True, True
    return [doc]


# ---------------------------------------------------------------- XML / SGML

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_DOC_TAG = re.compile(r"<doc\b([^>]*)>", re.I)
_SEG = re.compile(r"<seg\b([^>]*)>(.*?)(</seg\s*>|(?=<seg\b|<doc\b|</doc\s*>)|\Z)", re.I | re.S)
_ENTITY = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")


def _attr(attrs: str, name: str) -> str | None:
    """Attribute ``name`` in a tag's attribute text, quoted with ", ' or not at all."""
    m = re.search(rf"""(?<![\w-]){name}\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", attrs, re.I)
    return None if m is None else _clean(next(g for g in m.groups() if g is not None))


_ZERO_WIDTH = {0x200B: " ", 0xFEFF: " "}  # zero-width spaces count as whitespace (newstest2012)


_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.S)


def _clean(s: str) -> str:
    """Unescape ``&...;`` references (a bare ``&`` stays) outside ``<![CDATA[...]]>`` sections,
    which are unwrapped as they are; collapse and strip whitespace."""
    parts = _CDATA.split(s)   # even indices: markup text, odd: CDATA contents
    s = "".join(p if k % 2 else _ENTITY.sub(lambda m: html.unescape(m.group()), p) for k, p in enumerate(parts))
    return " ".join(s.translate(_ZERO_WIDTH).split())


@dataclass
class _XDoc:
    line: int
    segs: dict[str, str]
    meta: dict


_DATASET = re.compile(r"<dataset\b", re.I)
_SIDE = re.compile(r"<(src|ref)\b([^>]*)>(.*?)</\1\s*>", re.I | re.S)


def _xml_docs(f: Text) -> dict[str, _XDoc]:
    """The documents of an XML/SGML file by docid, their segments by seg id, in file order."""
    text = _COMMENT.sub(lambda m: "\n" * m.group().count("\n"), f.text)
    if _DATASET.search(text):
        return _wmt_docs(f, text)
    tags = list(_DOC_TAG.finditer(text))
    if not tags:
        raise DataError("no <doc> element", f.name)
    if stray := _SEG.search(text, 0, tags[0].start()):
        raise DataError("<seg> outside any <doc> element", f.name, text.count("\n", 0, stray.start()) + 1)
    docs: dict[str, _XDoc] = {}
    line, pos = 1, 0

    def line_at(p: int) -> int:  # line numbers counted incrementally: one pass over the text
        nonlocal line, pos
        line, pos = line + text.count("\n", pos, p), p
        return line

    for k, tag in enumerate(tags):
        doc = _XDoc(line_at(tag.start()), {}, {})
        docid = _attr(tag.group(1), "docid")
        if not docid:
            raise DataError("<doc> without docid", f.name, doc.line)
        if docid in docs:
            raise DataError(f"duplicate document id {docid!r}", f.name, doc.line)
        if origlang := _attr(tag.group(1), "origlang"):
            doc.meta["origlang"] = origlang
        end = tags[k + 1].start() if k + 1 < len(tags) else len(text)
        for seg in _SEG.finditer(text, tag.end(), end):
            no = line_at(seg.start())
            sid = _attr(seg.group(1), "id") or str(len(doc.segs) + 1)
            if not seg.group(3):
                raise DataError(f"<seg id={sid}> not closed", f.name, no)
            if sid in doc.segs:
                raise DataError(f"duplicate seg id {sid} in document {docid!r}", f.name, no)
            doc.segs[sid] = _clean(seg.group(2))
            if not doc.segs[sid]:
                raise DataError(f"empty segment (seg id {sid})", f.name, no)
        if not doc.segs:
            raise DataError(f"document {docid!r} has no <seg>", f.name, doc.line)
        docs[docid] = doc
    return docs


def _wmt_docs(f: Text, text: str) -> dict[str, _XDoc]:
    """The WMT test-set format of 2021 on: ``<dataset><collection><doc id=… origlang=…>`` holding
    ``<src lang=…>`` and any number of ``<ref lang=… translator=…>`` (and ``<hyp>``, ignored),
    each with ``<p>`` paragraphs of ``<seg id=…>``. The source segments by seg id; the references,
    by translator (``A``, ``B`` … or their position), in ``meta["references"]``."""
    tags = list(_DOC_TAG.finditer(text))
    if not tags:
        raise DataError("no <doc> element in the <dataset>", f.name)
    docs: dict[str, _XDoc] = {}
    for k, tag in enumerate(tags):
        line = text.count("\n", 0, tag.start()) + 1
        docid = _attr(tag.group(1), "id")
        if not docid:
            raise DataError("<doc> without id", f.name, line)
        if docid in docs:
            raise DataError(f"duplicate document id {docid!r}", f.name, line)
        end = tags[k + 1].start() if k + 1 < len(tags) else len(text)
        doc = _XDoc(line, {}, {"references": {}})
        if origlang := _attr(tag.group(1), "origlang"):
            doc.meta["origlang"] = origlang
        for side in _SIDE.finditer(text, tag.end(), end):
            segs: dict[str, str] = {}
            for seg in _SEG.finditer(side.group(3)):
                no = text.count("\n", 0, side.start(3) + seg.start()) + 1
                sid = _attr(seg.group(1), "id") or str(len(segs) + 1)
                if not seg.group(3):
                    raise DataError(f"<seg id={sid}> not closed", f.name, no)
                if sid in segs:
                    raise DataError(f"duplicate seg id {sid} in document {docid!r}", f.name, no)
                segs[sid] = _clean(seg.group(2))
            if side.group(1).lower() == "src":
                if doc.segs:
                    raise DataError(f"document {docid!r} has two <src> elements", f.name, line)
                doc.segs = segs
                doc.meta["src_lang"] = _attr(side.group(2), "lang")
            else:
                name = _attr(side.group(2), "translator") or str(len(doc.meta["references"]) + 1)
                doc.meta["references"][name] = segs
        if not doc.segs:
            raise DataError(f"document {docid!r} has no <src> segments", f.name, line)
        for sid, seg in doc.segs.items():
            if not seg:
                raise DataError(f"empty segment (seg id {sid})", f.name, line)
        docs[docid] = doc
    return docs


def _xml(a: Text, b: Text | None) -> list[Document]:
    da = _xml_docs(a)
    if b is None:
        docs = []
        for i, d in da.items():
            refs = d.meta.pop("references", None)
            doc = Document(i, list(d.segs.values()), None, d.meta)
            if refs:                # the WMT 2021+ format: the first reference is the target
                aligned = {name: [r.get(sid, "") for sid in d.segs] for name, r in refs.items()}
                doc.tgt = next(iter(aligned.values()))
                doc.meta["references"] = aligned
            docs.append(doc)
        return docs
    db = _xml_docs(b)
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
    if dropped:
        warnings.warn(f"{a.name} / {b.name}: dropped {dropped} segments whose seg id is on one "
                      "side only (see meta['unpaired_segs'])", stacklevel=3)
    return docs


# ---------------------------------------------------------------- JSON formats

def _json_error(e: Exception, f: Text, no: int | None) -> DataError:
    where = f" (column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
    return DataError(f"invalid JSON: {getattr(e, 'msg', e)}{where}", f.name, no)


def _sentences(value, what: str, name: str, no: int | None, allow_empty: bool = False) -> list[str]:
    """``value`` as a non-empty list of one-line strings (non-empty unless ``allow_empty``), stripped."""
    if not isinstance(value, list) or not value:
        raise DataError(f"{what}: expected a non-empty list of sentences", name, no)
    for k, s in enumerate(value):
        if not isinstance(s, str) or (not s.strip() and not allow_empty) or "\n" in s or "\r" in s:
            raise DataError(f"{what}[{k}]: expected a non-empty one-line string, got {s!r}",
                            name, no)
        if s.strip() == DOC_MARK:   # refused here, not when a translation is written as <d> lines
            raise DataError(f"{what}[{k}]: a sentence {DOC_MARK!r} would read as a document marker", name, no)
    return [s.strip() for s in value]


def _jsonl(f: Text, src_key: str = "src", tgt_key: str = "tgt", id_key: str = "id",
           allow_empty: bool = False) -> list[Document]:
    docs, lines = [], []
    for no, line in enumerate(f.lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise _json_error(e, f, no) from None
        if not isinstance(obj, dict):
            raise DataError("expected a JSON object", f.name, no)
        src = _sentences(obj.get(src_key), src_key, f.name, no)
        tgt = None if obj.get(tgt_key) is None else _sentences(obj[tgt_key], tgt_key, f.name, no, allow_empty)
        if tgt is not None and len(tgt) != len(src):
            raise DataError(f"{len(src)} {src_key} sentences but {len(tgt)} {tgt_key}", f.name, no)
        if docs and (tgt is None) != (docs[0].tgt is None):
            raise DataError(f"{tgt_key} present in some documents only", f.name, no)
        docid, meta = obj.get(id_key, f"{f.base}:{len(docs)}"), obj.get("meta", {})
        if isinstance(docid, bool) or not isinstance(docid, (str, int)) or not str(docid).strip():
            raise DataError(f"{id_key}: expected a non-empty string, got {docid!r}", f.name, no)
        if not isinstance(meta, dict):
            raise DataError("meta: expected a JSON object", f.name, no)
        docs.append(Document(str(docid), src, tgt, meta))
        lines.append(no)
    if not docs:
        raise DataError("empty input: no documents", f.name)
    _check_unique(((d.docid, no) for d, no in zip(docs, lines)), f.name)
    return docs


def _bcontrast(f: Text) -> list[Document]:
    """BConTrasT: ``{conversation id: [{"speaker", "source", "target", ...}, ...]}``.

    With gold targets every turn is oriented source=English, target=German. Without them
    (``test1_corpus.json``: all targets empty) ``src`` holds the turns as written and ``tgt``
    is None. ``meta["speakers"]`` and ``meta["orig_lang"]`` (the language each turn was
    written in) are kept either way.
    """
    try:
        data = json.loads(f.text)
    except (ValueError, RecursionError) as e:
        raise _json_error(e, f, getattr(e, "lineno", None)) from None
    if not isinstance(data, dict) or not data:
        raise DataError("expected a JSON object mapping conversation ids to turns", f.name, 1)
    gold = any(isinstance(t, dict) and t.get("target") for turns in data.values()
               if isinstance(turns, list) for t in turns)
    docs = []
    for cid, turns in data.items():
        pos = f.text.find(json.dumps(cid))
        no = f.text.count("\n", 0, pos) + 1 if pos >= 0 else None
        if not isinstance(turns, list) or not turns or not all(isinstance(t, dict) for t in turns):
            raise DataError(f"conversation {cid!r}: expected a non-empty list of turns", f.name, no)
        speakers = [t.get("speaker") for t in turns]
        if bad := [s for s in speakers if not isinstance(s, str) or s not in BCONTRAST_LANG]:
            raise DataError(f"conversation {cid!r}: unknown speaker {bad[0]!r}", f.name, no)
        orig = [BCONTRAST_LANG[s] for s in speakers]
        source = [_one_string(t.get("source"), cid, "source", f, no) for t in turns]
        meta = {"speakers": speakers, "orig_lang": orig}
        if not gold:
            docs.append(Document(cid, source, None, meta))
            continue
        target = [_one_string(t.get("target"), cid, "target", f, no) for t in turns]
        pairs = [(s, t) if lang == "en" else (t, s) for s, t, lang in zip(source, target, orig)]
        docs.append(Document(cid, [p[0] for p in pairs], [p[1] for p in pairs], meta))
    return docs


def _one_string(s, cid: str, key: str, f: Text, no: int | None) -> str:
    if not isinstance(s, str) or not s.strip():
        raise DataError(f"conversation {cid!r}: a turn has no {key} text", f.name, no)
    return " ".join(s.split())


# ---------------------------------------------------------------- public readers

def read_marker(src_path, tgt_path=None, docids_path=None) -> list[Document]:
    """Read the ``<d>`` marker format (see the module docstring)."""
    return _marker(read_text(src_path), _load(tgt_path), docids_path)


def read_blankline(src_path, tgt_path=None, docids_path=None) -> list[Document]:
    """Read documents separated by blank lines."""
    return _blankline(read_text(src_path), _load(tgt_path), docids_path)


def read_xml(src_path, tgt_path=None) -> list[Document]:
    """Read IWSLT XML / WMT SGML; two sides are paired by docid and seg id."""
    return _xml(read_text(src_path), _load(tgt_path))


def read_jsonl(path, src_key="src", tgt_key="tgt", id_key="id") -> list[Document]:
    """Read one JSON document per line."""
    return _jsonl(read_text(path), src_key, tgt_key, id_key)


def read_bcontrast_json(path) -> list[Document]:
    """Read BConTrasT chat JSON (see :func:`_bcontrast`)."""
    return _bcontrast(read_text(path))


def read_plain(src_path, tgt_path=None) -> list[Document]:
    """Read sentence-per-line files as one document with ``meta["sentence_level"] = True``."""
    return _plain(read_text(src_path), _load(tgt_path))


_BY_EXT = {".jsonl": "jsonl", ".xml": "xml", ".sgm": "xml", ".sgml": "xml", ".json": "bcontrast"}


def _sniff(f: Text) -> str:
    if fmt := _BY_EXT.get(os.path.splitext(f.name)[1].lower()):
        return fmt
    stripped = [line.strip() for line in f.lines]
    first = next((line for line in stripped if line), "")
    if first.startswith("{"):                            # content, for stdin and unusual names
        return "jsonl"
    if re.match(r"<(\?xml|doc\b|refset|srcset|tstset|mteval|dataset\b)", first, re.I):
        return "xml"
    if DOC_MARK in stripped:
        return "marker"
    full = [k for k, s in enumerate(stripped) if s]
    return "blankline" if full and "" in stripped[full[0]:full[-1]] else "plain"


def detect_format(f: Text) -> str:
    """The format ``read_documents(fmt="auto")`` reads ``f`` as: by its name's extension, else by
    its content (marker, blankline, plain, xml, jsonl, bcontrast)."""
    return _sniff(f)


def replace_segments(text: str, translations: list[str]) -> str:
    """``text`` (XML/SGML as :func:`read_xml` reads it) with the contents of its ``<seg>``
    elements, in reading order, replaced by ``translations``."""
    blank = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)   # same offsets, no comments
    spans = []
    tags = list(_DOC_TAG.finditer(blank))
    for k, tag in enumerate(tags):
        end = tags[k + 1].start() if k + 1 < len(tags) else len(blank)
        spans.extend(seg.span(2) for seg in _SEG.finditer(blank, tag.end(), end))
    if len(spans) != len(translations):
        raise DataError(f"{len(spans)} segments but {len(translations)} translations")
    out, pos = [], 0
    for (a, b), t in zip(spans, translations):
        out += [text[pos:a], html.escape(t, quote=False)]
        pos = b
    out.append(text[pos:])
    return re.sub(r"(</?)srcset\b", r"\1tstset", "".join(out))


def read_documents(src, tgt=None, fmt: str = "auto", docids=None, allow_empty: bool = False,
                   **kw) -> list[Document]:
    """Read ``src`` (``"-"``: standard input) and optionally ``tgt`` in format ``fmt``.

    ``auto`` picks by extension (``.jsonl``, ``.xml``/``.sgm``, ``.json`` for BConTrasT), then
    by content: a first line starting with ``{`` means JSONL, one starting with ``<?xml``,
    ``<doc``, ``<refset`` etc. XML/SGML, a ``<d>`` line marker, blank lines between sentences
    blankline, else plain.
    ``kw`` are the key names of :func:`read_jsonl`. ``allow_empty`` accepts empty sentences
    (marker lines, JSONL targets), as system outputs may contain them.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown input format {fmt!r}; expected one of {', '.join(FORMATS)}")
    a = read_text(src)
    fmt = _sniff(a) if fmt == "auto" else fmt
    if kw and fmt != "jsonl":
        raise ConfigError(f"options {sorted(kw)} apply to the jsonl format only, not {fmt}")
    if fmt in ("jsonl", "bcontrast"):
        if tgt is not None or docids is not None:
            raise ConfigError(f"format {fmt} holds both sides and ids in one file: "
                              "give no separate target or docids file")
        return _jsonl(a, **kw, allow_empty=allow_empty) if fmt == "jsonl" else _bcontrast(a)
    if docids is not None and fmt not in ("marker", "blankline"):
        raise ConfigError(f"a docids file applies to the marker and blankline formats, not {fmt}")
    b = _load(tgt)
    if fmt in ("xml", "sgml"):
        return _xml(a, b)
    if fmt == "plain":
        return _plain(a, b)
    if fmt == "marker":
        return _marker(a, b, docids, allow_empty)
    return _blankline(a, b, docids)


def read_inputs(paths: list[str], fmt: str = "auto") -> list[Document]:
    """The documents of several input files, in order. Where two files give the same document
    id (``x/a.en`` and ``y/a.en`` both number theirs ``a.en:0`` …), every id gets its file's path
    as a prefix (``x/a.en/a.en:0``; the file's place too, ``2:a.en/a.en:0``, where a path is
    given twice), so an output keeps one id per document."""
    parts = [read_documents(path, fmt=fmt) for path in paths]
    ids = [d.docid for docs in parts for d in docs]
    if len(set(ids)) < len(ids):
        repeated = len(set(paths)) < len(paths)
        for k, (path, docs) in enumerate(zip(paths, parts)):
            for d in docs:
                d.docid = f"{f'{k + 1}:' if repeated else ''}{path}/{d.docid}"
    return [d for docs in parts for d in docs]


def sentence_line(path, fmt: str, doc: int, sent: int) -> tuple[int | None, bool]:
    """For error messages: the 1-based line of sentence ``sent`` of document ``doc`` (both
    0-based, in the order :func:`read_documents` returns them) of a file it read without error,
    and whether that line is the sentence's own: in JSONL and XML/SGML it is the line where the
    document starts; BConTrasT JSON gives (None, False)."""
    f = read_text(path)
    fmt = _sniff(f) if fmt == "auto" else fmt
    if fmt == "marker":
        start, _ = _split_marker(f, allow_empty=True)[doc]
        return start + sent + (f.lines[start - 1].strip() == DOC_MARK), True
    if fmt == "blankline":
        return _split_blankline(f)[doc][0] + sent, True
    if fmt == "plain":
        return sent + 1, True
    if fmt == "jsonl":
        return [no for no, line in enumerate(f.lines, 1) if line.strip()][doc], False
    if fmt in ("xml", "sgml"):
        return list(_xml_docs(f).values())[doc].line, False
    return None, False


def locate_sentence(paths: list, fmt: str, doc: int, sent: int) -> tuple[str, int | None, bool]:
    """For error messages: the file (of ``paths``, read one after the other as
    :func:`read_inputs` does) and line of sentence ``sent`` of document ``doc`` (0-based), and
    whether the line is the sentence's own (see :func:`sentence_line`)."""
    if any(str(p) == STDIN for p in paths):          # read once, already
        return ",".join("<stdin>" if str(p) == STDIN else str(p) for p in paths), None, False
    for path in paths:
        n = len(read_documents(path, fmt=fmt)) if len(paths) > 1 else doc + 1
        if doc < n:
            return (str(path), *sentence_line(path, fmt, doc, sent))
        doc -= n
    raise IndexError(doc)


# ---------------------------------------------------------------- writers

@contextmanager
def _output(path_or_file) -> Iterator:
    if hasattr(path_or_file, "write"):
        yield path_or_file
    elif str(path_or_file) == STDIN:
        yield sys.stdout
    else:
        try:
            fh = open(path_or_file, "w", encoding="utf-8", newline="\n")
        except OSError as e:
            raise DataError(f"cannot write file: {e.strerror or e}", str(path_or_file)) from None
        try:
            with fh:
                yield fh
        except OSError as e:                # a full disk (or /dev/full) fails on writing or closing
            raise DataError(f"cannot write file: {e.strerror or e}", str(path_or_file)) from None


def _one_line(s: str, what: str, name: str, allow_empty: bool = False) -> str:
    if not isinstance(s, str) or (not s.strip() and not allow_empty) or "\n" in s or "\r" in s or s.strip() == DOC_MARK:
        raise DataError(f"{what} {s!r} cannot be written as one line", name)
    return s + "\n"


def write_marker(docs: Iterable[Document], path_or_file, side: str = "src",
                 docids_path=None, allow_empty: bool = False) -> None:
    """Write one side of ``docs`` in the ``<d>`` format, and their ids to ``docids_path``;
    ``allow_empty`` writes empty sentences as empty lines (translations that came back empty).
    A first document read without a ``<d>`` line (``meta["unmarked"]``: plain text, or lines
    before the first marker) is written without one, so a translation has its input's lines."""
    if side not in ("src", "tgt"):
        raise ValueError(f"side must be 'src' or 'tgt', not {side!r}")
    docs = list(docs)
    name = str(path_or_file if isinstance(path_or_file, (str, os.PathLike))
               else getattr(path_or_file, "name", "<output>"))
    out = []
    for k, doc in enumerate(docs):
        sents = getattr(doc, side)
        if sents is None:
            raise DataError(f"document {doc.docid!r} has no {side} side", name)
        if k or not doc.meta.get("unmarked"):
            out.append(DOC_MARK + "\n")
        out.extend(_one_line(s, f"document {doc.docid!r}: sentence", name, allow_empty) for s in sents)
    with _output(path_or_file) as fh:
        fh.write("".join(out))
    if docids_path is not None:
        ids = "".join(_one_line(d.docid, "document id", str(docids_path)) for d in docs)
        with _output(docids_path) as fh:
            fh.write(ids)


def write_jsonl(docs: Iterable[Document], path_or_file) -> None:
    """Write ``docs`` one JSON object a line, as :func:`read_jsonl` reads them."""
    with _output(path_or_file) as fh:
        for doc in docs:
            obj = {"id": doc.docid, "src": doc.src}
            if doc.tgt is not None:
                obj["tgt"] = doc.tgt
            if doc.meta:
                obj["meta"] = doc.meta
            fh.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")


def read_sentences(path: str, hypothesis: bool = False, source: bool = False) -> list[list[str]]:
    """Documents as sentence lists: marker files, JSONL written by `docnmt translate` (its target
    side when it has one), or XML/SGML references (a WMT 2021+ test set holding source and
    references: its first reference, or its source with ``source``). Files of other formats are
    read as marker files, where a blank line is an empty sentence (a system may output one), not
    a boundary."""
    fmt = "marker" if str(path) == STDIN else _sniff(read_text(path))    # standard input is read once
    if fmt in ("jsonl", "bcontrast", "xml"):
        docs = read_documents(path, fmt=fmt, allow_empty=hypothesis)
        return [d.tgt if d.tgt is not None and not source else d.src for d in docs]
    return [d.src for d in read_documents(path, fmt="marker", allow_empty=hypothesis)]
