"""Contrastive evaluation (docs/methods/discourse.md#contrastive-scoring): score every candidate
of a test-suite example by the model's log-probability of the current target sentence in its
context, pick the best, and report accuracy with its breakdowns, and compare two systems on the
same examples with an exact McNemar test (:func:`paired_test`).

Ties count as errors (``accuracy``, docs/methods/discourse.md#contrastive-ties); the lenient
count, where a tie with the correct candidate counts as right (D2DToolkits' argmax with the
reference first), is ``accuracy_lenient``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from .document import Document
from .errors import DataError
from .suites import ContrastiveExample

BREAKDOWNS = ("phenomenon", "type", "pronoun", "distance")


def example_documents(examples: Sequence[ContrastiveExample]) -> tuple[list[Document], list[int]]:
    """One document per candidate (context sentences + the current one, both sides) and the
    number of candidates per example. Contexts of unequal length keep their last sentences."""
    docs, counts = [], []
    for k, ex in enumerate(examples):
        for j, cand in enumerate(ex.candidates):
            m = min(len(ex.src_context), len(cand.tgt_context))
            src = ex.src_context[len(ex.src_context) - m:] + [ex.src]
            tgt = cand.tgt_context[len(cand.tgt_context) - m:] + [cand.tgt]
            docs.append(Document(f"{k}.{j}", src, tgt))
        counts.append(len(ex.candidates))
    return docs, counts


def score_examples(translator, examples: Sequence[ContrastiveExample], max_context: int | None = None,
                   progress: bool = False, max_tokens: int | None = None) -> list[list[float]]:
    """Per example, the log-probability of each candidate's current sentence (higher is better)."""
    from .scoring import sentence_logprobs
    docs, counts = example_documents(examples)
    # identical candidates (some suites repeat the reference) are scored once, so they tie exactly
    unique: dict[tuple, int] = {}
    index = [unique.setdefault((tuple(d.src), tuple(d.tgt)), len(unique)) for d in docs]
    first = {i: d for d, i in zip(docs, index)}
    scores = sentence_logprobs(translator, [first[i] for i in range(len(unique))], max_context,
                               progress=progress, max_tokens=max_tokens)
    flat = scores[index]
    cuts = np.cumsum([0] + counts)
    return [flat[a:b].tolist() for a, b in zip(cuts[:-1], cuts[1:])]


def decisions(scores: Sequence[Sequence[float]], correct: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(strict, lenient) per example: strict needs the correct candidate's score above every
    other; lenient accepts a tie."""
    strict, lenient = [], []
    for s, c in zip(scores, correct):
        others = [x for j, x in enumerate(s) if j != c]
        best_other = max(others) if others else -np.inf
        strict.append(s[c] > best_other)
        lenient.append(s[c] >= best_other)
    return np.asarray(strict, dtype=bool), np.asarray(lenient, dtype=bool)


def right_answers(examples: Sequence[ContrastiveExample], scores: Sequence[Sequence[float]]) -> list[bool]:
    """The strict decision of every example: whether its correct candidate scored highest."""
    return decisions(scores, [ex.correct for ex in examples])[0].tolist()


def source_only_ceiling(examples: Sequence[ContrastiveExample]) -> float | None:
    """The highest accuracy (strict) a model that sees no target context can reach on these examples.

    Such a model scores a candidate's current sentence the same in every example with the same
    source sentence and source context, so among the examples that share those and offer the same
    current sentences it gets right at most those whose correct sentence is the most common one,
    and none whose correct sentence is also offered as a wrong one (a tie). Bawden et al.'s
    anaphora set is built so that this is about 50%: only the previous target sentence tells its
    candidates apart."""
    groups: dict[tuple, dict[str, int]] = {}
    for ex in examples:
        offered = [c.tgt for c in ex.candidates]
        right = offered[ex.correct]
        count = groups.setdefault((tuple(ex.src_context), ex.src, frozenset(offered)), {})
        count[right] = count.get(right, 0) + (offered.count(right) == 1)
    return sum(max(c.values()) for c in groups.values()) / len(examples) if examples else None


def accuracy_report(examples: Sequence[ContrastiveExample], scores: Sequence[Sequence[float]]) -> dict:
    """Accuracy (strict), lenient accuracy, ties, the accuracy per value of every breakdown key
    present in the examples' ``meta`` (phenomenon, type, pronoun, antecedent distance), and
    ``source_only_ceiling`` (:func:`source_only_ceiling`)."""
    strict, lenient = decisions(scores, [ex.correct for ex in examples])
    n = len(examples)
    report = {"examples": n, "correct": int(strict.sum()), "accuracy": float(strict.mean()) if n else None,
              "accuracy_lenient": float(lenient.mean()) if n else None, "ties": int((lenient & ~strict).sum()),
              "source_only_ceiling": source_only_ceiling(examples), "by": {}}
    for key in BREAKDOWNS:
        values = [ex.meta.get(key) for ex in examples]
        if all(v is None for v in values):
            continue
        groups: dict[str, list[int]] = {}
        for i, v in enumerate(values):
            groups.setdefault(str(v), []).append(i)
        if key == "phenomenon" and len(groups) == 1:
            continue
        report["by"][key] = {v: {"examples": len(ix), "correct": int(strict[ix].sum()),
                                 "accuracy": float(strict[ix].mean())} for v, ix in sorted(groups.items(), key=_order)}
    return report


def paired_test(right_a: Sequence[bool], right_b: Sequence[bool]) -> dict:
    """Exact McNemar test of system B against system A on the same contrastive examples (strict
    decisions): only the examples where they disagree count, and under "no difference" each is
    B's with probability 1/2. ``p_value`` is two-sided (the binomial tail doubled, at most 1);
    ``delta`` is B's accuracy minus A's."""
    if len(right_a) != len(right_b):
        raise DataError(f"paired test over different examples: {len(right_a)} against {len(right_b)}")
    only_a = sum(1 for a, b in zip(right_a, right_b) if a and not b)
    only_b = sum(1 for a, b in zip(right_a, right_b) if b and not a)
    n = only_a + only_b
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1))
    return {"delta": (only_b - only_a) / len(right_a) if right_a else 0.0, "only_a": only_a, "only_b": only_b,
            "p_value": min(1.0, 2 * tail / 2 ** n) if n else 1.0, "examples": len(right_a)}


def read_decisions(path: str | Path) -> list[bool]:
    """The strict per-example decisions of a ``--scores`` file (:func:`write_scores`)."""
    try:
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not a per-example scores file of score-contrastive --scores ({e})") from None
    if not rows or any(not isinstance(r, dict) or "right" not in r for r in rows):
        raise DataError(f"{path}: not a per-example scores file of score-contrastive --scores")
    return [bool(r["right"]) for r in rows]


def _order(item):
    v = item[0]
    return (0, int(v), "") if v.isdigit() else (1, 0, v)


def format_report(report: dict, title: str = "") -> str:
    lines = [f"{title}: " if title else ""]
    lines[0] += (f"accuracy {100 * report['accuracy']:.2f}% ({report['correct']}/{report['examples']}, "
                 f"ties as errors); lenient {100 * report['accuracy_lenient']:.2f}% ({report['ties']} ties)")
    ceiling = report.get("source_only_ceiling")
    if ceiling is not None and ceiling < 1:
        lines.append(f"  a model that sees no target context (Sent2Sent, Doc2Sent, the context-encoder Transformer) "
                     f"scores at most {100 * ceiling:.2f}% here: in the other examples only the target context "
                     f"tells the candidates apart")
    for key, groups in report["by"].items():
        lines.append(f"  by {key}:")
        lines += [f"    {v:<14} {100 * g['accuracy']:6.2f}%  ({g['correct']}/{g['examples']})"
                  for v, g in groups.items()]
    return "\n".join(lines)


def write_scores(path: str | Path, examples: Sequence[ContrastiveExample], scores: Sequence[Sequence[float]]) -> None:
    """One JSON line per example: candidate scores, the correct index and the decision."""
    with open(path, "w", encoding="utf-8") as f:
        for ex, s, ok in zip(examples, scores, right_answers(examples, scores)):
            f.write(json.dumps({"scores": s, "correct": ex.correct, "right": bool(ok), **ex.meta},
                               ensure_ascii=False) + "\n")


def plot_accuracy_by(reports: dict[str, dict], key: str, path: str | Path, title: str = "") -> bool:
    """Accuracy per value of ``key`` (e.g. antecedent distance) for several systems, as a PNG.
    Returns False (and writes nothing) when no report has that breakdown."""
    series = {name: r["by"][key] for name, r in reports.items() if key in r.get("by", {})}
    if not series:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    values = [v for v, _ in sorted({v: 0 for s in series.values() for v in s}.items(), key=_order)]
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / len(series)
    for i, (name, groups) in enumerate(series.items()):
        x = np.arange(len(values)) + (i - (len(series) - 1) / 2) * width
        ax.bar(x, [100 * groups[v]["accuracy"] if v in groups else 0 for v in values], width, label=name)
    ax.set_xticks(np.arange(len(values)), values)
    ax.set_xlabel(key)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title or f"contrastive accuracy by {key}")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
