"""How far a document model initialised from a sentence model starts from it, by position scheme.

Loads the Tier M-fr stage-1 Sent2Sent weights into a document model (``--preset``; the
G-Transformer by default) exactly as ``docnmt train --init-from`` does (the G-Transformer's
attention becomes its local attention; its global attention, gates and, with sentence positions,
sentence-index vectors are fresh; DocFlat's flat-batch attention and context gates are fresh) and
prints the validation NLL in bits per target token before any fine-tuning, with the paper's
document positions and with positions that restart in every sentence
(``method.sentence_positions`` for the G-Transformer, ``model.sentence_positions`` for the
others), each with the fresh gates and, for a model with gates, with the gates forced shut on the
context (the G-Transformer's to its local attention, DocFlat's context gates closed), which
isolates what the positions alone cost. Writes JSON with ``--out``.

    python experiments/tier_mfr/gt_positions.py bench/.cache/tier_mfr experiments/tier_mfr/results/stage1 \\
        --out experiments/tier_mfr/results/gt_positions_at_init.json
    python experiments/tier_mfr/gt_positions.py bench/.cache/tier_mfr experiments/tier_mfr/results/stage1 \\
        --preset docflat_d_small \\
        --out experiments/tier_mfr/results/docflat_d_positions_at_init.json
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
from docnmt.methods.docflat import FlatBatchSublayer
from docnmt.training import forward_loss, load_corpus
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
        key = "method.sentence_positions" if Config.load(args.preset).method_name == "gtransformer" \
            else "model.sentence_positions"
        cfg = Config.load(args.preset).override({key: positions == "sentence"})
        valid = InstanceSet(corpus, build_instances(corpus, cfg.data, training=False),
                            methods.data_joiner(vocab, cfg.data))
        torch.manual_seed(cfg.train.seed)
        model = build_model(cfg, vocab)
        load_weights(model, args.sentence_model / "model.safetensors", strict=False)
        model = model.float()
        fresh = valid_nll(model, valid, cfg)
        gated = False
        for mod in model.modules():
            if hasattr(mod, "attn_global"):         # g = 1: the combined sublayers return the local attention
                torch.nn.init.zeros_(mod.gate.weight)
                torch.nn.init.constant_(mod.gate.bias, 30.0)
                gated = True
            elif isinstance(mod, FlatBatchSublayer) and hasattr(mod, "gate"):   # g = 0: DocFlat's input kept
                torch.nn.init.zeros_(mod.gate.weight)
                torch.nn.init.constant_(mod.gate.bias, -30.0)
                gated = True
        row = {"positions": positions, "valid_nll_fresh_gates": fresh}
        if gated:
            row["valid_nll_gates_shut"] = valid_nll(model, valid, cfg)
            if cfg.method_name == "gtransformer":    # (the name of the first measurement's column)
                row["valid_nll_gates_local"] = row.pop("valid_nll_gates_shut")
        rows.append(row)
        shut = next((v for k, v in row.items() if k.startswith("valid_nll_gates_")), None)
        print(f"positions {positions}: valid NLL at init {fresh:.3f} bits (fresh gates)"
              + ("" if shut is None else f", {shut:.3f} (gates shut on the context)"), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"preset": args.preset, "sentence_model": str(args.sentence_model),
                                        "valid_pairs": corpus.n_sents, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
