"""``train --fsdp`` (docs/training.md#sharded-training-fsdp): FSDP2 under ``torchrun`` with two CPU
processes on gloo trains with the losses of the same run under DDP, resumes a killed run with the
uninterrupted run's losses, and leaves an ordinary model directory that ``Translator.load`` reads.

On a GPU (bench/gpu/README.md): ``DOCNMT_FSDP_DEVICE=cuda DOCNMT_FSDP_PROCS=1`` runs the same
checks with one process on NCCL (a single GPU cannot hold two NCCL ranks): FSDP2 over one device
against the plain run, killed and resumed."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from _tiny import chat_documents, history, tiny_config
from docnmt.checkpoint import last_checkpoint, load_state
from docnmt.errors import ConfigError
from docnmt.training import Trainer
from docnmt.training.sharding import check_layout

UPDATES = 6
DEVICE = os.environ.get("DOCNMT_FSDP_DEVICE", "cpu")
PROCS = int(os.environ.get("DOCNMT_FSDP_PROCS", "2"))
EXACT = 0.0 if DEVICE == "cpu" else 1e-4        # the CPU resumes bit for bit; GPU kernels may reorder sums


def torchrun(data: Path, save: Path, port: int, *extra: str, crash_at: str = "") -> subprocess.CompletedProcess:
    """``docnmt train`` of the tiny model under torchrun with PROCS processes (two, gloo): UPDATES updates,
    two micro-batches each (gradients kept local until the second), a loss logged and a checkpoint
    saved every 1 and 2 updates."""
    sets = {"model.d_model": 32, "model.ffn_dim": 64, "model.heads": 2, "train.max_tokens": 300, "train.lr": 3e-3,
            "train.warmup_updates": 10, "train.max_epoch": 0, "train.log_interval": 1, "train.patience": 0,
            "train.precision": "fp32", "train.update_freq": 2}
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={PROCS}", f"--master_port={port}",
           "-m", "docnmt.cli", "train", str(data), "--arch", "transformer_tiny", "--save-dir", str(save),
           "--max-update", str(UPDATES), "--save-interval-updates", "2", "--no-progress", "--device", DEVICE, *extra]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DOCNMT_CRASH_AT": crash_at}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def losses(save: Path) -> dict[int, float]:
    return {r["updates"]: r["loss"] for r in history(save) if "loss" in r}


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    """The same run under DDP and under FSDP, and under FSDP killed after update 5 (its newest
    checkpoint: update 4) and resumed by the same command."""
    root, data = tmp_path_factory.mktemp("fsdp"), tiny_dir / "data"
    out = {}
    for name, port, extra in (("ddp", 29741, ()), ("fsdp", 29742, ("--fsdp",))):
        proc = torchrun(data, root / name, port, *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = root / name
    killed = torchrun(data, root / "killed", 29743, "--fsdp", crash_at="update:5")
    assert killed.returncode != 0
    assert last_checkpoint(root / "killed").name == "u00000004"
    resumed = torchrun(data, root / "killed", 29744, "--fsdp")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr
    out["killed"] = root / "killed"
    return out


@pytest.mark.slow
def test_fsdp_gives_the_losses_and_weights_of_ddp(runs):
    ddp, fsdp = losses(runs["ddp"]), losses(runs["fsdp"])
    assert sorted(fsdp) == sorted(ddp) == list(range(1, UPDATES + 1))
    for u in ddp:
        assert fsdp[u] == pytest.approx(ddp[u], rel=max(EXACT, 1e-5)), (u, fsdp[u], ddp[u])
    assert fsdp[UPDATES] < fsdp[1]                  # it learns
    want, got = load_file(runs["ddp"] / "model.safetensors"), load_file(runs["fsdp"] / "model.safetensors")
    assert sorted(got) == sorted(want)              # the same names: tied weights saved once, as unsharded
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5)
    state = load_state(last_checkpoint(runs["fsdp"]))
    assert state["fsdp"] is True and state["progress"]["updates"] == UPDATES
    assert set(state["optimizer"]["state"]) <= set(want) | {"decoder.embed.table.weight"}   # by parameter name


@pytest.mark.slow
def test_fsdp_run_killed_and_resumed_has_the_uninterrupted_losses(runs):
    whole, resumed = losses(runs["fsdp"]), losses(runs["killed"])
    assert sorted(resumed) == sorted(whole) == list(range(1, UPDATES + 1))
    for u in whole:
        assert resumed[u] == pytest.approx(whole[u], rel=EXACT, abs=EXACT), (u, resumed[u], whole[u])
    final = load_file(runs["fsdp"] / "model.safetensors"), load_file(runs["killed"] / "model.safetensors")
    for k in final[0]:
        torch.testing.assert_close(final[1][k], final[0][k], rtol=EXACT, atol=EXACT)


@pytest.mark.slow
def test_fsdp_model_loads_and_translates(runs):
    from docnmt.translate import Translator
    tr = Translator.load(runs["fsdp"], device=DEVICE)
    weights = load_file(runs["fsdp"] / "model.safetensors")
    own = tr.model.state_dict()
    for k, v in weights.items():
        torch.testing.assert_close(own[k].cpu(), v)
    docs = chat_documents("valid", target=False)[:2]
    for d in docs:
        d.src = d.src[:3]
    hyps, _ = tr.translate(docs)
    assert [len(h.tgt) for h in hyps] == [3, 3]


def test_fsdp_without_torchrun_is_refused(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ConfigError, match="run training under torchrun"):
        Trainer.from_dirs(tiny_config(fsdp=True), tiny_dir / "data", tmp_path / "m", progress_bar=False)
    assert not (tmp_path / "m" / "checkpoints").exists()


@pytest.mark.slow
def test_fsdp_init_from_a_model_directory(runs, tiny_dir, tmp_path):
    """``--init-from`` (an imported model's directory, in the use this is for) loads every weight
    into the shards: the first update's loss is the trained model's, not a fresh one's."""
    proc = torchrun(tiny_dir / "data", tmp_path / "m", 29745, "--fsdp", "--init-from", str(runs["ddp"]),
                    "--set", "train.max_update=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "; 0 fresh" in proc.stderr
    fresh, started = losses(runs["fsdp"])[1], losses(tmp_path / "m")[1]
    assert started < fresh - 0.3          # 10.15 against 10.65 from fresh weights


def test_a_checkpoint_resumes_only_the_way_it_was_trained():
    check_layout({"fsdp": True}, sharded=True)
    check_layout({}, sharded=False)                  # a checkpoint from before --fsdp existed
    with pytest.raises(ConfigError, match="saved by a run with --fsdp: resume it with --fsdp"):
        check_layout({"fsdp": True}, sharded=False)
    with pytest.raises(ConfigError, match="without --fsdp"):
        check_layout({"fsdp": False}, sharded=True)
