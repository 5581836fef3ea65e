"""The Tier L stage of bench/gpu/run.py: a ``transformer_base`` Sent2Sent on Hansard, then
G-Transformer fine-tuned from it, each for a fixed share of the stage's minutes; both scored on
the carried validation sittings (s-/d-BLEU, paired bootstrap) and the Bawden and SCAT suites
(exact McNemar), the G-Transformer against the sentence model.

    python bench/gpu/tierl.py OUTDIR [--budget 240] [--dry-run]

Every step is a ``docnmt`` command, as a user would run it; its output goes to the log. The
outputs (translations, coverage reports, evaluation and suite JSON, per-candidate scores,
configs, metrics, learning curves) are packed into ``OUTDIR/tierl.tar.gz`` so that every figure can
be recomputed on a CPU; the weights of ``transformer_base`` (≈ 120 MB in fp16) do not fit in what a
GPU run brings back and stay there. The summary goes to ``OUTDIR/tierl.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# shares of the stage budget: sentence model, G-Transformer; the rest decodes and scores
SHARES = {"sent": 0.36, "gt": 0.18}
KEEP = ("config.yaml", "metrics.jsonl", "train.log", "learning_curve.png")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget", type=float, default=240)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--dry-updates", type=int, default=10, help=argparse.SUPPRESS)   # the dry run's training length
    ap.add_argument("--work", type=Path, help="where the models go (default: a folder in the system's temp dir)")
    a = ap.parse_args()
    data_root = HERE / ("data-dry" if a.dry_run else "data")
    data, valid, suites = data_root / "tierl", data_root / "valid/hansard", data_root / "suites"
    work = a.work or Path(tempfile.gettempdir()) / "docnmt-gpu-tierl"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    t_start = time.time()
    deadline = t_start + a.budget - 20          # what is left is for packing the outputs
    summary: dict = {"ok": True, "steps": []}

    def save() -> None:
        """The summary so far and the outputs, after every step: a stage cut off keeps them."""
        tmp = a.out / "tierl.tar.gz.tmp"       # written aside and renamed: a kill mid-write keeps the last copy
        with tarfile.open(tmp, "w:gz") as tar:
            for path in sorted(work.rglob("*")):
                if path.is_file() and (path.name in KEEP or path.suffix in (".fr", ".json", ".jsonl")) \
                        and "checkpoints" not in path.parts:
                    tar.add(path, arcname=str(path.relative_to(work)))
        os.replace(tmp, a.out / "tierl.tar.gz")
        summary["seconds"] = round(time.time() - t_start, 1)
        (a.out / "tierl.json.tmp").write_text(json.dumps(summary, indent=1))
        os.replace(a.out / "tierl.json.tmp", a.out / "tierl.json")

    def step(*argv: str, needs: bool = True) -> bool:
        """One ``docnmt`` command, stopped at the stage's deadline (then the steps after it are
        skipped); skipped too when a step it ``needs`` did not succeed."""
        t0, left = time.time(), deadline - time.time()
        print("$ docnmt " + " ".join(map(str, argv)), flush=True)
        if not needs:
            rc = "skipped: an earlier step failed"
        elif left < 5:
            rc = "skipped: out of time"
        else:
            try:
                rc = subprocess.run([sys.executable, "-m", "docnmt.cli", *map(str, argv)], cwd=ROOT,
                                    timeout=left).returncode
            except subprocess.TimeoutExpired:
                rc = "stopped: out of time"
        summary["steps"].append({"command": " ".join(map(str, argv[:2])), "rc": rc,
                                 "seconds": round(time.time() - t0, 1)})
        summary["ok"] = summary["ok"] and rc == 0
        save()
        return rc == 0

    minutes = {k: a.budget * v / 60 for k, v in SHARES.items()}
    size = (["--set", "model.d_model=64", "--set", "model.ffn_dim=128", "--set", "model.heads=4",
             "--set", "model.encoder_layers=2", "--set", "model.decoder_layers=2", "--max-tokens", "1500",
             "--max-update", str(a.dry_updates)] if a.dry_run else ["--max-tokens", "16384", "--max-update", "1000000"])
    common = ["--no-progress", "--precision", "bf16", "--set", "train.validate_interval_updates=0",
              "--set", "train.max_epoch=0", "--set", "train.patience=0", "--set", "train.log_interval=50"]
    trained = {"sent": step("train", data, "--arch", "transformer_base", "--save-dir", work / "sent",
                            "--max-minutes", minutes["sent"], "--lr", "1e-3", "--warmup-updates", "300",
                            *size, *common)}
    trained["gt"] = step("train", data, "--arch", "g_transformer_finetune_base", "--init-from", work / "sent",
                         "--save-dir", work / "gt", "--max-minutes", minutes["gt"], "--warmup-updates", "100",
                         # positions restart in each sentence: Tier M-fr measured the paper's document-wide
                         # positions costing a sentence-trained model 1.35 bits/piece at the start
                         # (bench/gt_positions.py)
                         "--set", "method.sentence_positions=true", *size, *common, needs=trained["sent"])
    decode = ["--beam", "5", "--lenpen", "1.0", "-q"]
    translated = {}
    for name in ("sent", "gt"):         # both models' BLEU first, then the suites
        hyp = work / name / "valid.fr"
        translated[name] = step("translate", work / name, "-i", f"{valid}.en", "-o", hyp, "--report",
                                work / name / "valid.coverage.json", *decode, needs=trained[name])
        against = ["--compare", work / "sent/valid.fr"] if name == "gt" and translated["sent"] else []
        step("evaluate", "--hyp", hyp, "--ref", f"{valid}.fr", *against, "--json", work / name / "valid.json",
             needs=translated[name])
    for name in ("sent", "gt"):
        for suite in (suites / "bawden/anaphora.json", suites / "bawden/lexical-choice.json",
                      suites / "scat_yin2021_enfr"):
            s = suite.name.removesuffix(".json")
            base = work / f"sent/{s}.scores.jsonl"
            against = ["--against", base] if name == "gt" and base.exists() else []
            step("score-contrastive", work / name, suite, "-q", "--json", work / name / f"{s}.json",
                 "--scores", work / name / f"{s}.scores.jsonl", *against, needs=trained[name])
    for name in ("sent", "gt"):
        model = work / name
        row = {}
        for f in ("valid.json", "anaphora.json", "lexical-choice.json", "scat_yin2021_enfr.json"):
            if (model / f).exists():
                row[f.removesuffix(".json")] = json.loads((model / f).read_text())
        metrics = model / "metrics.jsonl"
        if metrics.exists():
            rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
            row["updates"] = max((r.get("updates", 0) for r in rows), default=0)
            row["last_valid"] = next((r for r in reversed(rows) if "valid_loss" in r), None)
        summary[name] = row
    summary["minutes"] = minutes
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
