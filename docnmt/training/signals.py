"""Stopping training with Ctrl-C (SIGINT) or SIGTERM, which cluster schedulers send some time
before they kill a job (:class:`StopSignals`): the run finishes the update it is in, saves a
checkpoint there, says so in one line and ends with :class:`TrainingStopped`, which the command
line turns into exit status 130 (SIGINT) or 143 (SIGTERM), the statuses of a process those
signals ended. The same command resumes the run exactly. A signal that comes while that
checkpoint is being written (a second Ctrl-C) is noted and changes nothing: the save completes.

Under torchrun every process gets the signal, each at its own moment; they stop at the same
update because each update sums the processes' votes with its losses (:meth:`StopSignals.vote`)
and every process reads the same update's sum (:meth:`StopSignals.stopping`)."""
from __future__ import annotations

import os
import signal
import sys
import threading

import torch

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingStopped(KeyboardInterrupt):
    """Training stopped by a signal, its checkpoint saved; ``status``: the exit status (128 + signal)."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.status = 128 + signum


class StopSignals:
    """While training (``with StopSignals() as s``), SIGINT and SIGTERM only set ``s.received``;
    the loop looks at :meth:`stopping` between updates. Outside the main thread (where Python
    cannot take signals) nothing changes."""

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, object] = {}
        self._tallies: list[tuple[torch.Tensor, object]] = []     # the summed votes of the last updates

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                self._previous[s] = signal.signal(s, self._note)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def _note(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
        else:           # os.write: a print here could re-enter a print the signal interrupted
            os.write(2, b"docnmt: still saving the checkpoint; training stops once it is written\n")

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else ""

    def vote(self, like: torch.Tensor) -> torch.Tensor:
        """This process's votes to stop, one per signal (1 for the one it got), to be summed over the
        processes with an update's losses."""
        votes = like.new_zeros(len(STOP_SIGNALS))          # filled on the device: no copy from the host
        if self.received is not None:
            votes[STOP_SIGNALS.index(self.received)] = 1.0
        return votes

    def tally(self, votes: torch.Tensor) -> None:
        """Keep an update's summed votes, copied to the host without waiting for the device."""
        event = None
        if votes.device.type == "cuda":
            votes = votes.to("cpu", non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        self._tallies = [*self._tallies[-1:], (votes, event)]

    def stopping(self, world: int) -> bool:
        """Whether to stop before the next update: a signal came (to any process, with several,
        which then all stop as if they had got it, SIGTERM first; the votes are read from the update
        before the last on a GPU, so that the host does not wait for the newest)."""
        if world == 1 or not self._tallies:
            return world == 1 and self.received is not None
        votes, event = self._tallies[0] if self._tallies[-1][1] is not None else self._tallies[-1]
        if event is not None:
            event.synchronize()
        got = [s for s, n in zip(STOP_SIGNALS, votes.tolist()) if n > 0]
        if got and self.received is None:
            self.received = got[-1]
        return bool(got)


def stop(trainer) -> None:
    """Save ``trainer``'s checkpoint at the current update (unless one was just saved there), say
    so, and end with :class:`TrainingStopped`; every process calls it at the same update."""
    signals, u = trainer.signals, trainer.progress.updates
    if u == 0:
        raise TrainingStopped(signals.received, f"{signals.name}: stopped before the first update; nothing to save")
    name = f"u{u:08d}"
    path = trainer.save_dir / "checkpoints" / name
    if trainer.dist.main:
        print(f"docnmt: {signals.name}: saving checkpoint {path} at update {u} and stopping; the same command "
              "resumes from it", file=sys.stderr, flush=True)
    if trainer._saved_at != u:
        trainer.save(name, best=trainer.valid is None)
    raise TrainingStopped(signals.received, f"{signals.name}: stopped at update {u}; the same command resumes "
                                            f"from {path}")
