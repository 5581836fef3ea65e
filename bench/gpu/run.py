"""docnmt on a GPU, in one command: environment, CUDA correctness, speed against Hugging Face, and
a Tier L model, each stage with its own time budget.

    python bench/gpu/run.py OUTDIR [--dry-run] [--stages env correctness speed tierl] [--scale 1.0]
    bash bench/gpu/run.sh OUTDIR          # the same, installing docnmt first (the GPU machine)

Writes ``OUTDIR/results.json`` (rewritten after every stage, so a cut-off run keeps what it has)
and ``OUTDIR/log.txt`` (every stage's output). A stage runs in its own process under its budget
(× ``--scale``); a stage that fails or runs out of time is recorded as such and the next one
runs. ``--dry-run`` runs every stage on the CPU at tiny sizes on ``bench/gpu/data-dry`` (made by
``bench/gpu/prepare.py --dry-run``), as ``tests/integration/test_gpu_bench.py`` and
``experiments/tier_l/test_tierl.py`` do.
See bench/gpu/README.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# the stages run as scripts of their own: speed here, Tier L (one comparison) in experiments/tier_l
STAGE_SCRIPTS = {"speed": HERE / "speed.py", "tierl": ROOT / "experiments/tier_l/tierl.py"}

# seconds; 540 in all, each stage allowed about 30 s more to finish: give the device call 600 s
BUDGETS = {"env": 20, "correctness": 150, "speed": 130, "tierl": 240}
DRY_BUDGETS = {"env": 60, "correctness": 300, "speed": 300, "tierl": 300}

# the dry run's share of the CUDA checks: one preset per method family, the small sizes, one
# decoding check (the whole list runs on the GPU)
DRY_TESTS = ("transformer_tiny or g_transformer_small or p_transformer_small or docflat_small or "
             "context_transformer_small or doc2doc_dls_laa_small or flex or kernel or incremental or "
             "batched_equals_unbatched_decoding_fp32 and sent2sent or torchrun")


def stage_env(out: Path, dry: bool) -> dict:
    """GPU name, versions, and the measured bf16 peak of one n³ matmul (n = 8192; 512 in a dry run)."""
    import torch
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
            "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30 if cuda else None,
            "cpu_threads": torch.get_num_threads()}
    n = 512 if dry or not cuda else 8192
    a, b = (torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    reps = 3 if dry else 20
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    seconds = (time.perf_counter() - t0) / reps
    info.update({"matmul_n": n, "bf16_matmul_seconds": seconds, "bf16_peak_tflops": 2 * n**3 / seconds / 1e12})
    return info


def kill_marked(mark: str) -> int:
    """SIGKILL every process whose environment holds ``DOCNMT_GPU_STAGE=mark``: what a stage
    started, including processes in sessions of their own (torchrun's agent and worker), which a
    kill of the stage's process group misses. How many were killed."""
    killed = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            marked = f"DOCNMT_GPU_STAGE={mark}".encode() in (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marked:
            with contextlib.suppress(OSError):
                os.kill(int(d.name), signal.SIGKILL)
                killed += 1
    return killed


def stage_correctness(out: Path, dry: bool, budget: float) -> dict:
    """``pytest -m cuda tests/cuda`` (verbose, so a run cut off by its budget keeps the verdicts so far)."""
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "pytest", "tests/cuda", "-m", "cuda", "-v", "-p", "no:cacheprovider",
           "-o", "addopts=", "--tb=line", "-W", "ignore::UserWarning"]
    if dry:
        env["DOCNMT_CUDA_TESTS_ON_CPU"] = "1"
        cmd += ["-k", DRY_TESTS]
    elif os.environ.get("DOCNMT_GPU_TESTS"):      # a pytest -k expression: spend a short run on what is left
        cmd += ["-k", os.environ["DOCNMT_GPU_TESTS"]]
    lines = []
    env["DOCNMT_GPU_STAGE"] = mark = f"correctness-{os.getpid()}-{time.time_ns()}"
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # killed at the deadline even in the middle of a test that prints nothing for minutes
    fired = threading.Event()
    watchdog = threading.Timer(budget, lambda: (fired.set(), proc.kill()))
    watchdog.start()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            print(line, end="", flush=True)
    finally:
        watchdog.cancel()
        timed_out = fired.is_set()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        left = kill_marked(mark)        # e.g. a torchrun the timer interrupted: not into the next stage
    verdicts = {}
    for line in lines:
        m = re.match(r"(tests/cuda/\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR)", line)
        if m:
            verdicts[m.group(1).split("::", 1)[1]] = m.group(2).lower()
    failures = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]   # pytest's short summary
    counts = {k: sum(v == k for v in verdicts.values()) for k in ("passed", "failed", "skipped", "error")}
    return {"counts": counts, "tests": verdicts, "failures": failures[-40:], "timed_out": timed_out,
            "processes_left_and_killed": left,
            "returncode": proc.returncode, "ok": not timed_out and counts["failed"] == counts["error"] == 0
            and counts["passed"] > 0}


def run_stage(name: str, out: Path, dry: bool, budget: float, log) -> dict:
    """One stage in its own process, under ``budget`` seconds; its JSON result (or why there is none)."""
    t0 = time.time()
    result_file = out / f"{name}.json"
    result_file.unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE / "run.py"), str(out), "--one", name, "--budget", str(budget)]
    if name in STAGE_SCRIPTS:
        cmd = [sys.executable, str(STAGE_SCRIPTS[name]), str(out), "--budget", str(budget)]
    if dry:
        cmd.append("--dry-run")
    log(f"== stage {name} (budget {budget:.0f} s): {' '.join(cmd)}")
    # its own process group: when the stage ends, in time or not, every process it started goes too
    # (but not one that started a session of its own, as the torchrun test's do)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)

    def read() -> None:
        try:
            for line in proc.stdout:
                log(line.rstrip("\n"))
        except Exception as e:                         # keep draining, or the stage blocks on a full pipe
            log(f"(log reader: {e!r})")
            for _ in proc.stdout:
                pass
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    status = "ok"
    try:
        proc.wait(timeout=budget + 30)        # the stage's own budget, plus time to write its results
    except subprocess.TimeoutExpired:
        status = "timeout"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(timeout=10)
    if status == "ok" and proc.returncode != 0:
        status = f"failed (exit {proc.returncode})"
    try:
        result = json.loads(result_file.read_text()) if result_file.exists() else {}
    except ValueError:
        result = {"error": f"{result_file.name} is not JSON (cut off while written?)"}
    if status == "ok" and result.get("ok") is False:
        status = "failed checks"
    return {"status": status, "seconds": round(time.time() - t0, 1), **result}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="every stage on the CPU at tiny sizes")
    ap.add_argument("--stages", nargs="+", default=list(BUDGETS), choices=list(BUDGETS))
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every stage's time budget")
    ap.add_argument("--set-budget", nargs="+", default=[], metavar="STAGE=SECONDS",
                    help="give a stage another budget (before --scale), e.g. speed=200")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--budget", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one:                       # a stage run in its own process by run_stage
        fn = {"env": lambda: stage_env(a.out, a.dry_run),
              "correctness": lambda: stage_correctness(a.out, a.dry_run, a.budget)}[a.one]
        (a.out / f"{a.one}.json").write_text(json.dumps(fn(), indent=1))
        return 0
    if a.dry_run and not (HERE / "data-dry/tierl/prepare.json").exists():
        subprocess.run([sys.executable, str(HERE / "prepare.py"), "--dry-run"], cwd=ROOT, check=True)
    log_file = (a.out / "log.txt").open("a")

    lock = threading.Lock()            # a stage's output comes from its reader thread

    def log(msg: str) -> None:
        with lock:
            print(msg, flush=True)
            log_file.write(msg + "\n")
            log_file.flush()
    budgets = dict(DRY_BUDGETS if a.dry_run else BUDGETS)
    for item in a.set_budget:
        name, _, seconds = item.partition("=")
        if name not in budgets or not seconds.replace(".", "", 1).isdigit():
            ap.error(f"--set-budget {item}: expected STAGE=SECONDS with STAGE one of {', '.join(budgets)}")
        budgets[name] = float(seconds)
    results = {"dry_run": a.dry_run, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "stages": {}}
    for name in a.stages:
        results["stages"][name] = run_stage(name, a.out, a.dry_run, budgets[name] * a.scale, log)
        (a.out / "results.json").write_text(json.dumps(results, indent=1))
        log(f"== stage {name}: {results['stages'][name]['status']} in {results['stages'][name]['seconds']} s")
    for name in a.stages:             # the per-stage files are in results.json now
        (a.out / f"{name}.json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
