"""The probe's text outputs: the Markdown table, names of models and how long each trained (for
titles), and the training length of a model (the one-model-per-length setup)."""
from __future__ import annotations

import filecmp
import json
import os
from pathlib import Path

from ..checkpoint import CHECKPOINT, WEIGHTS, list_checkpoints
from ..config import Config
from ..errors import DocnmtError

# what the two input-length setups are, in the outputs (the table's captions, probe.json, the plot)
ONE_MODEL = ("one model probed at every length (the model was trained on its own inputs only; "
             "the paper trains one model per length: --own-length)")
PER_LENGTH = "one model per length, each probed on inputs of at most the length it was trained on"


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

