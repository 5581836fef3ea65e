"""The GPU checks (``python -m pytest -m cuda``; every test here is marked ``cuda``).

Skipped without CUDA. ``DOCNMT_CUDA_TESTS_ON_CPU=1`` runs them on the CPU at small sizes, which is
what ``bench/gpu/run.sh --dry-run`` does, so the code of these tests keeps working while no GPU is
around (the same functions run on either device; only the sizes differ).
"""
from __future__ import annotations

import os

import pytest
import torch

ON_CPU = bool(os.environ.get("DOCNMT_CUDA_TESTS_ON_CPU"))


@pytest.fixture(scope="session")
def device() -> torch.device:
    if ON_CPU:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (DOCNMT_CUDA_TESTS_ON_CPU=1 runs these checks on the CPU at small sizes)")
    return torch.device("cuda")


def sizes(gpu: list, cpu: list) -> list:
    """Test sizes: ``gpu`` on CUDA, ``cpu`` for the CPU dry run (decided at collection time)."""
    return cpu if ON_CPU or not torch.cuda.is_available() else gpu
