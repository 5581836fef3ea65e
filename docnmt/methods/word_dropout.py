"""Word dropout (docs/methods/baselines.md#word-dropout), a switch any model can use: during
training each ordinary word of the source and of the decoder input is replaced by ``<mask>``
with probability ``train.word_dropout`` (:func:`docnmt.data.word_dropout`), in every epoch or,
with ``train.word_dropout_epochs`` = N, in epochs 1..N only (G-Transformer's first step)."""
from __future__ import annotations

from .. import ranges
from ..data import word_dropout
from .base import Extension, Setting


def _drop_words(batch: dict, cfg, vocab, epoch: int, seed: tuple) -> dict:
    tc = cfg.train
    if tc.word_dropout > 0 and (tc.word_dropout_epochs <= 0 or epoch <= tc.word_dropout_epochs):
        return word_dropout(batch, tc.word_dropout, vocab, seed)
    return batch


EXTENSION = Extension(name="word_dropout", train_batch=_drop_words, settings=(
    Setting("train.word_dropout", 0.0, "P(word -> <mask>) on source and decoder input", "--word-dropout",
            limit=ranges.PROBABILITY),
    Setting("train.word_dropout_epochs", 0, "word dropout in epochs 1..N only (0 = all)", "--word-dropout-epochs",
            limit=ranges.AT_LEAST_0),
))
