"""bench/gpu/run.py keeps working while no GPU is around: its dry run (every stage on the CPU at
tiny sizes) completes and reports every figure; a failing stage does not stop the next. Its Tier L
stage (one comparison, experiments/tier_l/tierl.py) is tested in experiments/tier_l/test_tierl.py."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench/gpu/run.py"



def run(out: Path, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(RUN), str(out), "--dry-run", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def test_dry_run_runs_every_stage_and_reports_every_figure(tmp_path):
    r = run(tmp_path, "--stages", "env", "correctness", "speed")
    stages = r["stages"]
    assert list(stages) == ["env", "correctness", "speed"]
    assert {s["status"] for s in stages.values()} == {"ok"}, {k: s["status"] for k, s in stages.items()}
    assert stages["env"]["bf16_peak_tflops"] > 0 and stages["env"]["torch"]
    c = stages["correctness"]
    assert c["counts"]["passed"] >= 15 and c["counts"]["failed"] == 0
    assert any("torchrun" in t for t in c["tests"]) and any("flex" in t for t in c["tests"])
    s = stages["speed"]
    for part in ("train_sentences", "train_documents"):
        assert s[part]["docnmt"]["target_tokens_per_s"] > 0 and s[part]["huggingface"]["target_tokens_per_s"] > 0
    for side in ("docnmt", "huggingface"):      # the diagnosis of where training time goes
        d = s["train_documents"][side]
        assert d["same_batch"]["target_tokens_per_s"] > 0 and d["profile"]["updates"] == 3
        assert d["profile"]["wall_s"] > 0 and "top_kernels" in d["profile"]
    c = s["train_documents_compiled"]["docnmt"]                # --compile, its compiling timed apart
    assert c["target_tokens_per_s"] > 0 and c["warmup_seconds"] > 0 and c["profile"]["updates"] == 3
    assert "huggingface" not in s["train_documents_compiled"]
    assert s["train_documents_4x"]["max_tokens"] == 4 * s["train_documents"]["max_tokens"]
    assert s["train_documents_4x"]["docnmt"]["target_tokens_per_s"] > 0
    assert s["decode_beam5"]["speedup"] > 0
    assert {row["model"] for row in s["g_transformer_long"] if "seconds" in row} == {"flex", "dense", "vanilla"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.txt", "results.json"]


def test_a_stage_out_of_time_is_recorded_and_the_next_stage_runs(tmp_path):
    r = run(tmp_path, "--stages", "correctness", "env", "--scale", "0.01")   # 3 s for the CUDA checks
    assert r["stages"]["correctness"]["status"] != "ok"
    assert r["stages"]["env"]["status"] == "ok" and r["stages"]["env"]["bf16_peak_tflops"] > 0


def test_speed_keeps_the_docnmt_figures_when_hugging_face_fails_and_writes_every_row(tmp_path, monkeypatch):
    """bench/gpu/speed.py: an error on the Hugging Face side (another transformers version) is
    recorded beside docnmt's figures instead of losing them, and the G-Transformer's rows reach
    speed.json one at a time (a stage killed at its deadline keeps what it measured)."""
    import importlib.util
    subprocess.run([sys.executable, str(ROOT / "bench/gpu/prepare.py"), "--dry-run"], cwd=ROOT, check=True,
                   capture_output=True)
    spec = importlib.util.spec_from_file_location("gpu_speed", ROOT / "bench/gpu/speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)

    def broken(*a, **kw):
        raise RuntimeError("MarianConfig got an unexpected keyword")
    monkeypatch.setattr(speed, "marian_like", broken)
    data = ROOT / "bench/gpu/data-dry/tierl"
    out = speed.decode_speed(data, 8, 4, 4, dry=True)
    assert out["docnmt"]["generated_tokens_per_s"] > 0 and "unexpected keyword" in out["huggingface"]["error"]
    out = speed.train_speed(data, "sent2sent", 1000, 2, 1, True, None)
    assert out["docnmt"]["target_tokens_per_s"] > 0 and "unexpected keyword" in out["huggingface"]["error"]
    seen = []
    rows = speed.long_instances([128], 1, True, time.time() + 60, on_row=lambda r: seen.append(len(r)))
    assert seen == [1, 2, 3] and [r["model"] for r in rows] == ["flex", "dense", "vanilla"]


def test_speed_parts_runs_only_the_named_parts(tmp_path):
    """``speed.py --parts``: a short call measures one part (here decoding) and nothing else; a
    misspelt part is refused instead of measuring nothing."""
    subprocess.run([sys.executable, str(ROOT / "bench/gpu/prepare.py"), "--dry-run"], cwd=ROOT, check=True,
                   capture_output=True)
    proc = subprocess.run([sys.executable, str(ROOT / "bench/gpu/speed.py"), str(tmp_path / "off"), "--dry-run",
                           "--budget", "120", "--parts", "decode_beam5"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((tmp_path / "off" / "speed.json").read_text())
    assert r["decode_beam5"]["docnmt"]["generated_tokens_per_s"] > 0
    assert not {"g_transformer_long", "train_documents", "train_documents_cudnn", "train_documents_4x",
                "train_sentences", "train_documents_compiled"} & set(r)
    assert r["cudnn_attention"] is False
    typo = subprocess.run([sys.executable, str(ROOT / "bench/gpu/speed.py"), str(tmp_path), "--dry-run",
                           "--parts", "decode"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert typo.returncode != 0 and "invalid choice" in typo.stderr


def test_processes_a_stage_left_in_sessions_of_their_own_are_killed():
    """The correctness stage's timer kills pytest; torchrun's agent and worker run in sessions of
    their own and would go on training into the next stage: found by their environment, killed."""
    import importlib.util
    import os
    spec = importlib.util.spec_from_file_location("gpu_run", RUN)
    gpu_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_run)
    mark = f"test-{os.getpid()}"
    env = {**os.environ, "DOCNMT_GPU_STAGE": mark}
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env, start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        time.sleep(0.5)
        assert gpu_run.kill_marked(mark) == 1
        assert left.wait(timeout=10) == -9 and other.poll() is None
    finally:
        for p in (left, other):
            p.kill()
            p.wait()
