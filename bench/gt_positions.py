"""How far a G-Transformer initialised from a sentence model starts from it, by position scheme.

Loads the Tier M-fr stage-1 Sent2Sent weights into the G-Transformer exactly as
``docnmt train --init-from`` does (its attention becomes the local attention; global attention,
gates and, with ``sentence_positions``, the sentence-index vectors are fresh) and prints the
validation NLL in bits per target token before any fine-tuning, with the paper's document
positions and with ``method.sentence_positions: true`` (positions restart in every sentence),
each with the fresh gates and with the gates forced to the local attention (which isolates what
the positions alone cost). Writes JSON with ``--out``.

    python bench/gt_positions.py bench/.cache/tier_mfr bench/results/tier_mfr/stage1 \\
        --out bench/results/tier_mfr/gt_positions_at_init.json
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from docnmt import methods
from docnmt.checkpoint import load_weights
from docnmt.config import Config
from docnmt.data import InstanceSet, build_instances
from docnmt.methods import build_model
from docnmt.train import forward_loss, load_corpus
from docnmt.vocab import Vocab


def valid_nll(model, valid: InstanceSet, cfg: Config) -> float:
    model.eval()
    nll, ntok = 0.0, 0
    with torch.no_grad():
        for b in valid.batches(cfg.train.max_tokens, shuffle=False, order=cfg.data.batch_order):
            _, n, t = forward_loss(model, valid.collate(b), cfg.train.label_smoothing)
            nll, ntok = nll + float(n), ntok + t
    return nll / ntok / math.log(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="the prepared Tier M-fr data directory")
    ap.add_argument("sentence_model", type=Path, help="a sentence model's directory (its model.safetensors)")
    ap.add_argument("--preset", default="g_transformer_finetune_small")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    vocab = Vocab.load(args.data)
    corpus = load_corpus(args.data, "valid", len(vocab))
    rows = []
    for positions in ("document", "sentence"):
        cfg = Config.load(args.preset).override({"method.sentence_positions": positions == "sentence"})
        valid = InstanceSet(corpus, build_instances(corpus, cfg.data, training=False),
                            methods.data_joiner(vocab, cfg.data))
        torch.manual_seed(cfg.train.seed)
        model = build_model(cfg, vocab)
        load_weights(model, args.sentence_model / "model.safetensors", strict=False)
        model = model.float()
        fresh = valid_nll(model, valid, cfg)
        for mod in model.modules():                 # g = 1: the combined sublayers return the local attention
            if hasattr(mod, "attn_global"):
                torch.nn.init.zeros_(mod.gate.weight)
                torch.nn.init.constant_(mod.gate.bias, 30.0)
        local = valid_nll(model, valid, cfg)
        rows.append({"positions": positions, "valid_nll_fresh_gates": fresh, "valid_nll_gates_local": local})
        print(f"positions {positions}: valid NLL at init {fresh:.3f} bits (fresh gates), "
              f"{local:.3f} (gates forced to the local attention)", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"preset": args.preset, "sentence_model": str(args.sentence_model),
                                        "valid_pairs": corpus.n_sents, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
