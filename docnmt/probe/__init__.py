"""Position probing of encoder states (docs/methods/discourse.md#position-probing; P-Transformer's
Figures 1-3 and 6).

For every encoder layer of a frozen docnmt model, linear classifiers (a linear layer and a
softmax: no hidden layer) are trained on one set of documents, selected on a second and scored on
a third:

* **absolute**: h_i -> its position i (K = 512 classes; exact and ±3 accuracy);
* **relative**: h_i − h_j -> i − j for pairs within ±20 tokens (40 classes), per distance;
* **word order**: h_i − h_j -> whether i < j, same pairs, per distance.

The inputs are what the model reads at translation time (sentences for Sent2Sent, ≤512-token
instances for Doc2Doc), or sub-documents of at most I tokens for the input-length study, in one
of two setups that the outputs name: one model probed at every length I (``input_lengths``), or
the paper's, one model trained per length I (``own_length``: each model is probed on inputs of at
most its own training budget, ``data.max_instance_tokens``).
Choices where the paper is silent (docs/methods/discourse.md#probe-settings): Adam lr 1e-3,
batch 64, at most 50 epochs, early stopping on validation accuracy with patience 5; pairs: for
every position i one partner j drawn uniformly within ±K (j ≠ i) inside its sequence, from an
RNG seeded per run.

Modules: :mod:`.states` (encoder states and task examples), :mod:`.classifier` (the probes and
chance levels), :mod:`.figures`, :mod:`.report` (table, names, training updates and lengths);
:func:`run` here.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..document import Document
from ..translate import Translator
from .classifier import ProbeSettings, chance_level, probe_model, score, train_probe
from .figures import figures, plot, wrap
from .report import (
    ONE_MODEL,
    PER_LENGTH,
    model_names,
    models_caption,
    table,
    trained_updates,
    training_length,
    updates_label,
)
from .states import ABS_CLASSES, N_CLASSES, REL_RANGE, States, encoder_states, sample_pairs, task_data

__all__ = ["ABS_CLASSES", "N_CLASSES", "ONE_MODEL", "OUTPUTS", "PER_LENGTH", "REL_RANGE", "ProbeSettings", "States",
           "chance_level", "encoder_states", "figures", "model_names", "models_caption", "plot", "probe_model", "run",
           "sample_pairs", "score", "table", "task_data", "train_probe", "trained_updates", "training_length",
           "updates_label", "wrap"]

OUTPUTS = ("probe.json", "probe.md", "probe_layers.png", "probe_relative_distance.png",   # what run() writes
           "probe_word_order_distance.png", "probe_input_length.png")


def run(models: list[str], splits: dict[str, list[Document]], out_dir: Path, s: ProbeSettings,
        input_lengths: list[int] = (), log=print, own_length: bool = False) -> dict:
    """``docnmt probe``: every model, every task and layer; a table (printed and ``probe.md``), JSON
    and plots in ``out_dir``. The input-length study: ``input_lengths`` probes every model's top
    layer on inputs of at most each length (one model at every length); ``own_length`` probes
    each model on inputs of at most its own training length (one model per length, the paper's
    setup: pass models trained with ``--max-instance-tokens`` 64, 128, …)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results, by_length, own, updates, length_chance = {}, {}, [], {}, {}
    lengths = [training_length(path) for path in models] if own_length else []
    for k, (path, name) in enumerate(zip(models, model_names(models))):
        updates[name] = updates_label(path)
        tr = Translator.load(path, device="cpu")
        log(f"{name} ({tr.cfg.data.mode}, {tr.cfg.method_name})")
        results[name] = probe_model(tr, splits, s, log=log)
        for n in input_lengths:
            accuracy = _top_absolute(tr, splits, s, n, length_chance)
            by_length.setdefault(name, {})[n] = accuracy
            log(f"  absolute, top layer, inputs of <= {n} tokens (this one model at another length): {accuracy:.3f}")
        if own_length:
            n = lengths[k]
            own.append({"model": name, "length": n, "accuracy": _top_absolute(tr, splits, s, n, length_chance)})
            log(f"  absolute, top layer, inputs of <= {n} tokens (its own training length): {own[-1]['accuracy']:.3f}")
    length_chance = {n: c for n, c in length_chance.items() if c is not None}
    result = {"results": results, "by_input_length": by_length, "by_own_length": own,
              "input_length_setups": {"by_input_length": ONE_MODEL, "by_own_length": PER_LENGTH},
              "chance_by_input_length": length_chance, "updates": updates}
    _write_outputs(result, out_dir, log)
    return result


def _top_absolute(tr: Translator, splits: dict[str, list[Document]], s: ProbeSettings, n: int,
                  length_chance: dict) -> float:
    """The top layer's absolute-position accuracy on inputs of at most ``n`` tokens; the chance
    level at that length goes to ``length_chance`` (the first model's)."""
    top = len(tr.model.encoder.layers) - 1
    r = probe_model(tr, splits, s, max_tokens=n, tasks=("absolute",), layers=[top], log=lambda m: None)
    length_chance.setdefault(n, r["absolute"][0].get("chance"))
    return r["absolute"][0]["accuracy"]


def _write_outputs(result: dict, out_dir: Path, log) -> None:
    """probe.json, probe.md (also logged) and the figures."""
    results, by_length, own = result["results"], result["by_input_length"], result["by_own_length"]
    (out_dir / "probe.json").write_text(json.dumps(result, indent=1))
    text = table(results, by_length, own)
    (out_dir / "probe.md").write_text(text)
    log("\ntest accuracy per encoder layer" + (" and top-layer absolute accuracy per input length"
                                               if by_length or own else "")
        + f" (also in {out_dir / 'probe.md'}):\n" + text)
    for p in plot(results, out_dir, by_length or None, own or None, result["updates"],
                  result["chance_by_input_length"] or None):
        log(f"wrote {p}")
