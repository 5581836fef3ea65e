"""How the training processes hold the model (:func:`sharding_for`): replicated (one process, or
DDP under ``torchrun``: :class:`Replicated`) or sharded with PyTorch's FSDP2 (``train --fsdp``:
:class:`Sharded`, docs/training.md#sharded-training-fsdp).

Under ``--fsdp`` every encoder and decoder layer (each :class:`~docnmt.layers.Layer`) is one
``fully_shard`` unit, then the root (embeddings, final norms, what the method adds): each process
keeps 1/N of the weights, gradients and Adam moments, and gathers a layer's weights only while it
runs. Checkpoints hold full (unsharded) state: the weights are gathered into rank 0's CPU memory
and written as an ordinary ``model.safetensors``, the optimizer state as full tensors keyed by
parameter name; on resuming every process reads them and keeps its own shard. So a sharded run's
checkpoint and final model are laid out as any other's (``docnmt translate`` loads them), and it
resumes on any number of processes; the price is rank 0 holding one full copy of weights and
Adam moments in CPU memory while it saves (about 12 bytes per parameter).
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..checkpoint import load_weights, save_weights
from ..config import TrainConfig
from ..errors import ConfigError, DocnmtError
from .distributed import Distributed


def sharding_for(tc: TrainConfig, dist: Distributed, amp_dtype) -> "Replicated":
    """The way this run holds its model: :class:`Sharded` with ``train.fsdp``, after refusing it
    where it cannot work (not under ``torchrun``; validation BLEU, which decodes outside ``forward``;
    fp16, whose gradient scaler does not know sharded gradients), else :class:`Replicated`. Under
    ``torchrun`` with one process it shards over that one (no memory saved, a warning says so): the
    same code path, to check on a machine with one GPU."""
    if not tc.fsdp:
        return Replicated()
    if "WORLD_SIZE" not in os.environ:
        raise ConfigError("--fsdp shards the model over the processes torchrun starts: run training under "
                          "torchrun (torchrun --nproc_per_node=N -m docnmt.cli train ... --fsdp), or drop --fsdp")
    if dist.world == 1 and dist.main:
        print("warning: --fsdp with one process shards nothing (no memory saved): start 2 or more with "
              "torchrun --nproc_per_node=N", file=sys.stderr)
    if tc.valid_bleu:
        raise ConfigError("--fsdp does not support --valid-bleu yet (decoding runs outside the sharded forward "
                          "pass); validate on the loss, and translate the saved model afterwards")
    if amp_dtype == torch.float16:
        raise ConfigError("--fsdp needs bf16 or fp32 (fp16's gradient scaler does not handle sharded gradients): "
                          "set --precision bf16 or fp32")
    return Sharded()


class Replicated:
    """Every process holds the whole model (DDP averages the gradients under ``torchrun``)."""
    sharded = False

    def prepare(self, model: torch.nn.Module, dist: Distributed, device: torch.device) -> torch.nn.Module:
        """The model the trainer keeps (and builds its optimizer on)."""
        return model

    def wrap(self, model: torch.nn.Module, dist: Distributed, device: torch.device) -> torch.nn.Module:
        """The module an update runs forward through (DDP's wrapper with several processes)."""
        if dist.world == 1:
            return model
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                         else None)

    def no_sync(self, wrapped: torch.nn.Module, sync: bool):
        """A context in which a micro-batch's backward does (``sync``) or does not yet average the
        gradients over the processes."""
        return contextlib.nullcontext() if sync or not hasattr(wrapped, "no_sync") else wrapped.no_sync()

    def load(self, model: torch.nn.Module, path: Path, strict: bool = True) -> list[str]:
        """Load a safetensors file into ``model`` (:func:`~docnmt.checkpoint.load_weights`)."""
        return load_weights(model, path, strict=strict)

    def weights(self, model: torch.nn.Module) -> torch.nn.Module | dict[str, torch.Tensor]:
        """What :func:`~docnmt.checkpoint.save_checkpoint` writes (every rank calls it; rank 0
        writes): here the model itself, whose weights every rank holds."""
        return model

    def save_weights(self, model: torch.nn.Module, path: Path, main: bool) -> None:
        """Write ``model.safetensors`` at ``path`` unless it exists (every rank calls it)."""
        if main and not path.exists():
            save_weights(model, path)

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        return optimizer.state_dict()

    def load_optimizer(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """Put back a checkpoint's optimizer state (refusing one a sharded run saved)."""
        check_layout(state, self.sharded)
        optimizer.load_state_dict(state["optimizer"])


class Sharded(Replicated):
    """FSDP2: each process holds a shard of every weight, gradient and Adam moment."""
    sharded = True

    def prepare(self, model: torch.nn.Module, dist: Distributed, device: torch.device) -> torch.nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from ..layers import Layer
        if not torch.distributed.is_initialized():        # one process: Distributed made no group
            torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        mesh = init_device_mesh(device.type, (dist.world,))
        for layer in [m for m in model.modules() if isinstance(m, Layer)]:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    def wrap(self, model: torch.nn.Module, dist: Distributed, device: torch.device) -> torch.nn.Module:
        return model

    def no_sync(self, wrapped: torch.nn.Module, sync: bool):
        wrapped.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()

    def load(self, model: torch.nn.Module, path: Path, strict: bool = True) -> list[str]:
        """Every rank reads the whole file and keeps its shard; the same checks as unsharded."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
        if not Path(path).exists():
            raise DocnmtError(f"{path}: no such weights file")
        tensors = load_file(str(path))
        own = {n: p.shape for n, p in model.state_dict().items()}
        wrong = [k for k, t in tensors.items() if k in own and own[k] != t.shape]
        unexpected = [k for k in tensors if k not in own]
        tied = set(all_names(model)) - set(unique_names(model))
        missing = [k for k in own if k not in tensors and k not in tied]
        if wrong or unexpected or (strict and missing):
            raise DocnmtError(f"{path}: weights do not fit this model (wrong shape {wrong[:3]}, missing "
                              f"{missing[:3]}, unexpected {unexpected[:3]}; same vocabulary and dimensions needed)")
        set_model_state_dict(model, tensors, options=StateDictOptions(full_state_dict=True, strict=False))
        loaded = set(tensors) | tied
        return [n for n, _ in model.named_parameters() if n in loaded]

    def weights(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The full weights gathered on rank 0's CPU (empty on the other ranks), without the tied
        duplicates an unsharded save leaves out (the names :func:`~docnmt.checkpoint.state_dict_unique` keeps)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        model.reshard()           # after an eval forward (validation) the root's weights stay gathered
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        tied = set(all_names(model)) - set(unique_names(model))
        return {k: v.contiguous() for k, v in full.items() if k not in tied}

    def save_weights(self, model: torch.nn.Module, path: Path, main: bool) -> None:
        from safetensors.torch import save_file

        from ..checkpoint import atomic_write
        tensors = self.weights(model)
        if main and not path.exists():
            atomic_write(path, lambda tmp: save_file(tensors, tmp))

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """The full optimizer state on rank 0's CPU, keyed by parameter name (empty elsewhere)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
        model.reshard()           # the optimizer's parameters back in place of the gathered ones
        return get_optimizer_state_dict(model, optimizer,
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_optimizer(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
        check_layout(state, self.sharded)
        set_optimizer_state_dict(model, optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True))


def all_names(model: torch.nn.Module) -> list[str]:
    return [n for n, _ in model.named_parameters(remove_duplicate=False)]


def unique_names(model: torch.nn.Module) -> list[str]:
    """Parameter names, each shared (tied) parameter under its first name only, as the state dict orders them."""
    return [n for n, _ in model.named_parameters()]


def check_layout(state: dict, sharded: bool) -> None:
    """Refuse to resume a checkpoint whose optimizer state the other way of training saved (its
    layout differs: by parameter name under ``--fsdp``, by position otherwise)."""
    if bool(state.get("fsdp", False)) != sharded:
        saved = "with --fsdp" if state.get("fsdp") else "without --fsdp"
        raise ConfigError(f"the checkpoint was saved by a run {saved}: resume it {saved} (or --force to start over)")
