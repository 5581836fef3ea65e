"""experiments/restore_weights.py: a kept weight file comes back from the repository's history with
the recorded SHA-256, and a file whose hash is not the recorded one is refused (one error line,
nothing left behind). Also: no model weight is tracked under bench/ or experiments/."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPT = HERE / "restore_weights.py"
KEPT = HERE / "tier_mfr/results/stage1/weights.json"      # the Tier M-fr stage 1 weights (15 MB)


def restore(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def kept_copy(tmp_path) -> tuple[Path, Path]:
    """A repository of its own whose history holds a weight file the working tree no longer tracks,
    recorded as the experiments record theirs (``--record``, then ``git rm --cached``): (repo, folder).
    The test does not depend on how much history the clone running it has."""
    repo, run = tmp_path / "repo", tmp_path / "repo" / "run"
    run.mkdir(parents=True)
    git(repo, "init", "-q")
    (run / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    git(repo, "add", "-f", "run/model.safetensors")
    git(repo, "commit", "-q", "-m", "weights")
    assert restore("--record", "--repo", repo, run / "model.safetensors").returncode == 0
    git(repo, "rm", "-q", "--cached", "run/model.safetensors")
    git(repo, "commit", "-q", "-m", "weights leave the tree")
    (run / "model.safetensors").unlink()
    return repo, run


def test_a_kept_weight_file_comes_back_from_history_with_its_recorded_hash(kept_copy):
    repo, run = kept_copy
    entry = json.loads((run / "weights.json").read_text())[0]
    proc = restore("--repo", repo, run)
    assert proc.returncode == 0, proc.stderr
    weights = run / entry["file"]
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == entry["sha256"]
    assert weights.stat().st_size == entry["size"] == 256 * 64
    assert restore("--repo", repo, run / "weights.json").returncode == 0        # already there: left alone
    assert sorted(p.name for p in run.iterdir()) == sorted(["weights.json", entry["file"]])   # no .tmp


def test_a_wrong_hash_is_refused_and_nothing_is_left(kept_copy):
    repo, run = kept_copy
    listing = run / "weights.json"
    entries = json.loads(listing.read_text())
    entries[0]["sha256"] = "0" * 64
    listing.write_text(json.dumps(entries))
    proc = restore("--repo", repo, run)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "SHA-256" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in run.iterdir()) == ["weights.json"]
    entries[0]["commit"] = "f" * 40                                    # a commit the history does not hold
    listing.write_text(json.dumps(entries))
    proc = restore("--repo", repo, run)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in run.iterdir()) == ["weights.json"]


def test_the_kept_tier_mfr_weights_come_back_or_fail_in_one_line(tmp_path):
    """This repository's own record: where the clone holds the history (not shallow) the stage 1
    weights come back with their hash; otherwise the script says so in one line (no traceback)."""
    entry = json.loads(KEPT.read_text())[0]
    shutil.copy(KEPT, tmp_path / "weights.json")
    present = subprocess.run(["git", "cat-file", "-e", f"{entry['commit']}:{entry['path_in_commit']}"], cwd=ROOT,
                             capture_output=True).returncode == 0
    proc = restore(tmp_path)
    if present:
        assert proc.returncode == 0, proc.stderr
        assert hashlib.sha256((tmp_path / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    else:
        assert proc.returncode == 1 and "not in the repository's history" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_every_kept_weight_is_recorded_and_none_is_tracked():
    tracked = subprocess.run(["git", "ls-files", "bench", "experiments"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert not [p for p in tracked if p.endswith((".safetensors", ".pt", ".bin"))]
    for listing in HERE.rglob("weights.json"):
        for entry in json.loads(listing.read_text()):
            assert set(entry) == {"file", "commit", "path_in_commit", "sha256", "size"}, listing
            assert len(entry["sha256"]) == 64 and entry["size"] > 0
