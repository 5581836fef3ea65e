"""Shared set-up of the benchmark scripts: Tier M data (PROTOCOL.md), timing and memory helpers."""
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
    from docnmt.train import forward_loss
    base = peak_rss_mb()
    times = []
    for _ in range(repeats + 1):
        with Timer() as t:
            loss, _, _ = forward_loss(model, batch, 0.1)
            loss.backward()
        times.append(t.seconds)
        model.zero_grad(set_to_none=True)
    return float(np.median(times[1:])), peak_rss_mb() - base
