"""Instance building: which sentences of a document form one training or decoding instance.

An instance is a row ``(start, end, tgt_start)`` of global sentence indices: the source covers
sentences ``[start, end)``, the target ``[tgt_start, end)``. Sent2Sent is ``(i, i+1, i)``,
Doc2Sent with context K is ``(i-K, i+1, i)``, Doc2Doc is ``(a, b, a)`` (docs/methods/baselines.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .corpus import Corpus


def sentence_costs(corpus: Corpus, extra: int = 2) -> np.ndarray:
    """c_k = max(|src_k|, |tgt_k|) + 2; source-only corpora use |src_k| + 2 (the split rule of
    docs/methods/baselines.md)."""
    lengths = corpus.src.lengths if corpus.tgt is None else np.maximum(corpus.src.lengths, corpus.tgt.lengths)
    return lengths + extra


def greedy_split(costs: np.ndarray, start: int, end: int, max_tokens: int,
                 max_sents: int = 1000) -> list[tuple[int, int]]:
    """G-Transformer's left-to-right split of sentences [start, end) (docs/methods/baselines.md): append sentence
    k iff C + c_k < max_tokens and n < max_sents, else start a new part; an over-long sentence
    stands alone."""
    parts, a, total = [], start, 0
    for k in range(start, end):
        if k > a and (total + costs[k] >= max_tokens or k - a >= max_sents):
            parts.append((a, k))
            a, total = k, 0
        total += costs[k]
    if end > a:
        parts.append((a, end))
    return parts


def sent_instances(corpus: Corpus) -> np.ndarray:
    i = np.arange(corpus.n_sents, dtype=np.int64)
    return np.stack([i, i + 1, i], axis=1)


def doc2sent_instances(corpus: Corpus, context: int) -> np.ndarray:
    i = np.arange(corpus.n_sents, dtype=np.int64)
    doc_start = np.repeat(corpus.doc_offsets[:-1], np.diff(corpus.doc_offsets))
    return np.stack([np.maximum(doc_start, i - context), i + 1, i], axis=1)


def pseudodoc_instances(corpus: Corpus, context: int) -> np.ndarray:
    """Sentence i with up to ``context`` previous sentences of its document on both sides
    (DocFlat's pseudo-documents, docs/methods/docflat.md#data-format; its DOC2DOC baseline), in corpus order."""
    rows = doc2sent_instances(corpus, context)
    rows[:, 2] = rows[:, 0]
    return rows


def doc2doc_instances(corpus: Corpus, max_tokens: int = 512, max_sents: int = 1000) -> np.ndarray:
    """Documents split by the 512-token rule of docs/methods/baselines.md; ``max_tokens <= 0``: whole
    documents, one instance each."""
    if max_tokens <= 0:
        return np.asarray([(*doc_bounds(corpus, d), doc_bounds(corpus, d)[0]) for d in range(corpus.n_docs)],
                          dtype=np.int64).reshape(-1, 3)
    costs = sentence_costs(corpus)
    rows = [(a, b, a) for d in range(corpus.n_docs)
            for a, b in greedy_split(costs, *doc_bounds(corpus, d), max_tokens, max_sents)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def mr_instances(corpus: Corpus, max_tokens: int = 512) -> np.ndarray:
    """Multi-resolution Doc2Doc (docs/methods/baselines.md#multi-resolution-mr and #mr-split): for
    k = 1, 2, 4, ... split every document into k parts of near-equal sentence counts (until parts
    are single sentences), re-split parts over ``max_tokens`` with the 512-token rule, and take the
    union of all parts."""
    costs, rows = sentence_costs(corpus), set()
    for d in range(corpus.n_docs):
        start, end = doc_bounds(corpus, d)
        n, k = end - start, 1
        while True:
            cuts = start + np.round(np.linspace(0, n, min(k, n) + 1)).astype(np.int64)
            for a, b in zip(cuts[:-1], cuts[1:]):
                rows.update((p, q, p) for p, q in greedy_split(costs, int(a), int(b), max_tokens))
            if k >= n:
                break
            k *= 2
    return np.asarray(sorted(rows), dtype=np.int64).reshape(-1, 3)


def doc_bounds(corpus: Corpus, d: int) -> tuple[int, int]:
    return int(corpus.doc_offsets[d]), int(corpus.doc_offsets[d + 1])


@dataclass
class ModeConfig:
    """How documents become instances (the ``data:`` mode settings of a config).

    mode: sent2sent | doc2sent | doc2doc | mr | pseudodoc. ``mix_sentences`` adds every sentence
    pair as its own instance ("doc + sent" / "ctx + sent" training mixtures, docs/methods/baselines.md#mix-sentences).
    ``pseudodoc`` is sentence i with its ``context`` previous sentences on both sides (DocFlat,
    docs/methods/docflat.md); translation forces the context's translation and generates sentence i.
    """

    mode: str = "sent2sent"
    context: int = 3                 # doc2sent / pseudodoc: previous sentences
    max_instance_tokens: int = 512   # doc2doc / mr: the split budget (doc2doc: <= 0 = whole documents)
    max_instance_sents: int = 1000
    separator: str = "index"         # index: <sepI> (PT) | uniform: <sep> | group: <s> x </s> (GT)
                                     # | global_index: <sepJ> x </s> (DF)
    mix_sentences: bool = False
    context_input: int = 0           # sent2sent: N previous source sentences as a separate context input
                                     # (docs/methods/context_transformer.md#context-input)
    context_self: bool = False       # ... and pairs of sentence-level corpora get their own source as context
                                     # (docs/methods/context_transformer.md#dt-step2-data)
    batch_order: str = "sorted"      # sorted: length buckets | ordered: runs of consecutive instances, whole
                                     # batches shuffled (DocFlat) | strict: ordered, never shuffled
    # training-document filters of the official codes (docs/methods/baselines.md#document-filters), off by
    # default; validation keeps every document
    min_train_doc_sents: int = 0     # drop training documents of fewer sentences (G-Transformer's --min-train-doclen)
    max_train_sent_tokens: int = 0   # drop training documents with a longer sentence, either side (length bias: 256)

    MODES = ("sent2sent", "doc2sent", "doc2doc", "mr", "pseudodoc")

    def __post_init__(self):
        if self.mode not in self.MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; choose one of {', '.join(self.MODES)}")
        if self.batch_order not in ("sorted", "ordered", "strict"):
            raise ConfigError(f"unknown batch_order {self.batch_order!r}; choose sorted, ordered or strict")

    @property
    def is_document_level(self) -> bool:
        return self.mode in ("doc2doc", "mr")


def build_instances(corpus: Corpus, mode: ModeConfig, training: bool = True, epoch: int = 1,
                    seed: int = 1) -> np.ndarray:
    """All instances of ``corpus`` in ``mode`` (training mixtures and document filters only when
    ``training``). ``epoch`` and ``seed`` are for builders whose instances change every epoch:
    a switch's ``training_rows`` hook (dynamic length sampling, :func:`docnmt.methods.training_rows`)
    replaces this function in training when it is on."""
    rows = _instances(corpus, mode, training, epoch, seed)
    return filter_training_documents(corpus, rows, mode) if training else rows


def filter_training_documents(corpus: Corpus, rows: np.ndarray, mode: ModeConfig) -> np.ndarray:
    """The rows whose document the training-document filters of ``mode`` keep."""
    if mode.min_train_doc_sents > 0 or mode.max_train_sent_tokens > 0:
        rows = rows[train_documents(corpus, mode)[corpus.doc_of(rows[:, 0])]]
    return rows


def train_documents(corpus: Corpus, mode: ModeConfig) -> np.ndarray:
    """Which documents the training-document filters of ``mode`` keep (bool per document)."""
    keep = np.diff(corpus.doc_offsets) >= mode.min_train_doc_sents
    if mode.max_train_sent_tokens > 0:
        longest = np.maximum.reduceat(sentence_costs(corpus, extra=0), corpus.doc_offsets[:-1])
        keep &= longest <= mode.max_train_sent_tokens
    return keep


def _instances(corpus: Corpus, mode: ModeConfig, training: bool, epoch: int, seed: int) -> np.ndarray:
    if mode.mode == "sent2sent":
        rows = sent_instances(corpus)
    elif mode.mode == "doc2sent":
        rows = doc2sent_instances(corpus, mode.context)
    elif mode.mode == "pseudodoc":
        rows = pseudodoc_instances(corpus, mode.context)
    elif mode.mode == "mr" and training:
        rows = mr_instances(corpus, mode.max_instance_tokens)
    else:  # doc2doc, and mr at validation / test time
        rows = doc2doc_instances(corpus, mode.max_instance_tokens, mode.max_instance_sents)
    return with_sentences(corpus, rows, mode) if training else rows


def with_sentences(corpus: Corpus, rows: np.ndarray, mode: ModeConfig) -> np.ndarray:
    """``rows`` plus every sentence pair as its own instance when ``mode.mix_sentences`` asks for
    it ("doc + sent" / "ctx + sent" training mixtures)."""
    if mode.mix_sentences and mode.mode != "sent2sent":
        rows = np.concatenate([rows, sent_instances(corpus)])
    return rows
