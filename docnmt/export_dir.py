"""The rule of every export's output directory (``export-hf``, ``export-ct2``): ``--force``
replaces only an earlier export, never a user's files."""
from __future__ import annotations

from pathlib import Path

from .errors import DocnmtError


def check_replaceable(out_dir: Path, force: bool, verb: str, record: str, ours: set[str] | None = None) -> None:
    """The rule of every export's output directory: an error for a file, for a non-empty directory
    without ``--force``, and, even with it, for one ``verb`` did not write (no ``record`` file in
    it) or one holding a name outside ``ours`` (the files its earlier export listed; None: not
    checked). ``--force`` thus replaces only an earlier export, never a user's files."""
    if out_dir.exists() and not out_dir.is_dir():
        raise DocnmtError(f"{out_dir} is a file; {verb} writes a directory")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return
    if not force:
        raise DocnmtError(f"{out_dir} exists and is not empty; choose another directory or pass --force")
    if not (out_dir / record).exists():
        raise DocnmtError(f"{out_dir} is not a directory {verb} wrote (no {record}), and --force only "
                          "replaces those: remove it yourself or choose another directory")
    foreign = [] if ours is None else sorted(f.name for f in out_dir.iterdir() if f.name not in ours or f.is_dir())
    if foreign:
        raise DocnmtError(f"{out_dir} holds {foreign[0]}, which {verb} did not write, and --force only replaces an "
                          "earlier export: remove it yourself or choose another directory")
