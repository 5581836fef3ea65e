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
"""
from __future__ import annotations

import filecmp
import json
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from .checkpoint import CHECKPOINT, WEIGHTS, list_checkpoints
from .config import Config
from .data import Corpus, InstanceSet, build_instances, model_inputs
from .document import Document
from .errors import DocnmtError
from .model import rows_apart
from .translate import Translator

ABS_CLASSES = 512
REL_RANGE = 20
OUTPUTS = ("probe.json", "probe.md", "probe_layers.png", "probe_relative_distance.png",   # what run() writes
           "probe_word_order_distance.png", "probe_input_length.png")
# what the two input-length setups are, in the outputs (the table's captions, probe.json, the plot)
ONE_MODEL = ("one model probed at every length (the model was trained on its own inputs only; "
             "the paper trains one model per length: --own-length)")
PER_LENGTH = "one model per length, each probed on inputs of at most the length it was trained on"


@dataclass
class ProbeSettings:
    lr: float = 1e-3
    batch_size: int = 64
    max_epochs: int = 50
    patience: int = 5
    max_examples: int = 20000     # per split and task (a sample of the tokens or pairs)
    seed: int = 1


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
    order = np.argsort(iset.src_lens, kind="stable")
    captured: list[Tensor] = []
    hooks = [layer.register_forward_hook(lambda m, i, o: captured.append(o)) for layer in tr.model.encoder.layers]
    layers: list[list[Tensor]] = [[] for _ in hooks]
    positions, sequences = [], []
    start = 0
    try:
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * iset.src_lens[order[end]] <= batch_tokens:
                end += 1
            idx = order[start:end]
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
            start = end
    finally:
        for h in hooks:
            h.remove()
    return States([torch.cat(x) for x in layers], torch.cat(positions), torch.cat(sequences))


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


N_CLASSES = {"absolute": ABS_CLASSES, "relative": 2 * REL_RANGE, "word_order": 2}


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


def plot(all_results: dict[str, dict], out_dir: Path, lengths: dict[str, dict[int, float]] | None = None,
         own: list[dict] | None = None, updates: dict[str, str] | None = None,
         length_chance: dict[int, float] | None = None) -> list[Path]:
    """The paper's figures as PNGs (:func:`figures`), written to ``out_dir``."""
    paths = []
    for name, fig in figures(all_results, lengths, own, updates, length_chance).items():
        paths.append(out_dir / name)
        fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
    return paths


def figures(all_results: dict[str, dict], lengths: dict[str, dict[int, float]] | None = None,
            own: list[dict] | None = None, updates: dict[str, str] | None = None,
            length_chance: dict[int, float] | None = None) -> dict:
    """The paper's figures, by file name: accuracy per layer (Figure 1), per relative distance on
    the top layer (Figures 2-3), and absolute accuracy vs input length (Figure 6): dashed, each
    model probed at every length (``lengths``); solid, one model per length (``own``, rows of
    ``{"model", "length", "accuracy"}``). Each is titled with what it probes and the models'
    training updates (``updates``: model -> :func:`updates_label`), draws the chance level as a
    dashed grey line (:func:`chance_level`, per input length ``length_chance``; per distance, a
    uniform guess 1/K: at one distance the most frequent class is always right or always wrong) and
    has its legend outside the axes."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, ScalarFormatter
    names = list(dict.fromkeys([*all_results, *(lengths or {})]))
    color = {name: f"C{i % 10}" for i, name in enumerate(names)}   # one colour per model in every figure
    trained = models_caption(updates or {})
    out = {}

    def legend(ax, *handles_labels):
        ax.legend(*handles_labels, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=True,
                  borderaxespad=0)

    def chance_line(ax, values: dict[str, float | None], label: str, style: str = "--"):
        """One grey line when every model has the same chance level, else one per model in its
        colour (models read other inputs: a Sent2Sent model's sentences, a Doc2Doc model's documents)."""
        values = {name: round(v, 4) for name, v in values.items() if v is not None}
        if len(set(values.values())) == 1:
            v = next(iter(values.values()))
            ax.axhline(v, ls=style, lw=1, color="grey", label=label)
            ax.annotate(f"{v:.3f}", (1, v), xycoords=("axes fraction", "data"), xytext=(-2, 2),
                        textcoords="offset points", ha="right", fontsize=7, color="grey")
            return
        for name, v in values.items():
            ax.axhline(v, ls=style, lw=1, color=color[name], alpha=0.7, label=f"{name}: {label}")

    fig = Figure(figsize=(14, 4.2), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (task, label) in zip(axes, [("absolute", "absolute position"), ("relative", "relative position"),
                                        ("word_order", "word order")]):
        for name, res in all_results.items():
            rows = res.get(task, [])
            ax.plot([r["layer"] for r in rows], [r["accuracy"] for r in rows], "o-", color=color[name], label=name)
            if task == "absolute":
                ax.plot([r["layer"] for r in rows], [r["accuracy_pm3"] for r in rows], "s--", alpha=0.5,
                        color=color[name], label=f"{name} ±3")
        top = {name: (res.get(task) or [{}])[-1] for name, res in all_results.items()}   # same labels every layer
        chance_line(ax, {name: r.get("chance") for name, r in top.items()}, "chance (most frequent class)")
        if task == "absolute":
            chance_line(ax, {name: r.get("chance_pm3") for name, r in top.items()},
                        "chance ±3 (most frequent 7 positions)", ":")
        ax.set_title(label)
        ax.set_xlabel("encoder layer")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    entries = {}                         # one legend for the three panels, beside the last
    for ax in axes:
        entries.update({lab: h for h, lab in zip(*ax.get_legend_handles_labels()) if lab not in entries})
    legend(axes[-1], list(entries.values()), list(entries))
    fig.suptitle(wrap(f"Position probing of each encoder layer — {trained}"))
    out["probe_layers.png"] = fig
    for task, what in (("relative", "relative position"), ("word_order", "word order")):
        classes = N_CLASSES[task]
        fig = Figure(figsize=(8, 4), layout="constrained")
        ax = fig.subplots()
        for name, res in all_results.items():
            if res.get(task):
                top = res[task][-1]["by_distance"]
                ax.plot([int(d) for d in top], list(top.values()), ".-", color=color[name], label=name)
        chance_line(ax, {"": 1 / classes}, f"chance 1/{classes} (uniform guess)")
        ax.set_title(wrap(f"{what} accuracy per distance i − j, top encoder layer — {trained}", 80),
                     fontsize=10)
        ax.set_xlabel("i − j")
        ax.set_ylabel("test accuracy")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        legend(ax)
        out[f"probe_{task}_distance.png"] = fig
    if lengths or own:
        fig = Figure(figsize=(8, 4.4), layout="constrained")
        ax = fig.subplots()
        for name, by_len in (lengths or {}).items():
            ax.plot([int(n) for n in by_len], list(by_len.values()), "o--", color=color[name],
                    label=f"{name} (one model)")
        if own:
            rows = sorted(own, key=lambda r: r["length"])
            ax.plot([r["length"] for r in rows], [r["accuracy"] for r in rows], "s-", color="black",
                    label="one model per length")
            for r in rows:
                ax.annotate(r["model"], (r["length"], r["accuracy"]), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        if length_chance:
            xs = sorted(length_chance)
            ax.plot(xs, [length_chance[n] for n in xs], "x:", lw=1, color="grey", label="chance (most frequent class)")
        setups = [f"dashed: {ONE_MODEL.split(' (')[0]}"] * bool(lengths) + [f"solid: {PER_LENGTH}"] * bool(own)
        ax.set_title(wrap(f"Top-layer absolute-position accuracy by input length — {trained}", 80) + "\n"
                     + "\n".join(setups), fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("input length (tokens)")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        legend(ax)
        out["probe_input_length.png"] = fig
    return out


def wrap(text: str, width: int = 120) -> str:
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False))


def trained_updates(model_dir: str | Path) -> tuple[int | None, int | None]:
    """``(weights, trained)``: the update of the checkpoint whose weights ``model.safetensors``
    holds (None when no kept checkpoint has them: pruned, averaged or imported) and the updates
    the run trained (its newest checkpoint, else the last record of ``metrics.jsonl``)."""
    d = Path(model_dir)
    ckpts = list_checkpoints(d)
    trained = int(ckpts[-1].name[1:]) if ckpts else None
    if trained is None and (d / "metrics.jsonl").is_file():
        for line in (d / "metrics.jsonl").read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                trained = max(trained or 0, int(json.loads(line)["updates"]))
            except (ValueError, KeyError, TypeError):
                continue
    weights = None
    if (d / WEIGHTS).is_file():
        for c in reversed(ckpts):           # model.safetensors is a byte copy of the best (or last) checkpoint's
            if CHECKPOINT.fullmatch(c.name) and filecmp.cmp(c / WEIGHTS, d / WEIGHTS, shallow=False):
                weights = int(c.name[1:])
                break
    return weights, trained


def updates_label(model_dir: str | Path) -> str:
    """How long a model trained, for titles: "4,000 updates"; "3,000 of 4,000 updates (best)" when
    its weights are an earlier, best checkpoint's; "run of 4,000 updates" when no kept checkpoint
    holds its weights (pruned or averaged); "updates unknown" (an imported model)."""
    weights, trained = trained_updates(model_dir)
    if trained is None:
        return "updates unknown"
    count = f"{trained:,} update" + "s" * (trained != 1)
    if weights is None:
        return f"run of {count}"
    return count if weights == trained else f"{weights:,} of {count} (best)"


def models_caption(updates: dict[str, str]) -> str:
    """The models' training updates for a title: the one label all share, else each model's."""
    if len(set(updates.values())) == 1:
        return next(iter(updates.values()))
    return "; ".join(f"{name}: {label}" for name, label in updates.items()) or "updates unknown"


def model_names(paths: list[str]) -> list[str]:
    """Short names of model directories for tables and legends: the directory's name, with as
    many parent directories as it takes to tell two models apart (``a/model``, ``b/model``)."""
    parts = [Path(os.path.abspath(p)).parts for p in paths]
    depth = [1] * len(parts)
    while True:
        names = [Path(*pt[-k:]).as_posix() for pt, k in zip(parts, depth)]
        clash = [i for i, n in enumerate(names) if depth[i] < len(parts[i])
                 and any(m == n and pt != parts[i] for m, pt in zip(names, parts))]
        if not clash:
            break
        for i in clash:
            depth[i] += 1
    seen: dict[str, int] = {}
    for i, n in enumerate(names):            # the same directory given twice
        seen[n] = seen.get(n, 0) + 1
        names[i] = n if seen[n] == 1 else f"{n} ({seen[n]})"
    return names


def table(results: dict[str, dict], by_length: dict[str, dict[int, float]] | None = None,
          own: list[dict] | None = None) -> str:
    """A Markdown table: per model, each task's test accuracy on encoder layers 1, 2, … (the
    absolute task with its ±3 accuracy in brackets), and the input-length study if run, each
    setup with a caption that says which it is (:data:`ONE_MODEL`, :data:`PER_LENGTH`)."""
    cell = {"absolute": lambda r: f"{r['accuracy']:.3f} ({r['accuracy_pm3']:.3f})",
            "relative": lambda r: f"{r['accuracy']:.3f}", "word_order": lambda r: f"{r['accuracy']:.3f}"}
    lines = ["| model | absolute (±3), layer 1 / 2 / … | relative | word order |", "|---|---|---|---|"]
    for name, res in results.items():
        lines.append(f"| {name} | " + " | ".join(" / ".join(cell[t](r) for r in res.get(t, [])) for t in cell) + " |")
    if by_length:
        ns = sorted({n for v in by_length.values() for n in v})
        lines += ["", f"Top-layer absolute accuracy by input length, {ONE_MODEL}:", "",
                  "| model | " + " | ".join(f"≤{n} tokens" for n in ns) + " |", "|---|" + "---|" * len(ns)]
        lines += [f"| {name} | " + " | ".join(f"{v[n]:.3f}" if n in v else "–" for n in ns) + " |"
                  for name, v in by_length.items()]
    if own:
        rows = sorted(own, key=lambda r: r["length"])
        lines += ["", f"Top-layer absolute accuracy by input length, {PER_LENGTH}:", "",
                  "| input length | " + " | ".join(f"≤{r['length']} tokens" for r in rows) + " |",
                  "|---|" + "---|" * len(rows),
                  "| model | " + " | ".join(r["model"] for r in rows) + " |",
                  "| accuracy | " + " | ".join(f"{r['accuracy']:.3f}" for r in rows) + " |"]
    return "\n".join(lines) + "\n"


def training_length(model_dir: str | Path) -> int:
    """The input length a model was trained on, for the one-model-per-length setup: its Doc2Doc
    instance budget in tokens (read from its config, before any model is loaded)."""
    path, name = Path(model_dir) / "config.yaml", Path(model_dir).name
    if not path.exists():
        raise DocnmtError(f"{model_dir}: not a docnmt model directory (no config.yaml)")
    data = Config.load(path).data
    if not data.is_document_level or data.max_instance_tokens <= 0:
        raise DocnmtError(f"--own-length: {name} was not trained on Doc2Doc instances of a token budget "
                          f"(data.mode {data.mode}, data.max_instance_tokens {data.max_instance_tokens}); train one "
                          "model per length with docnmt train --mode doc2doc --max-instance-tokens I")
    return data.max_instance_tokens


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
        top = len(tr.model.encoder.layers) - 1
        for n in input_lengths:
            r = probe_model(tr, splits, s, max_tokens=n, tasks=("absolute",), layers=[top], log=lambda m: None)
            by_length.setdefault(name, {})[n] = r["absolute"][0]["accuracy"]
            length_chance.setdefault(n, r["absolute"][0].get("chance"))
            log(f"  absolute, top layer, inputs of <= {n} tokens (this one model at another length): "
                f"{by_length[name][n]:.3f}")
        if own_length:
            n = lengths[k]
            r = probe_model(tr, splits, s, max_tokens=n, tasks=("absolute",), layers=[top], log=lambda m: None)
            own.append({"model": name, "length": n, "accuracy": r["absolute"][0]["accuracy"]})
            length_chance.setdefault(n, r["absolute"][0].get("chance"))
            log(f"  absolute, top layer, inputs of <= {n} tokens (its own training length): {own[-1]['accuracy']:.3f}")
    length_chance = {n: c for n, c in length_chance.items() if c is not None}
    result = {"results": results, "by_input_length": by_length, "by_own_length": own,
              "input_length_setups": {"by_input_length": ONE_MODEL, "by_own_length": PER_LENGTH},
              "chance_by_input_length": length_chance, "updates": updates}
    (out_dir / "probe.json").write_text(json.dumps(result, indent=1))
    text = table(results, by_length, own)
    (out_dir / "probe.md").write_text(text)
    log("\ntest accuracy per encoder layer" + (" and top-layer absolute accuracy per input length"
                                               if by_length or own else "")
        + f" (also in {out_dir / 'probe.md'}):\n" + text)
    for p in plot(results, out_dir, by_length or None, own or None, updates, length_chance or None):
        log(f"wrote {p}")
    return result
