"""Score the kept Tier M-fr models on the Hansard pronoun suites (build.py) with `docnmt
score-contrastive`, each against the control (exact McNemar), and write results/scores.json and
results/table.md. Only models whose weights are kept can be scored (experiments/restore_weights.py
puts them back from the repository's history first).

    python experiments/hansard_pronouns/score.py [--suites experiments/hansard_pronouns/suite] [--models control gt ...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KEPT = ROOT / "experiments" / "tier_mfr" / "results"
MODELS = ["control", "stage1", "gt", "gt_sentpos_lr1_nowd"]      # the Tier M-fr runs whose weights are kept
SUITES = ["all", "antecedent"]


def run(*argv: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, check=True)


def score(model_dir: Path, name: str, suite: str, suites: Path, work: Path) -> dict:
    out = work / f"{name}.{suite}"
    if not Path(f"{out}.json").exists():
        weights = model_dir / "weights.json"
        if not (model_dir / "model.safetensors").exists() and weights.exists():
            run(str(ROOT / "experiments" / "restore_weights.py"), str(weights))
        against = [] if name == "control" else ["--against", str(work / f"control.{suite}.scores.jsonl")]
        run("-m", "docnmt.cli", "score-contrastive", str(model_dir), str(suites / suite), "--langs", "en", "fr",
            "--scores", f"{out}.scores.jsonl", "--json", f"{out}.json", "-q", "--force", *against)
    return json.loads(Path(f"{out}.json").read_text())


def verified(suites: Path) -> list[int]:
    """Indices of the antecedent/ examples the hand check (results/handcheck.tsv) confirmed."""
    import csv
    check = HERE / "results" / "handcheck.tsv"
    if not check.exists():
        return []
    refs = (suites / "antecedent" / "contrapro.text.fr").read_text(encoding="utf-8").split("\n")[0::2]
    ctx = (suites / "antecedent" / "contrapro.context.fr").read_text(encoding="utf-8").split("\n")
    index = {(refs[i], " ||| ".join(c for c in ctx[6 * i: 6 * i + 3] if c)): i for i in range(len(refs))}
    rows = csv.DictReader(open(HERE / "results" / "handcheck_input.tsv", encoding="utf-8"), delimiter="\t")
    verdicts = csv.DictReader(open(check, encoding="utf-8"), delimiter="\t")
    return sorted(index[(r["sentence_fr"], r["context_fr"])] for r, v in zip(rows, verdicts) if v["verdict"] == "yes")


def verified_row(work: Path, name: str, keep: list[int]) -> dict:
    from docnmt.contrastive import paired_test, read_decisions
    right = read_decisions(work / f"{name}.antecedent.scores.jsonl")
    control = read_decisions(work / "control.antecedent.scores.jsonl")
    mine, base = [right[i] for i in keep], [control[i] for i in keep]
    return {"accuracy": round(100 * sum(mine) / len(mine), 2), "correct": sum(mine), "examples": len(mine),
            "against": None if name == "control" else paired_test(base, mine), "balanced": None}


def balanced(report: dict) -> float | None:
    """Mean accuracy over the reference pronouns (the suite is mostly masculine)."""
    rows = [v["accuracy"] for v in report["by"].get("pronoun", {}).values() if v["examples"]]
    return round(100 * sum(rows) / len(rows), 2) if rows else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default=str(HERE / "suite"))
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--work", default=str(ROOT / "runs" / "hansard_pronouns" / "scores"), help="per-example scores")
    args = ap.parse_args()
    suites, results = Path(args.suites), Path(args.results)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    names = ["control"] + [m for m in args.models if m != "control"]
    table = {}
    for name in names:
        for suite in SUITES:
            r = score(KEPT / name, name, suite, suites, work)
            table.setdefault(name, {})[suite] = {"accuracy": round(100 * r["accuracy"], 2), "correct": r["correct"],
                                                 "examples": r["examples"], "against": r.get("against"),
                                                 "by": r["by"]}
            table[name][suite]["balanced"] = balanced(r)
        keep = verified(suites)
        if keep:
            table[name]["antecedent, hand-checked"] = verified_row(work, name, keep)
    (results / "scores.json").write_text(json.dumps(table, indent=1) + "\n")
    lines = ["| model | suite | accuracy | correct/total | per-pronoun mean | vs control (McNemar p) |",
             "|---|---|---|---|---|---|"]
    for name, per in table.items():
        for suite, r in per.items():
            vs = r.get("against") or {}
            diff = f"{100 * vs['delta']:+.2f} (p = {vs['p_value']:.3g})" if vs else "—"
            lines.append(f"| {name} | {suite} | {r['accuracy']:.2f} | {r['correct']}/{r['examples']} | "
                         f"{r['balanced'] if r['balanced'] is not None else '—'} | {diff} |")
    (results / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
