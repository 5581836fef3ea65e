"""experiments/tier_l/tierl.py, the GPU run's Tier L stage: a step still running at the stage's
deadline is stopped and the rest skipped, with the summary and outputs kept (decided by a step
that cannot finish, whatever the machine's speed); and bench/gpu/run.py runs the stage from here,
its dry run reporting every figure (on the miniature of tests/data/enfr: nothing outside the repository)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def tierl_module():
    spec = importlib.util.spec_from_file_location("tierl", HERE / "tierl.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_tierl_stops_at_its_deadline_and_keeps_what_it_did(tmp_path, monkeypatch):
    """Every docnmt step is replaced by a process that never ends: the first is stopped when the
    stage's budget (less the 20 s kept for packing) runs out, every later one is skipped, and the
    summary and the outputs so far come back."""
    tierl = tierl_module()
    real_run, started = subprocess.run, []

    def never_ends(argv, **kw):
        started.append(argv)
        return real_run([sys.executable, "-c", "import time; time.sleep(600)"], **kw)
    monkeypatch.setattr(tierl.subprocess, "run", never_ends)
    monkeypatch.setattr(sys, "argv", ["tierl.py", str(tmp_path), "--dry-run", "--budget", "26",
                                      "--work", str(tmp_path / "work")])
    t0 = time.time()
    assert tierl.main() == 0
    summary = json.loads((tmp_path / "tierl.json").read_text())
    rcs = [step["rc"] for step in summary["steps"]]
    assert rcs[0] == "stopped: out of time", rcs                 # the sentence model, at 26 - 20 = 6 s
    assert len(rcs) > 5 and set(rcs[1:]) == {"skipped: an earlier step failed"}, rcs
    assert len(started) == 1 and "train" in started[0]           # nothing else was started
    assert summary["ok"] is False and 5 < summary["seconds"] < 16 and time.time() - t0 < 60, summary
    assert tarfile.is_tarfile(tmp_path / "tierl.tar.gz") and not list(tmp_path.glob("*.tmp"))


@pytest.mark.slow
def test_the_gpu_run_runs_the_tierl_stage_and_reports_every_figure(tmp_path):
    """``bench/gpu/run.py --stages tierl --dry-run``: the stage runs this folder's script on the
    GPU run's data (bench/gpu/data-dry), every step succeeds, and the G-Transformer is tested
    against a control trained for as many updates with the same schedule."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench/gpu/run.py"), str(tmp_path), "--dry-run",
                           "--stages", "tierl"], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    t = json.loads((tmp_path / "results.json").read_text())["stages"]["tierl"]
    assert t["status"] == "ok", t
    assert t["ok"] and all(step["rc"] == 0 for step in t["steps"])
    assert "d_bleu" in t["gt"]["valid"] and "bootstrap" in json.dumps(t["gt"]["valid"]) and "anaphora" in t["gt"]
    # the control (the sentence model continued for the G-Transformer's updates), what it is tested against
    assert t["control"]["updates"] == t["gt"]["updates"] == t["control_updates"] > 0
    assert t["gt"]["updates"] != t["sent"]["updates"]         # so the count is the G-Transformer's
    assert "bootstrap" in json.dumps(t["control"]["valid.vs_sent"])
    assert "bootstrap" not in json.dumps(t["control"]["valid"])
    assert all(t["gt"][s]["against"] for s in ("anaphora", "lexical-choice", "scat_yin2021_enfr"))
    with tarfile.open(tmp_path / "tierl.tar.gz") as tar:
        names = set(tar.getnames())
        configs = {n: tar.extractfile(f"{n}/config.yaml").read().decode() for n in ("gt", "control")}
    assert {"sent/valid.fr", "gt/valid.fr", "gt/valid.json", "gt/anaphora.scores.jsonl", "sent/config.yaml",
            "control/valid.fr", "control/anaphora.scores.jsonl"} <= names
    lines = {n: set(c.splitlines()) for n, c in configs.items()}
    assert {"  flex_attention: false", "  word_dropout: 0.0", "  pretrained_lr_scale: 1.0",
            "  sentence_positions: true"} <= lines["gt"]
    for n in ("gt", "control"):           # the same schedule and tokens per update
        assert {"  lr: 0.0005", "  warmup_updates: 100", "  update_freq: 1", "  max_tokens: 1500"} <= lines[n], n
