"""The probe's inputs: encoder states of every layer for a model's own inputs, and the examples of
each probing task drawn from them (absolute positions; pairs within ±REL_RANGE for the relative
position and word-order tasks)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..data import Corpus, InstanceSet, build_instances, model_inputs
from ..document import Document
from ..model import rows_apart
from ..translate import Translator

ABS_CLASSES = 512
REL_RANGE = 20
N_CLASSES = {"absolute": ABS_CLASSES, "relative": 2 * REL_RANGE, "word_order": 2}


@dataclass
class States:
    """Encoder states of every layer for the real tokens of a set of inputs."""
    layers: list[Tensor]          # each (N, d)
    position: Tensor              # (N,) position within its input
    sequence: Tensor              # (N,) index of its input
    pairs: tuple[Tensor, Tensor] | None = None   # the (i, j) rows of the pair tasks, drawn once




@torch.no_grad()
def encoder_states(tr: Translator, docs: list[Document], max_tokens: int | None = None,
                   batch_tokens: int = 6000) -> States:
    """Hidden states after every encoder layer for the model's own inputs of ``docs`` (or
    sub-documents of at most ``max_tokens`` tokens). Inputs are batched by length; a method whose
    layers look across a batch's rows (DocFlat) computes each row as if alone, as it is scored."""
    cfg = tr.cfg if max_tokens is None else tr.cfg.override({"data.mode": "doc2doc",
                                                             "data.max_instance_tokens": max_tokens})
    corpus = Corpus.encode(docs, tr.vocab, max_sentence_tokens=cfg.model.max_positions - 2)
    iset = InstanceSet(corpus, build_instances(corpus, cfg.data, training=False), tr.joiner)
    captured: list[Tensor] = []
    hooks = [layer.register_forward_hook(lambda m, i, o: captured.append(o)) for layer in tr.model.encoder.layers]
    layers: list[list[Tensor]] = [[] for _ in hooks]
    positions, sequences = [], []
    try:
        for idx in _batches(iset.src_lens, batch_tokens):
            batch = iset.collate(idx)
            src = batch["src"].to(tr.device)
            captured.clear()
            with rows_apart(tr.model, tr.method.score_alone):
                tr.model.encode(src, **{k: v.to(tr.device) for k, v in model_inputs(batch).items()})
            real = src.ne(tr.vocab.pad)
            for layer, out in enumerate(captured):  # positions a method prepends (DocFlat's MBE) are not probed
                layers[layer].append(out[:, out.size(1) - src.size(1):][real].float().cpu())
            pos = torch.arange(src.size(1), device=src.device).expand_as(src)
            positions.append(pos[real].cpu())
            seq = torch.as_tensor(idx, device=src.device)[:, None].expand_as(src)
            sequences.append(seq[real].cpu())
    finally:
        for h in hooks:
            h.remove()
    return States([torch.cat(x) for x in layers], torch.cat(positions), torch.cat(sequences))


def _batches(lengths: np.ndarray, batch_tokens: int):
    """Indices of the inputs, shortest first, in batches of at most ``batch_tokens`` padded tokens
    (an input longer than that alone)."""
    order = np.argsort(lengths, kind="stable")
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end - start + 1) * lengths[order[end]] <= batch_tokens:
            end += 1
        yield order[start:end]
        start = end


def sample_pairs(states: States, rng: np.random.Generator, k: int = REL_RANGE) -> tuple[Tensor, Tensor]:
    """For every token i one partner j within ±k in the same input (j ≠ i): indices into the
    states' rows (i_rows, j_rows)."""
    pos, seq = states.position.numpy(), states.sequence.numpy()
    row_of = {(int(s), int(p)): r for r, (s, p) in enumerate(zip(seq, pos))}
    length = {}
    for s, p in zip(seq, pos):
        length[int(s)] = max(length.get(int(s), 0), int(p) + 1)
    i_rows, j_rows = [], []
    for r, (s, p) in enumerate(zip(seq, pos)):
        lo, hi = max(0, p - k), min(length[int(s)] - 1, p + k)
        choices = [q for q in range(lo, hi + 1) if q != p]
        if choices:
            i_rows.append(r)
            j_rows.append(row_of[(int(s), int(rng.choice(choices)))])
    return torch.tensor(i_rows), torch.tensor(j_rows)


def task_data(states: States, task: str, layer: int, rng: np.random.Generator,
              max_examples: int) -> tuple[Tensor, Tensor, Tensor]:
    """(features, labels, distance i − j or position) of one probing task on one layer."""
    h = states.layers[layer]
    if task == "absolute":
        keep = (states.position < ABS_CLASSES).nonzero().squeeze(1)
        x, y, dist = h[keep], states.position[keep], states.position[keep]
    else:
        if states.pairs is None:       # the same pairs for every layer, from a child stream so
            states.pairs = sample_pairs(states, rng.spawn(1)[0])   # the subsample below is too
        i, j = states.pairs
        d = states.position[i] - states.position[j]
        x = h[i] - h[j]
        y = (d + REL_RANGE - (d > 0).long()) if task == "relative" else (d < 0).long()   # i − j < 0: i before j
        dist = d
    if len(y) > max_examples:
        pick = torch.as_tensor(np.sort(rng.choice(len(y), max_examples, replace=False)))
        x, y, dist = x[pick], y[pick], dist[pick]
    return x, y, dist

