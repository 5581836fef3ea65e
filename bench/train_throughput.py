"""Training throughput (target tokens/s) and peak memory on Tier M data.

    python bench/train_throughput.py [--presets transformer_small transformer_base] [--updates 30]
    python bench/train_throughput.py --presets sent2sent_small context_transformer_small --kinds own \
        --init-from runs/tierm/sent2sent      # step 2 of the context-encoder Transformer (frozen)

Each (preset, instance kind) runs in its own process so peak memory is its own. Kinds: ``sent``
(Sent2Sent instances), ``doc`` (Doc2Doc instances of <= 512 tokens) and ``own`` (the preset's own
data mode and batching, e.g. DocFlat's ordered pseudo-documents). The timed updates go
through docnmt's own Trainer.update (forward, loss, backward, Adam), --max-tokens 4096, after
warm-up updates that are not timed. ``--init-from DIR`` starts every preset from that model's
weights (so a preset with ``train.freeze_pretrained`` times its frozen step 2). Prints a table and saves
bench/results/train_throughput_<precision>_<presets>.json.
"""
from __future__ import annotations

import argparse
import json
import tempfile

import common


def one(preset: str, kind: str, updates: int, warmup: int, threads: int, max_tokens: int, precision: str,
        init_from: str | None = None) -> dict:
    import numpy as np
    import torch

    from docnmt.config import Config
    from docnmt.training import Trainer
    common.set_threads(threads)
    data = common.tier_m_data()
    over = {"train.max_tokens": max_tokens, "train.precision": precision}
    if kind != "own":
        over["data.mode"] = {"sent": "sent2sent", "doc": "doc2doc"}[kind]
    cfg = Config.load(preset).override(over)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer.from_dirs(cfg, data, f"{tmp}/m", init_from=init_from, progress_bar=False)
        batches = trainer.epoch_batches(1)
        rng = np.random.default_rng(0)
        picks = [batches[i] for i in rng.choice(len(batches), warmup + updates, replace=False)]
        collated = [trainer.train_set.collate(b) for b in picks]
        for b in collated[:warmup]:
            trainer.update([b])
        tokens = pad_tokens = 0
        with common.Timer() as t:
            for b in collated[warmup:]:
                _, _, n = trainer.update([b])
                tokens += n
                pad_tokens += b["tgt_in"].numel()
        mem = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else common.peak_rss_mb()
    return {"preset": preset, "kind": kind, "init_from": init_from, "updates": updates, "target_tokens": tokens,
            "target_padding": 1 - tokens / pad_tokens, "seconds": t.seconds,
            "target_tokens_per_s": tokens / t.seconds, "peak_memory_mb": mem, "threads": threads,
            "precision": precision, "device": "cuda" if torch.cuda.is_available() else "cpu"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", nargs="+", default=["transformer_small", "transformer_base"])
    ap.add_argument("--kinds", nargs="+", default=["sent", "doc"])
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--precision", default="fp32", help="fp32 | bf16 (autocast, also on CPU)")
    ap.add_argument("--init-from", help="start every preset from this model directory's weights")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(*a.one, a.updates, a.warmup, a.threads, a.max_tokens, a.precision, a.init_from)))
        return
    common.tier_m_data()
    results = []
    for preset in a.presets:
        for kind in a.kinds:
            r = common.run_isolated(__file__, "--one", preset, kind, "--updates", a.updates, "--warmup", a.warmup,
                                    "--threads", a.threads, "--max-tokens", a.max_tokens, "--precision", a.precision,
                                    *(["--init-from", a.init_from] if a.init_from else []))
            results.append(r)
            print(f"{preset:18s} {kind:4s} {a.precision} {r['target_tokens_per_s']:8.0f} tgt tok/s  "
                  f"padding {100 * r['target_padding']:4.1f}%  peak {r['peak_memory_mb']:7.0f} MB", flush=True)
    common.save(f"train_throughput_{a.precision}_{'_'.join(a.presets)}", results)


if __name__ == "__main__":
    main()
