"""G-Transformer's group attention: time and memory of one forward+backward as documents grow.

    python bench/group_attention.py [--sentence-length 32] [--sentences 4 8 16 32 64 128]

One instance (batch 1) of N sentences of S tokens each (source and target, group format), through
a g_transformer_small model with group attention in every layer (``only_group``), once with
docnmt's block-by-block group attention and once with the dense N×N masked form (what the
official code does). Each setting runs in its own process so peak memory is its own. With the
sentence length fixed, the block form should grow about linearly with the document length.
Saves bench/results/group_attention.json.
"""
from __future__ import annotations

import argparse
import json

import common


def one(n_sents: int, sent_len: int, dense: bool, threads: int, repeats: int) -> dict:
    import numpy as np
    import torch
    from docnmt import model as model_module
    from docnmt.config import Config
    from docnmt.gtransformer import build
    common.set_threads(threads)
    model_module.GROUPED_ATTENTION = not dense
    cfg = Config.load("g_transformer_small").override({"model.group_ablation": "only_group",
                                                      "model.max_positions": n_sents * (sent_len + 2) + 2})
    cfg.model.vocab_size, cfg.model.pad_id = 8000, 0
    bos, eos, eod = 2, 3, 7999
    model = build(cfg.model, bos, eod).train()
    rng = np.random.default_rng(0)
    body = np.concatenate([np.concatenate([[bos], rng.integers(4, 7990, sent_len), [eos]]) for _ in range(n_sents)])
    batch = {"src": torch.as_tensor(body[None]), "tgt_in": torch.as_tensor(np.concatenate([[eod], body])[None]),
             "labels": torch.as_tensor(np.concatenate([body, [eod]])[None])}
    seconds, memory = common.time_forward_backward(model, batch, repeats)
    return {"sentences": n_sents, "sentence_length": sent_len, "tokens": int(body.size), "dense": dense,
            "seconds": seconds, "memory_over_model_mb": memory}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentence-length", type=int, default=32)
    ap.add_argument("--sentences", nargs="+", type=int, default=[4, 8, 16, 32, 64, 128])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], a.sentence_length, bool(a.one[1]), a.threads, a.repeats)))
        return
    results = []
    print(f"{'tokens':>7} {'block s':>9} {'dense s':>9} {'block MB':>9} {'dense MB':>9}")
    for n in a.sentences:
        rows = [common.run_isolated(__file__, "--one", n, dense, "--sentence-length", a.sentence_length,
                                    "--threads", a.threads, "--repeats", a.repeats) for dense in (0, 1)]
        results += rows
        print(f"{rows[0]['tokens']:7d} {rows[0]['seconds']:9.3f} {rows[1]['seconds']:9.3f} "
              f"{rows[0]['memory_over_model_mb']:9.0f} {rows[1]['memory_over_model_mb']:9.0f}", flush=True)
    common.save("group_attention", results)


if __name__ == "__main__":
    main()
