"""d-BLEU against the instance budget, one line per model and decoding (plain, sliding), from
``results/<model>.json`` (written by run.py), into ``results/length_bias.png`` and a Markdown
table ``results/table.md`` (d-BLEU / s-BLEU / seconds per setting, the training budget marked).

    python experiments/length_bias/plot.py [--results DIR] [--train-budget 512]

Budgets are placed on a log-2 axis; "whole" (each document as one instance) sits one step past
the longest budget measured; the d-BLEU axis spans at least 4 points, so that differences of a
few tenths look like that. A model with only some settings done is drawn with what it has.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIN_SPAN = 4.0       # d-BLEU the y axis spans at least


def load(results: Path) -> dict[str, dict]:
    """Every model's rows: ``{name: {key: row}}`` from ``results/*.json``."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}


def budget_axis(models: dict[str, dict]) -> dict[int, float]:
    """x position of every budget measured: log2 of the budget; whole documents (0) one step
    past the longest."""
    budgets = sorted({row["budget"] for rows in models.values() for row in rows.values() if row["budget"]})
    x = {b: math.log2(b) for b in budgets}
    x[0] = (max(x.values()) if x else 9.0) + 1
    return x


def lines(models: dict[str, dict]) -> list[tuple[str, list[tuple[int, float]]]]:
    """(label, [(budget, d-BLEU), ...] sorted by budget with whole documents last) per model and
    decoding; the sliding line starts from the plain row at the largest budget not slid."""
    out = []
    order = lambda b: b or float("inf")  # noqa: E731
    for name, rows in models.items():
        plain = sorted(((r["budget"], r["scores"]["d_bleu"]["score"]) for r in rows.values() if not r["sliding"]),
                       key=lambda p: order(p[0]))
        slid = sorted(((r["budget"], r["scores"]["d_bleu"]["score"]) for r in rows.values() if r["sliding"]),
                      key=lambda p: order(p[0]))
        if plain:
            out.append((name, plain))
        if slid:
            out.append((f"{name} (sliding)", slid))
    return out


def table(models: dict[str, dict], train_budget: int) -> str:
    """One Markdown table per model: setting, d-BLEU, s-BLEU, chrF (document), seconds, coverage."""
    parts = []
    for name, rows in models.items():
        parts += [f"### {name}", "", "| budget | decoding | d-BLEU | s-BLEU | d-chrF | empty sentences | seconds |",
                  "|---|---|---|---|---|---|---|"]
        for key, r in sorted(rows.items(), key=lambda kv: (kv[1]["budget"] or float("inf"), kv[1]["sliding"])):
            b = r["budget"] or "whole"
            mark = " (training)" if r["budget"] == train_budget else ""
            s = r["scores"]
            parts.append(f"| {b}{mark} | {'sliding' if r['sliding'] else 'plain'} | {s['d_bleu']['score']:.2f} | "
                         f"{s['s_bleu']['score']:.2f} | {s['d_chrf']['score']:.2f} | "
                         f"{r['coverage'].get('empty_sentences', '')} | {r['seconds']:.0f} |")
        parts.append("")
    return "\n".join(parts)


def plot(models: dict[str, dict], dest: Path, train_budget: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = budget_axis(models)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colours = {name: f"C{i}" for i, name in enumerate(models)}
    for label, points in lines(models):
        ax.plot([x[b] for b, _ in points], [y for _, y in points], marker="o", color=colours[label.split(" (")[0]],
                linestyle="--" if label.endswith("(sliding)") else "-", label=label)
    low, high = ax.get_ylim()
    if high - low < MIN_SPAN:      # a few tenths of BLEU drawn as a few tenths, not across the whole plot
        mid = (low + high) / 2
        ax.set_ylim(mid - MIN_SPAN / 2, mid + MIN_SPAN / 2)
    ticks = sorted(x.items(), key=lambda kv: kv[1])
    ax.set_xticks([v for _, v in ticks], [str(b) if b else "whole" for b, _ in ticks])
    if train_budget in x:
        ax.axvline(x[train_budget], color="grey", linewidth=0.8, linestyle=":")
        ax.annotate("training instances", (x[train_budget], ax.get_ylim()[0]), rotation=90, fontsize=8,
                    color="grey", xytext=(3, 5), textcoords="offset points")
    ax.set_xlabel("instance budget at decoding (source tokens; log scale)")
    ax.set_ylabel("d-BLEU")
    ax.set_title("Length bias at Tier M-fr (900 Hansard sentences, 3 documents)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dest, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--train-budget", type=int, default=512)
    args = ap.parse_args()
    results = Path(args.results)
    models = load(results)
    if not models:
        raise SystemExit(f"no results in {results}: run run.py first")
    (results / "table.md").write_text(table(models, args.train_budget), encoding="utf-8")
    plot(models, results / "length_bias.png", args.train_budget)
    print(f"wrote {results / 'length_bias.png'} and {results / 'table.md'}")


if __name__ == "__main__":
    main()
