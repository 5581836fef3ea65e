"""A training run's save directory (:class:`RunDir`): what a run writes there (``RUN_FILES``),
the lock that lets one training command at a time work in it, the recovery from a crash, the
comparison of its config with an existing run's, the newest checkpoint that loads, the records
of metrics.jsonl (and their truncation after a resume point), train.log and TensorBoard.

Each step is its own method; :func:`docnmt.training.setup.open_run` puts them in order."""
from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

from ..checkpoint import (
    MODEL_DIR_FILES,
    WEIGHTS,
    DirectoryLock,
    atomic_write,
    crash_point,
    list_checkpoints,
    recover,
    writing,
)
from ..config import Config
from ..errors import DocnmtError
from ..vocab import BaseVocab

log = logging.getLogger("docnmt.training")
FIXED_SECTIONS = ("model", "data", "method")     # a resumed run's network and instances: never changed


def flat(d: dict, prefix: str = "") -> dict:
    """A nested config dict as ``section.key`` -> value."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out

# what a training run writes into its save directory (a directory holding only these and no
# checkpoint is a run killed before its first checkpoint, started again by the same command)
RUN_FILES = {"config.yaml", "spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json", "train.log", "metrics.jsonl",
             "checkpoints"}


def record_through(line: bytes, updates: int, validated: bool) -> bool:
    """Whether a metrics.jsonl line is a whole record of an update up to ``updates`` (a
    validation of ``updates`` itself only when the checkpoint has it: else it is redone)."""
    try:
        rec = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    if not line.endswith(b"\n") or not isinstance(rec, dict) or not isinstance(rec.get("updates", 0), int):
        return False
    u = rec.get("updates", 0)
    return u < updates or (u == updates and (validated or not any(k.startswith("valid_") for k in rec)))


class LogFile(logging.FileHandler):
    """train.log, whose failed write (a full disk) stops training with one error line, as the
    failure of any other file of the run does (logging would print a traceback and go on)."""

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            return super().handleError(record)
        with writing(Path(self.baseFilename)):
            raise error


class RunDir:
    """The save directory of one run (``path``). Writing records, checkpoints and the model
    needs nothing more than the object; :meth:`claim` locks and checks the directory first."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.made = False                   # whether claim() created the directory
        self.tb = None                      # a TensorBoard writer, once tensorboard() opened one
        self._lock: DirectoryLock | None = None
        self._handlers: list[logging.Handler] = []

    # ---- taking the directory --------------------------------------------------------------------
    def claim(self, force: bool) -> None:
        """Make sure the directory is a docnmt run's or empty, create and lock it, recover from a
        crash, and refuse files of an earlier run that has no checkpoint (unless ``force``)."""
        self.check_ours()
        self.made = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = DirectoryLock(self.path)          # before looking: another command may be working here
        for line in recover(self.path):
            print(f"{self.path}: {line}", file=sys.stderr)
        self.refuse_leftovers(force)

    def check_ours(self) -> None:
        """A directory with files docnmt did not make is never touched."""
        d = self.path
        if d.exists() and not d.is_dir():
            raise DocnmtError(f"{d} is a file; --save-dir names a directory")
        if d.is_dir() and not (d / "config.yaml").exists() and self.contents():
            raise DocnmtError(f"{d} exists and is not empty, and is not a docnmt model directory (no "
                              "config.yaml): choose another --save-dir (--force only starts over a docnmt model "
                              "directory)")

    def contents(self) -> list[Path]:
        """Everything in the directory but its lock."""
        return [p for p in self.path.iterdir() if p.name != ".lock"]

    def refuse_leftovers(self, force: bool) -> None:
        """Files of an earlier run without a checkpoint are not ours to delete, unless ``force``
        (a directory holding only RUN_FILES is a run killed before its first checkpoint)."""
        others = [p.name for p in self.contents() if p.name not in RUN_FILES]
        if others and not self.checkpoints() and not force:
            raise DocnmtError(f"{self.path} holds files of an earlier run ({others[0]}) but no checkpoint to resume "
                              "from; choose another --save-dir or pass --force to start over")

    def checkpoints(self) -> list[Path]:
        return list_checkpoints(self.path)

    def check_config(self, cfg: Config) -> list[str]:
        """Refuse to resume a run whose model, data or method config differs from ``cfg`` (the
        network and its instances); return the other settings that differ (training, decoding:
        a resume may change them, e.g. a later ``--max-update`` or a training aid), each as
        ``KEY OLD -> NEW``, for :meth:`resumed_with`."""
        saved, mine = flat(Config.load(self.path / "config.yaml").to_dict()), flat(cfg.to_dict())
        changed = [k for k in sorted(saved.keys() | mine.keys()) if k != "from_preset" and saved.get(k) != mine.get(k)]
        fixed = [k for k in changed if k.split(".")[0] in FIXED_SECTIONS]
        if fixed:
            k = fixed[0]
            raise DocnmtError(f"{self.path} holds a run with a different model or data config ({k} "
                              f"{saved.get(k)!r}, not {mine.get(k)!r}); use another --save-dir, or --force to "
                              "start over")
        return [f"{k} {saved.get(k)!r} -> {mine.get(k)!r}" for k in changed]

    def resumed_with(self, cfg: Config, changed: list[str]) -> str:
        """After a resume with other training or decoding settings: ``config.yaml`` rewritten to
        the settings the run goes on with (so it says what trained the later updates), and the
        line that says what changed (logged, the old values kept there)."""
        if not changed:
            return ""
        atomic_write(self.path / "config.yaml", cfg.dump)
        return f"resuming with settings changed from the run's config.yaml (now rewritten): {'; '.join(changed)}"

    def clear(self) -> None:
        """Delete what an earlier run left (with --force, or after a start killed early): only the
        names docnmt writes into a model directory (``MODEL_DIR_FILES``); a file of the user's stays."""
        for child in self.contents():
            if child.name in MODEL_DIR_FILES:
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()

    def start(self, cfg: Config, vocab: BaseVocab) -> None:
        """Write what a new run starts from: its config and vocabulary."""
        atomic_write(self.path / "config.yaml", cfg.dump)
        vocab.save(self.path)
        crash_point("config")

    # ---- resuming ----------------------------------------------------------------------------------
    def resume_newest(self, found: list[Path], resume, say: bool = True) -> Path:
        """Call ``resume`` on the newest checkpoint of ``found`` that loads (a crash or a full disk
        can leave the newest one damaged: say so, when ``say``, and take the one before)."""
        damaged = []
        for path in reversed(found):
            try:
                resume(path)
            except Exception as e:          # a torn or empty state.pt, unreadable weights, missing keys
                damaged.append(f"{path.name} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
                continue
            if damaged and say:
                print(f"{self.path}: checkpoint {', '.join(damaged)} cannot be loaded; resumed from "
                      f"{path.name} instead", file=sys.stderr)
            return path
        raise DocnmtError(f"{self.path}: no checkpoint can be loaded ({'; '.join(damaged)}); "
                          "pass --force to start over")

    def forget_metrics_after(self, updates: int, validated: bool) -> None:
        """Drop the metrics a crashed run logged after its last checkpoint (they are redone), and
        any line the crash tore or garbled; ``validated``: the checkpoint has its validation."""
        path = self.path / "metrics.jsonl"
        if not path.exists():
            return
        lines = path.read_bytes().splitlines(keepends=True)
        kept = [ln for ln in lines if record_through(ln, updates, validated)]
        if len(kept) != len(lines):
            atomic_write(path, lambda tmp: Path(tmp).write_bytes(b"".join(kept)))

    def restore_model(self, checkpoint: Path) -> None:
        """Make model.safetensors the weights of ``checkpoint`` (a kill may have come between
        writing the checkpoint and the model)."""
        atomic_write(self.path / WEIGHTS, lambda t: shutil.copyfile(checkpoint / WEIGHTS, t))

    # ---- logging -----------------------------------------------------------------------------------
    def open_log(self) -> None:
        """train.log gets every message of the trainer; warnings also reach stderr."""
        to_file = LogFile(self.path / "train.log")
        to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        console = logging.StreamHandler(sys.stderr)
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter("docnmt: warning: %(message)s"))
        for handler in (to_file, console):
            log.addHandler(handler)
            self._handlers.append(handler)
        log.setLevel(logging.INFO)

    def tensorboard(self, directory: str) -> None:
        """Also send every record to TensorBoard in ``directory`` (a warning when it is missing)."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            log.warning("TensorBoard is not installed (pip install docnmt[tensorboard]); not logging to it")
            return
        self.tb = SummaryWriter(directory)

    def record(self, rec: dict) -> None:
        """One record of metrics: a line of metrics.jsonl and train.log, and TensorBoard scalars."""
        log.info(json.dumps(rec))
        with writing(self.path / "metrics.jsonl"), open(self.path / "metrics.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")          # a line a full disk tore is dropped on resuming
        if self.tb is not None:
            for k, v in rec.items():
                if k not in ("updates", "epoch") and v is not None:
                    self.tb.add_scalar(k, v, rec["updates"])

    # ---- letting go --------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the directory and its log."""
        for h in self._handlers:
            log.removeHandler(h)
            h.close()
        self._handlers = []
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def remove_if_made_empty(self) -> None:
        """A failed start leaves no directory it made."""
        if self.made and self.path.is_dir() and not self.contents():
            shutil.rmtree(self.path)
