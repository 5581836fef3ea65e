"""Keep what a Tier M-fr run produced in the repository (runs/ is not tracked and a fresh
checkout has none): config.yaml, metrics.jsonl, learning_curve.png, the training time, every
score file (valid.json, valid.coverage.json, valid.cxmi.json, the suites' reports), the validation
translation (valid.fr.gz) and the suites' per-example scores (*.scores.jsonl), so every test
against the control can be recomputed. With --weights also the final weights as fp16 safetensors
plus the vocabulary, so ``docnmt translate KEPT_DIR`` works (--fp32: the weights as trained).

    python experiments/tier_mfr/tier_mfr_keep.py [--weights [--fp32]] [--started-from W] RUN_DIR KEPT_DIR
    python experiments/tier_mfr/tier_mfr_keep.py --scores-only --started-from W RUN_DIR KEPT_DIR
    python experiments/tier_mfr/tier_mfr_keep.py --restore [--scores-only] --started-from W KEPT_DIR RUN_DIR
    python experiments/tier_mfr/tier_mfr_keep.py --restore-trained --started-from W KEPT_DIR RUN_DIR

--started-from W records the SHA-256 of the weights W a stage-2 run was fine-tuned from (the
kept stage-1 model) as started_from.sha256. --restore is for a queue whose runs/ was lost: when
KEPT_DIR holds a fully scored run that started from the same W, it puts the files later runs are
compared with (valid.fr, the suites' scores) back into RUN_DIR and exits 0; otherwise it exits 3
(the run must be trained again: never a table that mixes two stage-1 models); any other failure
exits otherwise, and the queue stops rather than train a run again for hours.
--scores-only is for a model scored but not trained by the queue (stage 1, scored as a system
beside the others): only its score files, translation and suite scores are kept (W is then the
scored weights themselves), and --restore needs no CXMI.
--restore-trained is for a run trained to its last update whose scoring runs/ lost: the queue
keeps every run's weights (fp16) as soon as it is trained, and this puts them back as a model
directory to score (weights_restored.json marks it), exit 3 when there is none.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from restore_weights import sha256  # noqa: E402  (experiments/: the one file hash of the kept weights)

SUITES = ("anaphora", "lexical-choice", "scat_yin2021_enfr")
SCORES = tuple(f"{s}.json" for s in SUITES) + ("valid.json", "valid.coverage.json", "valid.cxmi.json")
# a separator-format run decoded again with the source's sentence count forced (kept, not needed to restore)
COUNT = ("valid.count.json", "valid.count.coverage.json")
COMPARED = tuple(f"{s}.scores.jsonl" for s in SUITES)   # what the next runs are tested against
# the in-domain suites (experiments/hansard_pronouns), added after most runs were kept: kept and put back
# where a run has them, never needed to restore one
INDOMAIN = tuple(f"hansard_{s}.{ext}" for s in ("all", "antecedent") for ext in ("json", "scores.jsonl"))
AGAINST = "valid.vs_*.json"   # tests against a second baseline (tier_mfr.sh ALSO), one file per baseline
RESTORED = "weights_restored.json"    # a run scored from its kept (fp16) weights after runs/ was lost
FILES = ("config.yaml", "metrics.jsonl", "learning_curve.png", "dls_lengths.png", RESTORED) \
    + SCORES + COUNT + COMPARED + INDOMAIN
MODEL = ("config.yaml", "metrics.jsonl", "model.safetensors", "vocab.json")   # what a kept trained run needs
NOTHING = 3    # --restore / --restore-trained: nothing to restore (a crash exits 1, and stops the queue)


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




def keep(run: Path, dest: Path, weights: bool, fp32: bool = False, started_from: Path | None = None,
         scores_only: bool = False) -> None:
    if scores_only:
        if not (run / "valid.fr").exists():
            raise SystemExit(f"keep: {run} has no translation to keep")
    elif not (run / "config.yaml").exists():
        restored = (run / "valid.fr").exists()
        print(f"keep: {run} has no run" + (" (restored from its kept results: to keep its weights, run the "
                                           "queue again with RETRAIN=<run>)" if restored else " yet"))
        return
    dest.mkdir(parents=True, exist_ok=True)
    if started_from:
        (dest / "started_from.sha256").write_text(sha256(started_from) + "\n")
    if not scores_only and not (run / RESTORED).exists():
        (dest / RESTORED).unlink(missing_ok=True)          # trained again (RETRAIN): no longer from fp16 weights
    against = tuple(p.name for p in sorted(run.glob(AGAINST)))
    for name in ((SCORES + COUNT + COMPARED + INDOMAIN) if scores_only else FILES) + against:
        if (run / name).exists():
            shutil.copy2(run / name, dest / name)
    for translation in ("valid.fr", "valid.count.fr"):     # the second: decoded with the sentence count forced
        if (run / translation).exists():
            with open(run / translation, "rb") as f, \
                    gzip.GzipFile(dest / f"{translation}.gz", "wb", mtime=0) as g:
                shutil.copyfileobj(f, g)
    if (run / "train.log").exists() and not scores_only:
        (dest / "training_time.json").write_text(json.dumps(training_time(run / "train.log"), indent=1))
    if weights:
        import torch
        from safetensors.torch import load_file, save_file
        state = load_file(str(run / "model.safetensors"))
        dtype = torch.float32 if fp32 else torch.float16
        save_file({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()},
                  str(dest / "model.safetensors"))
        for name in ("spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json"):
            if (run / name).exists():
                shutil.copy2(run / name, dest / name)
    print(f"kept {run} in {dest}" + (f" (with {'fp32' if fp32 else 'fp16'} weights)" if weights else ""))


def restore(kept: Path, run: Path, started_from: Path, scores_only: bool = False) -> bool:
    """Put a fully scored kept run's translation and suite scores back into ``run`` (which must
    not hold a run: a trained run is never touched). False if ``kept`` is not fully scored or was
    fine-tuned from other weights than ``started_from`` (``scores_only``: a scored model, no CXMI
    needed)."""
    if (run / "config.yaml").exists():
        raise SystemExit(f"restore: {run} holds a run; nothing restored")
    needed = tuple(n for n in SCORES if not (scores_only and n == "valid.cxmi.json"))
    if not all((kept / n).exists() for n in needed + COMPARED + ("valid.fr.gz", "started_from.sha256")):
        return False
    if (kept / "started_from.sha256").read_text().strip() != sha256(started_from):
        print(f"restore: {kept} started from (or scored) other weights than {started_from}: done again")
        return False
    run.mkdir(parents=True, exist_ok=True)
    for name in COMPARED:
        shutil.copy2(kept / name, run / name)
    for name in INDOMAIN:
        if (kept / name).exists():
            shutil.copy2(kept / name, run / name)
    with gzip.open(kept / "valid.fr.gz", "rb") as g, open(run / "valid.fr", "wb") as f:
        shutil.copyfileobj(g, f)
    # as old as the scores kept with it: a restored translation (the control's above all) is not a
    # new one, so the runs scored against it are not scored again (tier_mfr.sh's newer())
    os.utime(run / "valid.fr", (0, 0))
    print(f"restored {run}'s translation and suite scores from {kept}")
    return True


def restore_trained(kept: Path, run: Path, started_from: Path) -> bool:
    """Put a kept run that was trained to its last update, from the same ``started_from``, back
    into ``run`` from its kept weights (fp16) and vocabulary, so that a queue whose runs/ was lost
    scores it instead of training it again; ``run/weights_restored.json`` says so and is kept with
    its scores. Any of its scoring already kept (a translation, score files) comes back too, so
    the queue does only the rest. False when ``kept`` has no such run (no weights, other stage-1 weights, or its
    metrics stop before the configured last update)."""
    import yaml
    if (run / "config.yaml").exists():
        raise SystemExit(f"restore: {run} holds a run; nothing restored")
    if not all((kept / n).exists() for n in MODEL + ("started_from.sha256",)):
        return False
    if (kept / "started_from.sha256").read_text().strip() != sha256(started_from):
        print(f"restore: {kept} started from other weights than {started_from}: trained again")
        return False
    last = max((json.loads(line).get("updates", 0) for line in (kept / "metrics.jsonl").read_text().splitlines()
                if line.strip()), default=0)
    wanted = ((yaml.safe_load((kept / "config.yaml").read_text()) or {}).get("train") or {}).get("max_update", 0)
    if not wanted or last < wanted:
        print(f"restore: {kept} was kept at update {last} of {wanted or '?'}: trained again")
        return False
    run.mkdir(parents=True, exist_ok=True)
    for name in MODEL + ("spm.model", "bpe.codes", "bpe.vocab.json", "learning_curve.png", "dls_lengths.png") \
            + SCORES + COUNT + COMPARED + INDOMAIN:      # and whatever of its scoring was kept: only the rest again
        if (kept / name).exists():
            shutil.copy2(kept / name, run / name)
    for translation in ("valid.fr", "valid.count.fr"):
        if (kept / f"{translation}.gz").exists():
            with gzip.open(kept / f"{translation}.gz", "rb") as g, open(run / translation, "wb") as f:
                shutil.copyfileobj(g, f)
            os.utime(run / translation, (0, 0))      # older than the scores kept with it (tier_mfr.sh's newer())
    (run / RESTORED).write_text(json.dumps({"weights": "model.safetensors kept in fp16", "updates": last}) + "\n")
    print(f"restored {run} from {kept}'s weights (trained to update {last}): it is scored, not trained again")
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--weights", action="store_true", help="also the final weights (fp16) and the vocabulary")
    ap.add_argument("--fp32", action="store_true", help="with --weights: keep the weights in fp32, as trained")
    ap.add_argument("--started-from", type=Path, metavar="W", help="the weights a stage-2 run started from")
    ap.add_argument("--restore", action="store_true", help="the other way: KEPT_DIR RUN_DIR (see above)")
    ap.add_argument("--scores-only", action="store_true", help="a model scored, not trained, by the queue")
    ap.add_argument("--restore-trained", action="store_true",
                    help="KEPT_DIR RUN_DIR: a run trained to the end, not yet scored, from its kept weights")
    a = ap.parse_args()
    if a.restore_trained:
        if not a.started_from:
            ap.error("--restore-trained needs --started-from")
        sys.exit(0 if restore_trained(a.run, a.dest, a.started_from) else NOTHING)
    if a.restore:
        if not a.started_from:
            ap.error("--restore needs --started-from")
        sys.exit(0 if restore(a.run, a.dest, a.started_from, a.scores_only) else NOTHING)
    if a.scores_only and (a.weights or not a.started_from):
        ap.error("--scores-only keeps no weights and needs --started-from")
    keep(a.run, a.dest, a.weights, a.fp32, a.started_from, a.scores_only)


if __name__ == "__main__":
    main()
