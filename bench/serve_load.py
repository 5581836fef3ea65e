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

``--mixed SECONDS`` runs the fault mix instead (docs/serving.md#what-you-can-rely-on), against a
server with ``--queue`` (default 16): a probe client sends one sentence every 0.25 s throughout;
the first 20% of the time nothing else runs (idle latency), the next 60% ``--mixed-clients``
closed-loop clients send requests of 1, 5 and 25 sentences, a client every 0.5 s sends a chat and
hangs up 50 ms later, and every ``--burst-every`` seconds a burst of twice the queue arrives at
once (answered 503 beyond the queue); the last 20% is idle again (latency after the bursts). It
saves idle, load, burst and after latency p50/p95, the 503s, the disconnects, resident memory
every ``--sample`` seconds and its growth over the second half (MB/min) to
``bench/results/serve/<--name>.json``::

    python bench/serve_load.py --model DIR --mixed 120 --name load_smoke
    python bench/serve_load.py --tiny /tmp/tiny --mixed 1800 --name load_idle_30min

``--tiny DIR`` serves the test suite's tiny Sent2Sent model (``tests/_tiny.py``: d=32, trained for
60 updates on 12 bundled chats), trained into ``DIR`` first if it is not there.
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
    m = np.array(samples)[:, 1]
    slope = rss_slope(samples)
    return {"minutes": minutes, "clients": len(bodies), "rss_mb": [[round(a, 1), round(b, 1)] for a, b in samples],
            "rss_first_mb": float(m[0]), "rss_last_mb": float(m[-1]), "rss_max_mb": float(m.max()),
            "growth_mb_per_min_second_half": slope, "load": result, "loadavg_1min": [round(x, 2) for x in loads]}


def percentiles(seconds: list[float]) -> dict:
    return {f"p{q}_ms": round(1000 * float(np.percentile(seconds, q)), 1) for q in (50, 95)} if seconds else {}


def rss_slope(samples: list[tuple[float, float]]) -> float:
    """MB per minute of a line fitted to the second half of (seconds, MB) samples."""
    t, m = np.array(samples).T
    half = t >= t[-1] / 2
    return float(np.polyfit(t[half] / 60, m[half], 1)[0]) if half.sum() > 1 else 0.0


def hang_up(url: str, body: dict) -> None:
    """Send ``body`` to /v1/translate and close the connection 50 ms later, unanswered."""
    import socket
    host, port = url.removeprefix("http://").rsplit(":", 1)
    data = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        time.sleep(0.05)


def mixed(url: str, pid: int, docs: list[list[str]], seconds: float, a) -> dict:
    """The fault mix of the module docstring; latencies by phase, 503s, disconnects, memory."""
    import concurrent.futures as cf

    import httpx
    t0 = time.monotonic()
    load_from, load_to = t0 + 0.2 * seconds, t0 + 0.8 * seconds
    end = t0 + seconds
    bursts: list[float] = []                    # start times of the bursts
    lat: dict[str, list[float]] = {"idle": [], "load": [], "burst": [], "after": [], "refused_503": []}
    status: dict[str, dict] = {k: {} for k in ("probe", "load", "burst")}
    count = {"disconnects": 0}
    lock = threading.Lock()
    sizes = [[d[0]] for d in docs] + [d[:5] for d in docs] + docs

    def note(kind: str, code: int) -> None:
        with lock:
            status[kind][code] = status[kind].get(code, 0) + 1

    def phase(t: float) -> str:
        if t < load_from:
            return "idle"
        if t >= load_to:
            return "after"
        return "burst" if any(b <= t < b + a.burst_window for b in bursts) else "load"

    def probe():
        with httpx.Client(base_url=url, timeout=600) as http:
            while (sent := time.monotonic()) < end:
                r = http.post("/v1/translate", json={"sentences": [docs[0][0]]})
                note("probe", r.status_code)
                if r.status_code == 200:
                    lat[phase(sent)].append(time.monotonic() - sent)
                time.sleep(0.25)

    def client(k: int):
        with httpx.Client(base_url=url, timeout=600) as http:
            while time.monotonic() < load_to:
                r = http.post("/v1/translate", json={"sentences": sizes[k % len(sizes)]})
                note("load", r.status_code)
                k += a.mixed_clients

    def burst(pool, http):
        bursts.append(time.monotonic())

        def one(k):
            sent = time.monotonic()
            r = http.post("/v1/translate", json={"sentences": sizes[k % len(sizes)]})
            note("burst", r.status_code)
            if r.status_code in (200, 503):         # how long an accepted one took; how soon a 503 came
                with lock:
                    lat["burst" if r.status_code == 200 else "refused_503"].append(time.monotonic() - sent)
        return [pool.submit(one, k) for k in range(2 * a.queue)]

    samples = []
    threads = [threading.Thread(target=probe)]
    limits = httpx.Limits(max_connections=2 * a.queue)       # one client for all bursts: no set-up per request
    with cf.ThreadPoolExecutor(3 * a.queue) as pool, httpx.Client(base_url=url, timeout=600, limits=limits) as http:
        threads[0].start()
        next_burst = load_from + a.burst_every / 2
        next_hangup = load_from
        while (now := time.monotonic()) < end:
            if now >= load_from and len(threads) == 1:
                threads += [threading.Thread(target=client, args=(k,)) for k in range(a.mixed_clients)]
                for t in threads[1:]:
                    t.start()
            if load_from <= now < load_to and now >= next_burst:
                burst(pool, http)
                next_burst += a.burst_every
            if load_from <= now < load_to and now >= next_hangup:
                pool.submit(hang_up, url, {"sentences": docs[count["disconnects"] % len(docs)]})
                count["disconnects"] += 1
                next_hangup += 0.5
            if not samples or now - t0 - samples[-1][0] >= a.sample:
                samples.append((now - t0, rss_mb(pid)))
            time.sleep(0.05)
    for t in threads:
        t.join()
    samples.append((time.monotonic() - t0, rss_mb(pid)))
    return {"seconds": seconds, "queue": a.queue, "mixed_clients": a.mixed_clients, "bursts": len(bursts),
            "burst_size": 2 * a.queue, "burst_window_s": a.burst_window, "disconnects": count["disconnects"],
            "latency": {k: {"count": len(v), **percentiles(v)} for k, v in lat.items()},
            "status": status, "answered_503": sum(s.get(503, 0) for s in status.values()),
            "rss_mb": [[round(x, 1), round(y, 1)] for x, y in samples],
            "rss_first_mb": samples[0][1], "rss_last_mb": samples[-1][1], "rss_max_mb": max(m for _, m in samples),
            "growth_mb_per_min_second_half": round(rss_slope(samples), 2)}


def print_mixed(r: dict) -> None:
    for k, v in r["latency"].items():
        print(f"{k:11s} latency: {v['count']:5d} answered, p50 {v.get('p50_ms', 0):8.0f} ms, "
              f"p95 {v.get('p95_ms', 0):8.0f} ms", flush=True)
    print(f"503: {r['answered_503']} ({r['bursts']} bursts of {r['burst_size']}), disconnects: {r['disconnects']}, "
          f"RSS {r['rss_first_mb']:.0f} -> {r['rss_last_mb']:.0f} MB (max {r['rss_max_mb']:.0f}), second-half "
          f"growth {r['growth_mb_per_min_second_half']:+.2f} MB/min", flush=True)


def tiny_model(directory: Path) -> Path:
    """The tiny model of ``--tiny`` in ``directory`` (trained there on first use, in a few seconds)."""
    model = directory / "model"
    if not (model / "model.safetensors").exists():
        sys.path.insert(0, str(HERE.parent / "tests"))
        from _tiny import tiny_config, tiny_data
        from docnmt.training import Trainer
        data = tiny_data(directory)
        Trainer.from_dirs(tiny_config("sent2sent", max_update=60), data, model, progress_bar=False).train()
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", help="the model directory to serve")
    where.add_argument("--tiny", type=Path, metavar="DIR", help="serve the tests' tiny model (trained into DIR)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--soak-minutes", type=float, default=10)
    ap.add_argument("--soak-clients", type=int, default=8)
    ap.add_argument("--sample", type=float, default=10)
    ap.add_argument("--beam", type=int, help="decoding beam (default: the model's)")
    ap.add_argument("--serve-flags", default="", help="extra docnmt serve flags, e.g. '--workers 2'")
    ap.add_argument("--tag", default="")
    ap.add_argument("--mixed", type=float, metavar="SECONDS", help="run the fault mix for this long instead")
    ap.add_argument("--queue", type=int, help="the server's --queue (default: 16 with --mixed, else 256)")
    ap.add_argument("--mixed-clients", type=int, default=3)
    ap.add_argument("--burst-every", type=float, default=15.0)
    ap.add_argument("--burst-window", type=float, default=5.0, help="seconds after a burst counted as 'burst'")
    ap.add_argument("--name", help="result file name (default: load_<model>[_tag] or mixed_<model>)")
    a = ap.parse_args()
    a.queue = a.queue or (16 if a.mixed else 256)
    a.model = a.model or str(tiny_model(a.tiny))

    docs = chats()
    options = {"scores": True, **({"beam": a.beam} if a.beam else {})}
    sentence_bodies = [{"sentences": [s], "options": options} for d in docs for s in d]
    document_bodies = [{"sentences": d, "options": options} for d in docs]
    out_dir = HERE / "results" / "serve"
    out_dir.mkdir(parents=True, exist_ok=True)
    flags = ["--queue", str(a.queue), "--log-level", "warning", *a.serve_flags.split()]
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
        if a.mixed:
            results["mixed"] = m = mixed(url, proc.pid, docs, a.mixed, a)
            print_mixed(m)
        for kind, bodies in () if a.mixed else (("sentence", sentence_bodies), ("document", document_bodies)):
            for n in a.clients:
                per_client = [bodies[k::n] for k in range(n)]
                cell = {"kind": kind, **load(url, per_client, a.seconds, a.warmup), "loadavg": os.getloadavg()[0]}
                results["cells"].append(cell)
                print(f"{kind:9s} {n:3d} clients: {cell['requests_per_s']:7.2f} req/s, "
                      f"{cell['sentences_per_s']:7.2f} sent/s, p50 {cell.get('p50_ms', 0):8.0f} ms, "
                      f"p90 {cell.get('p90_ms', 0):8.0f} ms, p99 {cell.get('p99_ms', 0):8.0f} ms, "
                      f"{cell['requests_per_batch']:.2f} req/batch, load {cell['loadavg']:.2f}", flush=True)
        if a.soak_minutes > 0 and not a.mixed:
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
    model = Path(a.model).resolve().name
    name = f"{a.name or (f'mixed_{model}' if a.mixed else f'load_{model}')}{'_' + a.tag if a.tag else ''}.json"
    (out_dir / name).write_text(json.dumps(results, indent=1))
    print(f"saved {out_dir / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
