"""Crash safety of training: a run killed at any instant of a save is resumed (or, before its
first checkpoint, started again) by the same command and ends exactly where an uninterrupted run
ends; damaged leftovers of a crash are recovered from; one training command at a time holds a
save directory; a diverging run stops with its last good checkpoint kept.

Kills are simulated at the named crash points of :mod:`docnmt.checkpoint` (``crash_hook`` in
process: an exception no ``except Exception`` catches, so the code's error clean-up does not run,
as after a kill; ``DOCNMT_CRASH_AT`` in a subprocess, which then exits with status 137), not by
timing. Two tests kill a real training process with SIGKILL.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from _tiny import history, tiny_config
from docnmt import checkpoint
from docnmt.checkpoint import DirectoryLock, last_checkpoint, list_checkpoints, recover
from docnmt.errors import DocnmtError
from docnmt.training import Trainer

UPDATES = 6
# saves at 2, 4 (validated: the best model so far) and 6, then validates 6 and saves it again (the
# re-save every run ends with); from the third save on the oldest checkpoint is deleted
SETTINGS = {"save_interval_updates": 2, "validate_interval_updates": 4, "keep_last": 2}


class Killed(BaseException):
    """The simulated kill: not an Exception, so no error handler of the trainer runs."""


def run_config():
    return tiny_config("sent2sent", max_update=UPDATES, **SETTINGS)


def train(data: Path, save: Path, hook=None) -> None:
    """The same training command every time; ``hook`` is installed as ``checkpoint.crash_hook``."""
    checkpoint.crash_hook = hook
    try:
        Trainer.from_dirs(run_config(), data, save, progress_bar=False).train()
    finally:
        checkpoint.crash_hook = None


def kill_at(point: str, occurrence: int):
    seen = {}

    def hook(name: str) -> None:
        seen[name] = seen.get(name, 0) + 1
        if name == point and seen[name] == occurrence:
            raise Killed(f"{point} #{occurrence}")
    return hook


@pytest.fixture(scope="module")
def data(tiny_dir) -> Path:
    return tiny_dir / "data"


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """An uninterrupted run and the order in which it passes the crash points."""
    save = tmp_path_factory.mktemp("crash") / "reference"
    points: list[str] = []
    train(data, save, points.append)
    return save, points


def weights(path: Path) -> dict:
    return load_file(str(path))


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0)


@pytest.mark.slow
def test_every_crash_point_is_reached(reference):
    """The run below passes every named point, the re-save of its final update included."""
    _, points = reference
    assert {"config", "update", "checkpoint-written", "checkpoint-aside", "checkpoint-renamed", "best-weights",
            "last", "prune"} <= set(points)
    assert points.count("update") == UPDATES and points.count("checkpoint-aside") >= 1


# (point, which occurrence: a number or "last"); "checkpoint-aside" happens once: the final update
# saved a second time after its validation, between the two renames of the re-save
KILLS = [("config", 1), ("update", 1), ("update", 3), ("update", "last"), ("checkpoint-written", 1),
         ("checkpoint-renamed", 1), ("best-weights", 1), ("last", 1), ("prune", 1),
         ("checkpoint-written", "last"), ("checkpoint-aside", 1), ("checkpoint-renamed", "last"),
         ("best-weights", "last"), ("last", "last")]


@pytest.mark.slow
@pytest.mark.parametrize("point, occurrence", KILLS, ids=[f"{p}-{n}" for p, n in KILLS])
def test_killed_run_resumes_to_the_uninterrupted_result(data, reference, tmp_path, point, occurrence):
    ref, points = reference
    n = points.count(point) if occurrence == "last" else occurrence
    save = tmp_path / "run"
    with pytest.raises(Killed):
        train(data, save, kill_at(point, n))
    ckpts = save / "checkpoints"
    if ckpts.is_dir():                                       # a checkpoint's name always means both files
        assert all(checkpoint.complete(c) for c in ckpts.glob("u*"))
    train(data, save)                                        # the same command, nothing else
    names = [c.name for c in list_checkpoints(save)]
    assert names == [c.name for c in list_checkpoints(ref)] == ["u00000004", "u00000006"]
    assert last_checkpoint(save).name == "u00000006"
    assert sorted(p.name for p in ckpts.iterdir()) == ["LAST", *names]       # no leftovers
    for name in names:
        assert_same_weights(save / "checkpoints" / name / "model.safetensors",
                            ref / "checkpoints" / name / "model.safetensors")
    assert_same_weights(save / "model.safetensors", ref / "model.safetensors")
    best = [r for r in history(save) if "valid_loss" in r]
    assert [r["updates"] for r in best] == [r["updates"] for r in history(ref) if "valid_loss" in r]


@pytest.mark.slow
def test_the_model_is_written_before_last_moves_on(data, reference, tmp_path):
    """Killed just after ``LAST`` named the final checkpoint (the best one here): model.safetensors
    already holds that checkpoint's weights, without any rerun."""
    ref, _ = reference
    assert_same_weights(ref / "model.safetensors", ref / "checkpoints" / "u00000006" / "model.safetensors")
    save = tmp_path / "run"
    with pytest.raises(Killed):
        train(data, save, kill_at("last", reference[1].count("last")))
    assert last_checkpoint(save).name == "u00000006"
    assert_same_weights(save / "model.safetensors", save / "checkpoints" / "u00000006" / "model.safetensors")


@pytest.mark.slow
def test_final_model_is_the_last_checkpoint_after_a_kill_before_it_was_written(data, tmp_path):
    """No validation set: model.safetensors must be the last checkpoint's weights even when the
    kill came after the final checkpoint and before the model was copied from it."""
    nodata = tmp_path / "data"
    shutil.copytree(data, nodata)
    for f in nodata.glob("valid.*"):
        f.unlink()
    save = tmp_path / "run"
    with pytest.raises(Killed):
        train(nodata, save, kill_at("checkpoint-renamed", 3))   # u6 complete, model.safetensors still u4's
    assert (save / "checkpoints" / "u00000006").is_dir()
    train(nodata, save)
    assert_same_weights(save / "model.safetensors", save / "checkpoints" / "u00000006" / "model.safetensors")


# ---- what a crash (or a full disk) can leave, made by hand ----------------------------------------

@pytest.fixture(scope="module")
def finished(reference):
    return reference[0]


def copy_run(finished: Path, tmp_path: Path) -> Path:
    save = tmp_path / "run"
    shutil.copytree(finished, save)
    (save / ".lock").unlink(missing_ok=True)
    return save


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_damaged_newest_state_falls_back_to_the_previous_checkpoint(data, finished, tmp_path, capsys, damage):
    save = copy_run(finished, tmp_path)
    state = save / "checkpoints" / "u00000006" / "state.pt"
    state.write_bytes(b"" if damage == "empty" else state.read_bytes()[: state.stat().st_size // 2])
    trainer = Trainer.from_dirs(run_config(), data, save, progress_bar=False)
    err = capsys.readouterr().err
    assert "u00000006" in err and "cannot be loaded" in err and "resumed from u00000004" in err
    assert trainer.progress.updates == 4
    trainer.train()
    assert_same_weights(save / "checkpoints" / "u00000006" / "model.safetensors",
                        finished / "checkpoints" / "u00000006" / "model.safetensors")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["torn-last-line", "bad-byte", "garbage-LAST", "empty-LAST"])
def test_resume_survives_damaged_metrics_and_last(data, finished, tmp_path, damage):
    save = copy_run(finished, tmp_path)
    metrics = save / "metrics.jsonl"
    if damage == "torn-last-line":
        metrics.write_bytes(metrics.read_bytes() + b'{"updates": 7, "lo')
    elif damage == "bad-byte":
        lines = metrics.read_bytes().splitlines(keepends=True)
        metrics.write_bytes(b"".join(lines[:1] + [b"\xff\xfe" + lines[1]] + lines[2:]))
    else:
        (save / "checkpoints" / "LAST").write_bytes(b"\x00garbage/../../x\n" if damage == "garbage-LAST" else b"")
    longer = tiny_config("sent2sent", max_update=UPDATES + 2, **SETTINGS)     # and training goes on
    trainer = Trainer.from_dirs(longer, data, save, progress_bar=False)
    assert trainer.progress.updates == UPDATES
    trainer.train()
    rows = history(save)                                 # every line parses again, the new ones too
    assert [r["updates"] for r in rows if "loss" in r][-1] == UPDATES + 2
    assert not any(r["updates"] > UPDATES and "loss" not in r and "valid_loss" not in r for r in rows)
    assert last_checkpoint(save).name == "u00000008"


def tiny_weights(path: Path, value: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"w": torch.full((2,), value)}, str(path))


def test_recover_puts_back_a_checkpoint_moved_aside_and_removes_leftovers(tmp_path):
    ckpts = tmp_path / "checkpoints"
    for name in (".u00000006.old", "u00000004"):
        tiny_weights(ckpts / name / "model.safetensors", 1.0)
        (ckpts / name / "state.pt").write_bytes(b"state")
    (ckpts / ".u00000006.x1y2z3").mkdir()                      # the new copy, half written
    (ckpts / ".u00000002.trash").mkdir()                      # an interrupted prune
    (ckpts / ".LAST.abc123").write_text("u00000006")
    (tmp_path / ".model.safetensors.k9").write_bytes(b"half")
    done = recover(tmp_path)
    assert sorted(p.name for p in ckpts.iterdir()) == ["u00000004", "u00000006"]
    assert not (tmp_path / ".model.safetensors.k9").exists()
    assert any("put back u00000006" in line for line in done)
    assert [c.name for c in list_checkpoints(tmp_path)] == ["u00000004", "u00000006"]


def test_a_checkpoint_missing_a_file_is_not_listed_and_average_skips_it(tmp_path, run_cli):
    """A kill while deleting an old checkpoint (before pruning was atomic) left u00000020 with
    only state.pt: it is not a checkpoint, and `average` uses the complete ones."""
    ckpts = tmp_path / "checkpoints"
    (ckpts / "u00000020").mkdir(parents=True)
    (ckpts / "u00000020" / "state.pt").write_bytes(b"state")
    for k, name in enumerate(("u00000030", "u00000040")):
        tiny_weights(ckpts / name / "model.safetensors", float(k))
        (ckpts / name / "state.pt").write_bytes(b"state")
    (ckpts / "LAST").write_text("u00000040")
    assert [c.name for c in list_checkpoints(tmp_path)] == ["u00000030", "u00000040"]
    status, _, err = run_cli("average", tmp_path, "--last", "10")
    assert status == 0, err
    torch.testing.assert_close(weights(tmp_path / "averaged.safetensors")["w"], torch.full((2,), 0.5))


@pytest.mark.parametrize("text", ["", "u00000099", "../u00000030", "\x00\xff", "u0000004"])
def test_last_that_names_no_complete_checkpoint_falls_back_to_the_newest(tmp_path, text):
    ckpts = tmp_path / "checkpoints"
    for name in ("u00000030", "u00000040"):
        tiny_weights(ckpts / name / "model.safetensors", 0.0)
        (ckpts / name / "state.pt").write_bytes(b"state")
    (ckpts / "LAST").write_text(text, encoding="utf-8", errors="surrogateescape")
    assert last_checkpoint(tmp_path).name == "u00000040"
    (ckpts / "LAST").write_text("u00000030")
    assert last_checkpoint(tmp_path).name == "u00000030"


# ---- one training command per directory ----------------------------------------------------------

def test_a_second_command_into_a_locked_directory_names_the_holder(data, tmp_path, cli_error):
    save = tmp_path / "run"
    save.mkdir()
    lock = DirectoryLock(save)
    try:
        message = cli_error("train", data, "--save-dir", save, "--arch", "transformer_tiny", "--max-update", "1")
        assert f"pid {os.getpid()}" in message and str(save) in message
        assert sorted(p.name for p in save.iterdir()) == [".lock"]       # nothing written, nothing resumed
    finally:
        lock.release()
    with pytest.raises(DocnmtError, match="in use"):                     # and through the Python API
        first = Trainer.from_dirs(run_config(), data, save, progress_bar=False)
        try:
            Trainer.from_dirs(run_config(), data, save, progress_bar=False)
        finally:
            first.close()


def test_a_lock_file_left_by_a_dead_process_does_not_block(data, tmp_path):
    save = tmp_path / "run"
    save.mkdir()
    (save / ".lock").write_text("999999999\n")                # no process holds it
    trainer = Trainer.from_dirs(run_config(), data, save, progress_bar=False)
    assert (save / ".lock").read_text().strip() == str(os.getpid())
    trainer.close()


def test_a_lock_whose_holder_has_died_is_waited_for_not_refused(tmp_path):
    """A holder killed an instant ago (its pid gone) may not have let go of the lock yet: wait."""
    import fcntl
    import threading
    held = open(tmp_path / ".lock", "a+")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    held.write("999999999\n")
    held.flush()
    threading.Timer(0.5, held.close).start()                 # the dying holder's descriptors close
    lock = DirectoryLock(tmp_path)
    assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
    lock.release()


def test_a_run_killed_before_its_first_checkpoint_starts_again(data, tmp_path):
    save = tmp_path / "run"
    with pytest.raises(Killed):
        train(data, save, kill_at("checkpoint-written", 1))
    assert not list_checkpoints(save) and (save / "config.yaml").exists()
    trainer = Trainer.from_dirs(run_config(), data, save, progress_bar=False)      # no "pass --force"
    assert trainer.progress.updates == 0
    trainer.close()
    (save / "notes.txt").write_text("mine")                              # but a file of the user's is kept
    with pytest.raises(DocnmtError, match="notes.txt"):
        Trainer.from_dirs(run_config(), data, save, progress_bar=False)
    assert (save / "notes.txt").read_text() == "mine"


# ---- divergence ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_non_finite_loss_stops_training_and_keeps_the_last_good_checkpoint(data, tmp_path, monkeypatch):
    import docnmt.training.trainer as train_module
    real = train_module.forward_loss
    updates = {"n": 0}

    def diverging(model, batch, eps):
        loss, nll, n = real(model, batch, eps)
        if model.training:                                    # not validation
            updates["n"] += 1
            if updates["n"] >= 3:                             # update 3 diverges (as --lr inf once did)
                loss = loss * float("nan")
        return loss, nll, n
    monkeypatch.setattr(train_module, "forward_loss", diverging)
    save = tmp_path / "run"
    cfg = tiny_config("sent2sent", max_update=UPDATES, save_interval_updates=2, validate_interval_updates=2)
    trainer = Trainer.from_dirs(cfg, data, save, progress_bar=False)
    with pytest.raises(DocnmtError, match="diverged: the loss of update 3 is nan") as e:
        trainer.train()
    assert "u00000002" in str(e.value)
    assert [c.name for c in list_checkpoints(save)] == ["u00000002"]
    assert_same_weights(save / "model.safetensors", save / "checkpoints" / "u00000002" / "model.safetensors")
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())      # no step was taken
    DirectoryLock(save).release()                                                # the lock was released


# ---- real processes ----------------------------------------------------------------------------------

TRAIN = [sys.executable, "-m", "docnmt.cli", "train"]


def cli_argv(data: Path, save: Path, updates: int) -> list[str]:
    return [*TRAIN, str(data), "--save-dir", str(save), "--arch", "transformer_tiny", "--mode", "sent2sent",
            "--max-update", str(updates), "--save-interval-updates", "2", "--max-tokens", "600", "--no-progress",
            "--set", "model.d_model=32", "--set", "model.ffn_dim=64", "--set", "model.heads=2"]


def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_crash_point_in_a_subprocess_then_the_same_command_resumes(data, tmp_path):
    save = tmp_path / "run"
    argv = cli_argv(data, save, 4)
    crashed = subprocess.run(argv, env={**env(), "DOCNMT_CRASH_AT": "checkpoint-aside"}, capture_output=True,
                             text=True, timeout=300)
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    assert (save / "checkpoints" / ".u00000004.old").is_dir() and not (save / "checkpoints" / "u00000004").exists()
    again = subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "put back u00000004" in again.stderr and "resuming from" in again.stderr
    assert last_checkpoint(save).name == "u00000004"


def wait_for(condition, timeout: float = 240.0, what=lambda: "") -> None:
    """Poll ``condition`` until it holds; on a timeout, the assertion says ``what()`` (e.g. a stderr)."""
    end = time.time() + timeout
    while not condition():
        if time.time() > end:
            raise AssertionError(f"timed out\n{what()}")
        time.sleep(0.2)


@pytest.mark.slow
def test_kill_9_during_training_then_the_same_command_resumes_and_a_second_command_is_refused(data, tmp_path,
                                                                                              cli_error):
    save = tmp_path / "run"
    argv = cli_argv(data, save, 100000)
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: bool(list_checkpoints(save)))
        message = cli_error("train", data, "--save-dir", save, "--arch", "transformer_tiny")
        assert f"pid {proc.pid}" in message                       # two trainings never share a directory
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (save / ".lock").read_text().strip() == str(proc.pid)   # stale, and harmless
    done = list_checkpoints(save)[-1].name
    again = subprocess.run(cli_argv(data, save, int(done[1:]) + 2), env=env(), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stderr
    assert last_checkpoint(save).name == f"u{int(done[1:]) + 2:08d}"


# ---- prepare ----------------------------------------------------------------------------------------

def test_prepare_builds_beside_and_swaps_in_only_a_complete_directory(tmp_path, monkeypatch):
    import docnmt.prepare as prep
    for lang, text in (("en", "<d>\nHello .\nHow are you ?\n"), ("de", "<d>\nHallo .\nWie geht es ?\n")):
        (tmp_path / f"a.{lang}").write_text(text * 3)
        (tmp_path / f"b.{lang}").write_text(text * 5)
    dest = tmp_path / "data"
    prep.prepare(dest, "en", "de", [str(tmp_path / "a")], vocab_size=40, log=lambda m: None)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}

    def killed(corpus):
        raise Killed("prepare")
    monkeypatch.setattr(prep, "split_stats", killed)
    with pytest.raises(Killed):                                   # killed halfway through the new one
        prep.prepare(dest, "en", "de", [str(tmp_path / "b")], vocab_size=40, force=True, log=lambda m: None)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    (tmp_path / ".data.new-x1y2" / "sub").mkdir(parents=True)    # what a kill -9 there leaves beside
    (tmp_path / ".data.old-999").mkdir()                          # and one between the two renames
    monkeypatch.undo()
    stats = prep.prepare(dest, "en", "de", [str(tmp_path / "b")], vocab_size=40, force=True, log=lambda m: None)
    assert stats["splits"]["train"]["documents"] == 5 and "prepare.json" in {p.name for p in dest.iterdir()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.de", "a.en", "b.de", "b.en", "data"]   # nothing left
    now = {p.name: p.read_bytes() for p in dest.iterdir()}
    dest.rename(tmp_path / ".data.old-5")                          # killed between the two renames of a swap
    with pytest.raises(DocnmtError, match="not empty"):            # the next prepare finds the data put back
        prep.prepare(dest, "en", "de", [str(tmp_path / "a")], vocab_size=40, log=lambda m: None)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == now
