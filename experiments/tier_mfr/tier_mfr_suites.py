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
right way in every example, and three medians over groups, in nats, of the score difference of
the two candidates over a group's examples: its half-range (how far the context moves it), its
bias (how far the middle of that range is from zero: the preference the context leaves alone; the
choice changes in a group exactly when the half-range exceeds the bias, exact ties aside), and its
effect (the difference is taken with the candidates in one fixed order, their texts sorted; the
effect is its mean where the first is right minus its mean where the second is, so positive when
the context moves the choice the right way, whatever the order), with the exact sign test of
whether the groups it moves the right way outnumber those it moves the wrong way.

    python experiments/tier_mfr/tier_mfr_suites.py experiments/tier_mfr/results --suites ../shared/data/enfr/suites \
        --out experiments/tier_mfr/results/suites_context.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from docnmt.contrastive import paired_test
from docnmt.suites import read_suite

TOL = 1e-3     # nats: an effect this small counts neither way in the sign test (a threshold we chose)
SUITES = {"anaphora": "bawden2018_discourse_test_sets_enfr/test-sets/anaphora.json",     # under --suites
          "lexical-choice": "bawden2018_discourse_test_sets_enfr/test-sets/lexical-choice.json",
          "scat_yin2021_enfr": "scat_yin2021_enfr"}


def context_groups(examples, records: list[dict]) -> dict:
    """The figures above for one suite: ``examples`` as read_suite gives them, ``records`` the
    scores file's lines in the same order (one score per candidate)."""
    if len(examples) != len(records):
        raise ValueError(f"{len(records)} scored examples, the suite has {len(examples)}")
    groups: dict[tuple, list[tuple[float, bool]]] = {}
    for n, (ex, rec) in enumerate(zip(examples, records), 1):
        # the scores file must be this suite's, line for line: each line carries the example's
        # answer and description (block, type, line ...), as score-contrastive --scores writes them
        want = {"correct": ex.correct, **ex.meta}
        if any(rec.get(k, ValueError) != v for k, v in want.items()):
            raise ValueError(f"scored example {n} is not the suite's example {n} (its answer or "
                             f"description differs: {', '.join(k for k, v in want.items() if rec.get(k) != v)})")
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
    half = [(max(d for d, _ in g) - min(d for d, _ in g)) / 2 for g in multi]
    bias = [abs(max(d for d, _ in g) + min(d for d, _ in g)) / 2 for g in multi]
    effect = [float(np.mean([d for d, right in g if right]) - np.mean([d for d, right in g if not right]))
              for g in multi]

    def median(x: list[float]) -> float | None:
        return float(np.median(x)) if x else None
    return {"groups": len(multi), "examples": sum(map(len, multi)),
            "context_sensitive": len(sensitive), "all_right": len(all_right),
            "median_half_range_nats": median(half), "median_bias_nats": median(bias),
            "median_effect_nats": median(effect), **sign_test(effect)}


def sign_test(effect: list[float]) -> dict:
    """Groups the context moves the right way and the wrong way (by more than TOL), and the exact
    two-sided sign test of "as often one way as the other" (1.0 when none moves): the exact McNemar
    test score-contrastive uses, a group moved the right way counting as one the second system wins."""
    right, wrong = [e > TOL for e in effect], [e < -TOL for e in effect]
    return {"effect_positive": sum(right), "effect_negative": sum(wrong),
            "sign_test_p": paired_test(wrong, right)["p_value"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="experiments/tier_mfr/results: one directory per run with <suite>.scores.jsonl")
    ap.add_argument("--suites", required=True, help="the En-Fr suites: ../shared/data/enfr/suites")
    ap.add_argument("--out")
    args = ap.parse_args()
    suites = {name: read_suite(Path(args.suites) / path) for name, path in SUITES.items()}
    report = {}
    for run in sorted(p for p in Path(args.results).iterdir() if p.is_dir()):
        row = {}
        for name, examples in suites.items():
            path = run / f"{name}.scores.jsonl"
            if path.exists():
                try:
                    row[name] = context_groups(examples, [json.loads(x) for x in path.read_text().splitlines()])
                except ValueError as e:     # one stale file: that run's suite left out, the rest reported
                    print(f"warning: {path} left out: {e}", file=sys.stderr)
        if row:
            report[run.name] = row
            print(f"{run.name:20s}" + "".join(
                f"  {n}: {r['context_sensitive']}/{r['groups']} sensitive, {r['all_right']} all right, "
                f"half-range {r['median_half_range_nats']:.3f} / bias {r['median_bias_nats']:.3f}, "
                f"effect {r['median_effect_nats']:+.3f} ({r['effect_positive']} > 0, {r['effect_negative']} < 0, "
                f"p = {r['sign_test_p']:.3f})"
                for n, r in row.items() if r["groups"]))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
