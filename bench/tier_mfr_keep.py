"""Keep what a Tier M-fr run produced in the repository (runs/ is not tracked and a fresh
checkout has none): config.yaml, metrics.jsonl, learning_curve.png, the training time, and every
score file (valid.json, valid.coverage.json, the suites' reports). With --weights also the final
weights as fp16 safetensors plus the vocabulary, so ``docnmt translate KEPT_DIR`` works.

    python bench/tier_mfr_keep.py [--weights] RUN_DIR KEPT_DIR
"""
from __future__ import annotations

import argparse
import json
import shutil
from datetime import datetime
from pathlib import Path

FILES = ("config.yaml", "metrics.jsonl", "learning_curve.png", "dls_lengths.png", "valid.json",
         "valid.coverage.json", "valid.cxmi.json", "anaphora.json", "lexical-choice.json", "scat_yin2021_enfr.json")


def training_time(log: Path, max_gap: float = 1800.0) -> dict:
    """Wall-clock training time from train.log's training records: the time between consecutive
    records, except across a restart (the update count does not grow: a resumed process) or a gap
    over ``max_gap`` seconds (a paused or stopped run). The machine may have been shared: this is
    the time the run took, not its cost on an idle machine."""
    seconds, restarts, prev = 0.0, 0, None
    for line in log.read_text().splitlines():
        try:
            t = datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
            rec = json.loads(line[line.index("{"):])
        except ValueError:
            continue
        if "loss" not in rec or "updates" not in rec:
            continue
        if prev is not None:
            gap = (t - prev[0]).total_seconds()
            if rec["updates"] > prev[1] and gap <= max_gap:
                seconds += gap
            else:
                restarts += 1
        prev = (t, rec["updates"])
    return {"seconds": seconds, "restarts_or_pauses": restarts, "last_update": prev[1] if prev else 0}


def keep(run: Path, dest: Path, weights: bool) -> None:
    if not (run / "config.yaml").exists():
        print(f"keep: {run} has no run yet")
        return
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if (run / name).exists():
            shutil.copy2(run / name, dest / name)
    if (run / "train.log").exists():
        (dest / "training_time.json").write_text(json.dumps(training_time(run / "train.log"), indent=1))
    if weights:
        import torch
        from safetensors.torch import load_file, save_file
        state = load_file(str(run / "model.safetensors"))
        save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in state.items()},
                  str(dest / "model.safetensors"))
        for name in ("spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json"):
            if (run / name).exists():
                shutil.copy2(run / name, dest / name)
    print(f"kept {run} in {dest}" + (" (with fp16 weights)" if weights else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--weights", action="store_true", help="also the final weights (fp16) and the vocabulary")
    a = ap.parse_args()
    keep(a.run, a.dest, a.weights)


if __name__ == "__main__":
    main()
