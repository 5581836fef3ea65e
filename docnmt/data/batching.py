"""Materialising instances, token-based batching and collation."""
from __future__ import annotations

import warnings

import numpy as np
import torch

from .corpus import Corpus
from .formats import Joiner


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
        """The context input of instance ``k`` (docs/methods/context_transformer.md#context-input):
        the N source sentences before its first one in the same document, concatenated, then
        ``</s>`` (just ``</s>`` at a document's start)."""
        a = int(self.rows[k, 0])
        doc = int(self.corpus.doc_of(a))
        doc_start = int(self.corpus.doc_offsets[doc])
        if self.joiner.context_self and self.corpus.sentence_level[doc]:
            sents = [self.corpus.src[a]]                    # a sentence pair mixed into step 2 (``--context-self``)
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
    stretch of a document, DocFlat's global context, docs/methods/docflat.md#batching-and-ordering),
    of which only the order of whole batches is shuffled; ``"strict"``: never shuffled.
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
