"""BLEU of sentences by where they sit in their decoding instance: a model's length bias seen
from inside the instances (docs/methods/length_bias.md).

Each translated sentence gets the offset, in source tokens, of its start within the instance it
was decoded in (the instances ``docnmt translate`` builds for the model with ``--max-instance-
tokens B``), and corpus BLEU is computed per offset bucket. Sliding decoding puts every new
sentence at the end of its window, so it inherits a model's end-of-instance quality.

    python experiments/tier_m/bleu_by_position.py runs/tierm/doc2doc_dls_laa \\
        --src ../shared/data/ende/valid/ted.en --ref ../shared/data/ende/valid/ted.de \\
        --hyp 512=runs/tierm/doc2doc_dls_laa/valid.ted.de 896=runs/tierm/doc2doc_dls_laa/length/ted.b896.de \\
              sliding=runs/tierm/doc2doc_dls_laa/length/ted.sliding.de
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import sacrebleu

from docnmt.data import Corpus, build_instances
from docnmt.readers import read_documents, read_sentences
from docnmt.translate import Translator

EDGES = (0, 128, 256, 384, 512, 1 << 30)


def offsets(corpus: Corpus, rounds) -> np.ndarray:
    """Each sentence's start within the instance that translated it, in source tokens; rounds are
    (rows [first, end, start], new_from) as :meth:`Translator._rounds` gives them."""
    out = np.zeros(corpus.n_sents, dtype=np.int64)
    lengths = corpus.src.lengths
    for rows, new_from in rounds:
        for (a, e, _), new in zip(rows, new_from):
            out[new:e] = (np.cumsum(lengths[a:e]) - lengths[a:e])[new - a:]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--hyp", nargs="+", required=True, metavar="BUDGET=FILE",
                    help="translations made with instances of at most BUDGET source tokens, or with "
                         "sliding decoding (BUDGET: sliding; the offsets of the sentences each window adds)")
    args = ap.parse_args()
    tr = Translator.load(args.model)
    docs = read_documents(args.src)
    corpus = Corpus.encode(docs, tr.vocab, tr.cfg.model.max_positions - 2)
    refs = [s for d in read_sentences(args.ref) for s in d]
    buckets = list(zip(EDGES, EDGES[1:]))
    print(f"{args.model}: BLEU (sentences) by offset of the sentence in its instance, source tokens")
    print("| budget | " + " | ".join(f"{a}-{b}" if b < EDGES[-1] else f"{a}+" for a, b in buckets) + " |")
    print("|---" * (len(buckets) + 1) + "|")
    for spec in args.hyp:
        budget, path = spec.split("=", 1)
        if budget == "sliding":
            rounds = tr._rounds(corpus, dataclasses.replace(tr.cfg.decode, sliding=True))
        else:
            rows = build_instances(corpus, dataclasses.replace(tr.cfg.data, max_instance_tokens=int(budget)),
                                   training=False)
            rounds = [(rows, rows[:, 0])]
        where = offsets(corpus, rounds)
        hyp = [s for d in read_sentences(path, hypothesis=True) for s in d]
        if len(hyp) != len(refs) or len(hyp) != corpus.n_sents:
            raise SystemExit(f"{path}: {len(hyp)} sentences, {len(refs)} references, {corpus.n_sents} sources")
        cells = []
        for a, b in buckets:
            pick = np.flatnonzero((where >= a) & (where < b))
            cells.append("" if not len(pick) else
                         f"{sacrebleu.corpus_bleu([hyp[i] for i in pick], [[refs[i] for i in pick]]).score:.2f}"
                         f" ({len(pick)})")
        print(f"| {budget} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
