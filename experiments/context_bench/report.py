"""The context-dependence benchmark's kept results from the per-run score files of run.py:
``results.json`` (every figure, rounded), ``results.md`` (accuracy, CXMI and attention on the
antecedent's sentence per method x recipe x dependency x distance) and ``accuracy_by_distance.png``.

    python experiments/context_bench/report.py [--scores runs/context_bench/scores] [--results DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = ["sent", "doc2sent", "doc2doc", "mr", "gt", "pt", "pseudodoc", "docflat", "context"]
NAMES = {"sent": "Sent2Sent", "doc2sent": "Doc2Sent (K=3)", "doc2doc": "Doc2Doc (512 tok)", "mr": "MR (512 tok)",
         "gt": "G-Transformer", "pt": "P-Transformer", "pseudodoc": "DOC2DOC pseudo-documents (K=3)",
         "docflat": "DocFlat_C (K=3)", "context": "context encoder (N=2)"}


def _round(x, n=4):
    if isinstance(x, float):
        return round(x, n)
    if isinstance(x, dict):
        return {k: _round(v, n) for k, v in x.items()}
    return x


def load_runs(scores: Path) -> list[dict]:
    runs = [json.loads(p.read_text()) for p in sorted(scores.glob("*.json"))]
    return sorted(runs, key=lambda r: (r["recipe"] != "scratch", r["updates"], ORDER.index(r["method"])))


def recipe_name(run: dict) -> str:
    return f"{run['recipe']} {run['updates']}"


def antecedent_weight(suite: dict) -> float | None:
    """The largest mean weight on sentence n-k over the attention kinds (the gate for the
    context encoder), or None when no kind recorded one."""
    att = {k: v for k, v in suite["attention_on_antecedent"].items() if k != "holds_antecedent"}
    return max(att.values()) if att else None


def table(runs: list[dict], deps, distances, cell, title: str) -> list[str]:
    head = [f"{d[0].upper()} k={k}" for d in deps for k in distances]
    lines = [f"**{title}**", "", "| recipe | method | " + " | ".join(head) + " |",
             "|---|---|" + "---:|" * len(head)]
    for r in runs:
        cells = [cell(r["suites"].get(f"{d}_k{k}")) for d in deps for k in distances]
        lines.append(f"| {recipe_name(r)} | {NAMES[r['method']]} | " + " | ".join(cells) + " |")
    return lines + [""]


def accuracy_cell(s: dict | None) -> str:
    if s is None:
        return ""
    mark = "*" if s.get("p_vs_sent", 1.0) < 0.05 else ""
    return f"{100 * s['accuracy']:.0f}{mark}"


def write_markdown(runs: list[dict], deps, distances, path: Path, source: str = "") -> None:
    n = next(iter(runs[0]["suites"].values()))["examples"]
    lines = [f"<!-- written by experiments/context_bench/report.py from {source} -->",
             "T = target-side dependency (pronoun gender from the target context), S = source-side (lexical "
             f"choice from a source cue); k = distance in sentences; {n} examples per cell, chance = 50.", ""]
    lines += table(runs, deps, distances, accuracy_cell,
                   "Accuracy (%); * = exact McNemar p < 0.05 against the sentence model of the same recipe")
    lines += table(runs, deps, distances, lambda s: "" if s is None else f"{s['cxmi_bits']:+.2f}",
                   "CXMI of the dependent sentence (bits per word piece)")
    lines += table(runs, deps, distances,
                   lambda s: "" if s is None or antecedent_weight(s) is None else f"{antecedent_weight(s):.2f}",
                   "Attention weight from the dependent sentence on the antecedent's sentence (largest "
                   "attention kind; context encoder: its gate's weight on the context input)")
    lines += ["| run | training seconds |", "|---|---:|"]
    lines += [f"| {r['run']} | {r['train_seconds']:.0f} |" for r in runs]
    path.write_text("\n".join(lines) + "\n")


def plot(runs: list[dict], deps, distances, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    recipes = list(dict.fromkeys(recipe_name(r) for r in runs))
    fig, axes = plt.subplots(len(recipes), len(deps), figsize=(5 * len(deps), 3.2 * len(recipes)), squeeze=False)
    for i, rec in enumerate(recipes):
        for j, dep in enumerate(deps):
            ax = axes[i][j]
            for r in (r for r in runs if recipe_name(r) == rec):
                ys = [100 * r["suites"][f"{dep}_k{k}"]["accuracy"] if f"{dep}_k{k}" in r["suites"] else None
                      for k in distances]
                ax.plot(range(len(distances)), ys, marker="o", label=NAMES[r["method"]])
            ax.axhline(50, color="grey", lw=0.8, ls="--")
            ax.set_xticks(range(len(distances)), [str(k) for k in distances])
            ax.set_ylim(0, 102)
            ax.set_title(f"{dep}-side dependency, {rec} updates", fontsize=9)
            ax.set_xlabel("distance k (sentences)")
            ax.set_ylabel("accuracy (%)")
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_results(scores: Path, results: Path, deps, distances) -> None:
    runs = load_runs(scores)
    if not runs:
        return
    results.mkdir(parents=True, exist_ok=True)
    (results / "results.json").write_text(json.dumps(_round(runs), indent=1) + "\n")
    write_markdown(runs, deps, distances, results / "results.md",
                   "runs/" + scores.as_posix().split("runs/", 1)[-1])
    plot(runs, deps, distances, results / "accuracy_by_distance.png")


def main() -> None:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scores", default=str(here.parents[1] / "runs" / "context_bench" / "scores"))
    ap.add_argument("--results", default=str(here / "results"))
    ap.add_argument("--distances", type=int, nargs="+", default=[1, 2, 3, 4, 5, 10, 80])
    a = ap.parse_args()
    write_results(Path(a.scores), Path(a.results), ("target", "source"), a.distances)


if __name__ == "__main__":
    main()
