"""Faults while training (docs/training.md#faults-while-training): a disk that fills up during a
save, Ctrl-C and SIGTERM, and a process of a torchrun run that dies. Each time the last good
checkpoint stays loadable, the command says what happened in one line, and the same command,
run again, resumes with exactly the losses of a run that was never interrupted.

A full disk is injected in process: every writer a save calls (safetensors, ``torch.save``, file
copies and writes, renames) fails its N-th call the way it fails on a full disk, after leaving
half a file where it writes one. Signals are real ones sent to a ``docnmt train`` subprocess
(``DOCNMT_SLOW_AT`` slows its updates, or its save, so that the signal lands where the test wants)."""
from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

import docnmt.checkpoint as checkpoint_module
import docnmt.training.run_dir as run_dir_module
from _tiny import history
from docnmt.checkpoint import CHECKPOINT, last_checkpoint, list_checkpoints, load_state
from docnmt.cli import main
from test_crash_safety import wait_for

ENOSPC = os.strerror(errno.ENOSPC)


@pytest.fixture(scope="module")
def data(tiny_dir) -> Path:
    return tiny_dir / "data"


def train_argv(data: Path, save: Path, updates: int = 6) -> list[str]:
    """The tiny training command of these tests: checkpoints at 2, 4 and 6 (4 validated and
    best, 6 saved again after its validation), two kept; a loss logged every 3 updates, so that
    a resumed run's log window starts before its checkpoint."""
    return ["train", str(data), "--save-dir", str(save), "--arch", "transformer_tiny", "--mode", "sent2sent",
            "--max-update", str(updates), "--save-interval-updates", "2", "--validate-interval-updates", "4",
            "--keep-last", "2", "--log-interval", "3", "--max-tokens", "600", "--lr", "3e-3", "--warmup-updates",
            "10", "--max-epoch", "0", "--patience", "0", "--no-progress",
            "--set", "model.d_model=32", "--set", "model.ffn_dim=64", "--set", "model.heads=2"]


def cli(argv: list[str]) -> tuple[int, str]:
    """``docnmt ARGV`` in process: its exit status and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(argv)
    return status, err.getvalue()


def losses(save: Path) -> dict[int, tuple[float, float]]:
    return {r["updates"]: (r["loss"], r["nll_loss"]) for r in history(save) if "loss" in r}


def assert_same_run(save: Path, ref: Path, besides: str = "") -> None:
    """Same checkpoints (``besides`` one the interruption saved), weights, model and logged losses
    as the uninterrupted ``ref``."""
    names = [c.name for c in list_checkpoints(save) if c.name != besides]
    assert names == [c.name for c in list_checkpoints(ref)]
    assert sorted(p.name for p in (save / "checkpoints").iterdir() if p.name != besides) == ["LAST", *names]
    for weights in [f"checkpoints/{n}/model.safetensors" for n in names] + ["model.safetensors"]:
        a, b = load_file(str(save / weights)), load_file(str(ref / weights))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), weights
    assert losses(save) == losses(ref)
    valid = [(r["updates"], r["valid_loss"]) for r in history(save) if "valid_loss" in r]
    assert valid == [(r["updates"], r["valid_loss"]) for r in history(ref) if "valid_loss" in r]


# ---- a full disk -----------------------------------------------------------------------------------

def kind_of(path) -> str:
    """Which write of a save ``path`` (the name written to) is."""
    path = Path(path)
    if path.name == "metrics.jsonl":
        return "metrics"
    if path.name.startswith(".LAST.") or path.name == "LAST":
        return "last" if path.name == "LAST" else "last-write"
    if path.parent.name.startswith(".u"):                       # inside a checkpoint being written
        return "checkpoint-" + ("weights" if path.name == "model.safetensors" else "state")
    if path.name.endswith(".trash"):
        return "prune"
    if path.name.endswith(".old"):
        return "checkpoint-aside"
    if CHECKPOINT.fullmatch(path.name):
        return "checkpoint-rename"
    if path.name == "model.safetensors":
        return "model"
    if path.name.startswith(".model.safetensors."):
        return "model-write"
    return "other"


class FullDisk:
    """Every writer of a save, failing its call number ``n`` of ``kind`` as it fails on a full disk
    (with half a file written where it writes one); ``None``: only note the calls (``seen``)."""

    def __init__(self, kind: str | None = None, n: int = 0):
        self.kind, self.n, self.seen = kind, n, []
        self.saved: list[str] = []           # the checkpoints that got their names

    def fails(self, path) -> bool:
        self.seen.append(kind_of(path))
        return self.seen[-1] == self.kind and self.seen.count(self.kind) == self.n

    def writer(self, real, error):
        """``real(src..., dst)`` that, when it fails, writes half of what it would have written first."""
        def write(*args, **kwargs):
            dst = args[-1] if real is not torch.save else args[1]
            if not self.fails(dst):
                return real(*args, **kwargs)
            real(*args, **kwargs)
            Path(dst).write_bytes(Path(dst).read_bytes()[: Path(dst).stat().st_size // 2])
            raise error(dst)
        return write

    def patches(self, mp: pytest.MonkeyPatch) -> None:
        def os_error(path):
            return OSError(errno.ENOSPC, ENOSPC, str(path))
        mp.setattr(checkpoint_module, "save_file", self.writer(
            checkpoint_module.save_file,
            lambda p: SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")))
        mp.setattr(torch, "save", self.writer(torch.save, lambda p: RuntimeError(
            "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: file write "
            "failed")))
        mp.setattr(shutil, "copyfile", self.writer(shutil.copyfile, os_error))
        real_write_text, real_replace, real_open = Path.write_text, os.replace, open

        def write_text(path, text, *args, **kwargs):
            if self.fails(path):
                real_write_text(path, text[: len(text) // 2])
                raise os_error(None)             # a file object's write names no file
            return real_write_text(path, text, *args, **kwargs)

        def replace(src, dst):
            if self.fails(dst):
                raise os_error(src)
            real_replace(src, dst)
            if CHECKPOINT.fullmatch(Path(dst).name):
                self.saved.append(Path(dst).name)

        def open_(path, mode="r", *args, **kwargs):
            if "a" in mode and self.fails(path):
                with real_open(path, mode) as f:
                    f.write('{"updates": ')
                raise os_error(None)
            return real_open(path, mode, *args, **kwargs)
        mp.setattr(Path, "write_text", write_text)
        mp.setattr(os, "replace", replace)
        mp.setattr(run_dir_module, "open", open_, raising=False)


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """An uninterrupted run, and the writes of its saves in order."""
    save = tmp_path_factory.mktemp("faults") / "reference"
    disk = FullDisk()
    with pytest.MonkeyPatch.context() as mp:
        disk.patches(mp)
        status, err = cli(train_argv(data, save))
    assert status == 0, err
    return save, disk.seen


@pytest.mark.slow
def test_every_write_of_a_save_is_reached(reference):
    _, seen = reference
    assert {"checkpoint-weights", "checkpoint-state", "checkpoint-aside", "checkpoint-rename", "model",
            "model-write", "last-write", "last", "prune", "metrics"} <= set(seen)


# (write, which call: a number or "last"); "checkpoint-aside" is the re-save of update 6
FULL = [("checkpoint-weights", 1), ("checkpoint-state", 1), ("checkpoint-rename", 1), ("last-write", 1),
        ("last", 1), ("metrics", 1), ("checkpoint-weights", 2), ("model-write", 1), ("model", 1), ("prune", 1),
        ("checkpoint-aside", 1), ("checkpoint-rename", "last"), ("model", "last"), ("last", "last"),
        ("metrics", "last")]
NAMED = {"checkpoint": "checkpoints/u0000000", "model": "model.safetensors", "last": "checkpoints/LAST",
         "prune": "checkpoints/u0000000", "metrics": "metrics.jsonl"}


@pytest.mark.slow
@pytest.mark.parametrize("kind, n", FULL, ids=[f"{k}-{n}" for k, n in FULL])
def test_a_full_disk_during_a_save_is_one_line_and_the_same_command_resumes(data, reference, tmp_path, kind, n):
    ref, seen = reference
    save, argv = tmp_path / "run", train_argv(data, tmp_path / "run")
    disk = FullDisk(kind, seen.count(kind) if n == "last" else n)
    with pytest.MonkeyPatch.context() as mp:
        disk.patches(mp)
        status, err = cli(argv)
    assert status == 2 and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("docnmt: error:")]
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err
    assert str(save / NAMED[kind.split("-")[0]]) in errors[0] and "/." not in errors[0], errors[0]
    assert ENOSPC in errors[0] or "disk full" in errors[0], errors[0]
    kept = list_checkpoints(save)[-1] if disk.saved else None      # what resuming takes: the newest saved
    assert [c.name for c in list_checkpoints(save)][-1:] == disk.saved[-1:]
    for path in {kept, last_checkpoint(save)} - {None}:                  # loadable, as they are
        load_state(path)
        load_file(str(path / "model.safetensors"))
    assert kind == "metrics" or str(kept or "no checkpoint") in errors[0]
    status, err = cli(argv)                         # space is back: the same command
    assert status == 0, err
    assert_same_run(save, ref)


# ---- Ctrl-C and SIGTERM ------------------------------------------------------------------------------

SIGNAL_UPDATES = 10


def signal_argv(data: Path, save: Path) -> list[str]:
    """Training with no save but the epoch's end (the one a signal makes never coincides with
    another), a loss logged every 3 updates."""
    argv = train_argv(data, save, SIGNAL_UPDATES)
    for flag in ("--save-interval-updates", "--validate-interval-updates"):
        argv[argv.index(flag) + 1] = "0"
    return [sys.executable, "-m", "docnmt.cli", *argv]


def env(**extra: str) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path), **extra}


@pytest.fixture(scope="module")
def signal_reference(data, tmp_path_factory) -> Path:
    save = tmp_path_factory.mktemp("signals") / "reference"
    done = subprocess.run(signal_argv(data, save), env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return save


def signalled(data: Path, save: Path, tmp_path: Path, signals: list[int], slow: str) -> tuple[int, str]:
    """Start the training, send the first of ``signals`` once it has logged a loss, the others once
    it says it is saving; its exit status and stderr."""
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(signal_argv(data, save), env=env(DOCNMT_SLOW_AT=slow), stdout=subprocess.DEVNULL,
                                stderr=err)
    try:
        wait_for(lambda: bool(losses(save)) if (save / "metrics.jsonl").exists() else False)
        proc.send_signal(signals[0])
        for sig in signals[1:]:
            wait_for(lambda: "saving checkpoint" in err_path.read_text())
            time.sleep(0.5)                             # well inside the save (which takes 3 s more)
            proc.send_signal(sig)
        status = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return status, err_path.read_text()


STOPS = [([signal.SIGINT], 130), ([signal.SIGTERM], 143), ([signal.SIGINT, signal.SIGINT], 130),
         ([signal.SIGTERM, signal.SIGINT, signal.SIGTERM], 143)]


@pytest.mark.slow
@pytest.mark.parametrize("signals, status", STOPS, ids=["SIGINT", "SIGTERM", "SIGINT-twice", "SIGTERM-then-more"])
def test_a_signal_saves_a_checkpoint_and_stops_and_the_same_command_resumes(data, signal_reference, tmp_path,
                                                                            signals, status):
    save = tmp_path / "run"
    slow = "update:0.5" + (",checkpoint-written:3" if len(signals) > 1 else "")
    code, err = signalled(data, save, tmp_path, signals, slow)
    assert code == status and "Traceback" not in err, err
    said = [line for line in err.splitlines() if "saving checkpoint" in line]
    assert len(said) == 1 and said[0].startswith(f"docnmt: {signal.Signals(signals[0]).name}: saving checkpoint"), err
    stopped_at = last_checkpoint(save)                        # the update it stopped at, saved whole
    assert stopped_at is not None and f"{stopped_at} at update {int(stopped_at.name[1:])} " in said[0], err
    assert int(stopped_at.name[1:]) < SIGNAL_UPDATES
    assert sorted(p.name for p in (save / "checkpoints").iterdir()) == ["LAST", stopped_at.name]
    load_state(stopped_at)
    assert err.count("still saving the checkpoint") == len(signals) - 1
    again = subprocess.run(signal_argv(data, save), env=env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming from {stopped_at}" in again.stderr
    assert_same_run(save, signal_reference, besides=stopped_at.name)


# ---- a process of a torchrun run that dies or hangs -----------------------------------------------------

TORCHRUN_UPDATES = 12


def torchrun_argv(data: Path, save: Path, port: int) -> list[str]:
    """Two CPU processes (gloo), a checkpoint every 2 updates, a loss logged every update."""
    argv = train_argv(data, save, TORCHRUN_UPDATES)
    argv[argv.index("--log-interval") + 1] = "1"
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
            "-m", "docnmt.cli", *argv, "--device", "cpu", "--set", "train.max_tokens=300"]


def rank_pid(launcher: int, rank: int) -> int:
    """The pid of torchrun's worker of ``rank``."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    return next(int(c) for c in children if f"RANK={rank}\0".encode() in Path(f"/proc/{c}/environ").read_bytes())


@pytest.fixture(scope="module")
def torchrun_reference(data, tmp_path_factory) -> Path:
    save = tmp_path_factory.mktemp("torchrun") / "reference"
    done = subprocess.run(torchrun_argv(data, save, 29751), env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return save


def test_a_collective_that_failed_inside_backward_is_one_line(tmp_path):
    """DDP's gradient all-reduce runs in autograd's engine: gloo's timeout reaches Python with no
    frame of torch.distributed, only gloo's source file in the message (seen once in four runs
    of the frozen case below), and is still the one line that says what resumes the run."""
    from docnmt.errors import DocnmtError
    from docnmt.training.distributed import Distributed

    two = object.__new__(Distributed)
    two.world, two.rank = 2, 0

    def backward():         # what autograd's engine raises, from C++
        raise RuntimeError("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
                           "Timed out waiting 5000ms for recv operation to complete")
    with pytest.raises(DocnmtError, match=r"process 0 of 2 lost contact .*\(Timed out waiting 5000ms for recv "
                                          r"operation to complete\).*the same command starts again"):
        with two.contact(tmp_path):
            backward()
    with pytest.raises(RuntimeError, match="a bug of ours"):       # any other error stays itself
        with two.contact(tmp_path):
            raise RuntimeError("a bug of ours")


@pytest.mark.slow
@pytest.mark.parametrize("fault, port", [(signal.SIGKILL, 29752), (signal.SIGSTOP, 29754)], ids=["killed", "frozen"])
def test_a_torchrun_process_that_dies_or_hangs_stops_the_other_and_the_same_command_resumes(
        data, torchrun_reference, tmp_path, fault, port):
    """Process 1 killed, or frozen, after the first checkpoint: process 0 says so in one line
    within DOCNMT_DIST_TIMEOUT (5 s here; a closed connection is seen at once), torchrun ends the
    run, and the same command resumes it to the uninterrupted run's losses."""
    save, err_path = tmp_path / "run", tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(torchrun_argv(data, save, port), stdout=subprocess.DEVNULL, stderr=err,
                                env=env(DOCNMT_SLOW_AT="update:0.3", DOCNMT_DIST_TIMEOUT="5"), start_new_session=True)
    faulty = None
    try:
        wait_for(lambda: bool(list_checkpoints(save)))
        faulty = rank_pid(proc.pid, 1)
        os.kill(faulty, fault)
        begun = time.time()
        wait_for(lambda: "lost contact" in err_path.read_text(), timeout=30, what=err_path.read_text)
        assert time.time() - begun < 20
        assert proc.wait(timeout=120) != 0                 # torchrun ends the frozen one (after its 30 s grace)
    finally:
        for pid, group in ((proc.pid, True), (faulty, False)):   # when the test failed: torchrun and its workers,
            with contextlib.suppress(ProcessLookupError, TypeError):   # and the frozen one torchrun had no time to kill
                (os.killpg if group else os.kill)(pid, signal.SIGKILL)
        proc.wait()
    err = err_path.read_text()
    said = [line for line in err.splitlines() if line.startswith("docnmt: error:")]
    assert len(said) == 1 and said[0].startswith("docnmt: error: process 0 of 2 lost contact"), err
    assert "[rank0]" not in err, err                       # no traceback of process 0's
    newest = list_checkpoints(save)[-1]
    assert f"resumes from {newest}" in said[0]
    again = subprocess.run(torchrun_argv(data, save, port + 1), env=env(), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from {newest}" in again.stderr
    assert_same_run(save, torchrun_reference)


@pytest.mark.slow
@pytest.mark.parametrize("to_launcher, sig, port", [(True, signal.SIGTERM, 29756), (False, signal.SIGINT, 29758)],
                         ids=["SIGTERM-to-torchrun", "SIGINT-to-process-1-only"])
def test_a_signal_stops_every_torchrun_process_at_the_same_update(data, torchrun_reference, tmp_path, to_launcher,
                                                                  sig, port):
    """A scheduler's SIGTERM to torchrun (which passes it on to every process), or a signal that only
    process 1 gets: the processes agree on an update, save it together and stop; the same command resumes."""
    save, err_path = tmp_path / "run", tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(torchrun_argv(data, save, port), stdout=subprocess.DEVNULL, stderr=err,
                                env=env(DOCNMT_SLOW_AT="update:0.3", DOCNMT_DIST_TIMEOUT="20"), start_new_session=True)
    try:
        wait_for(lambda: bool(list_checkpoints(save)))
        os.kill(proc.pid if to_launcher else rank_pid(proc.pid, 1), sig)
        assert proc.wait(timeout=120) != 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    err = err_path.read_text()
    said = [line for line in err.splitlines() if "saving checkpoint" in line]
    stopped_at = last_checkpoint(save)
    assert len(said) == 1 and said[0].startswith(f"docnmt: {sig.name}: saving checkpoint {stopped_at} at update"), err
    assert "[rank" not in err and "lost contact" not in err and "docnmt: error" not in err, err
    load_state(stopped_at)
    again = subprocess.run(torchrun_argv(data, save, port + 1), env=env(), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from {stopped_at}" in again.stderr
    assert_same_run(save, torchrun_reference, besides=stopped_at.name)


def test_a_full_disk_under_train_log_is_one_error_naming_it(tmp_path):
    """logging would print a traceback for a failed write of train.log and go on; a run stops instead."""
    from docnmt.checkpoint import WriteFailed
    from docnmt.training.run_dir import RunDir, log

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, ENOSPC)
    run = RunDir(tmp_path)
    run.open_log()
    try:
        handler = next(h for h in log.handlers if getattr(h, "baseFilename", "") == str(tmp_path / "train.log"))
        handler.stream = Full()
        with pytest.raises(WriteFailed, match=f"{tmp_path / 'train.log'}: cannot be written \\({ENOSPC}\\)"):
            log.info("a record")
    finally:
        handler.stream = io.StringIO()
        run.close()


@pytest.mark.parametrize("value", ["x", "0", "-3", "nan", "inf", "1e20"])
def test_a_bad_dist_timeout_is_one_error(monkeypatch, value):
    from docnmt.errors import DocnmtError
    from docnmt.training.distributed import collective_timeout
    monkeypatch.setenv("DOCNMT_DIST_TIMEOUT", value)
    with pytest.raises(DocnmtError, match="DOCNMT_DIST_TIMEOUT"):
        collective_timeout()
    monkeypatch.setenv("DOCNMT_DIST_TIMEOUT", "2.5")
    assert collective_timeout().total_seconds() == 2.5
