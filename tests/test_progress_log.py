"""Progress in log files (docnmt.progress_log): plain lines at an interval on a stream that is not
a terminal, tqdm's bar on one."""
from __future__ import annotations

import io

from docnmt.progress_log import LogLines, progress_bar


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_at_the_interval_not_a_bar(tmp_path):
    """1,200 updates at 10 a second, logged every 30 s: four plain lines (three on the way, one
    at the end) with count, share, rate, elapsed, ETA and the postfix; no carriage returns."""
    clock, out = Clock(), io.StringIO()
    with progress_bar(total=1200, desc="epoch 1", unit="upd", file=out, clock=clock, interval=30) as bar:
        assert isinstance(bar, LogLines)
        for i in range(1200):
            clock.now += 0.1
            bar.update(1)
            bar.set_postfix({"loss": f"{5 - i / 1000:.2f}"}, refresh=False)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and "\r" not in out.getvalue()
    assert lines[0].startswith("epoch 1: 300/1200 upd (25%), 10 upd/s, elapsed 0:30, ETA 1:30, loss=")
    assert lines[-1].startswith("epoch 1: 1200/1200 upd (100%)") and "ETA" not in lines[-1]


def test_a_short_run_writes_nothing_and_iterables_work():
    clock, out = Clock(), io.StringIO()
    assert list(progress_bar(range(5), desc="valid", file=out, clock=clock, interval=30)) == list(range(5))
    assert out.getvalue() == ""
    bar = progress_bar(range(3), file=out, clock=clock, interval=1)
    for _ in bar:
        clock.now += 2
    assert out.getvalue().splitlines() == ["1/3 it (33%), 2 s/it, elapsed 0:02, ETA 0:04",
                                           "2/3 it (67%), 2 s/it, elapsed 0:04, ETA 0:02",
                                           "3/3 it (100%), 2 s/it, elapsed 0:06"]


def test_a_terminal_gets_tqdm_and_disable_is_silent():
    from tqdm.auto import tqdm

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    bar = progress_bar(total=3, file=Terminal())
    assert isinstance(bar, tqdm)
    bar.close()
    out = io.StringIO()
    with progress_bar(total=3, file=out, disable=True, interval=0) as bar:
        bar.update(3)
    assert out.getvalue() == ""


def test_a_bad_interval_in_the_environment_is_one_error_line(monkeypatch):
    """DOCNMT_PROGRESS_SECONDS=abc (or negative, or nan) is a ConfigError naming the variable (the
    CLI prints one line), not a ValueError traceback; an empty value is the default."""
    import pytest

    from docnmt.errors import ConfigError
    for bad in ("abc", "-1", "nan"):
        monkeypatch.setenv("DOCNMT_PROGRESS_SECONDS", bad)
        with pytest.raises(ConfigError, match="DOCNMT_PROGRESS_SECONDS"):
            progress_bar(total=3, file=io.StringIO())
    monkeypatch.setenv("DOCNMT_PROGRESS_SECONDS", "")
    assert progress_bar(total=3, file=io.StringIO()).interval == 30
    monkeypatch.setenv("DOCNMT_PROGRESS_SECONDS", "2.5")
    assert progress_bar(total=3, file=io.StringIO()).interval == 2.5
