"""TCP, the Zh→En discourse metric of Sun et al. (2022) (docs/methods/discourse.md#tcp), on their PDC test set.

``en.candidates`` has one line per test document: tab-separated labels ``POS:alt1,alt2,…``, POS
a word position in the tokenised reference ``en.tok``. A label is hit when, at the position
rescaled to the hypothesis (⌊POS · |hyp| / |ref|⌋), the window of hypothesis words
``[pos − 20, pos + 20)`` contains an alternative: a multi-word alternative as a substring of the
window's words joined by spaces, a single word as one of the window's words (case-sensitive).
Documents 1–50 test tense consistency (TC), 51–96 conjunction presence (CP), 97–148 pronoun
translation (PT); TCP is the geometric mean of the three hit rates. Hypotheses are Moses-tokenised
(aggressive dash splitting, as ``en.tok``) unless they already are.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .errors import DataError

GROUPS = (("TC", 50), ("CP", 46), ("PT", 52))
WINDOW = (20, 20)


def read_labels(path: str | Path) -> list[list[tuple[int, list[str]]]]:
    """Per document, the (position, alternatives) labels of an ``en.candidates`` file."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        labels = []
        for item in (x for x in line.strip().split("\t") if x.strip()):
            pos, sep, alts = item.partition(":")
            if not sep or not pos.strip().isdigit():
                raise DataError(f"line {n}: label {item!r} is not POS:alternatives", path)
            labels.append((int(pos), alts.split(",")))
        out.append(labels)
    return out


def hit(alternatives: Sequence[str], window: list[str]) -> bool:
    joined = " ".join(window)
    return any((alt in joined) if " " in alt else (alt in window) for alt in alternatives)


def tcp(hyp_words: Sequence[Sequence[str]], ref_words: Sequence[Sequence[str]],
        labels: Sequence[Sequence[tuple[int, list[str]]]], groups=GROUPS, window=WINDOW) -> dict:
    """Hit counts and rates per category and TCP (all in %) of tokenised documents."""
    if not len(hyp_words) == len(ref_words) == len(labels) == sum(n for _, n in groups):
        raise DataError(f"TCP needs {sum(n for _, n in groups)} documents; got {len(hyp_words)} hypotheses, "
                        f"{len(ref_words)} references, {len(labels)} label lines")
    bounds, start = [], 0
    for name, n in groups:
        bounds.append((name, start, start + n))
        start += n
    result = {}
    for name, a, b in bounds:
        hits = total = 0
        for hyp, ref, doc_labels in zip(hyp_words[a:b], ref_words[a:b], labels[a:b]):
            ratio = len(hyp) / max(len(ref), 1)
            for pos, alts in doc_labels:
                p = int(pos * ratio)
                hits += hit(alts, list(hyp[max(p - window[0], 0): min(p + window[1], len(hyp))]))
            total += len(doc_labels)
        result[name] = {"hits": hits, "labels": total, "score": 100 * hits / total if total else 0.0}
    product = 1.0
    for name, _ in groups:
        product *= result[name]["score"] / 100
    result["TCP"] = 100 * product ** (1 / len(groups))
    return result


def moses_words(text: str, lang: str = "en") -> list[str]:
    try:
        from sacremoses import MosesTokenizer
    except ModuleNotFoundError:
        raise DataError("TCP tokenises hypotheses with Moses: pip install docnmt[moses] "
                        "(or give already tokenised hypotheses)") from None
    return MosesTokenizer(lang).tokenize(text, aggressive_dash_splits=True, escape=False)


def check_testset(testset: str | Path) -> Path:
    """``testset`` as a Path, or a DataError if it is not a PDC test directory."""
    testset = Path(testset)
    for name in ("en.tok", "en.candidates"):
        if not (testset / name).exists():
            raise DataError(f"no {name} here (a PDC test directory such as zhen/pdc/testsets/doc)", testset)
    return testset


def tcp_documents(hyp_docs: Sequence[Sequence[str]], testset: str | Path, tokenized: bool = False) -> dict:
    """TCP of hypothesis documents (lists of sentences) against a PDC test directory holding
    ``en.tok`` and ``en.candidates`` (``zhen/pdc/testsets/doc``)."""
    testset = check_testset(testset)
    refs = [line.split() for line in (testset / "en.tok").read_text(encoding="utf-8").splitlines()]
    hyps = [(" ".join(d).split() if tokenized else moses_words(" ".join(d))) for d in hyp_docs]
    return tcp(hyps, refs, read_labels(testset / "en.candidates"))


def format_tcp(result: dict) -> str:
    parts = [f"{k} {v['score']:.1f} ({v['hits']}/{v['labels']})" for k, v in result.items() if k != "TCP"]
    return "TCP " + f"{result['TCP']:.1f}: " + ", ".join(parts)
