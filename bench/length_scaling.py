"""Time and peak memory of one forward+backward as the instance length grows (128 ... 4096).

    python bench/length_scaling.py [--preset transformer_small] [--lengths 128 256 512 1024 2048 4096]

One instance (batch 1) with source and target of L tokens (real Tier M Doc2Doc text, repeated to
reach L), each length in its own process so peak memory is its own. Saves
bench/results/length_scaling_<preset>.json.
"""
from __future__ import annotations

import argparse
import json

import common


def one(preset: str, length: int, threads: int, repeats: int) -> dict:
    import numpy as np
    import torch

    from docnmt.config import Config
    from docnmt.data import Corpus, InstanceSet, build_instances
    from docnmt.methods import build_model, make_joiner
    from docnmt.vocab import Vocab
    common.set_threads(threads)
    data = common.tier_m_data()
    vocab = Vocab.load(data)
    cfg = Config.load(preset).override({"data.mode": "doc2doc", "model.max_positions": max(1024, length + 2)})
    corpus = Corpus.load(data, "valid")
    iset = InstanceSet(corpus, build_instances(corpus, cfg.data, training=False),
                       make_joiner(vocab, cfg.data.separator))
    src = np.resize(np.concatenate([iset.source(k) for k in range(8)]), length)
    tgt = np.resize(np.concatenate([iset.target(k)[1] for k in range(8)]), length)
    model = build_model(cfg, vocab).train()
    batch = {"src": torch.as_tensor(src[None], dtype=torch.long),
             "tgt_in": torch.as_tensor(np.concatenate([[vocab.bos], tgt[:-1]])[None], dtype=torch.long),
             "labels": torch.as_tensor(tgt[None], dtype=torch.long)}
    seconds, memory = common.time_forward_backward(model, batch, repeats)
    return {"preset": preset, "length": length, "seconds": seconds,
            "peak_memory_mb": common.peak_rss_mb(), "memory_over_model_mb": memory}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="transformer_small")
    ap.add_argument("--lengths", nargs="+", type=int, default=[128, 256, 512, 1024, 2048, 4096])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.preset, a.one, a.threads, a.repeats)))
        return
    common.tier_m_data()
    results = []
    for n in a.lengths:
        r = common.run_isolated(__file__, "--preset", a.preset, "--one", n, "--threads", a.threads,
                                "--repeats", a.repeats)
        results.append(r)
        print(f"L={n:5d}  fwd+bwd {r['seconds']:7.3f} s  peak {r['peak_memory_mb']:7.0f} MB "
              f"(+{r['memory_over_model_mb']:.0f} MB over the model)", flush=True)
    common.save(f"length_scaling_{a.preset}", results)


if __name__ == "__main__":
    main()
