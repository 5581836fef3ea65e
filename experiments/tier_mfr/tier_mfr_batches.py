"""What one update holds for each Tier M-fr system: sentence pairs and target tokens per batch at
``--max-tokens 4096`` over one epoch of the Hansard training set, with docnmt's own batching (the
training instances of each preset's format; a context input counts against ``--max-tokens`` like
the source and target, docs/methods/context_transformer.md#batching-with-a-context-input).

    python experiments/tier_mfr/tier_mfr_batches.py bench/.cache/tier_mfr sent2sent_small context_transformer_small \
        context_transformer_small:7168 g_transformer_finetune_small doc2doc_small p_transformer_small \
        --out experiments/tier_mfr/results/batches.json

(``PRESET:N``: that preset at ``--max-tokens N``.)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from docnmt import methods
from docnmt.config import Config
from docnmt.data.batching import InstanceSet
from docnmt.training import load_corpus
from docnmt.vocab import Vocab


def per_batch(data: Path, preset: str, max_tokens: int) -> dict:
    """Mean sentence pairs and target tokens per batch of one epoch (epoch 1, seed 1)."""
    cfg = Config.load(preset)
    vocab = Vocab.load(data)
    corpus = load_corpus(data, "train", len(vocab))
    rows = methods.training_rows(corpus, cfg.data, 1, cfg.train.seed)
    instances = InstanceSet(corpus, rows, methods.data_joiner(vocab, cfg.data))
    batches = instances.batches(max_tokens, seed=cfg.train.seed, epoch=1)
    sents = rows[:, 1] - rows[:, 2]                     # target sentences per instance
    return {"batches": len(batches), "max_tokens": max_tokens,
            "sentence_pairs_per_batch": float(np.mean([sents[b].sum() for b in batches])),
            "target_tokens_per_batch": float(np.mean([instances.tgt_lens[b].sum() for b in batches]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", type=Path, help="the prepared Tier M-fr data (bench/.cache/tier_mfr)")
    ap.add_argument("presets", nargs="+", help="PRESET or PRESET:MAX_TOKENS")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    out = {p: per_batch(a.data, p.split(":")[0], int(p.split(":")[1]) if ":" in p else a.max_tokens)
           for p in a.presets}
    for p, r in out.items():
        print(f"{p:33s} {r['batches']:6d} batches  {r['sentence_pairs_per_batch']:6.1f} pairs  "
              f"{r['target_tokens_per_batch']:6.0f} target tokens per batch")
    a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
