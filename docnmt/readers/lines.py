"""The line-based formats: ``marker`` (a ``<d>`` line starts a document), ``blankline`` (blank lines
between documents) and ``plain`` (one document per file); each sentence one line, stripped."""
from __future__ import annotations

from functools import partial
from typing import Callable

from ..document import Document
from ..errors import DataError
from .text import DOC_MARK, Split, Text, check_unique, load, read_text


def split_marker(f: Text, mark: str | None = DOC_MARK, allow_empty: bool = False) -> Split:
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


def split_blankline(f: Text) -> Split:
    """Documents of a file whose documents are separated by blank lines."""
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


def check_lines(a: Text, da: Split, b: Text, db: Split, mark: str | None = DOC_MARK) -> None:
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


def check_structure(a: Text, da: Split, b: Text, db: Split) -> None:
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


def docids(path, n: int, base: str) -> list[str]:
    """The ids of ``n`` documents: one a line of the file ``path``, else ``base:0``, ``base:1`` …"""
    if path is None:
        return [f"{base}:{k}" for k in range(n)]
    f = read_text(path)
    ids = [line.strip() for line in f.lines]
    if "" in ids:
        raise DataError("empty document id", f.name, ids.index("") + 1)
    if len(ids) != n:
        raise DataError(f"{len(ids)} document ids for {n} documents", f.name,
                        n + 1 if len(ids) > n else None)
    check_unique(zip(ids, range(1, n + 1)), f.name)
    return ids


def read_lined(split: Callable[[Text], Split], check: Callable[..., None], a: Text,
               b: Text | None, docids_path=None) -> list[Document]:
    """Documents of ``a`` (and target side ``b``) cut by ``split``, the two sides matched by ``check``."""
    da = split(a)
    if not da:
        raise DataError("empty input: no sentences", a.name)
    db = None
    if b is not None:
        db = split(b)
        check(a, da, b, db)
    ids = docids(docids_path, len(da), a.base)
    tgts = [None] * len(da) if db is None else [sents for _, sents in db]
    return [Document(i, s, t) for i, (_, s), t in zip(ids, da, tgts)]


def marker(a: Text, b: Text | None, docids_path=None, allow_empty: bool = False) -> list[Document]:
    """The marker format (see the package docstring)."""
    split = (lambda f: split_marker(f, allow_empty=True)) if allow_empty else split_marker
    docs = read_lined(split, check_lines, a, b, docids_path)
    if a.lines[0].strip() != DOC_MARK:
        docs[0].meta["unmarked"] = True   # write_marker adds no <d> line
    return docs


def blankline(a: Text, b: Text | None, docids_path=None, allow_empty: bool = False) -> list[Document]:
    """Documents separated by blank lines (``allow_empty`` does not apply: a blank line is a boundary)."""
    return read_lined(split_blankline, check_structure, a, b, docids_path)


def plain(a: Text, b: Text | None, docids_path=None, allow_empty: bool = False) -> list[Document]:
    """One sentence a line, the whole file one document with ``meta["sentence_level"]``."""
    (doc,) = read_lined(partial(split_marker, mark=None), partial(check_lines, mark=None), a, b)
    doc.docid, doc.meta["sentence_level"], doc.meta["unmarked"] = a.base, True, True
    return [doc]


def marker_line(f: Text, doc: int, sent: int) -> tuple[int, bool]:
    """The line of sentence ``sent`` of document ``doc`` of a marker file (see ``sentence_line``)."""
    start, _ = split_marker(f, allow_empty=True)[doc]
    return start + sent + (f.lines[start - 1].strip() == DOC_MARK), True


def blankline_line(f: Text, doc: int, sent: int) -> tuple[int, bool]:
    return split_blankline(f)[doc][0] + sent, True


def plain_line(f: Text, doc: int, sent: int) -> tuple[int, bool]:
    return sent + 1, True


def read_marker(src_path, tgt_path=None, docids_path=None) -> list[Document]:
    """Read the ``<d>`` marker format (see the package docstring)."""
    return marker(read_text(src_path), load(tgt_path), docids_path)


def read_blankline(src_path, tgt_path=None, docids_path=None) -> list[Document]:
    """Read documents separated by blank lines."""
    return blankline(read_text(src_path), load(tgt_path), docids_path)


def read_plain(src_path, tgt_path=None) -> list[Document]:
    """Read sentence-per-line files as one document with ``meta["sentence_level"] = True``."""
    return plain(read_text(src_path), load(tgt_path))
