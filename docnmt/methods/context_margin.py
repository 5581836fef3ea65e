"""The context margin loss (Jean and Cho, 2019; docs/methods/context_margin.md), a switch any
document method can use: with probability ``train.context_margin_prob`` an instance of a training
batch is scored twice more, its current (last) target sentence given its own context and given
the context of an instance of another document, and the loss gains the hinge
``max(0, M − (log p(y | own context) − log p(y | wrong context)))`` (M = ``train.context_margin``,
log-probabilities in nats summed over the current sentence's label positions), summed over those
instances and divided, like the token losses, by the update's target tokens.

The wrong context, by layout (:func:`swapped`): a concatenated context (Doc2Sent, Doc2Doc, MR,
G- and P-Transformer, DocFlat) is replaced by the donor's context sentences, on the target too
where the instance translates its context, through the instance's own format (separators,
G-Transformer's groups, DocFlat's sentence numbers: the current sentence keeps its own); a separate
context input (the context encoder's ``ctx``) is replaced by the donor's. Instances without
context are never drawn; donors are instances with context from another document, drawn from the
epoch's training instances (seeded by the batch's seed).
"""
from __future__ import annotations

import numpy as np
import torch

from .. import ranges
from ..data import pad_batch
from ..errors import ConfigError
from ..model import rows_apart
from .base import Extension, Setting, require_context

TRIES = 8        # donor draws per instance before it is left out of the margin


def with_context(instances, ks: np.ndarray) -> np.ndarray:
    """Whether instances ``ks`` have a context: a concatenated one (sentences before the last), or
    a non-empty context input."""
    if instances.joiner.context_sents > 0:
        return instances.ctx_lens[ks] > 1
    return instances.rows[ks, 1] - 1 > instances.rows[ks, 0]


def draw_donors(instances, ks: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """For each instance of ``ks`` a donor: an instance with context from another document of the
    same kind, read from the data or made by a training extension (a split pair's halves get
    another split pair's first half, not a long document's context, which would make the wrong
    rows many times longer than the batch); the first of ``TRIES`` uniform draws among that kind's
    instances that is one; and whether one was found. (Of one kind, the draws are those of all
    instances.)"""
    doc = instances.corpus.doc_of(instances.rows[:, 0])
    kind = instances.corpus.generated[doc]
    cand = np.empty((len(ks), TRIES), dtype=np.int64)
    for value in np.unique(kind[ks]):
        pool, mine = np.flatnonzero(kind == value), kind[ks] == value
        draws = rng.integers(0, len(pool), (int(mine.sum()), TRIES))
        cand[mine] = draws if len(pool) == len(kind) else pool[draws]
    ok = with_context(instances, cand.ravel()).reshape(cand.shape) & (doc[cand] != doc[ks][:, None])
    return cand[np.arange(len(ks)), ok.argmax(1)], ok.any(1)


def swapped(instances, k: int, donor: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Source, decoder input, labels and context input of instance ``k`` with ``donor``'s context."""
    if instances.joiner.context_sents > 0:
        return (instances.source(k), *instances.target(k), instances.context(donor))
    corpus, joiner = instances.corpus, instances.joiner
    a, b, t = (int(x) for x in instances.rows[k])
    da, db, _ = (int(x) for x in instances.rows[donor])
    ctx = range(da, db - 1)
    current = int(instances.first[k]) + (b - 1 - a)        # the current sentence's number in its document
    first = current - len(ctx)
    src = joiner.source([*(corpus.src[i] for i in ctx), corpus.src[b - 1]], first)
    if t < b - 1:                                          # the instance translates its context too
        tgt_in, labels = joiner.decoder_io([*(corpus.tgt[i] for i in ctx), corpus.tgt[b - 1]], first)
    else:
        tgt_in, labels = joiner.decoder_io([corpus.tgt[b - 1]], current)
    return src, tgt_in, labels, None


def current_labels(instances, k: int) -> int:
    """How many of instance ``k``'s last label positions are its current sentence's: its words
    and what closes it (the same count whatever the context, in every format)."""
    a, b, t = (int(x) for x in instances.rows[k])
    full = instances.target(k)[1]
    if t == b - 1:
        return len(full)
    sents = [instances.corpus.tgt[i] for i in range(t, b - 1)]
    return len(full) - len(instances.joiner.decoder_io(sents, int(instances.tfirst[k]))[1])


def collated(parts: list[tuple], pad: int, device) -> dict:
    src, tgt_in, labels, ctx = zip(*parts)
    batch = {"src": pad_batch(src, pad), "tgt_in": pad_batch(tgt_in, pad), "labels": pad_batch(labels, pad)}
    if ctx[0] is not None:
        batch["ctx"] = pad_batch(ctx, pad)
    return {k: v.to(device) for k, v in batch.items()}


def current_logprob(model, batch: dict, tails: torch.Tensor, pad: int) -> torch.Tensor:
    """log p of each row's last ``tails`` labels (its current sentence), summed per row (nats)."""
    inputs = {"ctx": batch["ctx"]} if "ctx" in batch else {}
    logits = model(batch["src"], batch["tgt_in"], **inputs)
    labels = batch["labels"]
    ends = labels.ne(pad).sum(1, keepdim=True)
    pos = torch.arange(labels.size(1), device=labels.device)[None]
    sel = (pos >= ends - tails[:, None]) & (pos < ends)
    logp = -torch.nn.functional.cross_entropy(logits[sel].float(), labels[sel], reduction="none")
    rows = torch.arange(labels.size(0), device=labels.device)[:, None].expand_as(labels)[sel]
    return logp.new_zeros(labels.size(0)).index_add(0, rows, logp)


def margin_loss(model, instances, ids: np.ndarray, margin: float, prob: float, seed: tuple,
                score_alone: bool = False) -> torch.Tensor | None:
    """The summed hinge of the instances ``ids`` drawn with probability ``prob`` (None when none
    was drawn); ``score_alone``: every row scored apart from the others (DocFlat)."""
    rng = np.random.default_rng([*seed, 0xC3])
    ks = ids[(rng.random(len(ids)) < prob)]
    ks = ks[with_context(instances, ks)]
    donors, found = draw_donors(instances, ks, rng)
    ks, donors = ks[found], donors[found]
    if not len(ks):
        return None
    device, pad = next(model.parameters()).device, instances.joiner.vocab.pad
    own = collated([(instances.source(k), *instances.target(k), instances.context(k)
                     if instances.joiner.context_sents > 0 else None) for k in ks], pad, device)
    wrong = collated([swapped(instances, k, d) for k, d in zip(ks, donors)], pad, device)
    tails = torch.tensor([current_labels(instances, k) for k in ks], device=device)
    with rows_apart(model, score_alone):
        gap = current_logprob(model, own, tails, pad) - current_logprob(model, wrong, tails, pad)
    return (margin - gap).clamp_min(0).sum()


def _check(cfg) -> None:
    require_context(cfg.train.context_margin > 0, cfg.data, "train.context_margin (--context-margin)",
                    "a sentence-level model has no context to swap")
    if cfg.train.context_margin > 0 and cfg.train.context_margin_prob == 0:
        raise ConfigError("train.context_margin_prob (--context-margin-prob) 0 gives no instance the context margin "
                          f"{cfg.train.context_margin}: give a probability above 0, or no --context-margin")


def _term(model, batch: dict, outputs, cfg, instances):
    tc = cfg.train
    if tc.context_margin <= 0 or tc.context_margin_prob <= 0:
        return None
    from . import get  # the registry knows every method
    return margin_loss(model, instances, batch["ids"].numpy(), tc.context_margin, tc.context_margin_prob,
                       batch.get("seed", (tc.seed,)), get(cfg.method_name).score_alone)


EXTENSION = Extension(name="context_margin", train_loss=_term, check=_check, settings=(
    Setting("train.context_margin", 0.0, "margin M of the hinge max(0, M - (log p(y|context) - log p(y|another "
            "document's context))) on the current sentence, in nats (0 = off; context margin loss)",
            "--context-margin", limit=ranges.FINITE_AT_LEAST_0),
    Setting("train.context_margin_prob", 0.5, "with --context-margin, P(a training instance gets the margin term)",
            "--context-margin-prob", limit=(lambda v: 0 <= v <= 1, "in [0, 1]"),
            needs="train.context_margin"),
))
