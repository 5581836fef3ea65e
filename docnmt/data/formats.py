"""Joining sentences into token sequences, and splitting outputs back into sentences.

A :class:`Joiner` turns an instance row into token ids with the separator convention of its
format and splits a generated target back into sentences (docs/methods/baselines.md, "Instance
formats" and "Recovering sentences"). This module holds the separator formats of the baselines
(``index``: ``<sepI>``; ``uniform``: one ``<sep>``); methods bring their own formats
(G-Transformer's ``group``, DocFlat's ``global_index``) and :mod:`docnmt.methods` maps format
names to joiners.
"""
from __future__ import annotations

import numpy as np
import torch

from ..vocab import Vocab


class Joiner:
    """Separator convention: ``x1 <sep1> x2 <sep2> … xN`` (index) or ``<sep>`` (uniform).

    The source gets ``</s>`` appended; the decoder input is ``<s> + target`` and the labels are
    ``target + </s>`` (so ``<sos>``/``<eos>`` are the model's BOS/EOS, docs/methods/ptransformer.md#pt-format).
    ``start`` and
    ``end`` are the tokens a decoder starts from and stops at. :class:`GroupJoiner` is
    G-Transformer's format; :func:`make_joiner` picks the one a config names.
    """

    def __init__(self, vocab: Vocab, separator: str = "index"):
        self.vocab, self.indexed = vocab, separator == "index"
        self.sep_ids = set(vocab.sep_ids)
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

    def sentence_ids(self, tokens: torch.Tensor) -> torch.Tensor:
        """For a batch of source or decoder-input token ids (B, n), the 0-based index of the
        instance sentence each token belongs to: a separator opens the next sentence (so in the
        decoder input the separator's position, which predicts the next sentence, is there too).
        The decoder's start ``<s>`` and the source's final ``</s>`` belong to the whole instance,
        to no sentence (-1): attention parked on them is nobody's context."""
        return self.separators_before(tokens).masked_fill(tokens.eq(self.vocab.bos) | tokens.eq(self.vocab.eos), -1)

    def separators_before(self, tokens: torch.Tensor) -> torch.Tensor:
        """How many separators each token of (B, n) comes at or after."""
        seps = torch.tensor(sorted(self.sep_ids), dtype=tokens.dtype, device=tokens.device)
        return torch.isin(tokens, seps).long().cumsum(-1)

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
        """Split a generated target into ``n`` sentences with the recovery rules of
        docs/methods/baselines.md#recovering-sentences-from-document-outputs:
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


def split_at_eos(ids: list[int], n: int, eos: int, dropped: set[int]) -> tuple[list[list[int]], bool]:
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
