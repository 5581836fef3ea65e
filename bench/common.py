"""Shared set-up of the benchmark scripts: the Tier M and Tier M-fr data (docs/benchmarks.md), timing and memory
helpers. The experiments (experiments/) prepare the tiers' data through its command line:

    python bench/common.py tier_m [DIR]                  # Tier M into DIR (default bench/.cache/tier_m)
    python bench/common.py tier_mfr [DIR] [--enfr E]     # Tier M-fr (default bench/.cache/tier_mfr)
    python bench/common.py tier_mfr_dry DEST             # a miniature of ../shared/data/enfr (a dry run's)
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "data"
TIER_M_TRAIN = [str(SHARED / "ende/train" / n) for n in ("ted", "news", "europarl", "chat", "flores")]
TIER_M_VALID = [str(SHARED / "ende/valid" / n) for n in ("ted", "news")]


def tier_m_data(directory: str | Path | None = None) -> Path:
    """Prepare Tier M (8K joint SentencePiece BPE) once into ``directory`` (default bench/.cache)."""
    from docnmt.prepare import prepare
    directory = Path(directory or HERE / ".cache" / "tier_m")
    if not (directory / "prepare.json").exists():
        prepare(directory, "en", "de", TIER_M_TRAIN, TIER_M_VALID, vocab_size=8000, force=True,
                log=lambda m: print(m, file=sys.stderr))
    return directory


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def set_threads(n: int) -> None:
    import torch
    torch.set_num_threads(n)
    os.environ["OMP_NUM_THREADS"] = str(n)


def save(name: str, results) -> Path:
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(results, indent=1))
    print(f"saved {path}", file=sys.stderr)
    return path


def run_isolated(script: str, *args) -> dict:
    """Run ``script`` with ``args`` in a fresh process (so peak memory is its own); return the JSON
    object it prints last."""
    import subprocess
    out = subprocess.run([sys.executable, script, *map(str, args)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *a):
        self.seconds = time.perf_counter() - self.t0


def time_forward_backward(model, batch: dict, repeats: int) -> tuple[float, float]:
    """Median seconds of ``repeats`` training forward+backward passes (after one untimed) and
    the peak memory they added (MB)."""
    import numpy as np

    from docnmt.training import forward_loss
    base = peak_rss_mb()
    times = []
    for _ in range(repeats + 1):
        with Timer() as t:
            loss, _, _ = forward_loss(model, batch, 0.1)
            loss.backward()
        times.append(t.seconds)
        model.zero_grad(set_to_none=True)
    return float(np.median(times[1:])), peak_rss_mb() - base


MFR_TRAIN = SHARED / "enfr/train/hansard"
MFR_VALID = SHARED / "enfr/valid/hansard"
MFR_MAX_WORDS = 200   # training pairs with a longer side are dropped (30 of 913,612; the longest has 827 words)


def tier_mfr_data(directory: str | Path | None = None, valid_docs: int = 2, enfr: str | Path | None = None) -> Path:
    """Prepare Tier M-fr once into ``directory`` (default bench/.cache/tier_mfr): one joint 8K
    SentencePiece BPE model learned on the Hansard training text; the validation split used during
    training is the first ``valid_docs`` sittings of enfr/valid/hansard (the systems are scored on
    all six afterwards). ``enfr``: another copy of ``../shared/data/enfr`` (a dry run's)."""
    from docnmt.prepare import prepare
    directory = Path(directory or HERE / ".cache" / "tier_mfr")
    train_prefix = Path(enfr) / "train/hansard" if enfr else MFR_TRAIN
    valid_prefix = Path(enfr) / "valid/hansard" if enfr else MFR_VALID
    if (directory / "prepare.json").exists():
        return directory
    raw = directory.parent / (directory.name + "_raw")
    raw.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "fr"):
        lines = valid_prefix.with_name(f"hansard.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if line == "<d>\n"] + [len(lines)]
        (raw / f"valid{valid_docs}.{lang}").write_text("".join(lines[: starts[valid_docs]]), encoding="utf-8")
    docids = valid_prefix.with_name("hansard.docids").read_text().splitlines()[:valid_docs]
    (raw / f"valid{valid_docs}.docids").write_text("".join(d + "\n" for d in docids))
    src, tgt = (train_prefix.with_name(f"hansard.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)
                for lang in ("en", "fr"))
    keep = [i for i, (s, t) in enumerate(zip(src, tgt))
            if max(len(s.split()), len(t.split())) <= MFR_MAX_WORDS or s == "<d>\n"]
    print(f"Hansard: {len(src) - len(keep)} lines over {MFR_MAX_WORDS} words dropped", file=sys.stderr)
    for lang, lines in (("en", src), ("fr", tgt)):
        (raw / f"train.{lang}").write_text("".join(lines[i] for i in keep), encoding="utf-8")
    (raw / "train.docids").write_text(train_prefix.with_name("hansard.docids").read_text())
    prepare(directory, "en", "fr", [str(raw / "train")], [str(raw / f"valid{valid_docs}")], vocab_size=8000,
            force=True, log=lambda m: print(m, file=sys.stderr))
    return directory


def tier_mfr_dry_copy(dest: str | Path, docs: int = 6, sents: int = 25) -> Path:
    """A miniature of ../shared/data/enfr for ``experiments/tier_mfr/tier_mfr.sh --dry-run``: the first ``docs``
    Hansard sittings of train and valid cut to ``sents`` sentences, the real suites (linked)."""
    dest = Path(dest)
    for split in ("train", "valid"):
        (dest / split).mkdir(parents=True, exist_ok=True)
        src = SHARED / "enfr" / split / "hansard"
        for lang in ("en", "fr"):
            out, d, n = [], 0, 0
            for line in src.with_name(f"hansard.{lang}").read_text(encoding="utf-8").splitlines(keepends=True):
                if line == "<d>\n":
                    d, n = d + 1, 0
                    if d > docs:
                        break
                elif n >= sents:
                    continue
                else:
                    n += 1
                out.append(line)
            (dest / split / f"hansard.{lang}").write_text("".join(out), encoding="utf-8")
        ids = src.with_name("hansard.docids").read_text().splitlines()[:docs]
        (dest / split / "hansard.docids").write_text("".join(i + "\n" for i in ids))
    if not (dest / "suites").exists():
        (dest / "suites").symlink_to(SHARED / "enfr" / "suites")
    return dest


def main() -> None:
    import argparse
    ap = argparse.ArgumentParser(description="prepare a tier's data (docs/benchmarks.md)")
    ap.add_argument("tier", choices=("tier_m", "tier_mfr", "tier_mfr_dry"))
    ap.add_argument("dir", nargs="?", help="where (tier_mfr_dry: required)")
    ap.add_argument("--enfr", help="tier_mfr: another copy of ../shared/data/enfr (a dry run's)")
    a = ap.parse_args()
    if a.tier == "tier_m":
        tier_m_data(a.dir)
    elif a.tier == "tier_mfr":
        tier_mfr_data(a.dir, enfr=a.enfr or None)
    elif not a.dir:
        ap.error("tier_mfr_dry needs DEST")
    else:
        tier_mfr_dry_copy(a.dir)


if __name__ == "__main__":
    main()
