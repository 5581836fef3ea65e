"""Encoded corpora, instance building (SPEC §2) and token-based batching.

A corpus is stored once, sentence by sentence: a flat int32 token array per side, sentence
offsets into it, and document boundaries (``doc_offsets``) -- memory-mapped ``.npy`` files, so
instances of any mode are cheap *views* over the same store and can be rebuilt every epoch.

An instance is a row ``(start, end, tgt_start)`` of global sentence indices: the source covers
sentences ``[start, end)``, the target ``[tgt_start, end)``. Sent2Sent is ``(i, i+1, i)``,
Doc2Sent with context K is ``(i-K, i+1, i)``, Doc2Doc is ``(a, b, a)``. A :class:`Joiner` turns a
row into token ids with the separator convention of the mode (SPEC §2.4).
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .document import Document
from .errors import ConfigError, DataError
from .vocab import Vocab


# --------------------------------------------------------------------------------------------
# The encoded corpus
# --------------------------------------------------------------------------------------------

class Side:
    """One language side: all sentences' tokens concatenated, plus offsets."""

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray):
        self.tokens, self.offsets = tokens, offsets
        self.lengths = np.diff(offsets).astype(np.int64)

    @classmethod
    def from_lists(cls, sents: list[list[int]]) -> "Side":
        lengths = np.fromiter((len(s) for s in sents), dtype=np.int64, count=len(sents))
        offsets = np.zeros(len(sents) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = [t for s in sents for t in s]
        return cls(np.asarray(flat, dtype=np.int32), offsets)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]: self.offsets[i + 1]]


class Corpus:
    """An encoded document-level corpus (see module docstring). ``tgt`` may be ``None``."""

    def __init__(self, src: Side, tgt: Side | None, doc_offsets: np.ndarray, docids: list[str],
                 sentence_level: np.ndarray | None = None):
        self.src, self.tgt, self.doc_offsets, self.docids = src, tgt, doc_offsets, docids
        # documents that come from a sentence-level corpus (single sentences, no real context)
        self.sentence_level = (np.zeros(len(docids), dtype=bool) if sentence_level is None
                               else np.asarray(sentence_level, dtype=bool))

    @property
    def n_docs(self) -> int:
        return len(self.docids)

    @property
    def n_sents(self) -> int:
        return len(self.src.lengths)

    def doc_range(self, d: int) -> range:
        return range(int(self.doc_offsets[d]), int(self.doc_offsets[d + 1]))

    def doc_of(self, sents):
        """The document of each sentence index (an array, or one int for one index)."""
        return np.searchsorted(self.doc_offsets, sents, side="right") - 1

    @classmethod
    def encode(cls, docs: list[Document], vocab: Vocab, max_sentence_tokens: int = 1024,
               origin: str = "input") -> "Corpus":
        """Encode documents with ``vocab``; a sentence over ``max_sentence_tokens`` is an error."""
        sides = [[s for d in docs for s in d.src]]
        if docs and docs[0].tgt is not None:
            sides.append([s for d in docs for s in d.tgt])
        encoded = [vocab.encode_batch(texts, side) for side, texts in zip(("src", "tgt"), sides)]
        for ids in encoded:
            for k, sent in enumerate(ids):
                if len(sent) > max_sentence_tokens:
                    d, j = _locate(docs, k)
                    raise DataError(f"document {docs[d].docid!r}, sentence {j + 1}: {len(sent)} subword tokens, "
                                    f"more than the {max_sentence_tokens} a sentence may have", origin)
        doc_offsets = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum([len(d.src) for d in docs], out=doc_offsets[1:])
        tgt = Side.from_lists(encoded[1]) if len(encoded) > 1 else None
        return cls(Side.from_lists(encoded[0]), tgt, doc_offsets, [d.docid for d in docs],
                   np.asarray([bool(d.meta.get("sentence_level")) for d in docs], dtype=bool))

    # ---- persistence (memory-mapped) ---------------------------------------------------------
    def save(self, directory: str | Path, split: str) -> None:
        directory = Path(directory)
        for name, side in (("src", self.src), ("tgt", self.tgt)):
            if side is not None:
                np.save(directory / f"{split}.{name}.tokens.npy", side.tokens)
                np.save(directory / f"{split}.{name}.offsets.npy", side.offsets)
        np.save(directory / f"{split}.docs.npy", self.doc_offsets)
        (directory / f"{split}.docids.json").write_text(json.dumps(self.docids))
        if self.sentence_level.any():
            np.save(directory / f"{split}.sentence_level.npy", self.sentence_level)

    @classmethod
    def load(cls, directory: str | Path, split: str) -> "Corpus":
        directory = Path(directory)
        if not (directory / f"{split}.docs.npy").exists():
            raise DataError(f"no prepared '{split}' split here (run `docnmt prepare`)", directory)

        def side(name):
            if not (directory / f"{split}.{name}.tokens.npy").exists():
                return None
            return Side(np.load(directory / f"{split}.{name}.tokens.npy", mmap_mode="r"),
                        np.load(directory / f"{split}.{name}.offsets.npy"))
        docids = json.loads((directory / f"{split}.docids.json").read_text())
        flags = directory / f"{split}.sentence_level.npy"
        return cls(side("src"), side("tgt"), np.load(directory / f"{split}.docs.npy"), docids,
                   np.load(flags) if flags.exists() else None)


def _locate(docs: list[Document], k: int) -> tuple[int, int]:
    for d, doc in enumerate(docs):
        if k < len(doc.src):
            return d, k
        k -= len(doc.src)
    raise IndexError(k)


# --------------------------------------------------------------------------------------------
# Instance builders (SPEC §2.3, §2.4, §2.6)
# --------------------------------------------------------------------------------------------

def sentence_costs(corpus: Corpus, extra: int = 2) -> np.ndarray:
    """c_k = max(|src_k|, |tgt_k|) + 2 (SPEC §2.3); source-only corpora use |src_k| + 2."""
    lengths = corpus.src.lengths if corpus.tgt is None else np.maximum(corpus.src.lengths, corpus.tgt.lengths)
    return lengths + extra


def greedy_split(costs: np.ndarray, start: int, end: int, max_tokens: int, max_sents: int = 1000) -> list[tuple[int, int]]:
    """G-Transformer's left-to-right split of sentences [start, end) (SPEC §2.3): append sentence
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
    (DocFlat's pseudo-documents, SPEC §2.4; its DOC2DOC baseline), in corpus order."""
    rows = doc2sent_instances(corpus, context)
    rows[:, 2] = rows[:, 0]
    return rows


def doc2doc_instances(corpus: Corpus, max_tokens: int = 512, max_sents: int = 1000) -> np.ndarray:
    """Documents split by the §2.3 rule; ``max_tokens <= 0``: whole documents, one instance each."""
    if max_tokens <= 0:
        return np.asarray([(*_bounds(corpus, d), _bounds(corpus, d)[0]) for d in range(corpus.n_docs)],
                          dtype=np.int64).reshape(-1, 3)
    costs = sentence_costs(corpus)
    rows = [(a, b, a) for d in range(corpus.n_docs)
            for a, b in greedy_split(costs, *_bounds(corpus, d), max_tokens, max_sents)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def mr_instances(corpus: Corpus, max_tokens: int = 512) -> np.ndarray:
    """Multi-resolution Doc2Doc (SPEC §2.6, C23): for k = 1, 2, 4, ... split every document into
    k parts of near-equal sentence counts (until parts are single sentences), re-split parts over
    ``max_tokens`` with the §2.3 rule, and take the union of all parts."""
    costs, rows = sentence_costs(corpus), set()
    for d in range(corpus.n_docs):
        start, end = _bounds(corpus, d)
        n, k = end - start, 1
        while True:
            cuts = start + np.round(np.linspace(0, n, min(k, n) + 1)).astype(np.int64)
            for a, b in zip(cuts[:-1], cuts[1:]):
                rows.update((p, q, p) for p, q in greedy_split(costs, int(a), int(b), max_tokens))
            if k >= n:
                break
            k *= 2
    return np.asarray(sorted(rows), dtype=np.int64).reshape(-1, 3)


def _bounds(corpus: Corpus, d: int) -> tuple[int, int]:
    return int(corpus.doc_offsets[d]), int(corpus.doc_offsets[d + 1])


@dataclass
class ModeConfig:
    """How documents become instances (the ``data:`` mode settings of a config).

    mode: sent2sent | doc2sent | doc2doc | mr | pseudodoc. ``mix_sentences`` adds every sentence
    pair as its own instance ("doc + sent" / "ctx + sent" training mixtures, SPEC §4.3).
    ``pseudodoc`` is sentence i with its ``context`` previous sentences on both sides (DocFlat,
    SPEC §5); translation forces the context's translation and generates sentence i.
    """

    mode: str = "sent2sent"
    context: int = 3                 # doc2sent / pseudodoc: previous sentences
    max_instance_tokens: int = 512   # doc2doc / mr: the §2.3 budget (doc2doc: <= 0 = whole documents)
    max_instance_sents: int = 1000
    separator: str = "index"         # index: <sepI> (PT) | uniform: <sep> | group: <s> x </s> (GT) | global_index: <sepJ> x </s> (DF)
    mix_sentences: bool = False
    context_input: int = 0           # sent2sent: N previous source sentences as a separate context input (DT, §7.1)
    context_self: bool = False       # ... and pairs of sentence-level corpora get their own source as context (C24)
    dls: bool = False                # doc2doc: dynamic length sampling of training segments (SPEC §2.5)
    dls_start_epoch: int = 20        # k of T = exp(epoch − k)
    batch_order: str = "sorted"      # sorted: length buckets | ordered: runs of consecutive instances, whole batches shuffled (DocFlat, C19) | strict: ordered, never shuffled
    # training-document filters of the official codes (SPEC §2.3), off by default; validation keeps every document
    min_train_doc_sents: int = 0     # drop training documents of fewer sentences (G-Transformer's --min-train-doclen)
    max_train_sent_tokens: int = 0   # drop training documents with a longer sentence, either side (length bias: 256)

    MODES = ("sent2sent", "doc2sent", "doc2doc", "mr", "pseudodoc")
    SEPARATORS = ("index", "uniform", "group", "global_index")

    def __post_init__(self):
        if self.mode not in self.MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; choose one of {', '.join(self.MODES)}")
        if self.separator not in self.SEPARATORS:
            raise ConfigError(f"unknown separator {self.separator!r}; choose one of {', '.join(self.SEPARATORS)}")
        if self.batch_order not in ("sorted", "ordered", "strict"):
            raise ConfigError(f"unknown batch_order {self.batch_order!r}; choose sorted, ordered or strict")

    @property
    def dls_marks(self) -> int:
        """Tokens the format adds to each sentence, which dynamic length sampling counts."""
        return int(joiner_class(self.separator).overhead(1, "src"))

    @property
    def is_document_level(self) -> bool:
        return self.mode in ("doc2doc", "mr")


def dls_probabilities(temperature: float, max_length: int) -> np.ndarray:
    """p_T(l) ∝ exp(−l/T) for l = 0 … L−1 (SPEC §2.5); T = 0 puts all mass on l = 0."""
    if temperature <= 0:
        p = np.zeros(max_length)
        p[0] = 1.0
        return p
    logits = -np.arange(max_length) / temperature
    p = np.exp(logits - logits.max())
    return p / p.sum()


def dls_temperature(epoch: int, start_epoch: int) -> float:
    """Epoch 1: T = 0 (sentence level); epoch e ≥ 2: T = exp(e − k) (SPEC §2.5)."""
    return 0.0 if epoch <= 1 else float(np.exp(epoch - start_epoch))


def dls_segments(src_costs: np.ndarray, tgt_costs: np.ndarray, start: int, end: int, draw,
                 max_sents: int = 1000) -> list[tuple[int, int]]:
    """Left-to-right segmentation of sentences [start, end) with sampled length budgets (SPEC
    §2.5): draw l; add sentences while both sides stay under l; when the next one does not fit a
    non-empty segment, close it and draw again, so a sentence longer than l stands alone.
    Segments never overlap. ``draw()`` returns the next budget."""
    parts, a, src_len, tgt_len, limit = [], start, 0, 0, draw()
    for k in range(start, end):
        fits = src_len + src_costs[k] < limit and tgt_len + tgt_costs[k] < limit and k - a < max_sents
        if not fits and k > a:
            parts.append((a, k))
            a, src_len, tgt_len, limit = k, 0, 0, draw()
        src_len += src_costs[k]
        tgt_len += tgt_costs[k]
    if end > a:
        parts.append((a, end))
    return parts


def dls_instances(corpus: Corpus, epoch: int, seed: int, start_epoch: int, max_length: int,
                  max_sents: int = 1000, marks: int = 1) -> np.ndarray:
    """Dynamic length sampling: this epoch's segmentation of every training document, drawn
    with p_T(l) at T = dls_temperature(epoch) from an RNG seeded by (seed, epoch): the same on
    every process and after a resume. A sentence costs its tokens plus the ``marks`` tokens
    its format adds to it (``Joiner.overhead`` of one sentence: the separator or end token it
    carries; G-Transformer's ``<s> … </s>``)."""
    p = dls_probabilities(dls_temperature(epoch, start_epoch), max_length)
    rng = np.random.default_rng([seed, epoch])
    src = corpus.src.lengths + marks
    tgt = src if corpus.tgt is None else corpus.tgt.lengths + marks
    draws = iter(rng.choice(max_length, size=corpus.n_sents + corpus.n_docs, p=p).tolist())
    draw = draws.__next__      # one budget per segment: at most one per sentence plus one per document
    rows = [(a, b, a) for d in range(corpus.n_docs) for a, b in dls_segments(src, tgt, *_bounds(corpus, d), draw, max_sents)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def build_instances(corpus: Corpus, mode: ModeConfig, training: bool = True, epoch: int = 1,
                    seed: int = 1) -> np.ndarray:
    """All instances of ``corpus`` in ``mode`` (training mixtures and document filters only when
    ``training``); with dynamic length sampling the training instances depend on (seed, epoch)."""
    rows = _instances(corpus, mode, training, epoch, seed)
    if training and (mode.min_train_doc_sents > 0 or mode.max_train_sent_tokens > 0):
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
    if training and mode.dls and mode.mode == "doc2doc":
        if mode.max_instance_tokens <= 0:
            raise ConfigError("data.dls samples segment lengths below data.max_instance_tokens: set it "
                              f"above 0 for training (it is {mode.max_instance_tokens}, whole documents)")
        rows = dls_instances(corpus, epoch, seed, mode.dls_start_epoch, mode.max_instance_tokens,
                             mode.max_instance_sents, marks=mode.dls_marks)
        if mode.mix_sentences:
            rows = np.concatenate([rows, sent_instances(corpus)])
        return rows
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
    if training and mode.mix_sentences and mode.mode != "sent2sent":
        rows = np.concatenate([rows, sent_instances(corpus)])
    return rows


# --------------------------------------------------------------------------------------------
# Joining sentences into token sequences, and splitting outputs back (SPEC §2.4, §8.1)
# --------------------------------------------------------------------------------------------

class Joiner:
    """Separator convention: ``x1 <sep1> x2 <sep2> … xN`` (index) or ``<sep>`` (uniform).

    The source gets ``</s>`` appended; the decoder input is ``<s> + target`` and the labels are
    ``target + </s>`` (so ``<sos>``/``<eos>`` are the model's BOS/EOS, SPEC C5). ``start`` and
    ``end`` are the tokens a decoder starts from and stops at. :class:`GroupJoiner` is
    G-Transformer's format; :func:`make_joiner` picks the one a config names.
    """

    def __init__(self, vocab: Vocab, separator: str = "index"):
        self.vocab, self.indexed = vocab, separator == "index"
        self.sep_ids = set(vocab.symbol_ids[s] for s in vocab.extra if s.startswith("<sep"))
        self.start, self.end = vocab.bos, vocab.eos
        self.context_sents, self.context_self = 0, False

    @staticmethod
    def overhead(n_sents: np.ndarray, side: str) -> np.ndarray:
        """Tokens added to ``n_sents`` sentences on the source or in the decoder input."""
        return n_sents    # N−1 separators plus </s> (source) or <s> (decoder input)

    def output_specials(self, sentence_targets: bool) -> set[int]:
        """Special tokens a generated target may contain (besides ``end``)."""
        return set() if sentence_targets else set(self.sep_ids)

    def sep(self, i: int) -> int:
        return self.vocab.sep(i if self.indexed else None)

    def start_for(self, first: int) -> int:
        """The decoder's start token for an instance whose first target sentence is sentence
        ``first`` (1-based) of its document; the same for every instance but in DocFlat's format."""
        return self.start

    def join(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        parts = []
        for i, s in enumerate(sents):
            if i:
                parts.append(np.asarray([self.sep(i)], dtype=np.int32))
            parts.append(np.asarray(s, dtype=np.int32))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def source(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        return np.concatenate([self.join(sents), np.asarray([self.vocab.eos], dtype=np.int32)])

    def prefix(self, sents: list[list[int]], first: int = 1) -> list[int]:
        """Target tokens that force ``sents`` as the first sentences of an output, ready for the
        next sentence (sliding decoding, two-pass decoding)."""
        if not sents:
            return []
        return [int(t) for t in self.join([np.asarray(s, dtype=np.int32) for s in sents])] + [self.sep(len(sents))]

    def decoder_io(self, sents: list[np.ndarray], first: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Teacher-forced decoder input and labels of a target instance."""
        body = self.join(sents)
        return np.concatenate([[self.start], body]), np.concatenate([body, [self.end]])

    def split(self, ids: list[int], n: int) -> tuple[list[list[int]], bool]:
        """Split a generated target into ``n`` sentences with the recovery rules of SPEC §8.1:
        text after ``<sepI>`` goes to sentence I+1, duplicates are concatenated, missing
        sentences are empty, indices beyond ``n`` go to sentence ``n``. Returns the sentences and
        whether the structure was exactly as expected."""
        out: list[list[int]] = [[] for _ in range(n)]
        cur, seen, ok = 0, [0], True
        for t in ids:
            if t in self.sep_ids:
                nxt = self._sep_index(t, seen[-1]) if self.indexed else seen[-1] + 1
                ok &= nxt == seen[-1] + 1
                cur = min(nxt, n - 1)
                seen.append(nxt)
            elif t not in (self.vocab.eos, self.vocab.bos, self.vocab.pad):
                out[cur].append(t)
        ok &= seen[-1] == n - 1 and all(out)
        return out, ok

    def _sep_index(self, t: int, prev: int) -> int:
        piece = self.vocab.piece(t)
        return int(piece[4:-1]) if piece != "<sep>" else prev + 1


class GroupJoiner(Joiner):
    """G-Transformer's format (SPEC §2.4): every sentence wrapped as ``<s> x </s>`` on both
    sides, no other separator; the decoder starts from the end-of-document token EOD and the
    labels end with it: input ``EOD <s> y1 </s> … </s>``, labels ``<s> y1 </s> … </s> EOD``."""

    def __init__(self, vocab: Vocab, separator: str = "group"):
        super().__init__(vocab, separator)
        self.sep_ids = set()
        self.start = self.end = vocab.id("<eod>")

    @staticmethod
    def overhead(n_sents: np.ndarray, side: str) -> np.ndarray:
        return 2 * n_sents + (side == "tgt")    # <s> … </s> per sentence, and EOD

    def output_specials(self, sentence_targets: bool) -> set[int]:
        return {self.vocab.bos, self.vocab.eos}

    def join(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        bos, eos = [self.vocab.bos], [self.vocab.eos]
        return np.concatenate([np.concatenate([bos, s, eos]) for s in sents]).astype(np.int32)

    def source(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        return self.join(sents)

    def prefix(self, sents: list[list[int]], first: int = 1) -> list[int]:
        return [int(t) for t in self.join([np.asarray(s, dtype=np.int32) for s in sents])] if sents else []

    def split(self, ids: list[int], n: int) -> tuple[list[list[int]], bool]:
        """Sentences end at ``</s>``; ``<s>``, EOD and pads are dropped (SPEC §8.1). Missing
        sentences come back empty, extra ones are appended to the last."""
        return _split_at_eos(ids, n, self.vocab.eos, {self.vocab.bos, self.vocab.pad, self.end})


def _split_at_eos(ids: list[int], n: int, eos: int, dropped: set[int]) -> tuple[list[list[int]], bool]:
    pieces: list[list[int]] = [[]]
    for t in ids:
        if t == eos:
            pieces.append([])
        elif t not in dropped:
            pieces[-1].append(t)
    if not pieces[-1]:
        pieces.pop()
    ok = len(pieces) == n and all(pieces)
    out = pieces[:n] + [[] for _ in range(n - len(pieces))]
    for extra in pieces[n:]:
        out[-1] = out[-1] + extra
    return out, ok


class GlobalIndexJoiner(Joiner):
    """DocFlat's format (SPEC §2.4, C13, C14): sentence j of a document is ``<sepj> w… </s>`` on
    both sides, j its 1-based index in the whole document, so instances whose positions all
    restart at 0 still carry their order across a flattened batch. The decoder starts from the
    first sentence's index token: input ``<sepa> ya </s> … <sepi> yi``, labels
    ``ya </s> … yi </s>``. The index tokens are docnmt's reserved ``<sepI>`` symbols (indices
    past the largest, 512, are clipped to it), so DocFlat needs no vocabulary of its own and
    fine-tunes from any docnmt sentence model."""

    def __init__(self, vocab: Vocab, separator: str = "global_index"):
        super().__init__(vocab, "index")

    @staticmethod
    def overhead(n_sents: np.ndarray, side: str) -> np.ndarray:
        return 2 * n_sents - (side == "tgt")      # <sepj> … </s> per sentence; decoder input lacks the last </s>

    def output_specials(self, sentence_targets: bool) -> set[int]:
        return set()        # generation writes the current sentence only; its context is forced

    def start_for(self, first: int) -> int:
        return self.sep(first)

    def join(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        eos = np.asarray([self.vocab.eos], dtype=np.int32)
        parts = [p for j, s in enumerate(sents) for p in (np.asarray([self.sep(first + j)], dtype=np.int32),
                                                          np.asarray(s, dtype=np.int32), eos)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def source(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        return self.join(sents, first)

    def decoder_io(self, sents: list[np.ndarray], first: int = 1) -> tuple[np.ndarray, np.ndarray]:
        body = self.join(sents, first)
        return body[:-1], body[1:]

    def prefix(self, sents: list[list[int]], first: int = 1) -> list[int]:
        """The tokens after the start token that force ``sents``, ending with the next index token."""
        if not sents:
            return []
        body = self.join([np.asarray(s, dtype=np.int32) for s in sents], first)
        return [int(t) for t in body[1:]] + [self.sep(first + len(sents))]

    def split(self, ids: list[int], n: int) -> tuple[list[list[int]], bool]:
        return _split_at_eos(ids, n, self.vocab.eos, {self.vocab.bos, self.vocab.pad, *self.sep_ids})


def joiner_class(separator: str) -> type[Joiner]:
    return {"group": GroupJoiner, "global_index": GlobalIndexJoiner}.get(separator, Joiner)


def make_joiner(vocab: Vocab, separator: str, context_input: int = 0, context_self: bool = False) -> Joiner:
    """The format a config names; ``context_input`` > 0 adds a context input of that many
    previous source sentences to every batch (``ctx``); with ``context_self`` a pair from a
    sentence-level corpus gets its own source sentence as context (SPEC C24)."""
    joiner = joiner_class(separator)(vocab, separator)
    joiner.context_sents, joiner.context_self = context_input, context_self
    return joiner


# --------------------------------------------------------------------------------------------
# Materialising instances, batching, collation
# --------------------------------------------------------------------------------------------

class InstanceSet:
    """Instances of one corpus in one mode, with their token lengths, ready for batching."""

    def __init__(self, corpus: Corpus, rows: np.ndarray, joiner: Joiner):
        self.corpus, self.rows, self.joiner = corpus, rows, joiner
        start, end, tstart = rows[:, 0], rows[:, 1], rows[:, 2]
        doc = corpus.doc_of(start)
        doc_start = corpus.doc_offsets[doc]
        self.first, self.tfirst = start - doc_start + 1, tstart - doc_start + 1   # 1-based in the document
        csum = np.concatenate([[0], np.cumsum(corpus.src.lengths)])
        self.src_lens = csum[end] - csum[start] + joiner.overhead(end - start, "src")
        self.ctx_lens = None                   # lengths of the context input (see context())
        if joiner.context_sents > 0:
            self.ctx_lens = csum[start] - csum[np.maximum(doc_start, start - joiner.context_sents)] + 1
            if joiner.context_self:
                own = np.asarray(corpus.sentence_level, dtype=bool)[doc]
                self.ctx_lens = np.where(own, csum[start + 1] - csum[start] + 1, self.ctx_lens)
        if corpus.tgt is not None:
            tsum = np.concatenate([[0], np.cumsum(corpus.tgt.lengths)])
            self.tgt_lens = tsum[end] - tsum[tstart] + joiner.overhead(end - tstart, "tgt")
        else:
            self.tgt_lens = np.zeros_like(self.src_lens)

    def __len__(self) -> int:
        return len(self.rows)

    def source(self, k: int) -> np.ndarray:
        a, b, _ = self.rows[k]
        return self.joiner.source([self.corpus.src[i] for i in range(a, b)], int(self.first[k]))

    def target(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Decoder input and labels of instance ``k``."""
        _, b, t = self.rows[k]
        return self.joiner.decoder_io([self.corpus.tgt[i] for i in range(t, b)], int(self.tfirst[k]))

    def context(self, k: int) -> np.ndarray:
        """The context input of instance ``k`` (SPEC §7.1): the N source sentences before its
        first one in the same document, concatenated, then ``</s>`` (just ``</s>`` at a
        document's start)."""
        a = int(self.rows[k, 0])
        doc = int(self.corpus.doc_of(a))
        doc_start = int(self.corpus.doc_offsets[doc])
        if self.joiner.context_self and self.corpus.sentence_level[doc]:
            sents = [self.corpus.src[a]]                    # a sentence pair mixed into step 2 (C24)
        else:
            sents = [self.corpus.src[i] for i in range(max(doc_start, a - self.joiner.context_sents), a)]
        return np.concatenate([*sents, [self.joiner.vocab.eos]]).astype(np.int32)

    def batches(self, max_tokens: int, *, with_target: bool = True, **kw) -> list[np.ndarray]:
        """:func:`token_batches` of these instances. The context input counts like the source
        and target, so a context model's batch stays within ``max_tokens`` on every input (its
        contexts are often several times longer than its sentences); ``with_target=False``
        ignores target lengths (decoding)."""
        tgt = self.tgt_lens if with_target else np.zeros_like(self.src_lens)
        return token_batches(self.src_lens, tgt, max_tokens, ctx_lens=self.ctx_lens, **kw)

    def collate(self, indices: list[int] | np.ndarray) -> dict:
        vocab = self.joiner.vocab
        batch = {"ids": torch.as_tensor(np.asarray(indices, dtype=np.int64)),
                 "src": pad_batch([self.source(k) for k in indices], vocab.pad)}
        if self.joiner.context_sents > 0:
            batch["ctx"] = pad_batch([self.context(k) for k in indices], vocab.pad)
        if self.corpus.tgt is not None:
            tgt_in, labels = zip(*(self.target(k) for k in indices))
            batch["tgt_in"] = pad_batch(tgt_in, vocab.pad)
            batch["labels"] = pad_batch(labels, vocab.pad)
            batch["ntokens"] = int(sum(len(t) for t in labels))
        return batch


def word_dropout(batch: dict, p: float, vocab: Vocab, seed: tuple[int, ...]) -> dict:
    """Replace each ordinary word of the source and the decoder input (not the labels) by
    ``<mask>`` with probability ``p`` (SPEC §2.7): specials (pad, unk, ``<s>``, ``</s>``) and
    docnmt's symbols (EOD, separators) are never dropped. The draws depend only on ``seed``
    (seed, epoch, batch), so a resumed run drops the same words."""
    rng = np.random.default_rng(list(seed))
    out = dict(batch)
    for key in ("src", "tgt_in"):
        if key in batch:
            x = batch[key]
            eligible = (x >= 4) & (x < vocab.n_pieces)
            drop = torch.from_numpy(rng.random(tuple(x.shape)) < p) & eligible
            out[key] = x.masked_fill(drop, vocab.id("<mask>"))
    return out


MODEL_INPUTS = ("ctx",)   # batch tensors besides src/tgt_in/labels that a model may take


def model_inputs(batch: dict) -> dict:
    """The extra model inputs a collated batch carries (passed to ``model.encode``)."""
    return {k: batch[k] for k in MODEL_INPUTS if k in batch}


def pad_batch(seqs: list[np.ndarray], pad: int) -> torch.Tensor:
    out = np.full((len(seqs), max(len(s) for s in seqs)), pad, dtype=np.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return torch.from_numpy(out)


def token_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int = 0,
                  epoch: int = 0, shuffle: bool = True, max_sentences: int | None = None,
                  order: str = "sorted", ctx_lens: np.ndarray | None = None) -> list[np.ndarray]:
    """Length-bucketed batches whose padded size ``n · max(max_src, max_tgt)`` stays within
    ``max_tokens`` (fairseq's rule; with ``ctx_lens``, a context input's length counts too);
    instances longer than the budget form their own batch.
    ``order="ordered"``: runs of consecutive instances instead of length buckets (a batch is a
    stretch of a document, DocFlat's global context, SPEC §5.4), of which only the order of
    whole batches is shuffled; ``"strict"``: never shuffled.
    Deterministic for (seed, epoch): the order is what an interrupted run resumes into."""
    rng = np.random.default_rng([seed, epoch])
    size = np.maximum(src_lens, tgt_lens)
    if ctx_lens is not None:
        size = np.maximum(size, ctx_lens)
    if order == "sorted":
        tie = rng.random(len(size)) if shuffle else np.arange(len(size))
        order = np.lexsort((tie, src_lens, size))
    else:
        shuffle = shuffle and order != "strict"
        order = np.arange(len(size))
    batches, cur, cur_max = [], [], 0
    oversize = 0
    for k in order:
        m = max(cur_max, int(size[k]))
        if cur and (m * (len(cur) + 1) > max_tokens or (max_sentences and len(cur) >= max_sentences)):
            batches.append(np.asarray(cur))
            cur, m = [], int(size[k])
        oversize += int(size[k]) > max_tokens
        cur.append(k)
        cur_max = m
    if cur:
        batches.append(np.asarray(cur))
    if oversize:
        warnings.warn(f"{oversize} instances are longer than --max-tokens {max_tokens}; each forms its own batch")
    if shuffle:
        rng.shuffle(batches)
    return batches
