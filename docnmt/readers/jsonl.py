"""JSONL: one JSON object a line, ``{"id": ..., "src": [...], "tgt": [...], "meta": {...}}``."""
from __future__ import annotations

import json

from ..document import Document
from ..errors import DataError
from .text import DOC_MARK, Text, check_unique, read_text


def json_error(e: Exception, f: Text, no: int | None) -> DataError:
    """The error of JSON text that does not parse."""
    where = f" (column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
    return DataError(f"invalid JSON: {getattr(e, 'msg', e)}{where}", f.name, no)


def sentences(value, what: str, name: str, no: int | None, allow_empty: bool = False) -> list[str]:
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


def read(f: Text, b: Text | None = None, docids_path=None, allow_empty: bool = False, src_key: str = "src",
         tgt_key: str = "tgt", id_key: str = "id") -> list[Document]:
    """The documents of ``f`` (``b`` and ``docids_path`` do not apply: the format holds both sides
    and the ids); ``allow_empty`` accepts empty target sentences."""
    docs, lines = [], []
    for no, line in enumerate(f.lines, 1):
        if not line.strip():
            continue
        obj, src, tgt = _sides(f, no, line, src_key, tgt_key, allow_empty)
        if docs and (tgt is None) != (docs[0].tgt is None):
            raise DataError(f"{tgt_key} present in some documents only", f.name, no)
        docid, meta = _id_and_meta(f, no, obj, id_key, len(docs))
        docs.append(Document(docid, src, tgt, meta))
        lines.append(no)
    if not docs:
        raise DataError("empty input: no documents", f.name)
    check_unique(((d.docid, no) for d, no in zip(docs, lines)), f.name)
    return docs


def _sides(f: Text, no: int, line: str, src_key: str, tgt_key: str,
           allow_empty: bool) -> tuple[dict, list[str], list[str] | None]:
    """The object on line ``no`` and its source and target sentences."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise json_error(e, f, no) from None
    if not isinstance(obj, dict):
        raise DataError("expected a JSON object", f.name, no)
    src = sentences(obj.get(src_key), src_key, f.name, no)
    tgt = None if obj.get(tgt_key) is None else sentences(obj[tgt_key], tgt_key, f.name, no, allow_empty)
    if tgt is not None and len(tgt) != len(src):
        raise DataError(f"{len(src)} {src_key} sentences but {len(tgt)} {tgt_key}", f.name, no)
    return obj, src, tgt


def _id_and_meta(f: Text, no: int, obj: dict, id_key: str, k: int) -> tuple[str, dict]:
    """The id of the ``k``-th document (``file:k`` when it has none) and its metadata."""
    docid, meta = obj.get(id_key, f"{f.base}:{k}"), obj.get("meta", {})
    if isinstance(docid, bool) or not isinstance(docid, (str, int)) or not str(docid).strip():
        raise DataError(f"{id_key}: expected a non-empty string, got {docid!r}", f.name, no)
    if not isinstance(meta, dict):
        raise DataError("meta: expected a JSON object", f.name, no)
    return str(docid), meta


def line_of(f: Text, doc: int, sent: int) -> tuple[int, bool]:
    """The line of document ``doc`` (see ``sentence_line``)."""
    return [no for no, line in enumerate(f.lines, 1) if line.strip()][doc], False


def read_jsonl(path, src_key="src", tgt_key="tgt", id_key="id") -> list[Document]:
    """Read one JSON document per line."""
    return read(read_text(path), src_key=src_key, tgt_key=tgt_key, id_key=id_key)
