"""Context-aware word dropout, CoWord dropout (Fernandes et al., 2021; docs/methods/coword_dropout.md),
a switch any document method can use: during training each ordinary word of the *current*
sentence of an instance's source is replaced by ``<mask>`` with probability
``train.coword_dropout``; the context stays untouched, so the model is pushed to take from the
context what the current sentence no longer says.

The current sentence is the last sentence of the source instance (as the instance's own format
numbers its sentences: :meth:`docnmt.data.Joiner.sentence_ids`): the sentence a Doc2Sent, DocFlat
or pseudo-document instance translates; in a multi-sentence instance (Doc2Doc, MR, G- and
P-Transformer), whose every sentence is translated, the last one, which has the most context
before it. A sentence-level source with a separate context input (the context encoder's ``ctx``)
is all current. It composes with plain word dropout (its own random draws, after it).
"""
from __future__ import annotations

import numpy as np
import torch

from .. import ranges
from .base import Extension, Setting, require_context


def current_sentence(tokens: torch.Tensor, joiner) -> torch.Tensor:
    """True at the tokens of each row's last source sentence (B, n)."""
    ids = joiner.sentence_ids(tokens)
    return ids.eq(ids.max(dim=1, keepdim=True).values) & ids.ge(0)


def coword_dropout(batch: dict, p: float, vocab, joiner, seed: tuple[int, ...]) -> dict:
    """``batch`` with each ordinary word of the current source sentence masked with probability
    ``p``; the draws depend only on ``seed``, so a resumed run masks the same words."""
    src = batch["src"]
    rng = np.random.default_rng([*seed, 0xC0])        # a stream of its own, not word dropout's
    drop = torch.from_numpy(rng.random(tuple(src.shape)) < p) & vocab.word_mask(src) & current_sentence(src, joiner)
    return {**batch, "src": src.masked_fill(drop, vocab.id("<mask>"))}


def _drop(batch: dict, cfg, vocab, epoch: int, seed: tuple) -> dict:
    if cfg.train.coword_dropout <= 0:
        return batch
    from . import data_joiner  # the registry knows every format
    return coword_dropout(batch, cfg.train.coword_dropout, vocab, data_joiner(vocab, cfg.data), seed)


def _check(cfg) -> None:
    require_context(cfg.train.coword_dropout > 0, cfg.data, "train.coword_dropout (--coword-dropout)",
                    "a sentence-level model has no context, so it would be plain source word dropout")


EXTENSION = Extension(name="coword_dropout", train_batch=_drop, check=_check, settings=(
    Setting("train.coword_dropout", 0.0, "P(word of the current source sentence -> <mask>); its context untouched "
            "(CoWord dropout)", "--coword-dropout", limit=ranges.PROBABILITY),
))
