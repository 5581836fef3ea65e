"""Search errors or model errors? A Tier M-fr model's own score of its beam output against its
score of another system's translation of the same source (and of the reference), per decoding
instance, teacher-forced exactly as the beam scores a finished hypothesis: the instances
translation decodes (split on the source alone), the sum of the word-piece log-probabilities
divided by length ** lenpen (the model's decode settings).

Where the model scores the other translation higher than its own output, beam search missed a
hypothesis its own model prefers (a search error, at least that large; flagged apart when the
other translation is longer than the beam's output limit allows, so beam search could never
have produced it). Where it scores its own higher although the other translation is better (by
the chrF of the instance's translation against its reference), the model itself prefers the worse
output (a model error). The teacher-forced score is the beam's own: ``--check N`` translates the
first N sentences again and reports the largest difference between the beam's score of each
best hypothesis and this script's score of its text (5e-7 on the kept Tier M-fr control and
G-Transformer). The figures: the share of instances in each cell of (which translation the
model scores higher) x (which one chrF prefers); the NLL of each translation as a whole, over
all labels of the model's own format and over the word pieces alone (the same pieces in every
format, so the only figure comparable between a G-Transformer and a sentence model); and the
s-/d-BLEU of the output made by taking, per instance, whichever of the two translations the
model scores higher ("rerank"), beside random picks of as many instances (ten draws): rerank
above every random pick says the model's preference carries information about quality; only a
rerank above both the beam output and every random pick says that a search finding what this
model prefers would have translated better (one inside the random picks' range says nothing).

    python experiments/tier_mfr/tier_mfr_search.py RUN --src ../shared/data/enfr/valid/hansard.en \
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
import torch
from sacrebleu.metrics import CHRF

from docnmt import methods
from docnmt.data import Corpus
from docnmt.document import Document
from docnmt.metrics import evaluate_documents
from docnmt.readers import read_documents
from docnmt.scoring import teacher_forced
from docnmt.search import length_penalty, output_limit
from docnmt.translate import Translator


def instance_scores(translator, docs: list[Document], rows: np.ndarray) -> dict[str, np.ndarray]:
    """Per instance of ``rows``, teacher-forced on ``docs``' targets: ``total`` (Σ log p over all
    labels) and ``labels``, ``words`` (Σ log p over the word pieces only) and ``pieces``, and
    ``limit``, the most tokens beam search lets the instance generate (its end token aside)."""
    corpus = Corpus.encode(docs, translator.vocab, max_sentence_tokens=translator.cfg.model.max_positions - 2,
                           origin="translation")
    out = {k: np.zeros(len(rows), dtype=float if k in ("total", "words") else np.int64)
           for k in ("total", "labels", "words", "pieces", "limit")}
    vocab = translator.vocab
    for idx, batch, lp, _ in teacher_forced(translator, corpus, rows):
        lp, labels = lp.double(), batch["labels"]
        words = vocab.word_mask(labels) | labels.eq(vocab.unk)     # an unknown word is a word
        sentences = torch.as_tensor(rows[idx, 1] - rows[idx, 2])
        limit = output_limit(batch["src"].ne(vocab.pad).sum(1).cpu(), translator.cfg.decode, sentences)
        for key, value in (("total", lp.sum(1)), ("labels", labels.ne(vocab.pad).sum(1)),
                           ("words", (lp * words).sum(1)), ("pieces", words.sum(1)), ("limit", limit)):
            out[key][idx] = value.cpu().numpy()
    return out


def decode_rows(translator, src_docs: list[Document]) -> np.ndarray:
    """The instances translation decodes ``src_docs`` in (one round, nothing forced)."""
    # the source alone, as translate reads it: a reference would change how a document is split
    corpus = Corpus.encode([Document(d.docid, d.src) for d in src_docs], translator.vocab,
                           max_sentence_tokens=translator.cfg.model.max_positions - 2)
    search = translator.cfg.decode
    rounds = methods.decode_walk(translator.cfg, search).rounds(translator, corpus, search)
    if len(rounds) != 1 or not np.array_equal(np.asarray(rounds[0][1]), rounds[0][0][:, 2]):
        raise SystemExit("error: this model decodes in several rounds or with forced sentences (sliding, two-pass); "
                         "its beam objective is not one instance's score")
    return rounds[0][0]


def chrf_by_instance(rows: np.ndarray, flat: dict[str, list[str]]) -> dict[str, np.ndarray]:
    """Sentence-level chrF of each instance's sentences (joined by spaces) against the reference's."""
    chrf = CHRF()
    out = {name: np.zeros(len(rows)) for name in flat if name != "ref"}
    for r, (_, end, first) in enumerate(rows.tolist()):
        ref = " ".join(flat["ref"][first:end])
        for name in out:
            out[name][r] = chrf.sentence_score(" ".join(flat[name][first:end]), [ref]).score
    return out


def search_report(translator, src_docs: list[Document], systems: dict[str, list[list[str]]],
                  draws: int = 10) -> dict:
    """Per-instance normalised scores of each system's translation (``hyp``, ``other`` and
    ``ref``) under ``translator``'s model, and what they say (see the module docstring)."""
    rows = decode_rows(translator, src_docs)
    dec = translator.cfg.decode
    scored = {}
    for name, sents in systems.items():
        docs = [Document(d.docid, d.src, s) for d, s in zip(src_docs, sents)]
        scored[name] = instance_scores(translator, docs, rows)
    scores = {name: v["total"] / length_penalty(v["labels"].astype(float), dec) for name, v in scored.items()}
    own, other = scores["hyp"], scores["other"]
    pick_other = other > own
    offsets = np.cumsum([0] + [len(d.src) for d in src_docs])
    owner = np.full(offsets[-1], -1)
    for r, (_, end, first) in enumerate(rows.tolist()):
        if (owner[first:end] != -1).any():
            raise SystemExit(f"error: instance {r} generates a sentence another instance generates too")
        owner[first:end] = r                      # the sentences instance r generates
    if (owner == -1).any():
        raise SystemExit(f"error: sentence {int(np.argmax(owner == -1)) + 1} is generated by no instance")
    flat = {name: [s for d in systems[name] for s in d] for name in systems}
    chrf = chrf_by_instance(rows, flat)
    better = np.sign(chrf["other"] - chrf["hyp"])            # 1: other better, -1: hyp better, 0: tie

    def merged(take_other: np.ndarray) -> list[list[str]]:
        chosen = [flat["other" if take_other[owner[i]] else "hyp"][i] for i in range(offsets[-1])]
        return [chosen[a:b] for a, b in zip(offsets[:-1], offsets[1:])]

    def bleu(docs: list[list[str]]) -> dict:
        v = evaluate_documents(docs, systems["ref"], lowercase_too=False, metrics=("bleu",))
        return {"s": v["s_bleu"]["score"], "d": v["d_bleu"]["score"]}

    rng = np.random.default_rng(0)
    random = [bleu(merged(np.isin(np.arange(len(rows)), rng.choice(len(rows), int(pick_other.sum()), replace=False))))
              for _ in range(draws)]
    cells = {f"{model}_scored_higher_{by}_better": float(((pick_other == (model == "other")) & (better == sign)).mean())
             for model in ("hyp", "other") for by, sign in (("hyp", -1), ("other", 1), ("neither", 0))}
    over = scored["other"]["labels"] > scored["other"]["limit"] + 1     # + 1: the end token
    bits = {name: {"per_label": float(-v["total"].sum() / v["labels"].sum() / math.log(2)),
                   "per_word_piece": float(-v["words"].sum() / v["pieces"].sum() / math.log(2))}
            for name, v in scored.items()}
    return {
        "instances": len(rows),
        "sentences": int(offsets[-1]),
        "decode": {k: getattr(dec, k) for k in ("beam", "lenpen", "lenpen_style", "max_len_a", "max_len_b")},
        "mean_score": {k: float(v.mean()) for k, v in scores.items()},
        "mean_labels": {k: float(v["labels"].mean()) for k, v in scored.items()},
        "labels": {k: int(v["labels"].sum()) for k, v in scored.items()},
        "word_pieces": {k: int(v["pieces"].sum()) for k, v in scored.items()},
        # the NLL of each translation as a whole: per label in the model's own format, and per word
        # piece (the same pieces in every format: the figure to compare across models)
        "bits": bits,
        "other_scored_higher": float(pick_other.mean()),
        "other_scored_higher_beyond_limit": float((pick_other & over).mean()),
        "ref_scored_higher": float((scores["ref"] > own).mean()),
        "cells_by_instance_chrf": cells,
        "mean_instance_chrf": {k: float(v.mean()) for k, v in chrf.items()},
        "bleu": {"hyp": bleu(systems["hyp"]), "other": bleu(systems["other"]), "rerank": bleu(merged(pick_other)),
                 "random_pick": {lvl: {"mean": float(np.mean([r[lvl] for r in random])),
                                       "min": min(r[lvl] for r in random), "max": max(r[lvl] for r in random)}
                                 for lvl in ("s", "d")}, "random_draws": draws},
    }


def beam_check(translator, src_docs: list[Document], n: int, hyp: list[str]) -> dict:
    """Translate the first ``n`` sentences again: the largest difference between the beam's score
    of each best hypothesis and :func:`instance_scores`' score of its text, normalised the same
    way, and how many of the sentences come out as in ``hyp`` (the kept output: weights kept in
    fp16 from an fp32 model should translate the same; a document model may split a shortened
    document differently)."""
    docs = [Document(src_docs[0].docid, src_docs[0].src[:n])]
    out, _ = translator.translate(docs, search=replace(translator.cfg.decode, nbest=2))
    rows = decode_rows(translator, docs)
    s = instance_scores(translator, [Document(d.docid, d.src, o.tgt) for d, o in zip(docs, out)], rows)
    flat = [score for o in out for score in o.meta["nbest_scores"]]
    beam = np.array([flat[first][0] for _, _, first in rows.tolist()])
    diff = np.abs(s["total"] / length_penalty(s["labels"].astype(float), translator.cfg.decode) - beam).max()
    return {"sentences": n, "max_difference": float(diff),
            "same_as_hyp": sum(a == b for a, b in zip(out[0].tgt, hyp[:n]))}


def with_decode(translator: Translator, args: argparse.Namespace) -> None:
    """The decode flags given (the others as the model's config has them) into ``translator``."""
    given = {k: getattr(args, k) for k in ("beam", "lenpen", "lenpen_style", "max_len_a", "max_len_b")
             if getattr(args, k) is not None}
    translator.cfg.decode = replace(translator.cfg.decode, **given)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="model directory")
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--hyp", required=True, help="the model's own translation (marker format)")
    ap.add_argument("--other", required=True, help="another system's translation of --src")
    ap.add_argument("--out", help="default RUN/valid.vs_OTHER.search.json, OTHER the directory name of --other")
    ap.add_argument("--check", type=int, default=40, metavar="N",
                    help="compare with the beam's own scores on the first N sentences (0: no check)")
    # the settings the hypotheses were decoded with (tier_mfr.sh passes its DECODE): the beam's
    # objective and output limit are these, not the ones the model's preset carries
    ap.add_argument("--beam", type=int)
    ap.add_argument("--lenpen", type=float)
    ap.add_argument("--lenpen-style")
    ap.add_argument("--max-len-a", type=float)
    ap.add_argument("--max-len-b", type=int)
    ap.add_argument("-q", "--quiet", action="store_true", help="(accepted with the decode flags; no effect)")
    return ap


def main() -> None:
    args = parser().parse_args()
    out = Path(args.out or Path(args.run) / f"valid.vs_{Path(args.other).parent.name}.search.json")
    start = time.time()
    translator = Translator.load(args.run, None, "cpu")
    with_decode(translator, args)
    src_docs = read_documents(args.src, args.ref)
    systems = {name: [d.tgt for d in read_documents(args.src, path, allow_empty=True)]
               for name, path in (("hyp", args.hyp), ("other", args.other), ("ref", args.ref))}
    report = search_report(translator, src_docs, systems)
    if args.check:
        report["beam_check"] = beam_check(translator, src_docs, args.check, systems["hyp"][0])
    report.update(seconds=round(time.time() - start, 1), hyp=args.hyp, other=args.other, ref=args.ref)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
