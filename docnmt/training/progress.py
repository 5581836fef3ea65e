"""Where a training run stands (:class:`Progress`, saved in every checkpoint) and where it will
stop (:func:`run_end`, for its progress bar, and :func:`finished`)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..config import TrainConfig


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    epoch: int = 1
    batch_in_epoch: int = 0      # batches of this epoch already consumed (micro-batches)
    updates: int = 0
    best: float | None = None
    bad_validations: int = 0
    history: list = field(default_factory=list)   # dicts of logged metrics

    def to_dict(self) -> dict:
        return dict(epoch=self.epoch, batch_in_epoch=self.batch_in_epoch, updates=self.updates,
                    best=self.best, bad_validations=self.bad_validations, history=json.dumps(self.history))

    @classmethod
    def from_dict(cls, d: dict) -> "Progress":
        d = dict(d)
        d["history"] = json.loads(d["history"])
        return cls(**d)

    def validated_here(self) -> bool:
        """Whether the current update was validated (its validation is in the history)."""
        return any(r.get("updates") == self.updates and any(k.startswith("valid_") for k in r) for r in self.history)

    def best_here(self) -> bool:
        """Whether the current update holds the best weights so far (validated here, none better since)."""
        return self.validated_here() and self.bad_validations == 0 and self.best is not None

    def judge(self, value: float) -> bool:
        """Count a validation result (lower is better) for early stopping; whether it is the best."""
        improved = self.best is None or value < self.best
        if improved:
            self.best, self.bad_validations = value, 0
        else:
            self.bad_validations += 1
        return improved


def finished(tc: TrainConfig, p: Progress, elapsed: float) -> bool:
    """Whether a run that has trained for ``elapsed`` seconds reached one of its limits."""
    out_of_time = tc.max_minutes > 0 and elapsed > 60 * tc.max_minutes
    return bool((tc.max_update and p.updates >= tc.max_update) or (tc.max_epoch and p.epoch > tc.max_epoch)
                or (tc.patience > 0 and p.bad_validations >= tc.patience) or out_of_time)


def run_end(tc: TrainConfig, updates: int, epoch: int, left_in_epoch: int, per_epoch: int, elapsed: float,
            rate: float) -> tuple[int | None, str]:
    """Where a run will stop, for its progress bar: ``(update, why)``, the nearest of its limits.
    ``train.max_update``; the end of epoch ``train.max_epoch`` (``left_in_epoch`` updates left in
    epoch ``epoch``, then ``per_epoch`` updates per later epoch: this epoch's count, as dynamic
    length sampling changes it a little from epoch to epoch); ``train.max_minutes``, as the update
    reached at the mean ``rate`` (updates per second) when the ``elapsed`` seconds reach it (the
    bar's end then moves with the speed). ``None`` when no limit is known yet (only a time cap
    before the first update, or only early stopping)."""
    ends = []
    if tc.max_update > 0:
        ends.append((tc.max_update, f"max-update {tc.max_update}"))
    if tc.max_epoch > 0:
        ends.append((updates + left_in_epoch + max(0, tc.max_epoch - epoch) * per_epoch,
                     f"end of epoch {tc.max_epoch}"))
    total, why = min(ends) if ends else (None, "early stopping" if tc.patience > 0 else "no limit")
    if tc.max_minutes > 0:
        left = max(0.0, 60 * tc.max_minutes - elapsed)
        at_cap = updates + int(rate * left) if rate > 0 else None
        if total is None or (at_cap is not None and at_cap < total):
            total, why = at_cap, "time cap in " + (f"{left:.0f} s" if left < 90 else f"{left / 60:.0f} min")
    return (None if total is None else max(total, updates)), why
