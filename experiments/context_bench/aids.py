"""How many fine-tuning updates each training aid needs to open the context path (issue 67), on the
context-dependence benchmark (experiments/context_bench/README.md#training-aids).

For the G-Transformer and Doc2Doc, fine-tuned from the grid's scratch sentence model with the
grid's ``ft`` recipe (run.py; ``--recipe tier_mfr``: the Tier M-fr queue's, whose G-Transformer
restarts positions in every sentence, trains the copied weights at the full learning rate and
has no word dropout), once without an aid and once with each aid alone, at the settings
of the Tier M-fr queue (CoWord dropout 0.1, split pairs 0.3, context margin 0.5), for
``--updates`` updates with a checkpoint every ``--every`` updates, all kept. Every checkpoint is
scored on the k = 1, 2, 3 suites of both dependencies (contrastive accuracy, %; the sentence
model scores exactly 50). A dependency *opens* at the first
checkpoint whose k = 1 accuracy is at least ``--open`` (75: halfway from chance to perfect).

    OMP_NUM_THREADS=1 nice -n 10 python experiments/context_bench/aids.py [--work runs/context_bench]

Needs the grid's generated data and ``models/sent-scratch2500`` (run.py makes them). Resumes: a run with a
``DONE`` file is not trained again, a checkpoint already in ``aids/<run>.curve.json`` is not
scored again. Writes ``results/aids.json`` and ``results/aids.md`` (the runs of earlier invocations kept).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from run import HERE, METHODS, ROOT, TINY, docnmt

AIDS = {"none": [], "coword": ["--coword-dropout", 0.1], "split": ["--split-pairs", 0.3],
        "margin": ["--context-margin", 0.5]}
# fine-tuning recipes: extra flags per method (grid: run.py's ft recipe as it is)
RECIPES = {"grid": {},
           "tier_mfr": {"gt": ["--set", "method.sentence_positions=true", "--pretrained-lr-scale", 1.0,
                               "--word-dropout", 0]},
           "sentpos": {"gt": ["--set", "method.sentence_positions=true"],    # the paper's recipe, positions restarting
                       "doc2doc": ["--sentence-positions"]},
           # the two other changes of tier_mfr, each beside positions restarting (sentpos alone stays at chance)
           "sentpos_lr1": {"gt": ["--set", "method.sentence_positions=true", "--pretrained-lr-scale", 1.0]},
           "sentpos_nowd": {"gt": ["--set", "method.sentence_positions=true", "--word-dropout", 0]},
           "nowd": {"gt": ["--word-dropout", 0]}}      # the paper's recipe without its word dropout
SUITES = [f"{dep}_k{k}" for dep in ("target", "source") for k in (1, 2, 3)]


def run_name(method: str, aid: str, args) -> str:
    return f"{method}-ft{args.updates}-{aid}" + ("" if args.recipe == "grid" else f"-{args.recipe}")


def train(work: Path, run: str, method: str, aid: str, args) -> Path:
    save = work / "models" / run
    if (save / "DONE").exists():
        return save
    _, finetune, _ = METHODS[method]
    argv = ["train", work / "gen" / "data", "--arch", finetune, "--save-dir", save, "--max-update", args.updates,
            "--max-tokens", 2048, "--patience", 0, "--threads", 1, "--no-progress", "--log-interval", 100,
            "--seed", args.seed, "--init-from", work / "models" / f"sent-scratch{args.scratch_updates}",
            "--lr", 1e-3, "--warmup-updates", 100, "--save-interval-updates", args.every, *AIDS[aid],
            *RECIPES[args.recipe].get(method, [])]
    argv += [x for s in TINY for x in ("--set", s)]
    argv += ["--set", "train.keep_last=100000"]     # every checkpoint (epoch ends save one too) until scored
    start = time.time()
    docnmt(*argv, log=work / "logs" / f"{run}.log")
    (save / "DONE").write_text(json.dumps({"seconds": round(time.time() - start, 1)}) + "\n")
    return save


def curve(work: Path, save: Path, run: str) -> dict[int, dict[str, float]]:
    """k = 1..3 accuracy of every kept checkpoint, {updates: {suite: accuracy}}."""
    from docnmt.contrastive import accuracy_report, score_examples
    from docnmt.suites import read_suite
    from docnmt.translate import Translator
    torch.set_num_threads(1)
    path = work / "aids" / f"{run}.curve.json"
    done = {int(u): v for u, v in json.loads(path.read_text()).items()} if path.exists() else {}
    suites = {name: read_suite(work / "gen" / "suites" / f"{name}.json", "voita", detokenize=False)
              for name in SUITES}
    for ckpt in sorted((save / "checkpoints").glob("u*")):
        updates = int(ckpt.name[1:])
        if updates in done:
            continue
        tr = Translator.load(save, ckpt, "cpu")
        done[updates] = {name: round(100 * accuracy_report(ex, score_examples(tr, ex))["accuracy"], 1)
                         for name, ex in suites.items()}
        path.write_text(json.dumps(done, indent=1, sort_keys=True) + "\n")
    return dict(sorted(done.items()))


def opened(points: dict[int, dict[str, float]], suite: str, threshold: float) -> int | None:
    """The first checkpoint (updates) whose accuracy on ``suite`` is at least ``threshold``."""
    return next((u for u, acc in points.items() if acc[suite] >= threshold), None)


def report(rows: list[dict], results: Path, threshold: float) -> None:
    results.mkdir(parents=True, exist_ok=True)
    path = results / "aids.json"
    earlier = json.loads(path.read_text()) if path.exists() else []
    for r in earlier:                                   # JSON made the updates strings
        r["curve"] = {int(u): acc for u, acc in sorted(r["curve"].items(), key=lambda kv: int(kv[0]))}
    ours = {r["run"] for r in rows}
    rows = [r for r in earlier if r["run"] not in ours] + rows
    path.write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["<!-- written by experiments/context_bench/aids.py -->",
             f"Updates until the k = 1 accuracy first reaches {threshold:g}% (— : not within the run), "
             "then the accuracy (%) after the last update; T = target side, S = source side.", "",
             "| method | recipe | aid | T opens at | S opens at | " + " | ".join(s.replace("target_", "T ").replace(
                 "source_", "S ").replace("k", "k=") for s in SUITES) + " |",
             "|---|---|---|---:|---:|" + "---:|" * len(SUITES)]
    for r in rows:
        last = r["curve"][max(r["curve"])] if r["curve"] else {}
        cells = " | ".join(f"{last[s]:.0f}" if s in last else "" for s in SUITES)
        t, s = (r["opens"][d] if r["opens"][d] is not None else "—" for d in ("target", "source"))
        lines.append(f"| {r['method']} | {r.get('recipe', 'grid')} | {r['aid']} | {t} | {s} | {cells} |")
    (results / "aids.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "context_bench"))
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--methods", nargs="+", default=["gt", "doc2doc"], choices=[m for m in METHODS if m != "sent"])
    ap.add_argument("--aids", nargs="+", default=list(AIDS), choices=list(AIDS))
    ap.add_argument("--updates", type=int, default=1500)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--scratch-updates", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--recipe", default="grid", choices=list(RECIPES))
    ap.add_argument("--open", type=float, default=75.0, help="accuracy (%%) at k = 1 that counts as open")
    args = ap.parse_args()
    work = Path(args.work)
    (work / "aids").mkdir(parents=True, exist_ok=True)
    if not (work / "models" / f"sent-scratch{args.scratch_updates}" / "DONE").exists():
        raise SystemExit(f"no {work}/models/sent-scratch{args.scratch_updates}: run run.py first")
    rows = []
    for method in args.methods:
        for aid in args.aids:
            run = run_name(method, aid, args)
            print(f"== {time.strftime('%F %T')} {run}", flush=True)
            try:
                save = train(work, run, method, aid, args)
            except RuntimeError as e:
                print(f"   FAILED: {e}", flush=True)
                continue
            points = curve(work, save, run)
            rows.append({"method": method, "recipe": args.recipe, "aid": aid, "run": run,
                         "flags": [str(x) for x in AIDS[aid] + RECIPES[args.recipe].get(method, [])],
                         "opens": {d: opened(points, f"{d}_k1", args.open) for d in ("target", "source")},
                         "curve": points})
            report(rows, Path(args.results), args.open)


if __name__ == "__main__":
    main()
