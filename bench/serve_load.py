"""Load test of ``docnmt serve``: requests/s and latency percentiles for sentence and document
requests at 1, 4 and 16 concurrent clients, then the server's memory under steady load.

    python bench/serve_load.py --model docnmt-quickstart/model            # ~16 minutes
    python bench/serve_load.py --model DIR --seconds 10 --soak-minutes 1  # a quick look

Starts ``docnmt serve`` on a free loopback port in a process of its own and sends it nothing but
loopback traffic. Requests come from the BConTrasT dev chats bundled with docnmt
(``docnmt/quickstart_data/valid.en.gz``, 78 chats, 1,980 turns): a *sentence* request is one turn,
a *document* request one whole chat. Each client is a thread that sends its next request as soon
as the last is answered (closed loop) for ``--seconds``, after ``--warmup`` seconds not counted.
The memory soak runs ``--soak-clients`` clients (every fourth sends documents) for
``--soak-minutes`` and samples the server's resident memory (``/proc/PID/status``) every
``--sample`` seconds; growth is the slope of a line fitted to the second half of the samples.
The load average of the machine is sampled too: the figures are only comparable between runs on
an equally idle machine. Saves ``bench/results/serve/load_<model name>.json`` (``--tag`` adds a
suffix).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CHATS = HERE.parent / "docnmt" / "quickstart_data" / "valid.en.gz"


def chats() -> list[list[str]]:
    docs: list[list[str]] = []
    for line in gzip.open(CHATS, "rt", encoding="utf-8").read().splitlines():
        if line.strip() == "<d>":
            docs.append([])
        elif line.strip():
            docs[-1].append(line.strip())
    return docs


def rss_mb(pid: int) -> float:
    m = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(m.group(1)) / 1024


def load(url: str, bodies: list[list[dict]], seconds: float, warmup: float) -> dict:
    """Closed-loop clients (one list of request bodies each, cycled); latencies after ``warmup``."""
    import httpx
    t0 = time.monotonic()
    begin, end = t0 + warmup, t0 + warmup + seconds
    lat, status, sentences, tokens = [], {}, [0], [0]
    lock = threading.Lock()

    def client(mine: list[dict]):
        with httpx.Client(base_url=url, timeout=600) as http:
            k = 0
            while time.monotonic() < end:
                body = mine[k % len(mine)]
                k += 1
                sent = time.monotonic()
                r = http.post("/v1/translate", json=body)
                done = time.monotonic()
                if sent < begin or done > end:
                    continue            # partly outside the measured window
                with lock:
                    status[r.status_code] = status.get(r.status_code, 0) + 1
                    if r.status_code == 200:
                        lat.append(done - sent)
                        sentences[0] += len(body["sentences"])
                        tokens[0] += r.json()["timing"]["source_tokens"]

    before = json.loads(httpx.get(url + "/metrics").text)
    threads = [threading.Thread(target=client, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = json.loads(httpx.get(url + "/metrics").text)
    batches = after["batches"] - before["batches"]
    served = sum(after["requests"].values()) - sum(before["requests"].values())
    out = {"clients": len(bodies), "seconds": seconds, "status": status, "requests_per_s": len(lat) / seconds,
           "sentences_per_s": sentences[0] / seconds, "source_tokens_per_s": tokens[0] / seconds,
           "requests_per_batch": served / max(batches, 1)}
    if lat:
        out.update({f"p{q}_ms": 1000 * float(np.percentile(lat, q)) for q in (50, 90, 99)})
    return out


def soak(url: str, pid: int, bodies: list[list[dict]], minutes: float, sample: float) -> dict:
    samples, loads = [], []
    stop = time.monotonic() + 60 * minutes
    result = {}
    runner = threading.Thread(target=lambda: result.update(load(url, bodies, 60 * minutes, 0.0)))
    runner.start()
    t0 = time.monotonic()
    while time.monotonic() < stop:
        samples.append((time.monotonic() - t0, rss_mb(pid)))
        loads.append(os.getloadavg()[0])
        time.sleep(sample)
    runner.join()
    samples.append((time.monotonic() - t0, rss_mb(pid)))
    t, m = np.array(samples).T
    half = t >= t[-1] / 2
    slope = float(np.polyfit(t[half] / 60, m[half], 1)[0]) if half.sum() > 1 else 0.0
    return {"minutes": minutes, "clients": len(bodies), "rss_mb": [[round(a, 1), round(b, 1)] for a, b in samples],
            "rss_first_mb": float(m[0]), "rss_last_mb": float(m[-1]), "rss_max_mb": float(m.max()),
            "growth_mb_per_min_second_half": slope, "load": result, "loadavg_1min": [round(x, 2) for x in loads]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--soak-minutes", type=float, default=10)
    ap.add_argument("--soak-clients", type=int, default=8)
    ap.add_argument("--sample", type=float, default=10)
    ap.add_argument("--beam", type=int, help="decoding beam (default: the model's)")
    ap.add_argument("--serve-flags", default="", help="extra docnmt serve flags, e.g. '--workers 2'")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()

    docs = chats()
    options = {"scores": True, **({"beam": a.beam} if a.beam else {})}
    sentence_bodies = [{"sentences": [s], "options": options} for d in docs for s in d]
    document_bodies = [{"sentences": d, "options": options} for d in docs]
    out_dir = HERE / "results" / "serve"
    out_dir.mkdir(parents=True, exist_ok=True)
    flags = ["--queue", "256", "--log-level", "warning", *a.serve_flags.split()]
    log = Path(tempfile.mkdtemp(prefix="serve-load-")) / "server.log"
    from docnmt.errors import DocnmtError
    from docnmt.serve import spawn
    try:
        proc, url = spawn({"bench": a.model}, log, flags)
    except DocnmtError as e:
        sys.exit(str(e))
    import httpx
    info = httpx.get(url + "/v1/models").json()["models"][0]
    results = {"model": a.model, "model_info": info, "serve_flags": flags, "cores": os.cpu_count(),
               "loadavg_at_start": os.getloadavg(), "chats": str(CHATS.relative_to(HERE.parent)),
               "cells": []}
    try:
        for kind, bodies in (("sentence", sentence_bodies), ("document", document_bodies)):
            for n in a.clients:
                per_client = [bodies[k::n] for k in range(n)]
                cell = {"kind": kind, **load(url, per_client, a.seconds, a.warmup), "loadavg": os.getloadavg()[0]}
                results["cells"].append(cell)
                print(f"{kind:9s} {n:3d} clients: {cell['requests_per_s']:7.2f} req/s, "
                      f"{cell['sentences_per_s']:7.2f} sent/s, p50 {cell.get('p50_ms', 0):8.0f} ms, "
                      f"p90 {cell.get('p90_ms', 0):8.0f} ms, p99 {cell.get('p99_ms', 0):8.0f} ms, "
                      f"{cell['requests_per_batch']:.2f} req/batch, load {cell['loadavg']:.2f}", flush=True)
        if a.soak_minutes > 0:
            mix = [document_bodies[k::a.soak_clients] if k % 4 == 3 else sentence_bodies[k::a.soak_clients]
                   for k in range(a.soak_clients)]
            results["soak"] = s = soak(url, proc.pid, mix, a.soak_minutes, a.sample)
            print(f"soak {a.soak_minutes:g} min: RSS {s['rss_first_mb']:.0f} -> {s['rss_last_mb']:.0f} MB "
                  f"(max {s['rss_max_mb']:.0f}), second-half slope {s['growth_mb_per_min_second_half']:+.2f} MB/min",
                  flush=True)
        results["metrics_at_end"] = httpx.get(url + "/metrics").json()
    finally:
        proc.terminate()
        proc.wait(30)
    results["loadavg_at_end"] = os.getloadavg()
    name = f"load_{Path(a.model).resolve().name}{'_' + a.tag if a.tag else ''}.json"
    (out_dir / name).write_text(json.dumps(results, indent=1))
    print(f"saved {out_dir / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
