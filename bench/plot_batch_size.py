"""BLEU against the decoding batch size (DocFlat's Figure 6 in miniature).

    python bench/plot_batch_size.py OUT.png 1=runs/tierm/docflat_small/valid.ted.b1.json \
        4=... 16=runs/tierm/docflat_small/valid.ted.json [--baseline runs/tierm/pseudodoc_small/valid.ted.json]

Each ``B=PATH`` is the ``docnmt evaluate --json`` report of a decode with ``--batch-size B``;
the plot shows s-BLEU and d-BLEU against B (log scale), with the baseline's as dashed lines.
Prints the table too.
"""
from __future__ import annotations

import argparse
import json


def scores(path: str) -> tuple[float, float]:
    r = json.load(open(path))
    return r["s_bleu"]["score"], r["d_bleu"]["score"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("points", nargs="+", help="BATCH_SIZE=EVALUATE_JSON")
    ap.add_argument("--baseline", help="evaluate JSON of the baseline (drawn as dashed lines)")
    ap.add_argument("--title", default="DocFlat_C, valid ted: BLEU against the decoding batch size")
    a = ap.parse_args()
    pts = sorted((int(b), *scores(p)) for b, p in (x.split("=", 1) for x in a.points))
    print("| decoding batch size | s-BLEU | d-BLEU |\n|---|---|---|")
    for b, s, d in pts:
        print(f"| {b} | {s:.2f} | {d:.2f} |")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.5))
    xs = [p[0] for p in pts]
    for k, (label, color) in enumerate((("s-BLEU", "C0"), ("d-BLEU", "C1"))):
        ax.plot(xs, [p[k + 1] for p in pts], "o-", color=color, label=label)
        if a.baseline:
            ax.axhline(scores(a.baseline)[k], ls="--", color=color, label=f"{label}, baseline")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("decoding batch size (consecutive sentences)")
    ax.set_ylabel("BLEU")
    ax.set_title(a.title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
