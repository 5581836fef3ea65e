"""The skip rule of CI (``.ci/run``, docs/testing.md#skips): with ``DOCNMT_ONLY_ALLOWED_SKIPS=1`` a run fails
when a test (or a whole test module) was skipped for a reason other than

* the GPU checks without CUDA: anything in ``tests/cuda/`` or marked ``cuda``;
* the browser test without Chromium: ``tests/integration/test_serve_browser.py`` skipped because
  Chromium or its driver is missing (a missing Python package, e.g. selenium, is not allowed).

Every test reads its data from the repository, so "real data not found" is never a reason. The hooks
are turned on by ``pytest_configure`` (called from ``tests/conftest.py``; ``pytest -p _skips`` loads it alone,
as ``tests/test_skips.py`` does).
"""
from __future__ import annotations

import os

import pytest

ENV = "DOCNMT_ONLY_ALLOWED_SKIPS"
CUDA_DIR = "tests/cuda/"
BROWSER_TEST = "tests/integration/test_serve_browser.py"


def skip_allowed(nodeid: str, reason: str, keywords=()) -> bool:
    """Whether the rule accepts a skip of ``nodeid`` (relative to the repository root) for ``reason``."""
    if nodeid.startswith(CUDA_DIR) or "cuda" in keywords:
        return True
    return nodeid.startswith(BROWSER_TEST) and "chromium" in reason.lower()


class SkipRule:
    """Records the refused skips of one session and fails it when there are any."""

    def __init__(self) -> None:
        self.refused: list[tuple[str, str]] = []     # (node id, reason)

    def check(self, report) -> None:
        if report.skipped:
            longrepr = report.longrepr
            reason = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)).removeprefix("Skipped: ")
            if not skip_allowed(report.nodeid, reason, getattr(report, "keywords", ())):
                self.refused.append((report.nodeid, reason))

    def pytest_runtest_logreport(self, report) -> None:
        self.check(report)

    def pytest_collectreport(self, report) -> None:
        self.check(report)

    def pytest_sessionfinish(self, session) -> None:
        if self.refused and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.refused:
            terminalreporter.section(f"skips not allowed ({ENV}=1)", red=True)
            for nodeid, reason in self.refused:
                terminalreporter.line(f"{nodeid}: {reason}")


def pytest_configure(config) -> None:
    """Turns the rule on for this session when ``DOCNMT_ONLY_ALLOWED_SKIPS=1``."""
    if os.environ.get(ENV) == "1":
        config.pluginmanager.register(SkipRule(), "docnmt-skip-rule")
