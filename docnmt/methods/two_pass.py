"""Two-pass decoding of pseudo-documents (docs/methods/docflat.md#decoding-two-passes-batch-by-batch),
the switch of every model trained on ``data.mode: pseudodoc`` (DocFlat's and its Doc2Doc
baseline's): pass 1 translates every sentence alone, pass 2 every pseudo-document with its
context's first-pass translation forced as the target prefix. ``decode.first_pass`` names what
translates pass 1: the model itself (default), a sentence model's directory or a file."""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..data import build_instances, sent_instances
from ..document import Document
from ..errors import DataError
from ..readers import DOC_MARK, read_text
from .base import Extension, Setting, Walk

log = logging.getLogger("docnmt.docflat")



class TwoPass(Walk):
    """Two-pass decoding of pseudo-documents: pass 1 translates every sentence alone (no
    context in the pseudo-document, the batch still as the flat-batch context), by this model,
    by the sentence model whose directory ``decode.first_pass`` names, or read from the file it
    names; pass 2 decodes every pseudo-document with its context's first-pass translation forced
    as the target prefix, generating only the current sentence. Both passes decode batches of
    consecutive sentences, also for a model trained on shuffled batches (``shuffled_data``).
    Its coverage-report entry ``first_pass`` says what translated pass 1. Not ``documents_apart``:
    the batches of consecutive sentences cross documents, and a first-pass file holds the whole input."""

    documents_apart = False

    def summary(self) -> str:
        used = self.report.get("first_pass")
        if used is None:
            return ""
        by, path = used["by"], used["path"]
        return "pass 1: " + ("this model itself" if by == "model" else f"{by.replace('_', ' ')} {path}")

    def rounds(self, translator, corpus, search):
        rows = build_instances(corpus, translator.cfg.data, training=False)
        if search.first_pass:
            return [(rows, rows[:, 1] - 1)]
        if not getattr(translator, "warned_first_pass", False):    # once per translator (a service: per model)
            log.warning("two-pass decoding: pass 1 is translated by this document model itself (one-sentence "
                        "pseudo-documents); the paper uses a sentence model: --first-pass SENTENCE_MODEL_DIR "
                        "(docs/methods/docflat.md#decoding-two-passes-batch-by-batch)")
            translator.warned_first_pass = True
        return [(sent_instances(corpus), np.arange(corpus.n_sents)), (rows, rows[:, 1] - 1)]

    def run(self, translator, docs, corpus, rounds, search, decode) -> None:
        cfg = translator.cfg
        if cfg.data.batch_order == "sorted":        # trained on shuffled batches: decode consecutive ones
            translator.cfg = cfg.override({"data.batch_order": "ordered"})
        try:
            first = self.first_pass(translator, docs, corpus, search, decode)
            rows, new_from = rounds[-1]
            decode(rows, new_from, forced_from=first)
        finally:
            translator.cfg = cfg

    def first_pass(self, translator, docs, corpus, search, decode) -> list[list[list[int]]]:
        """Pass 1: one list of token ids per sentence (other output is re-encoded with this
        vocabulary; a file holds one translation per input sentence, in order, ``<d>`` lines
        skipped: what ``docnmt translate`` writes). Sets the report's ``first_pass``."""
        path = search.first_pass
        by = "model" if not path else "sentence_model" if Path(path).is_dir() else "file"
        self.report["first_pass"] = {"by": by, "path": str(path) if path else None}
        if not path:
            outputs: list[list[list[int]]] = [[] for _ in range(corpus.n_sents)]
            rows = sent_instances(corpus)
            decode(rows, rows[:, 2].copy(), outputs=outputs)
            return outputs
        if Path(path).is_dir():
            other = type(translator).load(path, device=str(translator.device))
            own = other.cfg.decode               # the user's search settings, the sentence model's batching
            out, _ = other.translate([Document(d.docid, d.src) for d in docs],
                                     replace(search, max_sentences=own.max_sentences, max_tokens=own.max_tokens))
            texts = [t for d in out for t in d.tgt]
        else:
            texts = [t for t in read_text(path).lines if t.strip() != DOC_MARK]
            if len(texts) != corpus.n_sents:
                raise DataError(f"the first-pass translations have {len(texts)} lines, the input "
                                f"{corpus.n_sents} sentences", path)
        return [[ids] for ids in translator.vocab.encode_batch(texts, "tgt")]


def uses_two_pass(cfg, search) -> bool:
    """Pseudo-documents are decoded in two passes (whatever the model)."""
    return cfg.data.mode == "pseudodoc"


def _two_pass_walk(cfg, search) -> Walk | None:
    return TwoPass() if uses_two_pass(cfg, search) else None


EXTENSION = Extension(name="two_pass", walk=_two_pass_walk, settings=(
    Setting("decode.first_pass", "", "DocFlat: pass 1 of two-pass decoding, a sentence model's directory or a file "
            "of its translations (one line per input sentence; default: the model itself)", "--first-pass",
            service=False),
))
