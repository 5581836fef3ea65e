"""The training losses on their way from the device to the log (:class:`LossLog`): an update leaves
its losses on the device, and they are read, all at once, only when a log line, a validation or a
checkpoint needs them, so that the host never waits for the GPU inside the update loop
(docs/performance.md#no-host-syncs-in-the-update-loop); the log record of a window and the error of
a run whose loss is not finite."""
from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from ..checkpoint import last_checkpoint
from ..errors import DocnmtError


class LossLog:
    """The log window (losses and target tokens summed since ``window["time"]``) and the updates
    whose losses are still on the device (``pending``: update, learning rate, a (micro-batches,
    2 or 3) float64 tensor of loss, NLL and, with several processes, all their tokens; tokens)."""

    def __init__(self):
        self.pending: list[tuple[int, float, torch.Tensor, int]] = []
        self.carried: dict = {}       # a resumed checkpoint's :meth:`unlogged` sums, for the first window
        self.new_window()

    def new_window(self) -> None:
        self.window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "time": time.time(), **self.carried}
        self.carried = {}

    def unlogged(self) -> dict:
        """The window's sums (after :meth:`read`), which a checkpoint keeps: a run resumed from it
        logs the losses of the run that was never stopped, whatever update it stopped at."""
        return {k: self.window[k] for k in ("loss", "nll", "tokens")}

    def add(self, update: int, lr: float, stats: torch.Tensor, ntokens: int) -> None:
        self.pending.append((update, lr, stats, ntokens))

    def read(self, save_dir: Path) -> dict:
        """The log window, after bringing the pending updates' losses to the host (one wait for
        the device), summed in update order; a non-finite one stops training (:func:`diverged`:
        ``save_dir``'s last checkpoint is the last good one)."""
        if not self.pending:
            return self.window
        values = iter(torch.cat([stats.flatten() for _, _, stats, _ in self.pending]).tolist())
        pending, self.pending = self.pending, []
        w = self.window
        for update, lr, stats, ntokens in pending:
            loss = nll = 0.0
            for _ in range(stats.size(0)):        # summed as floats, in order, as when read per update
                loss += next(values)
                nll += next(values)
                ntokens = int(next(values)) if stats.size(1) > 2 else ntokens   # all processes' tokens
            if not math.isfinite(loss):       # diverged: its step was skipped, the weights are the last good ones
                raise diverged(update, loss, lr, last_checkpoint(save_dir))
            w["loss"], w["nll"], w["tokens"] = w["loss"] + loss, w["nll"] + nll, w["tokens"] + ntokens
        return w


def skip_on_device(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, loss: torch.Tensor) -> bool:
    """Make sure the step of an update whose summed ``loss`` is not finite leaves the weights alone,
    without reading the loss: the fused optimizer skips it on the device (``found_inf``, as the
    gradient scaler drives it), and so does fp16's scaler (non-finite gradients). False when
    neither can (an unfused optimizer): the caller must read the loss before the step."""
    if scaler.is_enabled():
        return True
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = (~torch.isfinite(loss)).float()
        return True
    return False


def train_record(window: dict, updates: int, epoch: int, lr: float) -> dict:
    """The metrics.jsonl record of a log window (its summed losses and tokens since ``window["time"]``)."""
    return {"updates": updates, "epoch": epoch, "loss": window["loss"] / window["tokens"] / math.log(2),
            "nll_loss": window["nll"] / window["tokens"] / math.log(2), "lr": lr,
            "tokens_per_s": window["tokens"] / max(time.time() - window["time"], 1e-9)}


def diverged(update: int, loss: float, lr: float, last: Path | None) -> DocnmtError:
    """The error that stops a run whose loss is not finite, saying what to do."""
    return DocnmtError(f"training diverged: the loss of update {update} is {loss} (learning rate {lr:.3g}); "
                       + (f"the last good checkpoint is {last}, which the same command resumes from (with "
                          "a --clip-norm if you add one); a lower --lr needs a fresh start (--force)" if last
                          else "no checkpoint was saved yet: lower --lr or set --clip-norm"))
