"""Progress for people and for log files: :func:`progress_bar` gives tqdm's bar when its stream is a
terminal and, when it is not (a file, a pipe, a job's log), :class:`LogLines`: a plain line every
``DOCNMT_PROGRESS_SECONDS`` seconds (default 30) and one at the end, like fairseq's ``simple``
log format, instead of a bar redrawn many times a second (a bar in a log file is one frame per
redraw: a 1,200-update run wrote 180 KB of them)."""
from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm

from docnmt.ranges import seconds_from_env

INTERVAL = 30.0          # seconds between lines when the stream is not a terminal


def progress_bar(iterable=None, *, file=None, clock=time.monotonic, interval: float | None = None, **kwargs):
    """A progress bar over ``iterable`` (tqdm's arguments): tqdm on a terminal, else :class:`LogLines`."""
    stream = file if file is not None else sys.stderr
    if kwargs.get("disable") or _is_terminal(stream):
        return tqdm(iterable, file=file, **kwargs)
    if interval is None:
        interval = interval_from_env()
    return LogLines(iterable, file=stream, clock=clock, interval=interval, **kwargs)


def interval_from_env() -> float:
    """The interval ``DOCNMT_PROGRESS_SECONDS`` sets (default 30): a bad value is one error line
    naming the variable, not a traceback from ``float``."""
    return seconds_from_env("DOCNMT_PROGRESS_SECONDS", INTERVAL)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class LogLines:
    """tqdm's interface as far as docnmt uses it (``update``, ``set_description``,
    ``set_postfix``, ``total``, ``n``, ``close``, iteration, ``with``), writing
    ``desc: n/total unit (p%), rate unit/s, elapsed, ETA, postfix`` lines at most every ``interval``
    seconds of ``clock`` and, after a run long enough to write one, a last one at ``close`` (a run
shorter than ``interval`` writes nothing)."""

    def __init__(self, iterable=None, *, file, clock=time.monotonic, interval: float = INTERVAL, total=None,
                 initial: int = 0, desc: str = "", unit: str = "it", **_ignored):
        self.iterable, self.file, self.clock, self.interval = iterable, file, clock, interval
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total, self.n, self.initial, self.desc, self.unit = total, initial, initial, desc, unit
        self.postfix = ""
        self.start = self.last = clock()
        self.shown, self.closed, self.written = initial, False, False

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.clock() - self.last >= self.interval:
            self._write()

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self.desc = desc

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def refresh(self) -> None:
        """Nothing: a line is written when its time comes."""

    def close(self) -> None:
        if not self.closed and self.n != self.shown and self.written:
            self._write()
        self.closed = True

    def line(self) -> str:
        """The progress line for now."""
        elapsed = self.clock() - self.start
        done = self.n - self.initial
        rate = done / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.n}/{self.total} {self.unit}" if self.total else f"{self.n} {self.unit}"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        parts.append(f"{rate:.3g} {self.unit}/s" if rate >= 1 or rate == 0 else f"{1 / rate:.3g} s/{self.unit}")
        parts.append(f"elapsed {_clock(elapsed)}")
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f"ETA {_clock((self.total - self.n) / rate)}")
        if self.postfix:
            parts.append(self.postfix)
        return f"{self.desc + ': ' if self.desc else ''}{', '.join(parts)}"

    def _write(self) -> None:
        print(self.line(), file=self.file, flush=True)
        self.last, self.shown, self.written = self.clock(), self.n, True


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
