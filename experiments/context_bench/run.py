"""The context-dependence benchmark's grid (experiments/context_bench/README.md): generate the
documents and suites, prepare them, train every method with every recipe, score each model on
every suite, and write the results table, JSON and plot.

Each method is its `docnmt presets` preset shrunk to a tiny Transformer (2+2 layers, d = 64,
FFN 256, 4 heads), trained with ``docnmt train``:

* ``scratch``: from random weights, ``--scratch-updates`` updates (peak lr 2e-3, 200 warm-up);
* ``ft``: each method's fine-tuning recipe (its preset: the G-Transformer's 0.2 x lr for the
  copied weights and word dropout, the context encoder's frozen sentence weights, DocFlat's word
  dropout) from the scratch sentence model (``--init-from``), for each of ``--ft-updates``
  budgets (peak lr 1e-3, 100 warm-up), the way Tier M-fr trained them; the sentence model's own
  row is that model trained on for as long (the control).

Everything resumes: a model directory with a ``DONE`` file is not trained again (an unfinished
one is resumed by ``docnmt train``), a model with its ``scores/RUN.json`` is not scored again.

    OMP_NUM_THREADS=1 nice -n 10 python experiments/context_bench/run.py [--work runs/context_bench]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from generate import DEPENDENCIES, generate  # noqa: E402
from report import write_results  # noqa: E402

TINY = ["model.d_model=64", "model.ffn_dim=256", "model.heads=4", "model.encoder_layers=2", "model.decoder_layers=2",
        "train.max_epoch=0", "train.keep_last=1"]
# method -> (preset from scratch, preset of its fine-tuning recipe, extra flags from scratch)
METHODS = {
    "sent": ("sent2sent_small", "sent2sent_small", []),
    "doc2doc": ("doc2doc_small", "doc2doc_small", []),
    "doc2sent": ("doc2sent_small", "doc2sent_small", []),
    "gt": ("g_transformer_small", "g_transformer_finetune_small", []),
    "pt": ("p_transformer_small", "p_transformer_small", []),
    "docflat": ("docflat_small", "docflat_small", []),
    "pseudodoc": ("pseudodoc_small", "pseudodoc_small", []),     # DocFlat's DOC2DOC: its data, no flat-batch attention
    "context": ("context_transformer_small", "context_transformer_small", ["--no-freeze-pretrained"]),
    "mr": ("mr_small", "mr_small", []),
}
DISTANCES = [1, 2, 3, 4, 5, 10, 80]
# the corpora's event distances, drawn uniformly from this list: short ones more often, so that a
# tiny model learns the dependency within a few thousand updates, long ones up to 12
TRAIN_DISTANCES = [1, 1, 1, 2, 2, 3, 3, 4, 5, 6, 8, 10, 12]


def docnmt(*argv, log: Path | None = None) -> None:
    """Run a docnmt verb (one CPU thread); its output goes to ``log``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log or os.devnull, "a") as f:
        proc = subprocess.run([sys.executable, "-m", "docnmt.cli", *map(str, argv)], cwd=ROOT, env=env,
                              stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode:
        raise RuntimeError(f"docnmt {argv[0]} failed (exit {proc.returncode}); see {log}")


def prepare(work: Path, args) -> Path:
    """Generate the corpora and suites (seeded) and prepare them, once."""
    gen = work / "gen"
    if not (gen / "data" / "prepare.json").exists():
        generate(gen, args.seed, args.train_docs, args.valid_docs, tuple(args.doc_sents), args.train_distances,
                 args.distances, args.examples)
        docnmt("prepare", "-s", "en", "-t", "xx", "--trainpref", gen / "raw" / "train", "--validpref",
               gen / "raw" / "valid", "--destdir", gen / "data", "--vocab-size", 600, "--force",
               log=work / "prepare.log")
    return gen


def plan(args) -> list[tuple[str, str, str, int]]:
    """(run name, method, recipe, updates) in order: the scratch sentence model, the smallest
    fine-tuning budget (the control first), the other scratch runs, the other budgets."""
    scratch = [(f"{m}-scratch{args.scratch_updates}", m, "scratch", args.scratch_updates) for m in args.methods]
    if "scratch" not in args.recipes:
        scratch = [r for r in scratch if r[1] == "sent"]
    budgets = sorted(args.ft_updates) if "ft" in args.recipes else []
    ft = [[(f"{m}-ft{n}", m, "ft", n) for m in args.methods] for n in budgets]
    return scratch[:1] + (ft[0] if ft else []) + scratch[1:] + [r for runs in ft[1:] for r in runs]


def train(work: Path, gen: Path, run: str, method: str, recipe: str, updates: int, args) -> None:
    save = work / "models" / run
    if (save / "DONE").exists():
        return
    scratch, finetune, extra = METHODS[method]
    argv = ["train", gen / "data", "--arch", scratch if recipe == "scratch" else finetune, "--save-dir", save,
            "--max-update", updates, "--max-tokens", 2048, "--patience", 0, "--threads", 1, "--no-progress",
            "--log-interval", 100, "--seed", args.seed]
    argv += [x for s in TINY for x in ("--set", s)]
    if recipe == "scratch":
        argv += ["--lr", 2e-3, "--warmup-updates", 200, *extra]
    else:
        argv += ["--init-from", work / "models" / f"sent-scratch{args.scratch_updates}", "--lr", 1e-3,
                 "--warmup-updates", 100]
    start = time.time()
    docnmt(*argv, log=work / "logs" / f"{run}.log")
    (save / "DONE").write_text(json.dumps({"seconds": round(time.time() - start, 1)}) + "\n")


def score(work: Path, gen: Path, run: str, method: str, recipe: str, updates: int) -> None:
    out = work / "scores" / f"{run}.json"
    if out.exists():
        return
    from score import score_model
    control = f"sent-{recipe}{updates}"
    against = None if method == "sent" else work / "scores" / control
    result = score_model(work / "models" / run, gen / "suites", against, work / "scores" / run)
    done = json.loads((work / "models" / run / "DONE").read_text())
    out.write_text(json.dumps({"run": run, "method": method, "recipe": recipe, "updates": updates,
                               "train_seconds": done["seconds"], "suites": result}, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "context_bench"), help="models, scores, logs (not in git)")
    ap.add_argument("--results", default=str(HERE / "results"), help="where the table, JSON and plot go")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--recipes", nargs="+", default=["scratch", "ft"], choices=["scratch", "ft"])
    ap.add_argument("--scratch-updates", type=int, default=2500)
    ap.add_argument("--ft-updates", type=int, nargs="+", default=[300, 1500])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-docs", type=int, default=1200)
    ap.add_argument("--valid-docs", type=int, default=60)
    ap.add_argument("--doc-sents", type=int, nargs=2, default=[12, 30], metavar=("MIN", "MAX"),
                    help="sentences per training document")
    ap.add_argument("--train-distances", type=int, nargs="+", default=TRAIN_DISTANCES,
                    help="the corpora's event distances (drawn uniformly from this list)")
    ap.add_argument("--examples", type=int, default=200, help="examples per suite")
    ap.add_argument("--distances", type=int, nargs="+", default=DISTANCES)
    args = ap.parse_args()
    if "sent" not in args.methods:
        args.methods.insert(0, "sent")          # every row is tested against the sentence model
    work = Path(args.work)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    gen = prepare(work, args)
    for run, method, recipe, updates in plan(args):
        print(f"== {time.strftime('%F %T')} {run}", flush=True)
        try:
            train(work, gen, run, method, recipe, updates, args)
            score(work, gen, run, method, recipe, updates)
        except RuntimeError as e:                 # one failed run does not stop the grid
            print(f"   FAILED: {e}", flush=True)
            continue
        write_results(work / "scores", Path(args.results), DEPENDENCIES, args.distances)
    write_results(work / "scores", Path(args.results), DEPENDENCIES, args.distances)


if __name__ == "__main__":
    main()
