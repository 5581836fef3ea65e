"""BLEU against a decoding setting, for one or more systems: a table and a PNG plot.

    python experiments/tier_m/plot_sweep.py OUT.png --xlabel "decoding batch size" \
        --series DocFlat_C 1=RUN/valid.ted.b1.json 4=... 16=RUN/valid.ted.json \
        --baseline "DOC2DOC at 16=RUN2/valid.ted.json"               # DocFlat's Figure 6
    python experiments/tier_m/plot_sweep.py OUT.png --xlabel "decoding instance budget (tokens)" --metrics d_bleu \
        --series Doc2Doc 64=... 512=... --series "Doc2Doc + DLS + LAA" 64=... 512=... \
        --baseline "Doc2Doc, sliding=..."                             # the length-bias figure

Each ``X=PATH`` is the ``docnmt evaluate --json`` report of one decode at setting X (a number);
each baseline is drawn as a dashed horizontal line. The x axis is logarithmic (base 2).
"""
from __future__ import annotations

import argparse
import json

NAMES = {"s_bleu": "s-BLEU", "d_bleu": "d-BLEU", "s_chrf": "s-chrF", "d_chrf": "d-chrF"}


def score(path: str, metric: str) -> float:
    return json.load(open(path))[metric]["score"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--series", nargs="+", action="append", required=True, metavar="NAME X=JSON",
                    help="a system's name, then its points")
    ap.add_argument("--baseline", action="append", default=[], metavar="NAME=JSON")
    ap.add_argument("--metrics", nargs="+", default=["s_bleu", "d_bleu"], choices=sorted(NAMES))
    ap.add_argument("--xlabel", default="setting")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    series = {s[0]: sorted((float(x), p) for x, p in (pt.split("=", 1) for pt in s[1:])) for s in a.series}
    baselines = dict(b.rsplit("=", 1) for b in a.baseline)
    xs = sorted({x for pts in series.values() for x, _ in pts})
    label = lambda x: f"{x:g}"    # noqa: E731
    metric_cols = [NAMES[m] for m in a.metrics]
    print(f"| system | metric | {' | '.join(label(x) for x in xs)} |")
    print("|---|---|" + "---|" * len(xs))
    for name, pts in series.items():
        got = dict(pts)
        for m, col in zip(a.metrics, metric_cols):
            cells = [f"{score(got[x], m):.2f}" if x in got else "–" for x in xs]
            print(f"| {name} | {col} | {' | '.join(cells)} |")
    for name, path in baselines.items():
        print(f"| {name} | "
              + ", ".join(f"{col} {score(path, m):.2f}" for m, col in zip(a.metrics, metric_cols)) + " |")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    color = 0
    for name, pts in series.items():
        for m, col in zip(a.metrics, metric_cols):
            ax.plot([x for x, _ in pts], [score(p, m) for _, p in pts], "o-", color=f"C{color}",
                    label=f"{name}, {col}" if len(a.metrics) > 1 else name)
            color += 1
    for name, path in baselines.items():
        for m, col in zip(a.metrics, metric_cols):
            ax.axhline(score(path, m), ls="--", color=f"C{color}",
                       label=f"{name}, {col}" if len(a.metrics) > 1 else name)
            color += 1
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [label(x) for x in xs])
    ax.set_xlabel(a.xlabel)
    ax.set_ylabel("BLEU" if len(a.metrics) > 1 else metric_cols[0])
    if a.title:
        ax.set_title(a.title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
