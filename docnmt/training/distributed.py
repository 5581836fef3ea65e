"""Several training processes under ``torchrun`` (:class:`Distributed`; one process otherwise),
and the random states a checkpoint keeps for every rank, so that a resumed run draws the same
dropout masks as the run that was never interrupted.

A process that dies or hangs: the others' next collective fails (at once when a gloo peer's
connection closes; after ``DOCNMT_DIST_TIMEOUT`` seconds when a peer hangs, torch's default
without it), each says so in one line (:meth:`Distributed.contact`) and exits, and torchrun ends
the rest; the same command resumes from the newest checkpoint."""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ..checkpoint import list_checkpoints
from ..errors import DocnmtError
from ..ranges import seconds_from_env


class Distributed:
    """Rank and world size from ``torchrun``'s environment; a single process otherwise."""

    def __init__(self, cuda: bool | None = None):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.cuda = torch.cuda.is_available() if cuda is None else cuda
        if self.world > 1 and self.cuda:
            torch.cuda.set_device(self.local_rank)
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.cuda else "gloo", timeout=collective_timeout())

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_sum_tensor(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over the processes, in place on their device (no host sync on CUDA;
        gloo sums CPU tensors)."""
        if self.world > 1:
            dist.all_reduce(values)
        return values

    def barrier(self):
        if self.world > 1:
            dist.barrier()

    @contextmanager
    def contact(self, save_dir: Path):
        """Turn the failure of a collective (another process died or hangs) into one error line
        that says what happened and what resumes the run, instead of a traceback of torch's."""
        try:
            yield
        except RuntimeError as e:
            if self.world == 1 or not collective_failed(e):
                raise
            reason = re.sub(r"^\[[^\]]*\]\s*", "", (str(e).strip().splitlines() or [""])[0])     # gloo's source line
            reason = re.split(r"\.\s", reason)[0][:200]
            newest = (list_checkpoints(save_dir) or [None])[-1]
            raise DocnmtError(f"process {self.rank} of {self.world} lost contact with the other training processes "
                              f"({reason}): one of them died or hangs (torchrun's report says which); "
                              + (f"the same command resumes from {newest}" if newest else
                                 "no checkpoint was saved yet: the same command starts again")) from None


def collective_timeout() -> timedelta | None:
    """How long a collective waits for a process that hangs: ``DOCNMT_DIST_TIMEOUT`` seconds, else
    torch's default (None)."""
    seconds = seconds_from_env("DOCNMT_DIST_TIMEOUT", None, zero_ok=False)
    return None if seconds is None else timedelta(seconds=seconds)


def collective_failed(error: RuntimeError) -> bool:
    """Whether ``error`` came from a collective (torch.distributed, DDP's buffer and gradient
    syncs): gloo's and NCCL's errors are not all :class:`torch.distributed.DistError`, and one
    raised in DDP's gradient hook reaches Python from autograd's engine, with no frame of
    torch.distributed, only gloo's or NCCL's source file in its message."""
    if isinstance(error, dist.DistError):
        return True
    if re.search(r"[/\\](gloo|nccl|c10d)[/\\]|ProcessGroup(Gloo|NCCL)", str(error)):
        return True
    tb = error.__traceback__
    while tb is not None:
        if re.search(r"torch[/\\](distributed|nn[/\\]parallel)[/\\]", tb.tb_frame.f_code.co_filename):
            return True
        tb = tb.tb_next
    return False


def device_rng_state(device: torch.device) -> torch.Tensor | None:
    """The random state of a CUDA device (None on the CPU, whose state torch.get_rng_state has)."""
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def set_device_rng_state(device: torch.device, state: torch.Tensor | None) -> None:
    """Put back what :func:`device_rng_state` returned (nothing to do for None: a CPU run, or a
    checkpoint written before accelerator states were kept)."""
    if state is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state, device)


def gather_rng(ranks: Distributed, device: torch.device) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """Every rank's CPU and accelerator random states (dropout on a GPU draws from the
    latter: without it a resumed run's dropout masks differ from the uninterrupted run's)."""
    mine = (torch.get_rng_state(), device_rng_state(device))
    if ranks.world == 1:
        return [mine[0]], [mine[1]]
    out = [None] * ranks.world
    dist.all_gather_object(out, mine)
    return [cpu for cpu, _ in out], [dev for _, dev in out]


def restore_rng(state: dict, rank: int, device: torch.device) -> None:
    """Put back this rank's random states from a checkpoint's ``state`` (rank 0's when the run
    that saved it had fewer ranks)."""
    mine = rank if rank < len(state["rng"]) else 0
    torch.set_rng_state(state["rng"][mine])
    set_device_rng_state(device, state.get("device_rng", [None] * len(state["rng"]))[mine])
