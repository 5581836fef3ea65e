"""The counters behind ``GET /metrics`` of ``docnmt serve``: requests by status, tokens, batches,
latency percentiles and the process's resident memory."""
from __future__ import annotations

import os
import threading
import time
from collections import Counter, deque
from pathlib import Path

import numpy as np


class Metrics:
    """Counters for GET /metrics: requests by status, tokens, batches, latency percentiles."""

    def __init__(self, window: float = 60.0):
        self.started = time.time()
        self.lock = threading.Lock()
        self.status: Counter = Counter()
        self.latency: dict[str, deque] = {}
        self.tokens: deque = deque()            # (time, source tokens) of finished batches, last ``window`` s
        self.window = window
        self.totals = Counter()

    def request(self, kind: str, status: int, seconds: float) -> None:
        with self.lock:
            self.status[f"{kind} {status}"] += 1
            if status == 200:
                self.latency.setdefault(kind, deque(maxlen=2000)).append(seconds)

    def batch(self, requests: int, units: int, tokens: int, seconds: float) -> None:
        now = time.monotonic()
        with self.lock:
            self.totals.update(batches=1, batch_requests=requests, units=units, source_tokens=tokens,
                               decode_seconds=seconds)
            self.tokens.append((now, tokens))
            while self.tokens and self.tokens[0][0] < now - self.window:
                self.tokens.popleft()

    def token_rate(self) -> float:
        """Source tokens per second over the last ``window`` seconds (or the uptime, if shorter)."""
        now = time.monotonic()
        with self.lock:
            recent = sum(n for t, n in self.tokens if t >= now - self.window)
        return recent / max(min(self.window, time.time() - self.started), 1.0)

    def snapshot(self) -> dict:
        with self.lock:
            lat = {k: {"count": len(v), **{f"p{q}_ms": round(1000 * float(np.percentile(v, q)), 1)
                                           for q in (50, 90, 99)}} for k, v in self.latency.items() if v}
            t, status = dict(self.totals), dict(self.status)
        uptime = time.time() - self.started
        return {"uptime_s": round(uptime, 1), "requests": status,
                "requests_total": sum(status.values()), "latency": lat,
                "source_tokens_total": t.get("source_tokens", 0),
                "source_tokens_per_s": {"last_60s": round(self.token_rate(), 1),
                                        "while_decoding": round(t.get("source_tokens", 0)
                                                                / max(t.get("decode_seconds", 0), 1e-9), 1)},
                "batches": t.get("batches", 0),
                "requests_per_batch": round(t.get("batch_requests", 0) / max(t.get("batches", 0), 1), 2),
                "rss_mb": rss_mb()}


def rss_mb() -> float | None:
    """Resident memory of this process in MB (Linux), else None."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
