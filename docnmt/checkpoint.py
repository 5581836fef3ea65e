"""The model directory: layout, atomic checkpoints, loading and averaging, the training lock.

::

    MODEL_DIR/
      config.yaml          resolved configuration (every value, presets expanded)
      spm.model vocab.json the subword model and docnmt's symbols (Moses+BPE: bpe.codes bpe.vocab.json)
      model.safetensors    the weights to translate with (best validation, else last)
      train.log metrics.jsonl learning_curve.png
      .lock                held by the training command working in the directory (its pid inside)
      checkpoints/
        LAST               name of the newest complete checkpoint
        u00001200/         one checkpoint: model.safetensors + state.pt
                           (optimizer, scheduler, progress, RNG; loadable with weights_only=True)

Crash safety: every file is written to a temporary name in the same directory and renamed into
place; a checkpoint directory is complete (both files) before it gets its name; a save writes
the checkpoint, then ``model.safetensors`` (when it is the best), then ``LAST``; an old
checkpoint is renamed to a hidden name before it is deleted. :func:`recover` (run when training
starts) puts back a checkpoint a crash left aside and removes the hidden leftovers, and
training resumes from the newest checkpoint that loads. Whatever instant a training process is
killed at, the same command resumes (or, before the first checkpoint, starts) the run. A write
that fails (a full disk) is one error line naming the file (:func:`writing`) and leaves the newest
complete checkpoint as it was.

:func:`crash_point` marks each instant of a save where a kill leaves a different state on disk;
the tests simulate a kill there (``crash_hook``, or ``DOCNMT_CRASH_AT=POINT[:N]`` for a
subprocess, which then exits at once with status 137 the N-th time it reaches POINT);
``DOCNMT_SLOW_AT=POINT:SECONDS[,...]`` makes a subprocess wait there (a save that a test signals).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .errors import DocnmtError

WEIGHTS = "model.safetensors"
STATE = "state.pt"
LOCK = ".lock"
LOCK_GRACE_SECONDS = 10.0     # how long to wait for a killed holder of a lock to let go
CHECKPOINT = re.compile(r"u\d{8}")           # u + the update count
# every name docnmt writes into a model directory (train, import-hf): all --force removes there
MODEL_DIR_FILES = frozenset({
    "config.yaml", WEIGHTS, "checkpoints", "train.log", "metrics.jsonl", "learning_curve.png",
    "spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json",                        # docnmt's vocabularies
    "pretrained.json", "tokenizer.json", "source.spm", "target.spm", "pieces.json", "hf_tokenizer"})   # import-hf's

crash_hook = None                # tests: called with the name of every crash point reached
_crash_counts: dict[str, int] = {}


def crash_point(name: str) -> None:
    """A named instant at which the tests simulate a kill (see the module docstring)."""
    if crash_hook is not None:
        crash_hook(name)
    for slow in filter(None, os.environ.get("DOCNMT_SLOW_AT", "").split(",")):     # tests: POINT:SECONDS
        point, _, seconds = slow.partition(":")
        if point == name:
            time.sleep(float(seconds))
    wanted = os.environ.get("DOCNMT_CRASH_AT")
    if wanted:
        point, _, count = wanted.partition(":")
        if point == name:
            _crash_counts[name] = _crash_counts.get(name, 0) + 1
            if _crash_counts[name] == int(count or 1):
                os._exit(137)


class WriteFailed(DocnmtError, OSError):
    """A file could not be written: a full disk, a quota, an I/O error (an OSError for callers
    that catch those, a one-line error for the command line)."""


@contextmanager
def writing(path: Path):
    """Report a failed write of ``path`` as one error line naming ``path`` (not the temporary name
    written to): OSError (ENOSPC, EDQUOT, EIO), and safetensors' and ``torch.save``'s own errors,
    which a full disk raises instead (they carry no errno)."""
    try:
        yield
    except (OSError, RuntimeError, SafetensorError) as e:
        if isinstance(e, OSError) and e.strerror:
            reason = e.strerror
        else:
            reason = f"{(str(e).strip().splitlines() or [type(e).__name__])[-1]}; is the disk full?"
        raise WriteFailed(f"{path}: cannot be written ({reason})") from e


def _new_file_mode(path: Path) -> int:
    """The mode ``open(path, "w")`` would give: the old file's, else 0666 less the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~current_umask()


def atomic_write(path: Path, write) -> None:
    """Call ``write(tmp_path)`` and rename the result over ``path``; a ``path`` that exists and is
    not a regular file (``/dev/null``, a named pipe) gets the result's bytes, never replaced (writers
    such as safetensors' ``save_file`` replace what they write to)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        with tempfile.TemporaryDirectory() as d:
            write(str(Path(d) / "out"))
            with open(Path(d) / "out", "rb") as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)
        return
    tmp = None
    try:
        with writing(path):
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            os.close(fd)
            write(tmp)
            os.chmod(tmp, _new_file_mode(path))   # mkstemp's 0600 would hide models from the group
            os.replace(tmp, path)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def state_dict_unique(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict without tied duplicates (safetensors refuses shared storage)."""
    out, seen = {}, set()
    for k, v in model.state_dict().items():
        key = (v.data_ptr(), v.shape)
        if key in seen:
            continue
        seen.add(key)
        out[k] = v.detach().contiguous().cpu()
    return out


def save_weights(model: torch.nn.Module, path: Path) -> None:
    tensors = state_dict_unique(model)
    atomic_write(path, lambda tmp: save_file(tensors, tmp))


def load_weights(model: torch.nn.Module, path: Path, strict: bool = True) -> list[str]:
    """Load safetensors weights; returns the names of the parameters that were loaded. With
    ``strict=False`` parameters missing from the file keep their values (fine-tuning a larger
    model from a smaller one); tensors the model does not have are an error either way."""
    if not Path(path).exists():
        raise DocnmtError(f"{path}: no such weights file")
    try:
        tensors = load_file(str(path))
    except Exception as e:         # safetensors' own error types (SafetensorError, OSError)
        raise DocnmtError(f"{path}: not a readable safetensors weights file ({e})") from None
    own = model.state_dict()
    wrong = [k for k, t in tensors.items() if k in own and own[k].shape != t.shape]
    if wrong:
        raise DocnmtError(f"{path}: weights do not fit this model ({wrong[0]}: {tuple(tensors[wrong[0]].shape)} vs "
                          f"{tuple(own[wrong[0]].shape)}; same vocabulary and dimensions needed)")
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {k for k in missing if _is_tied(model, k)}
    missing = [k for k in missing if k not in tied]
    if unexpected or (strict and missing):
        raise DocnmtError(f"{path}: weights do not fit this model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    loaded = set(tensors) | tied
    return [n for n, _ in model.named_parameters() if n in loaded]


def _is_tied(model: torch.nn.Module, key: str) -> bool:
    sd = model.state_dict()
    return any(k != key and sd[k].data_ptr() == sd[key].data_ptr() for k in sd)


def save_checkpoint(directory: Path, name: str, model: torch.nn.Module | dict[str, torch.Tensor], state: dict,
                    keep_last: int, best: bool = False) -> Path:
    """Write checkpoint ``name`` of ``model`` (or of its weights, a ``{name: CPU tensor}`` dict: a
    sharded model's, gathered); with ``best`` also ``model.safetensors``; then point ``LAST`` at
    it and delete all but the newest ``keep_last`` checkpoints (see the module docstring). A write
    that fails (a full disk) is one error line naming the file and the checkpoint that is kept."""
    try:
        final = _write_checkpoint(Path(directory) / "checkpoints", name, model, state)
        if best:
            atomic_write(Path(directory) / WEIGHTS, lambda t: shutil.copyfile(final / WEIGHTS, t))
            crash_point("best-weights")
        atomic_write(final.parent / "LAST", lambda t: Path(t).write_text(name))
        crash_point("last")
        _prune(directory, final, keep_last)
    except WriteFailed as e:
        kept = (list_checkpoints(directory) or [None])[-1]          # the one the same command resumes from
        raise WriteFailed(f"{e}; " + (f"the newest complete checkpoint is {kept}: free some space and run the "
                                      "same command to resume from it" if kept else "no checkpoint was saved yet"))
    return final


def _write_checkpoint(ckpts: Path, name: str, model: torch.nn.Module | dict[str, torch.Tensor], state: dict) -> Path:
    """The checkpoint directory ``ckpts/name``, complete before it gets its name."""
    final, tmp = ckpts / name, None
    aside = ckpts / f".{name}.old"
    tensors = model if isinstance(model, dict) else state_dict_unique(model)     # (a device error is not a write's)
    try:
        with writing(final):
            ckpts.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=ckpts, prefix=f".{name}."))
            save_file(tensors, str(tmp / WEIGHTS))
            os.chmod(tmp / WEIGHTS, 0o666 & ~current_umask())     # safetensors writes 0600
            torch.save(state, tmp / STATE)
            os.chmod(tmp, 0o777 & ~current_umask())
            crash_point("checkpoint-written")
            if final.exists():              # re-saving the same update: keep the old one until replaced
                os.replace(final, aside)
                crash_point("checkpoint-aside")
            os.replace(tmp, final)
        crash_point("checkpoint-renamed")
        shutil.rmtree(aside, ignore_errors=True)
    except Exception:                   # an error (not a kill: recover() cleans up after those)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if aside.exists() and not final.exists():      # the one moved aside is the newest complete
            os.replace(aside, final)
        raise
    return final


def _prune(directory: Path, final: Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` checkpoints, ``final`` among them."""
    older = [p for p in list_checkpoints(directory) if p != final]
    for old in older[: max(0, len(older) - (keep_last - 1))] if keep_last > 0 else []:
        trash = final.parent / f".{old.name}.trash"
        with writing(old):
            os.replace(old, trash)          # gone from the list at once, never half there
        crash_point("prune")
        shutil.rmtree(trash, ignore_errors=True)


def work_dir_beside(dest: Path) -> Path:
    """A new empty directory beside ``dest`` (``.NAME.new-*``) to build ``dest`` in, with the mode a
    plain mkdir would give (mkdtemp's 0700 would hide it from the group)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.new-"))
    os.chmod(work, 0o777 & ~current_umask())
    return work


def swap_into_place(work: Path, dest: Path) -> None:
    """Rename the finished directory ``work`` to ``dest``: a non-empty ``dest`` is moved aside
    (``.NAME.old-PID``) until the new one is in place, then removed; an empty one is replaced."""
    if dest.exists() and any(dest.iterdir()):
        aside = dest.parent / f".{dest.name}.old-{os.getpid()}"
        os.replace(dest, aside)
        os.replace(work, dest)
        shutil.rmtree(aside, ignore_errors=True)
        return
    if dest.exists():
        dest.rmdir()
    os.replace(work, dest)


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def complete(path: Path) -> bool:
    """A checkpoint directory holding both of its files."""
    return (path / STATE).is_file() and (path / WEIGHTS).is_file()


def list_checkpoints(directory: Path) -> list[Path]:
    """The complete checkpoints of a model directory, oldest first."""
    ckpts = Path(directory) / "checkpoints"
    if not ckpts.is_dir():
        return []
    return sorted(p for p in ckpts.iterdir() if CHECKPOINT.fullmatch(p.name) and complete(p))


def last_checkpoint(directory: Path) -> Path | None:
    """The checkpoint ``LAST`` names when it is complete, else the newest complete one (a
    crash can leave ``LAST`` missing, torn or behind)."""
    pointer = Path(directory) / "checkpoints" / "LAST"
    try:
        name = pointer.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        name = ""
    if CHECKPOINT.fullmatch(name) and complete(pointer.parent / name):
        return pointer.parent / name
    found = list_checkpoints(directory)
    return found[-1] if found else None


def recover(directory: Path) -> list[str]:
    """Undo what a killed save left behind: a checkpoint moved aside while it was being saved
    again is put back (unless the new one made it), hidden temporary files and directories are
    removed. Returns what was done, for the log."""
    done: list[str] = []
    ckpts = Path(directory) / "checkpoints"
    if ckpts.is_dir():
        for aside in sorted(ckpts.glob(".u*.old")):
            final = ckpts / aside.name[1:-4]
            if CHECKPOINT.fullmatch(final.name) and not final.exists() and complete(aside):
                os.replace(aside, final)
                done.append(f"put back {final.name}, moved aside by an interrupted save")
        for left in ckpts.iterdir():
            if left.name.startswith("."):
                shutil.rmtree(left) if left.is_dir() else left.unlink()
                done.append(f"removed {left.name}, left by an interrupted save")
            elif CHECKPOINT.fullmatch(left.name) and not complete(left):      # half deleted by older versions
                shutil.rmtree(left)
                done.append(f"removed {left.name}, an incomplete checkpoint")
    for name in (WEIGHTS, "config.yaml", "metrics.jsonl"):
        for left in Path(directory).glob(f".{name}.*"):       # atomic_write's temporary files
            left.unlink()
            done.append(f"removed {left.name}, left by an interrupted write")
    return done


def load_state(path: Path) -> dict:
    return torch.load(Path(path) / STATE, weights_only=True)


def _running(pid: str) -> bool:
    """Whether process ``pid`` is alive and not a zombie (unknown counts as alive)."""
    try:
        pid_number = int(pid)
        return Path(f"/proc/{pid_number}/stat").read_text().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except ValueError:
        return True
    except OSError:
        pass
    try:                                   # no /proc (macOS): signal 0 only says whether it exists
        os.kill(pid_number, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class DirectoryLock:
    """An exclusive lock on a directory (``flock`` of its ``.lock`` file, which holds the owner's
    pid). The kernel drops it when its process ends, however it ends, so a killed run never
    blocks the next one. Without ``fcntl`` (Windows) nothing is locked."""

    def __init__(self, directory: Path, what: str = "docnmt train"):
        self.path = Path(directory) / LOCK
        self.file = open(self.path, "a+")
        try:
            import fcntl
        except ImportError:
            return
        deadline = time.monotonic() + LOCK_GRACE_SECONDS
        while True:
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                self.file.seek(0)
                holder = self.file.read().strip() or "unknown"
                # a holder that was just killed may take a moment to release its descriptors
                if not _running(holder) and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
            self.file.close()
            raise DocnmtError(f"{directory} is in use by another {what} (pid {holder}); wait for it to end "
                              "or choose another --save-dir") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"{os.getpid()}\n")
        self.file.flush()

    def release(self) -> None:
        if not self.file.closed:
            self.file.close()          # closing the last descriptor drops the lock


def average_checkpoints(paths: list[Path], output: Path) -> None:
    """Arithmetic mean of every floating-point tensor (fairseq's average_checkpoints)."""
    if not paths:
        raise DocnmtError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        weights = p / WEIGHTS if Path(p).is_dir() else Path(p)
        if not weights.exists():
            raise DocnmtError(f"{weights}: no such checkpoint")
        for k, v in load_file(str(weights)).items():
            if k in total and v.shape != total[k].shape:
                raise DocnmtError(f"{weights}: tensor {k} has shape {tuple(v.shape)}, other checkpoints "
                                  f"{tuple(total[k].shape)}")
            total[k] = total[k] + v.double() if k in total else v.double()
    out = {k: (v / len(paths)).to(torch.float32) for k, v in total.items()}
    atomic_write(Path(output), lambda tmp: save_file(out, tmp))
