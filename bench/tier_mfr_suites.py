"""Does a Tier M-fr system's choice on the contrastive suites change with the context at all?
A suite at 50% says nothing about why; this says whether the context moved the choice.

Examples that ask the same question (the same source sentence and the same candidate
translations of it) in different contexts form a group: Bawden et al.'s anaphora blocks give each
pronoun choice after a masculine and after a feminine antecedent, lexical choice's blocks each
word after two contexts. A model that ignores the context (a sentence model) prefers the same
candidate in every example of a group, so it is right on half of the anaphora examples by design;
a model that reads the context can prefer each candidate where its context calls for it. Per run
and suite, from the scores ``docnmt score-contrastive --scores`` wrote: the groups, those whose
preferred candidate changes with the context ("context-sensitive") and those where it changes the
right way in every example, and, in nats, the median over groups of how far the context moves
the score difference of the two candidates (its range over the group's examples) beside the
median size of that difference (the gap the context would have to close).

    python bench/tier_mfr_suites.py bench/results/tier_mfr --out bench/results/tier_mfr/suites_context.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from docnmt.suites import read_suite

SHARED = Path(__file__).resolve().parents[2] / "shared/data/enfr/suites"
SUITES = {"anaphora": SHARED / "bawden2018_discourse_test_sets_enfr/test-sets/anaphora.json",
          "lexical-choice": SHARED / "bawden2018_discourse_test_sets_enfr/test-sets/lexical-choice.json",
          "scat_yin2021_enfr": SHARED / "scat_yin2021_enfr"}


def context_groups(examples, records: list[dict]) -> dict:
    """The figures above for one suite: ``examples`` as read_suite gives them, ``records`` the
    scores file's lines in the same order (one score per candidate)."""
    if len(examples) != len(records):
        raise SystemExit(f"error: {len(records)} scored examples, the suite has {len(examples)}")
    groups: dict[tuple, list[tuple[dict, float]]] = {}
    for ex, rec in zip(examples, records):
        texts = [c.tgt for c in ex.candidates]
        if len(texts) != 2 or len(rec["scores"]) != 2:
            continue                                     # pairs only: one score difference
        first = min(texts)                               # the difference always taken the same way
        i = texts.index(first)
        diff = rec["scores"][i] - rec["scores"][1 - i]   # > 0: prefers ``first``
        key = (ex.src, tuple(sorted(texts)))
        groups.setdefault(key, []).append((diff, texts[ex.correct] == first))
    multi = [g for g in groups.values() if len({right for _, right in g}) > 1]   # the context decides
    sensitive = [g for g in multi if len({d > 0 for d, _ in g}) > 1]
    all_right = [g for g in multi if all((d > 0) == right for d, right in g)]
    shift = [max(d for d, _ in g) - min(d for d, _ in g) for g in multi]
    gap = [float(np.median([abs(d) for d, _ in g])) for g in multi]
    return {"groups": len(multi), "examples": sum(map(len, multi)),
            "context_sensitive": len(sensitive), "all_right": len(all_right),
            "median_shift_nats": float(np.median(shift)) if shift else None,
            "median_gap_nats": float(np.median(gap)) if gap else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="bench/results/tier_mfr: one directory per run with <suite>.scores.jsonl")
    ap.add_argument("--out")
    args = ap.parse_args()
    suites = {name: read_suite(path) for name, path in SUITES.items()}
    report = {}
    for run in sorted(p for p in Path(args.results).iterdir() if p.is_dir()):
        row = {}
        for name, examples in suites.items():
            path = run / f"{name}.scores.jsonl"
            if path.exists():
                row[name] = context_groups(examples, [json.loads(x) for x in path.read_text().splitlines()])
        if row:
            report[run.name] = row
            print(f"{run.name:20s}" + "".join(
                f"  {n}: {r['context_sensitive']}/{r['groups']} sensitive, {r['all_right']} all right, "
                f"shift {r['median_shift_nats']:.3f} / gap {r['median_gap_nats']:.3f}"
                for n, r in row.items() if r["groups"]))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
