"""Earlier translations as context: a document continued after sentences already translated.

``docnmt translate --context-src F --context-tgt F``, the service's ``context: {src, tgt}`` and
``Translator.translate(..., context=...)`` (or a document's ``meta["context"]``) put earlier
source sentences before a document and, with their translations (possibly edited by hand), force
those as the target of the context: the translator decodes the whole document (context and new
sentences) in its usual instances and walk, every context sentence's translation forced as the
target prefix of whatever instance holds it (instances of context sentences only are not decoded),
and returns the new sentences only. The result equals a full decode of the whole document with
that target prefix forced.

Models that read no target context (a sentence model, Doc2Sent, the context encoder) use the
context's source sentences where they read source context (Doc2Sent, the context encoder) and
ignore the translations, with a warning. Without ``tgt`` the context's translation is decoded as
usual (not forced) and dropped.
"""
from __future__ import annotations

import logging

import numpy as np

from .document import Document
from .errors import DataError

log = logging.getLogger("docnmt.translate")

TARGET_MODES = ("doc2doc", "mr", "pseudodoc")      # data.mode: the decoder reads earlier target sentences


def check_context(context, where: str = "context") -> dict | None:
    """``{"src": [...], "tgt": [...] or None}`` from a context as given (a dict or None); a
    DataError for lists of different lengths, a target without a source or a sentence that is not
    a one-line string."""
    if not context:
        return None
    src, tgt = context.get("src") or [], context.get("tgt")
    if tgt is not None and len(tgt) != len(src):
        raise DataError(f"{where}: {len(src)} source sentences but {len(tgt)} translations")
    for side, sents in (("src", src), ("tgt", tgt or [])):
        for k, s in enumerate(sents):
            if not isinstance(s, str) or "\n" in s or "\r" in s:
                raise DataError(f"{where}.{side}[{k}]: give one sentence a string, without line breaks")
            if side == "src" and not s.strip():
                raise DataError(f"{where}.src[{k}]: empty sentence")
    return {"src": [" ".join(s.split()) for s in src], "tgt": None if tgt is None else [" ".join(s.split())
                                                                                         for s in tgt]}


class ForcedContext:
    """The contexts of a translate call: per document, how many context sentences precede it and
    their translations' word pieces (None: not forced)."""

    def __init__(self, contexts: list[dict | None]):
        self.contexts = contexts
        self.sizes = [len(c["src"]) if c else 0 for c in contexts]
        self.forced: dict[int, list[int]] = {}     # sentence of the corpus -> forced translation
        self.context: set[int] = set()             # every context sentence of the corpus (forced or not)
        self.first_new = np.zeros(0, dtype=np.int64)
        self.skipped = 0

    @classmethod
    def of(cls, docs: list[Document], context=None) -> tuple[list[Document], ForcedContext | None]:
        """The documents with their contexts put in front (``context``: the first document's; else
        each document's ``meta["context"]``) and the plan, or the documents as they are and None."""
        contexts = [check_context(context if (k == 0 and context) else d.meta.get("context"),
                                  "context" if k == 0 and context else f"document {d.docid}: context")
                    for k, d in enumerate(docs)]
        if not any(contexts):
            return docs, None
        full = [Document(d.docid, [*c["src"], *d.src] if c else d.src, None,
                         {k: v for k, v in d.meta.items() if k != "context"}) for d, c in zip(docs, contexts)]
        return full, cls(contexts)

    def start(self, translator, corpus, outputs: list) -> None:
        """Put the forced translations in ``outputs`` and note where each document's new
        sentences start (warning once when the model reads no target context)."""
        starts = corpus.doc_offsets[:-1]
        self.context = {int(s) + k for s, n in zip(starts, self.sizes) for k in range(n)}
        self.first_new = np.array([s + (n if c and c["tgt"] is not None else 0)
                                   for s, n, c in zip(starts, self.sizes, self.contexts)], dtype=np.int64)
        targets = [(int(s), c["tgt"]) for s, c in zip(starts, self.contexts) if c and c["tgt"] is not None]
        if targets and translator.cfg.data.mode not in TARGET_MODES:
            log.warning("this model (data.mode %s) reads no target context: the context's translations are "
                        "ignored%s", translator.cfg.data.mode,
                        "" if translator.cfg.data.mode == "sent2sent" and not translator.cfg.data.context_input
                        else "; its source sentences are the new sentences' source context")
        for s, tgt in targets:
            for k, ids in enumerate(translator.vocab.encode_batch(tgt, "tgt")):
                self.forced[s + k] = ids
                outputs[s + k] = [ids]

    def wrap(self, decode, corpus):
        """``decode(rows, new_from, forced_from=None, **kw)`` of the walk, with every context
        sentence forced: ``new_from`` raised past the document's context (instances of context
        sentences only are skipped) and ``forced_from`` holding the forced translations."""
        def forced_decode(rows, new_from, forced_from=None, **kw):
            first = self.first_new[corpus.doc_of(rows[:, 2])]
            new_from = np.minimum(np.maximum(new_from, first), rows[:, 1])
            keep = new_from < rows[:, 1]
            self.skipped += int((~keep).sum())
            if forced_from is not None:
                forced_from = [[self.forced[i]] if i in self.forced else out for i, out in enumerate(forced_from)]
            if keep.any():
                decode(rows[keep], new_from[keep], forced_from, **kw)
        return forced_decode

    def strip(self, docs: list[Document], report) -> list[Document]:
        """The documents without their context sentences (and the report counting only the new
        sentences); ``meta["context"]`` says what the context was."""
        for doc, n, c in zip(docs, self.sizes, self.contexts):
            if not n:
                continue
            report.sentences -= n
            doc.src, doc.tgt = doc.src[n:], doc.tgt[n:]
            for key in ("nbest", "nbest_scores"):
                if key in doc.meta:
                    doc.meta[key] = doc.meta[key][n:]
            if "repaired" in doc.meta:
                doc.meta["repaired"] = [k - n for k in doc.meta["repaired"] if k >= n]
            doc.meta["context"] = c
        report.instances -= self.skipped
        return docs
