"""Reading documents in any format of the table (:mod:`.formats`): :func:`read_documents`, several
files at once (:func:`read_inputs`), sentence lists for scoring (:func:`read_sentences`), and the
file and line of a sentence for error messages (:func:`locate_sentence`)."""
from __future__ import annotations

from ..document import Document
from ..errors import ConfigError
from .detect import detect_format
from .formats import FORMATS, TABLE
from .text import STDIN, load, read_text


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
    fmt = detect_format(a) if fmt == "auto" else fmt
    spec = TABLE[fmt]
    if kw and not spec.keys:
        with_keys = " and ".join(name for name, f in TABLE.items() if f.keys)
        raise ConfigError(f"options {sorted(kw)} apply to the {with_keys} format only, not {fmt}")
    if spec.one_file and (tgt is not None or docids is not None):
        files = ", ".join("<stdin>" if str(f) == STDIN else str(f) for f in (src, tgt, docids) if f is not None)
        raise ConfigError(f"{files}: format {fmt} holds both sides and ids in one file: "
                          "give no separate target or docids file")
    if docids is not None and not spec.docids_file:
        with_ids = " and ".join(name for name, f in TABLE.items() if f.docids_file)
        raise ConfigError(f"a docids file applies to the {with_ids} formats, not {fmt}")
    return spec.read(a, load(tgt), docids_path=docids, allow_empty=allow_empty, **kw)


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


def read_sentences(path: str, hypothesis: bool = False, source: bool = False) -> list[list[str]]:
    """Documents as sentence lists: marker files, JSONL written by `docnmt translate` (its target
    side when it has one), or XML/SGML references (a WMT 2021+ test set holding source and
    references: its first reference, or its source with ``source``). Files of other formats are
    read as marker files, where a blank line is an empty sentence (a system may output one), not
    a boundary."""
    fmt = "marker" if str(path) == STDIN else detect_format(read_text(path))    # standard input is read once
    if not TABLE[fmt].as_marker:
        docs = read_documents(path, fmt=fmt, allow_empty=hypothesis)
        return [d.tgt if d.tgt is not None and not source else d.src for d in docs]
    return [d.src for d in read_documents(path, fmt="marker", allow_empty=hypothesis)]


def sentence_line(path, fmt: str, doc: int, sent: int) -> tuple[int | None, bool]:
    """For error messages: the 1-based line of sentence ``sent`` of document ``doc`` (both
    0-based, in the order :func:`read_documents` returns them) of a file it read without error,
    and whether that line is the sentence's own: in JSONL and XML/SGML it is the line where the
    document starts; BConTrasT JSON gives (None, False)."""
    f = read_text(path)
    spec = TABLE.get(detect_format(f) if fmt == "auto" else fmt)
    return (None, False) if spec is None or spec.line_of is None else spec.line_of(f, doc, sent)


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
