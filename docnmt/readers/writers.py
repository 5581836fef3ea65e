"""Writers: :func:`write_marker` and :func:`write_jsonl`, the inverses of the matching readers, to a
path, an open file, or ``"-"`` (standard output)."""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from typing import Iterable, Iterator

from ..document import Document
from ..errors import DataError
from .text import DOC_MARK, STDIN


@contextmanager
def _output(path_or_file) -> Iterator:
    """An open text file for ``path_or_file``; a failed open or write is a :class:`DataError`."""
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
