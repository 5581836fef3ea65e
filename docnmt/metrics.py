"""Sentence- and document-level BLEU/chrF and paired bootstrap resampling (docs/methods/discourse.md).

All scores come from SacreBLEU (default settings: 13a tokenisation, exp smoothing for BLEU,
chrF with char order 6 / word order 0); we only decide *what* is scored:

* s-level: corpus score over all sentence pairs of the documents whose hypothesis and reference
  have the same number of sentences (others are reported in ``mismatched_docs`` and left out);
* d-level: corpus score over documents, each document's sentences joined with single spaces.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from .errors import DataError

_METRICS = {"bleu": BLEU, "chrf": CHRF}
_LABELS = {"bleu": "BLEU", "chrf": "chrF"}
_SPECIAL = re.compile(r"</?s>|<sos>|<eos>|<sep\d*>|<eod>|<idx_\d+>")

Docs = Sequence[Sequence[str]]


def strip_special(text: str) -> str:
    """Remove ``<s> </s> <sos> <eos> <sep> <sepN> <eod> <idx_N>`` and collapse whitespace."""
    return " ".join(_SPECIAL.sub(" ", text).split())


def join_doc(sents: Sequence[str]) -> str:
    """One document as one line: stripped sentences joined by single spaces, empty ones skipped."""
    return " ".join(s for s in (x.strip() for x in sents) if s)


def _metric(name: str, lowercase: bool):
    if name not in _METRICS:
        raise ValueError(f"unknown metric {name!r}; choose from {sorted(_METRICS)}")
    return _METRICS[name](lowercase=lowercase)


def _score(name: str, lowercase: bool, hyps: list[str], refs: list[str]) -> dict | None:
    if not hyps:
        return None
    m = _metric(name, lowercase)
    return {"score": float(m.corpus_score(hyps, [refs]).score), "signature": m.get_signature().format()}


def _check(hyp_docs: Docs, ref_docs: Docs) -> None:
    if len(hyp_docs) != len(ref_docs):
        raise DataError(f"{len(hyp_docs)} hypothesis documents but {len(ref_docs)} reference documents")
    if not ref_docs:
        raise DataError("no documents to evaluate")


def _units(level: str, hyp_sets: list[list[list[str]]], ref_docs: Docs):
    """Scoring units for each hypothesis set and the reference: (hyp units per set, ref units,
    indices of documents left out of s-level because some sentence count differs)."""
    if level == "d":
        return [[join_doc(d) for d in hs] for hs in hyp_sets], [join_doc(d) for d in ref_docs], []
    if level != "s":
        raise ValueError(f"level must be 's' or 'd', not {level!r}")
    bad = [i for i, r in enumerate(ref_docs) if any(len(hs[i]) != len(r) for hs in hyp_sets)]
    keep = sorted(set(range(len(ref_docs))) - set(bad))
    flat = lambda docs: [s for i in keep for s in docs[i]]  # noqa: E731
    return [flat(hs) for hs in hyp_sets], flat(ref_docs), bad


def _clean(hyp_docs: Docs) -> list[list[str]]:
    return [[strip_special(s) for s in d] for d in hyp_docs]


def evaluate_documents(hyp_docs: Docs, ref_docs: Docs, *, lowercase_too: bool = True,
                       metrics: Sequence[str] = ("bleu", "chrf")) -> dict:
    """Score documents (lists of sentences) with cased and (optionally) lowercased s-/d-level
    metrics. Special tokens are stripped from hypotheses. Returns a JSON-serialisable dict with
    ``{s,d}_{metric}[_lc]`` -> ``{"score", "signature"}`` (s-level ``None`` if no document has
    matching sentence counts), ``n_docs``, ``n_sents`` (reference sentences), ``n_sents_scored``
    (sentence pairs in s-level scores), ``n_mismatched_docs`` and ``mismatched_docs``."""
    _check(hyp_docs, ref_docs)
    hyps = _clean(hyp_docs)
    result: dict = {}
    for level in ("s", "d"):
        (h,), r, bad = _units(level, [hyps], ref_docs)
        if level == "s":
            result.update(n_docs=len(ref_docs), n_sents=sum(map(len, ref_docs)), n_sents_scored=len(r),
                          n_mismatched_docs=len(bad), mismatched_docs=bad)
        for name in metrics:
            for lc in (False, True) if lowercase_too else (False,):
                result[f"{level}_{name}" + ("_lc" if lc else "")] = _score(name, lc, h, r)
    return result


LENGTH_EDGES = (0, 64, 128, 256, 512, 1024, 2048, 4096)


def bleu_by_length(hyp_docs: Docs, ref_docs: Docs, lengths: Sequence[int],
                   edges: Sequence[int] = LENGTH_EDGES) -> list[dict]:
    """d-BLEU (cased and lowercased) of the documents in each length bucket [edges[i],
    edges[i+1]) (the last one open), ``lengths`` being each document's length (e.g. source
    words): how a model's quality moves with document length (the length-bias paper's Figure 5).
    Empty buckets are left out."""
    _check(hyp_docs, ref_docs)
    hyps = _clean(hyp_docs)
    rows = []
    for i, lo in enumerate(edges):
        hi = edges[i + 1] if i + 1 < len(edges) else None
        pick = [k for k, n in enumerate(lengths) if n >= lo and (hi is None or n < hi)]
        if not pick:
            continue
        h, r = [join_doc(hyps[k]) for k in pick], [join_doc(ref_docs[k]) for k in pick]
        rows.append({"bucket": f"[{lo}, {hi if hi is not None else 'inf'})", "low": lo, "high": hi,
                     "n_docs": len(pick), "mean_length": sum(lengths[k] for k in pick) / len(pick),
                     "d_bleu": _score("bleu", False, h, r)["score"], "d_bleu_lc": _score("bleu", True, h, r)["score"]})
    return rows


def plot_by_length(rows: list[dict] | dict[str, list[dict]], path, title: str = "") -> None:
    """d-BLEU against mean document length per bucket, as a PNG: one system's rows (cased and
    lowercased curves) or ``{system: rows}`` (one cased curve per system)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    series = rows if isinstance(rows, dict) else {"d-BLEU (cased)": rows}
    for name, rs in series.items():
        ax.plot([r["mean_length"] for r in rs], [r["d_bleu"] for r in rs], "o-", label=name)
    if not isinstance(rows, dict):
        ax.plot([r["mean_length"] for r in rows], [r["d_bleu_lc"] for r in rows], "s--", label="d-BLEU (lowercased)")
    for r in next(iter(series.values()), []):
        ax.annotate(str(r["n_docs"]), (r["mean_length"], r["d_bleu"]), textcoords="offset points", xytext=(0, 5),
                    fontsize=7, ha="center")
    ax.set_xscale("log")
    ax.set_xlabel("document length (source words; label: documents)")
    ax.set_ylabel("d-BLEU")
    ax.set_title(title or "quality vs document length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def paired_bootstrap(hyp_a_docs: Docs, hyp_b_docs: Docs, ref_docs: Docs, level: str = "d",
                     metric: str = "bleu", n_samples: int = 1000, seed: int = 12345,
                     lowercase: bool = False) -> dict:
    """Paired bootstrap resampling (Koehn 2004) of system B against system A over documents
    (``level="d"``) or sentence pairs (``level="s"``; documents whose sentence counts differ in
    A, B or the reference are left out). Per-unit sufficient statistics come from SacreBLEU and
    each resample's score from SacreBLEU's ``_compute_score_from_stats``. These two methods are not
    SacreBLEU's public API (its public ``PairedTest`` reports per-system intervals, not the
    difference's, and would score every resample from text): the SacreBLEU versions this is tested
    with are pinned in pyproject.toml, and ``tests/test_metrics.py::test_bootstrap`` checks that the
    full-sample scores equal the public ``corpus_bleu`` / ``corpus_chrf``, so a change inside
    SacreBLEU fails a test instead of changing a p-value.

    ``p_value`` is the one-sided probability that the better-scoring system is not better:
    ``(1 + #resamples where the sign of B-A is not that of the observed delta) / (1 + n)``
    (a zero delta counts as "not better", so a system against itself gets 1.0).
    """
    _check(hyp_a_docs, ref_docs)
    _check(hyp_b_docs, ref_docs)
    (ua, ub), ur, _ = _units(level, [_clean(hyp_a_docs), _clean(hyp_b_docs)], ref_docs)
    if not ur:
        raise DataError("no sentence pairs left for s-level bootstrap (all documents mismatched)")
    m = _metric(metric, lowercase)
    stats = [np.asarray(m._extract_corpus_statistics(u, [ur]), dtype=np.int64) for u in (ua, ub)]
    score = lambda s: float(m._compute_score_from_stats(s).score)  # noqa: E731
    a, b = (score(s.sum(0)) for s in stats)
    rng = np.random.default_rng(seed)
    n = len(ur)
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_samples)])
    diffs = np.array([[score(row) for row in counts @ s] for s in stats])
    diffs = diffs[1] - diffs[0]
    delta = b - a
    worse = np.sum(diffs <= 0) if delta >= 0 else np.sum(diffs >= 0)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return {"a": a, "b": b, "delta": delta, "p_value": float((worse + 1) / (n_samples + 1)),
            "ci95_b_minus_a": [float(lo), float(hi)], "n_samples": n_samples, "level": level,
            "metric": metric, "n_units": n, "signature": m.get_signature().format()}


def format_table(result: dict) -> str:
    """Fixed-width table of an :func:`evaluate_documents` result (rows: metric; columns: cased,
    lowercased), followed by the document counts and the SacreBLEU signatures."""
    fmt = lambda e: "-" if e is None else f"{e['score']:.2f}"  # noqa: E731
    lines = [f"{'metric':<8}{'cased':>10}{'lowercased':>12}"]
    sigs: dict[str, str] = {}
    for name in _METRICS:
        for level in ("s", "d"):
            key = f"{level}_{name}"
            if key not in result:
                continue
            cased, lc = result[key], result.get(key + "_lc")
            lines.append(f"{level + '-' + _LABELS[name]:<8}{fmt(cased):>10}{fmt(lc):>12}")
            for tag, e in (("cased", cased), ("lowercased", lc)):
                if e is not None:
                    sigs.setdefault(f"{_LABELS[name]} {tag}", e["signature"])
    lines.append(f"docs: {result.get('n_docs')}  sentences: {result.get('n_sents')}  "
                 f"mismatched docs (excluded from s-level): {result.get('n_mismatched_docs', 0)}")
    lines += ["signatures:"] + [f"  {k}: {v}" for k, v in sigs.items()]
    return "\n".join(lines)


__all__ = ["strip_special", "join_doc", "evaluate_documents", "paired_bootstrap", "format_table"]
