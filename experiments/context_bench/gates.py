"""How open the G-Transformer's combination gates are: for each G-Transformer of the grid, the mean
over the suite's scored tokens of the gate g = σ(W_g [H_L; H_G] + b_g) of every combined attention
(the weight of the local, group attention; 1 − g goes to the global attention that reads the
context), while the model scores the k = 1 suites. The benchmark's attention figures are the global
branch's own softmax; this is how much of that branch reaches the layer's output.

    python experiments/context_bench/gates.py [--work runs/context_bench] [--runs gt-ft300 gt-ft1500 ...]

Writes ``results/gates.json`` ({run: {suite: {module: mean gate}}}).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def mean_gates(model_dir: Path, suite: Path) -> dict[str, float]:
    """Mean local-attention gate of every combined attention module while scoring ``suite``."""
    from docnmt.contrastive import score_examples
    from docnmt.methods.gtransformer import CombinedAttentionSublayer
    from docnmt.suites import read_suite
    from docnmt.translate import Translator
    tr = Translator.load(model_dir, None, "cpu")
    sums: dict[str, list[float]] = {}

    def hook(name):
        def record(module, inputs, output):
            g = torch.sigmoid(output.detach())
            sums.setdefault(name, [0.0, 0])
            sums[name][0] += float(g.sum())
            sums[name][1] += g.numel()
        return record

    handles = [m.gate.register_forward_hook(hook(n)) for n, m in tr.model.named_modules()
               if isinstance(m, CombinedAttentionSublayer)]
    try:
        score_examples(tr, read_suite(suite, "voita", detokenize=False))
    finally:
        for h in handles:
            h.remove()
    return {name: round(total / max(count, 1), 3) for name, (total, count) in sums.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "context_bench"))
    ap.add_argument("--runs", nargs="+", default=None, help="default: every gt-* model of the grid")
    ap.add_argument("--results", default=str(HERE / "results"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = Path(args.work)
    runs = args.runs or sorted(p.name for p in (work / "models").glob("gt-*") if (p / "DONE").exists())
    out = {run: {s: mean_gates(work / "models" / run, work / "gen" / "suites" / f"{s}.json")
                 for s in ("target_k1", "source_k1")} for run in runs}
    dest = Path(args.results) / "gates.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
