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


def restore(*paths) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def kept_copy(tmp_path) -> Path:
    """``weights.json`` of the stage 1 weights in a folder of its own (the file restored there)."""
    entry = json.loads(KEPT.read_text())[0]
    if subprocess.run(["git", "cat-file", "-e", f"{entry['commit']}:{entry['path_in_commit']}"], cwd=ROOT,
                      capture_output=True).returncode != 0:
        pytest.skip(f"commit {entry['commit'][:10]} is not in this clone (a shallow clone?)")
    shutil.copy(KEPT, tmp_path / "weights.json")
    return tmp_path


def test_a_kept_weight_file_comes_back_from_history_with_its_recorded_hash(kept_copy):
    entry = json.loads((kept_copy / "weights.json").read_text())[0]
    proc = restore(kept_copy)
    assert proc.returncode == 0, proc.stderr
    weights = kept_copy / entry["file"]
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == entry["sha256"]
    assert weights.stat().st_size == entry["size"]
    assert restore(kept_copy / "weights.json").returncode == 0        # already there: left alone
    assert sorted(p.name for p in kept_copy.iterdir()) == sorted(["weights.json", entry["file"]])   # no .tmp


def test_a_wrong_hash_is_refused_and_nothing_is_left(kept_copy):
    listing = kept_copy / "weights.json"
    entries = json.loads(listing.read_text())
    entries[0]["sha256"] = "0" * 64
    listing.write_text(json.dumps(entries))
    proc = restore(kept_copy)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "SHA-256" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in kept_copy.iterdir()) == ["weights.json"]
    entries[0]["commit"] = "f" * 40                                    # a commit the history does not hold
    listing.write_text(json.dumps(entries))
    proc = restore(kept_copy)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in kept_copy.iterdir()) == ["weights.json"]


def test_every_kept_weight_is_recorded_and_none_is_tracked():
    tracked = subprocess.run(["git", "ls-files", "bench", "experiments"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert not [p for p in tracked if p.endswith((".safetensors", ".pt", ".bin"))]
    for listing in HERE.rglob("weights.json"):
        for entry in json.loads(listing.read_text()):
            assert set(entry) == {"file", "commit", "path_in_commit", "sha256", "size"}, listing
            assert len(entry["sha256"]) == 64 and entry["size"] > 0
