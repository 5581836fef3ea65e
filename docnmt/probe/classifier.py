"""The probes: linear classifiers trained on one split's encoder states, selected on a second and
scored on a third, with the chance level of each task; :func:`probe_model` runs every task on every
layer of one model."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..document import Document
from ..translate import Translator
from .states import N_CLASSES, encoder_states, task_data


@dataclass
class ProbeSettings:
    lr: float = 1e-3
    batch_size: int = 64
    max_epochs: int = 50
    patience: int = 5
    max_examples: int = 20000     # per split and task (a sample of the tokens or pairs)
    seed: int = 1



def train_probe(train: tuple, valid: tuple, n_classes: int, s: ProbeSettings) -> nn.Linear:
    """A linear probe, Adam, early stopping on validation accuracy; returns the best one. Its
    initial weights come from ``s.seed`` too, so the same data always gives the same probe."""
    gen = torch.Generator().manual_seed(s.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(s.seed)
        probe = nn.Linear(train[0].size(1), n_classes)
    opt = torch.optim.Adam(probe.parameters(), lr=s.lr)
    best, best_state, bad = -1.0, None, 0
    for _ in range(s.max_epochs):
        order = torch.randperm(len(train[1]), generator=gen)
        for b in range(0, len(order), s.batch_size):
            idx = order[b: b + s.batch_size]
            loss = nn.functional.cross_entropy(probe(train[0][idx]), train[1][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            acc = float((probe(valid[0]).argmax(1) == valid[1]).float().mean())
        if acc > best:
            best, best_state, bad = acc, {k: v.clone() for k, v in probe.state_dict().items()}, 0
        else:
            bad += 1
            if bad >= s.patience:
                break
    probe.load_state_dict(best_state)
    return probe


def score(probe: nn.Linear, data: tuple, task: str) -> dict:
    x, y, dist = data
    with torch.no_grad():
        pred = probe(x).argmax(1)
    out = {"accuracy": float((pred == y).float().mean()), "n": len(y)}
    if task == "absolute":
        out["accuracy_pm3"] = float(((pred - y).abs() <= 3).float().mean())
    else:
        out["by_distance"] = {int(d): float((pred[dist == d] == y[dist == d]).float().mean())
                              for d in torch.unique(dist).tolist()}
    return out


def chance_level(y: Tensor, task: str) -> dict:
    """What a probe that ignores its input reaches at best: the rate of the most frequent class
    in the test labels ``y`` (and for the absolute task, of the most frequent window of ±3
    positions). Not 1/K: short inputs make small positions, and small distances, more frequent
    than the others (position 0 starts every input)."""
    counts = np.bincount(y.numpy(), minlength=N_CLASSES[task]).astype(float)
    out = {"chance": float(counts.max() / max(len(y), 1))}
    if task == "absolute":
        out["chance_pm3"] = float(np.convolve(counts, np.ones(7), "same").max() / max(len(y), 1))
    return out


def probe_model(tr: Translator, splits: dict[str, list[Document]], s: ProbeSettings,
                max_tokens: int | None = None, tasks=("absolute", "relative", "word_order"),
                layers: list[int] | None = None, log=print) -> dict:
    """Results of every task on every encoder layer: {task: [per-layer result]}."""
    states = {name: encoder_states(tr, docs, max_tokens) for name, docs in splits.items()}
    layers = layers if layers is not None else list(range(len(tr.model.encoder.layers)))
    results: dict = {t: [] for t in tasks}
    for task in tasks:
        for layer in layers:
            data = {}
            for k, (name, st) in enumerate(states.items()):
                data[name] = task_data(st, task, layer, np.random.default_rng([s.seed, k]), s.max_examples)
            probe = train_probe(data["train"], data["valid"], N_CLASSES[task], s)
            r = {"layer": layer + 1, **score(probe, data["test"], task), **chance_level(data["test"][1], task)}
            results[task].append(r)
            extra = f" (±3: {r['accuracy_pm3']:.3f})" if task == "absolute" else ""
            log(f"  {task:10s} layer {layer + 1}: {r['accuracy']:.3f}{extra}  [{r['n']} test examples]")
    return results
