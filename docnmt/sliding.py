"""Sliding decoding and the sentence-count constraint (SPEC §6.3), for any Doc2Doc-style model.

A document longer than the window W (``decode.sliding_window`` × the training instance budget,
0.8 × 512 ≈ 409 source tokens by default) is decoded as a chain of sentence windows: each window
is re-encoded, the best translation of the sentences it shares with the previous window is forced
as the target prefix, and only its new sentences are generated. Every source sentence is
translated exactly once. The walk itself lives in :meth:`docnmt.translate.Translator.translate`;
this module builds the windows and the constraint.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def sliding_windows(costs: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Sentence windows [a, b) over sentences with token ``costs`` (SPEC §6.3 steps 1-2).

    The first window holds the sentences that end within the first ``budget`` tokens; then
    each step advances the end by at least one sentence, drops the oldest sentences until the
    window fits, and extends it greedily while it fits. A sentence longer than the budget forms
    its own window (decoded without context), a choice where the code would skip it."""
    n = len(costs)
    csum = np.concatenate([[0], np.cumsum(costs)])
    size = lambda a, b: int(csum[b] - csum[a])  # noqa: E731
    if size(0, n) <= budget:
        return [(0, n)]
    b = 0
    while b < n and size(0, b + 1) <= budget:
        b += 1
    a, b = 0, max(b, 1)
    windows = []
    while True:
        windows.append((a, b))
        if b >= n:
            return windows
        b += 1
        while size(a, b) > budget and a < b - 1:
            a += 1
        while b < n and size(a, b + 1) <= budget:
            b += 1


class SentenceCount:
    """The length-bias generator's sentence-count constraint for separator formats: among the
    separators only the next one (``<sep{c+1}>``, or ``<sep>``) is allowed while fewer than N−1
    were produced, none afterwards, and the end token only once there are N−1; when the steps
    left up to the row's length limit (whose token is the end token) only fit the missing
    separators and the end, the next separator is forced (SPEC §6.3). Counts include a forced
    prefix. ``n_sents`` (B,) is each input row's number of sentences."""

    def __init__(self, n_sents: Tensor, sep_ids: list[int], next_sep: Tensor, end: int):
        self.n_sents, self.end = n_sents, end
        self.seps = torch.tensor(sorted(sep_ids), device=n_sents.device)
        self.next_sep = next_sep        # [c] = token id of the separator that follows c separators

    def __call__(self, step: int, tokens: Tensor, lprobs: Tensor, rows: Tensor, limit: Tensor) -> None:
        count = torch.isin(tokens, self.seps).sum(1)
        missing = self.n_sents[rows] - count              # separators still to come, and the end
        more = (missing > 1).nonzero().squeeze(1)
        nxt = self.next_sep[count[more].clamp(max=len(self.next_sep) - 1)]
        keep = lprobs[more, nxt].clone()
        short = more[limit[more] - step + 1 <= missing[more]]   # steps left = marks missing
        lprobs[short] = float("-inf")
        lprobs[:, self.seps] = float("-inf")
        lprobs[more, nxt] = keep
        lprobs[more, self.end] = float("-inf")
