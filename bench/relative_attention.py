"""P-Transformer's relative-position attention: one self-attention forward+backward, block by block
of queries (``attention_relative``) against SDPA with the dense (B, h, N, N) term, and plain fused
SDPA without the term for scale.

    python bench/relative_attention.py [--batch 8] [--length 512] [--blocks 16 32 64 128]

Tier M shapes: 4 heads of 64 dimensions, a 1,025-row table (M = 512), half the rows padded by
112 keys; encoder (full) and decoder (causal) masks. Prints seconds per forward+backward and
saves bench/results/relative_attention.json; ``RELATIVE_BLOCK`` in docnmt/attention.py is the best
block size found here.
"""
from __future__ import annotations

import argparse

import common


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--blocks", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import torch

    from docnmt import attention as m
    common.set_threads(a.threads)
    torch.manual_seed(0)
    B, h, N, d, M = a.batch, 4, a.length, 64, 512
    q, k, v = (torch.randn(B, h, N, d, requires_grad=True) for _ in range(3))
    table = torch.randn(2 * M + 1, d, requires_grad=True)
    pad = torch.zeros(B, 1, 1, N, dtype=torch.bool)
    pad[: B // 2, ..., N - min(112, N // 4):] = True

    def step(causal: bool, how: str) -> None:
        rel = m.RelativeLogits(q, table, M, N, d ** -0.5)
        bias = {"none": None, "dense": rel.dense(), "blocked": rel}[how]
        out = m.attention_sdpa(q, k, v, m.AttnSpec(mask=pad, is_causal=causal, bias=bias))
        out.sum().backward()

    def seconds(causal: bool, how: str) -> float:
        for _ in range(2):
            step(causal, how)
        with common.Timer() as t:
            for _ in range(a.repeats):
                step(causal, how)
        return t.seconds / a.repeats

    results = []
    for causal in (False, True):
        runs = [("no relative term (fused SDPA)", "none", None), ("dense term + SDPA", "dense", None)]
        runs += [(f"blocked, {b} queries", "blocked", b) for b in a.blocks]
        for label, how, block in runs:
            if block:
                m.RELATIVE_BLOCK = block
            s = seconds(causal, how)
            results.append({"mask": "causal" if causal else "full", "method": label, "block": block,
                            "seconds": s, "batch": B, "length": N, "threads": a.threads})
            print(f"{results[-1]['mask']:7s} {label:32s} {s:7.3f} s")
    common.save("relative_attention", results)


if __name__ == "__main__":
    main()
