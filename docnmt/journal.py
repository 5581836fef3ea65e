"""Translation that survives being stopped: ``docnmt translate -i ... -o FILE`` translates its
documents in chunks of whole documents (about ``CHUNK_SENTENCES`` source sentences each) and
appends every finished chunk to a journal beside the output, ``FILE.partial.jsonl``: one JSON
line with the chunk's translations, their metadata (n-best lists, scores, repaired sentences) and
its coverage report. The output is written once, at the end (to a temporary file, then renamed),
and the journal removed. A run stopped on the way (killed, a crash, a full disk) leaves the
journal; the same command again translates only the chunks it does not hold, and writes the
output and report the uninterrupted run would have written (with ``--force`` too: the same
command always goes on; deleting the journal starts again).

``docnmt score -o FILE`` keeps the same kind of journal: each finished chunk's reference scores
(and with ``--cxmi`` its scores alone), so a stopped scoring goes on where it stopped and writes
what the uninterrupted one writes. A chunk's documents are batched apart from the others', so a
score written to a file may differ in its last digits from the same score written to stdout
(scored whole); the same command always writes the same file.

The journal's first line holds a fingerprint of what decides the translations (the model's files,
the input files, the decoding settings, the output format, the chunk size): a journal of another
translation is refused, not mixed in (``--force`` deletes it and starts again). A last line cut
short by the stop is ignored (that chunk is translated again). Chunks are independent only where
the method translates each document on its own: a walk whose documents depend on each other
(two-pass decoding, whose pass 2 reads a batch of consecutive sentences across documents) is
translated whole, without a journal, as is an input of one chunk."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from .document import Document
from .errors import DataError, DocnmtError
from .translate import CoverageReport

CHUNK_SENTENCES = 1000       # source sentences per journal entry, at least (a chunk holds whole documents)
SUFFIX = ".partial.jsonl"
VERSION = 1


def journal_path(output: str | Path) -> Path:
    return Path(str(output) + SUFFIX)


def chunks(docs: list[Document], size: int | None = None) -> list[range]:
    """Consecutive ranges of document indices, each closed by the document that brings it to ``size``
    (default ``CHUNK_SENTENCES``) source sentences or more (the last may hold fewer)."""
    size = size or CHUNK_SENTENCES
    out, start, n = [], 0, 0
    for k, doc in enumerate(docs):
        n += len(doc.src)
        if n >= size:
            out.append(range(start, k + 1))
            start, n = k + 1, 0
    if start < len(docs):
        out.append(range(start, len(docs)))
    return out


def file_digest(path: str | Path, *, content: bool = True) -> str:
    """A file's identity for the fingerprint: its SHA-256 (``content``), else its size and
    modification time (a model's weights: reading gigabytes to start a translation is too slow)."""
    p = Path(path)
    if not content:
        st = p.stat()
        return f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    h = hashlib.sha256()
    with p.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fingerprint(parts: dict) -> str:
    """One digest of ``parts`` (anything JSON can write; other values by ``str``)."""
    text = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def report_state(report: CoverageReport) -> dict:
    """A chunk's coverage report as the journal keeps it (sentence numbers within the chunk)."""
    return {"documents": report.documents, "sentences": report.sentences, "instances": report.instances,
            "malformed_instances": report.malformed_instances, "empty_sentences": report.empty_sentences,
            "documents_with_problems": list(report.documents_with_problems), "walk": report.walk,
            "walk_summary": report.walk_summary, "lost": sorted(report.lost), "repaired": sorted(report.repaired),
            "fallback": report.fallback}


def report_from(state: dict) -> CoverageReport:
    return CoverageReport(**{**state, "lost": set(state["lost"]), "repaired": set(state["repaired"])})


class Journal:
    """The journal of one translation (or, ``kind="scoring"``, one ``docnmt score``) into
    ``output``: ``done`` maps a chunk's first document to its entry as journalled (a translation's:
    ``docs`` and ``report``; a scoring's: ``scores`` and ``words``); :meth:`add` appends a
    translated chunk, :meth:`append` any chunk, :meth:`remove` ends it."""

    def __init__(self, output: str | Path, fp: str, documents: int, kind: str = "translation"):
        self.path, self.fp, self.documents, self.kind = journal_path(output), fp, documents, kind
        self.done: dict[int, dict] = {}
        self.added = 0           # documents this run has journalled
        self.fh = None

    @classmethod
    def open(cls, output: str | Path, fp: str, documents: int, force: bool,
             kind: str = "translation") -> "Journal":
        """The journal for a run into ``output``: an interrupted run's is taken up when it holds this
        translation (the same fingerprint; with ``force`` too, so that the same command always goes
        on), and refused when it holds another or is damaged, unless ``force`` (then deleted)."""
        out = cls(output, fp, documents, kind)
        if not out.path.exists():
            return out
        try:
            header, entries = read_journal(out.path)
        except DocnmtError:
            if not force:
                raise
            header, entries = {}, []
        if header.get("fingerprint") == fp and header.get("version") == VERSION \
                and header.get("kind", "translation") == kind:
            out.done = {e["first"]: e for e in entries}
            return out
        if not force:
            what = ("another model, input, decoding settings or output format" if kind == "translation" else
                    "another model, source, reference, --format, --cxmi or --precision")
            raise DocnmtError(f"{out.path}: the journal of another {header.get('kind', 'translation')} into {output} "
                              f"({what}); give that command again to go on, or add --force to start again")
        out.path.unlink()
        return out

    @property
    def documents_done(self) -> int:
        """Documents the journal holds: from the stopped run and from this one."""
        return sum(len(e["docs"] if "docs" in e else e["scores"]) for e in self.done.values()) + self.added

    def add(self, first: int, docs: list[Document], report: CoverageReport) -> None:
        """Append one translated chunk (documents from ``first``), flushed and synced to disk."""
        self.append(first, len(docs), {"docs": [{"tgt": d.tgt, "meta": d.meta} for d in docs],
                                       "report": report_state(report)})

    def append(self, first: int, documents: int, entry: dict) -> None:
        """Append one finished chunk of ``documents`` documents from ``first``, flushed and synced."""
        if self.fh is None:
            new = not self.path.exists()
            try:
                self.fh = self.path.open("a", encoding="utf-8", newline="\n")
                if new:
                    self._write({"docnmt_journal": VERSION, "version": VERSION, "fingerprint": self.fp,
                                 "documents": self.documents, "kind": self.kind})
            except OSError as e:
                raise DataError(f"cannot write the journal: {e.strerror or e}", str(self.path)) from None
        self._write({"first": first, **entry})
        self.added += documents

    def _write(self, obj: dict) -> None:
        try:
            self.fh.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
            self.fh.flush()
            os.fsync(self.fh.fileno())
        except OSError as e:
            raise DataError(f"cannot write the journal: {e.strerror or e}", str(self.path)) from None

    @contextmanager
    def said(self, documents: int, done: str, quiet: bool):
        """A run on this journal, said on stderr: where its chunks go (or how many of the ``documents``
        were ``done`` before the stop), and on Ctrl-C how many it keeps."""
        if not quiet:
            print(f"going on from {self.path}: {self.documents_done} of {documents} documents {done} before the stop"
                  if self.done else f"finished chunks of documents go to {self.path}: if this run is stopped, the "
                  "same command goes on from them", file=sys.stderr)
        try:
            yield
        except KeyboardInterrupt:
            print(f"docnmt: {self.documents_done} of {documents} documents kept in {self.path}: the same command "
                  "goes on from them" if self.documents_done else "docnmt: stopped before the first chunk of "
                  "documents was finished: nothing kept, the same command starts again", file=sys.stderr)
            raise

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def read_journal(path: Path) -> tuple[dict, list[dict]]:
    """A journal's header and its complete entries (a last line cut short is left out)."""
    header, entries = {}, []
    with path.open(encoding="utf-8") as fh:
        for k, line in enumerate(fh):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                if line.endswith("\n"):          # a damaged line inside: not a journal to trust
                    raise DocnmtError(f"{path}: line {k + 1} is not JSON; remove the journal or add --force "
                                      "to start again") from None
                break                            # the last line, cut short by the stop
            if k == 0:
                header = obj
            else:
                entries.append(obj)
    if not header.get("docnmt_journal"):
        raise DocnmtError(f"{path}: not a docnmt journal; remove it or add --force to start again")
    return header, entries


def translate_journalled(translator, search, docs: list[Document], journal: Journal | None, *,
                         context: dict | None = None, progress: bool = False, origin: str = "input",
                         scores: bool = False, size: int | None = None):
    """Translate ``docs`` chunk by chunk (:func:`chunks`), each finished chunk added to ``journal``
    and the chunks it already holds taken from it; ``context`` goes with the first document,
    ``scores`` adds each document's reference scores (``--print-scores``) before it is journalled.
    Returns the translated documents and the whole input's coverage report."""
    from .progress_log import progress_bar
    from .translate_io import add_scores
    parts = chunks(docs, size)
    held = journal.done if journal is not None else {}
    total, out, offset = CoverageReport(), [], 0
    todo = sum(len(docs[k].src) for part in parts if part.start not in held for k in part)
    bar = progress_bar(total=todo, desc="translate", unit="sent", disable=not progress or len(parts) == 1, leave=False)
    for part in parts:
        sub = [docs[k] for k in part]
        if part.start in held:
            kept, state = held[part.start]["docs"], held[part.start]["report"]
            if len(kept) != len(sub):
                raise DocnmtError(f"{journal.path}: its chunk at document {part.start + 1} holds {len(kept)} "
                                  f"documents, the input {len(sub)}; add --force to start again")
            done = [Document(d.docid, d.src, k["tgt"], k["meta"]) for d, k in zip(sub, kept)]
            rep = report_from(state)
        else:
            done, rep = translator.translate(sub, search, progress=progress and len(parts) == 1, origin=origin,
                                             context=context if part.start == 0 else None)
            if scores:
                add_scores(translator, done)
            if journal is not None:
                journal.add(part.start, done, rep)
            bar.update(sum(len(d.src) for d in sub))
        total.add(rep, offset)
        offset += max(rep.sentences, max(rep.lost | rep.repaired, default=-1) + 1)
        out.extend(done)
    bar.close()
    return out, total


def score_journalled(translator, docs: list[Document], journal: Journal, *, cxmi: bool = False,
                     progress: bool = False, origin: str = "reference", size: int | None = None):
    """``docnmt score``'s ``(scores, words)`` (:func:`~docnmt.translate_io.reference_scores`)
    chunk by chunk (:func:`chunks`), each finished chunk added to ``journal`` and the chunks it
    already holds taken from it; ``words`` (with ``cxmi``) totalled over the whole input."""
    from .progress_log import progress_bar
    from .scoring import usage_totals
    from .translate_io import reference_scores
    parts = chunks(docs, size)
    todo = sum(len(docs[k].src) for part in parts if part.start not in journal.done for k in part)
    bar = progress_bar(total=todo, desc="score", unit="sent", disable=not progress, leave=False)
    scores, per_doc = [], []
    for part in parts:
        entry = journal.done.get(part.start)
        if entry is None:
            got, words = reference_scores(translator, [docs[k] for k in part], cxmi=cxmi, origin=origin)
            entry = {"scores": got, "words": words["documents"] if words else None}
            journal.append(part.start, len(part), entry)
            bar.update(sum(len(docs[k].src) for k in part))
        elif len(entry["scores"]) != len(part) or [len(d) for d in entry["scores"]] != \
                [len(docs[k].src) for k in part] or (entry["words"] is None) == cxmi:
            raise DocnmtError(f"{journal.path}: its chunk at document {part.start + 1} does not hold this input's "
                              "sentences; add --force to start again")
        scores += [[tuple(s) for s in doc] for doc in entry["scores"]]
        per_doc += [[tuple(s) for s in doc] for doc in entry["words"] or []]
    bar.close()
    return scores, usage_totals(per_doc) if cxmi else None
