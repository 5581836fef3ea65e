"""Put kept model weights back from the repository's history: weights are not tracked in the
working tree (they made the clone 129 MiB), but every weight file an experiment kept is in an
older commit, and a ``weights.json`` beside the run's scores says where: the file's name, the
commit that holds it, its path in that commit, its SHA-256 and size.

    python experiments/restore_weights.py DIR_OR_WEIGHTS_JSON ...     # git show, then check the hash
    python experiments/restore_weights.py --record FILE ...           # write FILE's entry (committed first)

``--repo DIR``: the git repository whose history holds the files (default: this one).

A restored file whose hash differs from the recorded one is deleted and the script exits 1 with
one error line; a file already there with the right hash is left alone. ``--record`` is for a new
weight file: commit it once (``git add -f``), record it, then ``git rm --cached`` it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def restore(weights_json: Path, repo: Path = ROOT) -> list[Path]:
    """Every file ``weights_json`` lists, from its commit in ``repo``, checked against its SHA-256."""
    restored = []
    for entry in json.loads(weights_json.read_text()):
        dest = weights_json.parent / entry["file"]
        if dest.exists() and sha256(dest) == entry["sha256"]:
            restored.append(dest)
            continue
        tmp = dest.with_name(dest.name + ".tmp")
        with open(tmp, "wb") as f:
            proc = subprocess.run(["git", "show", f"{entry['commit']}:{entry['path_in_commit']}"], cwd=repo,
                                  stdout=f, stderr=subprocess.PIPE)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise ValueError(f"{dest}: not in the repository's history ({proc.stderr.decode().strip()})")
        got = sha256(tmp)
        if got != entry["sha256"]:
            tmp.unlink()
            raise ValueError(f"{dest}: SHA-256 {got} is not the recorded {entry['sha256']}; nothing restored")
        tmp.replace(dest)
        restored.append(dest)
    return restored


def record(path: Path, repo: Path = ROOT) -> dict:
    """The ``weights.json`` entry of ``path`` (a file committed in ``repo``), added to the one beside it."""
    rel = path.resolve().relative_to(repo.resolve()).as_posix()
    commit = subprocess.run(["git", "log", "-1", "--format=%H", "--", rel], cwd=repo, capture_output=True,
                            text=True, check=True).stdout.strip()
    if not commit:
        raise ValueError(f"{path}: never committed; commit it first (git add -f)")
    entry = {"file": path.name, "commit": commit, "path_in_commit": rel, "sha256": sha256(path),
             "size": path.stat().st_size}
    listing = path.parent / "weights.json"
    entries = [e for e in (json.loads(listing.read_text()) if listing.exists() else []) if e["file"] != path.name]
    listing.write_text(json.dumps(entries + [entry], indent=1) + "\n")
    return entry


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="weights.json files or the folders holding them")
    ap.add_argument("--record", action="store_true", help="record these committed weight files instead")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the git repository holding the files (default: this one)")
    a = ap.parse_args()
    try:
        for p in a.paths:
            if a.record:
                print(f"recorded {p}: {record(p, a.repo)['commit']}")
            else:
                for dest in restore(p / "weights.json" if p.is_dir() else p, a.repo):
                    print(f"restored {dest}")
    except (ValueError, OSError, KeyError, subprocess.CalledProcessError) as e:
        print(f"restore_weights: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
