"""G-Transformer vs the vanilla Transformer: time and memory of one forward+backward as documents grow.

    python bench/group_attention.py [--sentence-length 32] [--tokens 512 1024 2048 4096 8192]
                                    [--models vanilla gt gt_local gt_local_dense vanilla_explicit]

One instance (batch 1) of N sentences of S tokens each (source and target, group format for the
G-Transformer), Tier M size (3+3 layers, d=256). Models:

* ``vanilla``: the Transformer (Doc2Doc), attention through SDPA;
* ``vanilla_explicit``: the same with explicit N×N attention weights, as fairseq computes them;
* ``gt``: G-Transformer (group attention, combined attention in the top 2 layers of each kind);
* ``gt_local``: G-Transformer with group attention in every layer (``only_group``), block-wise;
* ``gt_local_dense``: the same with dense N×N masks (the official code's cost).

Each (model, length) runs in its own process so its peak memory is its own; memory is the peak
resident memory added by the passes (activations, gradients, workspace). Saves
bench/results/group_attention.json.
"""
from __future__ import annotations

import argparse
import json

import common

MODELS = ("vanilla", "vanilla_explicit", "gt", "gt_local", "gt_local_dense")


def one(model_name: str, tokens: int, sent_len: int, threads: int, repeats: int) -> dict:
    import numpy as np
    import torch

    from docnmt import attention
    from docnmt.config import Config
    from docnmt.methods.gtransformer import build
    from docnmt.model import Transformer
    common.set_threads(threads)
    n_sents = max(1, tokens // (sent_len + 2))
    over = {"model.max_positions": n_sents * (sent_len + 2) + 2}
    if model_name.startswith("gt_local"):
        over["method.group_ablation"] = "only_group"
    cfg = Config.load("g_transformer_small").override(over)
    cfg.model.vocab_size, cfg.model.pad_id = 8000, 0
    bos, eos, eod = 2, 3, 7999
    # the reference costs: group masks as dense N×N masks, attention as an explicit softmax
    if model_name == "gt_local_dense":
        attention.attention_grouped = (lambda q, k, v, spec, dropout=0.0:
                                       attention.attention_masked(q, k, v, spec, dropout))
    if model_name == "vanilla_explicit":
        attention.attention_sdpa = attention.attention_reference
    if model_name.startswith("vanilla"):
        model = Transformer(cfg.model).train()
    else:
        model = build(cfg.model, cfg.method, bos, eod).train()
    rng = np.random.default_rng(0)
    body = np.concatenate([np.concatenate([[bos], rng.integers(4, 7990, sent_len), [eos]]) for _ in range(n_sents)])
    batch = {"src": torch.as_tensor(body[None]), "tgt_in": torch.as_tensor(np.concatenate([[eod], body])[None]),
             "labels": torch.as_tensor(np.concatenate([body, [eod]])[None])}
    seconds, memory = common.time_forward_backward(model, batch, repeats)
    return {"model": model_name, "sentences": n_sents, "sentence_length": sent_len, "tokens": int(body.size),
            "seconds": seconds, "memory_over_model_mb": memory}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentence-length", type=int, default=32)
    ap.add_argument("--tokens", nargs="+", type=int, default=[512, 1024, 2048, 4096, 8192])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--explicit-max", type=int, default=4096,
                    help="longest input for vanilla_explicit (its N×N weights take ≥1 GB per attention at 8192)")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), a.sentence_length, a.threads, a.repeats)))
        return
    results = []
    print(f"{'tokens':>7} " + " ".join(f"{m + ' s':>18} {'MB':>6}" for m in a.models))
    for n in a.tokens:
        rows = [None if m == "vanilla_explicit" and n > a.explicit_max else
                common.run_isolated(__file__, "--one", m, n, "--sentence-length", a.sentence_length,
                                    "--threads", a.threads, "--repeats", a.repeats) for m in a.models]
        results += [r for r in rows if r]
        tokens = next(r["tokens"] for r in rows if r)
        print(f"{tokens:7d} " + " ".join(f"{r['seconds']:18.3f} {r['memory_over_model_mb']:6.0f}" if r else
                                         f"{'-':>18} {'-':>6}" for r in rows), flush=True)
    common.save("group_attention", results)


if __name__ == "__main__":
    main()
