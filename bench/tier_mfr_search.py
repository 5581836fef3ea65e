"""Search errors or model errors? A Tier M-fr model's own score of its beam output against its
score of another system's translation of the same source (and of the reference), per decoding
instance, teacher-forced exactly as the beam scores a finished hypothesis: the instances
translation decodes (split on the source alone), the sum of the word-piece log-probabilities
divided by length ** lenpen (the model's decode settings).

Where the model scores the other translation higher than its own output, beam search missed a
hypothesis its own model prefers (a search error, at least that large). Where it scores its own
higher although the other translation is better by BLEU, the model itself prefers the worse
output (a model error). The teacher-forced score is the beam's own: ``--check N`` translates the
first N sentences again and reports the largest difference between the beam's score of each
best hypothesis and this script's score of its text (5e-7 on the kept Tier M-fr control and
G-Transformer). The figures: the share of instances of each kind, and the s-/d-BLEU of
the output made by taking, per instance, whichever of the two translations the model scores
higher ("rerank"): if rerank beats the beam output, better search alone would have helped.

    python bench/tier_mfr_search.py RUN --src ../shared/data/enfr/valid/hansard.en \
        --ref ../shared/data/enfr/valid/hansard.fr --hyp RUN/valid.fr \
        --other runs/tier_mfr/control/valid.fr --out RUN/valid.vs_control.search.json
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from docnmt import methods
from docnmt.data import Corpus
from docnmt.document import Document
from docnmt.metrics import evaluate_documents
from docnmt.readers import read_documents
from docnmt.scoring import teacher_forced
from docnmt.search import length_penalty
from docnmt.translate import Translator


def instance_scores(translator, docs: list[Document], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σ log p, labels) of every instance of ``rows``, teacher-forced on ``docs``' targets."""
    corpus = Corpus.encode(docs, translator.vocab, max_sentence_tokens=translator.cfg.model.max_positions - 2,
                           origin="translation")
    total, length = np.zeros(len(rows)), np.zeros(len(rows), dtype=np.int64)
    pad = translator.vocab.pad
    for idx, batch, lp, _ in teacher_forced(translator, corpus, rows):
        total[idx] = lp.double().sum(1).cpu().numpy()
        length[idx] = batch["labels"].ne(pad).sum(1).cpu().numpy()
    return total, length


def decode_rows(translator, src_docs: list[Document]) -> np.ndarray:
    """The instances translation decodes ``src_docs`` in (one round, nothing forced)."""
    corpus = Corpus.encode(src_docs, translator.vocab, max_sentence_tokens=translator.cfg.model.max_positions - 2)
    search = translator.cfg.decode
    rounds = methods.decode_walk(translator.cfg, search).rounds(translator, corpus, search)
    if len(rounds) != 1 or not np.array_equal(np.asarray(rounds[0][1]), rounds[0][0][:, 2]):
        raise SystemExit("error: this model decodes in several rounds or with forced sentences (sliding, two-pass); "
                         "its beam objective is not one instance's score")
    return rounds[0][0]


def search_report(translator, src_docs: list[Document], systems: dict[str, list[list[str]]]) -> dict:
    """Per-instance normalised scores of each system's translation (``hyp``, ``other`` and
    ``ref``) under ``translator``'s model, and what they say (see the module docstring)."""
    rows = decode_rows(translator, src_docs)
    dec = translator.cfg.decode
    scores, lengths, bits = {}, {}, {}
    for name, sents in systems.items():
        docs = [Document(d.docid, d.src, s) for d, s in zip(src_docs, sents)]
        total, n = instance_scores(translator, docs, rows)
        scores[name] = total / length_penalty(n.astype(float), dec)
        lengths[name] = n
        bits[name] = float(-total.sum() / n.sum() / math.log(2))
    own, other = scores["hyp"], scores["other"]
    pick_other = other > own
    offsets = np.cumsum([0] + [len(d.src) for d in src_docs])
    owner = np.full(offsets[-1], -1)
    for r, (_, end, first) in enumerate(rows.tolist()):
        owner[first:end] = r                      # the sentences instance r generates
    flat = {name: [s for d in systems[name] for s in d] for name in ("hyp", "other")}
    chosen = [flat["other" if pick_other[owner[i]] else "hyp"][i] for i in range(offsets[-1])]
    reranked = [chosen[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    bleu = {name: evaluate_documents(s, systems["ref"], lowercase_too=False, metrics=("bleu",))
            for name, s in (("hyp", systems["hyp"]), ("other", systems["other"]), ("rerank", reranked))}
    return {
        "instances": len(rows),
        "sentences": int(offsets[-1]),
        "lenpen": dec.lenpen, "lenpen_style": dec.lenpen_style,
        "mean_score": {k: float(v.mean()) for k, v in scores.items()},
        "mean_labels": {k: float(v.mean()) for k, v in lengths.items()},
        "labels": {k: int(v.sum()) for k, v in lengths.items()},
        "bits_per_label": bits,     # the NLL of each translation as a whole, in the model's own format
        "other_scored_higher": float(pick_other.mean()),
        "ref_scored_higher": float((scores["ref"] > own).mean()),
        "bleu": {k: {"s": v["s_bleu"]["score"], "d": v["d_bleu"]["score"]} for k, v in bleu.items()},
    }


def beam_check(translator, src_docs: list[Document], n: int) -> float:
    """The largest difference between the beam's score of each best hypothesis of the first
    ``n`` sentences and :func:`instance_scores`' score of its text, normalised the same way."""
    docs = [Document(src_docs[0].docid, src_docs[0].src[:n])]
    out, _ = translator.translate(docs, search=replace(translator.cfg.decode, nbest=2))
    rows = decode_rows(translator, docs)
    total, length = instance_scores(translator, [Document(d.docid, d.src, o.tgt) for d, o in zip(docs, out)], rows)
    flat = [score for o in out for score in o.meta["nbest_scores"]]
    beam = np.array([flat[first][0] for _, _, first in rows.tolist()])
    return float(np.abs(total / length_penalty(length.astype(float), translator.cfg.decode) - beam).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="model directory")
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--hyp", required=True, help="the model's own translation (marker format)")
    ap.add_argument("--other", required=True, help="another system's translation of --src")
    ap.add_argument("--out", help="default RUN/valid.vs_OTHER.search.json, OTHER the directory name of --other")
    ap.add_argument("--check", type=int, default=40, metavar="N",
                    help="compare with the beam's own scores on the first N sentences (0: no check)")
    args = ap.parse_args()
    out = Path(args.out or Path(args.run) / f"valid.vs_{Path(args.other).parent.name}.search.json")
    start = time.time()
    translator = Translator.load(args.run, None, "cpu")
    src_docs = read_documents(args.src, args.ref)
    systems = {name: [d.tgt for d in read_documents(args.src, path, allow_empty=True)]
               for name, path in (("hyp", args.hyp), ("other", args.other), ("ref", args.ref))}
    report = search_report(translator, src_docs, systems)
    if args.check:
        report["beam_check"] = {"sentences": args.check, "max_difference": beam_check(translator, src_docs, args.check)}
    report.update(seconds=round(time.time() - start, 1), hyp=args.hyp, other=args.other, ref=args.ref)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
