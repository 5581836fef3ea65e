"""Contrastive scoring speed: the whole Voita et al. deixis test (2,500 examples, 5,000 candidates,
3 context sentences each) on CPU.

    python bench/contrastive_speed.py --model runs/tierm/sent2sent
    python bench/contrastive_speed.py --preset doc2doc_small --vocab runs/tierm/sent2sent

With ``--preset`` the model has random weights (speed does not depend on them) and the
vocabulary of ``--vocab``. The suite is En-Ru: an En-De vocabulary turns Cyrillic words into a
few ``<unk>`` pieces (short targets, and tied candidates), so time an En-Fr suite too, whose
French an En-De vocabulary splits into many pieces (``--suite .../scat_yin2021_enfr --split
train --limit 2500``: up to 5 context sentences). Saves bench/results/contrastive_<mode>_<suite>.json.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import common


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="a trained model directory")
    ap.add_argument("--preset", help="or a preset with random weights ...")
    ap.add_argument("--vocab", help="... and the vocabulary of this model or data directory")
    ap.add_argument("--suite",
                    default=str(common.SHARED / "enru/suites/voita2019/consistency_testsets/deixis_test.json"))
    ap.add_argument("--split", default="valid", help="SCAT split")
    ap.add_argument("--limit", type=int, default=0, help="score only the first N examples")
    ap.add_argument("--batch-tokens", type=int, default=0, help="tokens per batch (0 = the model's decoding budget)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    common.set_threads(a.threads)
    from docnmt.contrastive import accuracy_report, score_examples
    from docnmt.suites import read_suite
    from docnmt.translate import Translator
    if a.model:
        tr = Translator.load(a.model, device="cpu")
    else:
        tr = random_model(a.preset, a.vocab)
    examples = read_suite(a.suite, split=a.split)
    examples = examples[: a.limit] if a.limit else examples
    score_examples(tr, examples[:20])                                    # warm-up
    with common.Timer() as t:
        scores = score_examples(tr, examples, max_tokens=a.batch_tokens or None)
    rep = accuracy_report(examples, scores)
    n = sum(len(e.candidates) for e in examples)
    r = {"model": a.model or f"{a.preset} (random weights)", "mode": tr.cfg.data.mode, "suite": a.suite,
         "examples": len(examples), "candidates": n, "seconds": t.seconds, "examples_per_s": len(examples) / t.seconds,
         "accuracy": rep["accuracy"], "ties": rep["ties"], "threads": a.threads,
         "source_tokens": sum(len(tr.vocab.encode(s, "src")) for e in examples for s in [e.src, *e.src_context]),
         "target_tokens": sum(len(tr.vocab.encode(s)) for e in examples for c in e.candidates
                              for s in [c.tgt, *c.tgt_context])}
    print(f"{r['model']} ({r['mode']}): {len(examples)} examples, {n} candidates in {t.seconds:.1f} s "
          f"= {r['examples_per_s']:.1f} examples/s ({r['target_tokens']} target tokens); accuracy "
          f"{100 * rep['accuracy']:.1f}% ({rep['ties']} ties)")
    common.save(f"contrastive_{tr.cfg.data.mode}_{Path(a.suite).stem}", r)
    return 0


def random_model(preset: str, vocab_dir: str):
    from docnmt.config import Config
    from docnmt.methods import build_model
    from docnmt.translate import Translator
    from docnmt.vocab import Vocab
    cfg = Config.load(preset)
    vocab = Vocab.load(vocab_dir)
    model = build_model(cfg, vocab)
    return Translator(model, vocab, cfg, "cpu")


if __name__ == "__main__":
    sys.exit(main())
