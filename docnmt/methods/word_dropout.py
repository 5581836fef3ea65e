"""Word dropout (docs/methods/baselines.md#word-dropout), a switch any model can use: during
training each ordinary word of the source and of the decoder input is replaced by ``<mask>``
with probability ``train.word_dropout`` (:func:`word_dropout`), in every epoch or,
with ``train.word_dropout_epochs`` = N, in epochs 1..N only (G-Transformer's first step)."""
from __future__ import annotations

import numpy as np
import torch

from .. import ranges
from ..vocab import Vocab
from .base import Extension, Setting


def word_dropout(batch: dict, p: float, vocab: Vocab, seed: tuple[int, ...]) -> dict:
    """Replace each ordinary word of the source and the decoder input (not the labels) by
    ``<mask>`` with probability ``p`` (docs/methods/baselines.md#word-dropout): specials (pad,
    unk, ``<s>``, ``</s>``) and docnmt's symbols (EOD, separators) are never dropped. The draws
    depend only on ``seed`` (seed, epoch, batch), so a resumed run drops the same words."""
    rng = np.random.default_rng(list(seed))
    out = dict(batch)
    for key in ("src", "tgt_in"):
        if key in batch:
            x = batch[key]
            drop = torch.from_numpy(rng.random(tuple(x.shape)) < p) & vocab.word_mask(x)
            out[key] = x.masked_fill(drop, vocab.id("<mask>"))
    return out


def _drop_words(batch: dict, cfg, vocab, epoch: int, seed: tuple) -> dict:
    tc = cfg.train
    if tc.word_dropout > 0 and (tc.word_dropout_epochs <= 0 or epoch <= tc.word_dropout_epochs):
        return word_dropout(batch, tc.word_dropout, vocab, seed)
    return batch


EXTENSION = Extension(name="word_dropout", train_batch=_drop_words, settings=(
    Setting("train.word_dropout", 0.0, "P(word -> <mask>) on source and decoder input", "--word-dropout",
            limit=ranges.PROBABILITY),
    Setting("train.word_dropout_epochs", 0, "word dropout in epochs 1..N only (0 = all)", "--word-dropout-epochs",
            limit=ranges.AT_LEAST_0, needs="train.word_dropout"),
))
