"""Output length and n-gram precisions of every scored Tier M-fr system on the validation sittings:
how much of a BLEU difference is brevity (sacreBLEU's brevity penalty) and how much precision; and
how many sentences repeat themselves (a 4-gram of words three or more times in one sentence), the
looping that document models fall into on long instances; and how many sentences are word for word
the control's translation of one of the three sentences before them in their document (and not of
their own sentence), beside those equal to its translation of one of the three sentences after them
(the level that chance, recurring lines such as speaker labels, and slipping sentence alignment give);
and each document's own d-BLEU (a sitting's translation against its reference, joined as `docnmt
evaluate` joins them), with how many sittings a system is above the control on: the d-level paired
bootstrap resamples these six documents only.

    python experiments/tier_mfr/tier_mfr_lengths.py experiments/tier_mfr/results ../shared/data/enfr/valid/hansard.fr \
        --out experiments/tier_mfr/results/lengths.json
"""
from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter
from pathlib import Path

import sacrebleu

from docnmt.metrics import join_doc


def documents(path: Path) -> list[list[str]]:
    """The sentences of a <d>-marker file (plain or gzipped), one list per document."""
    docs: list[list[str]] = []
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
        for line in f:
            if line.strip() == "<d>":
                docs.append([])
            elif not docs:
                raise SystemExit(f"error: {path} does not start with a <d> line")
            else:
                docs[-1].append(line.rstrip("\n"))
    return docs


def context_copies(hyp: list[list[str]], control: list[list[str]], back: int = 3) -> dict[str, int]:
    """Per distance k: the non-empty sentences of ``hyp`` equal to ``control``'s translation of the
    sentence k before them in the same document (the nearest such k, 1..back) while differing from
    ``control``'s translation of their own sentence; and, as the level that chance and slipping
    sentence alignment give, those equal instead to the control's translation of one of the
    ``back`` sentences after them ("following"). Documents whose sentence counts differ are left
    out (counted in "documents_left_out")."""
    counts = dict.fromkeys(map(str, range(1, back + 1)), 0)
    counts.update(following=0, documents_left_out=0)
    if len(hyp) != len(control):
        raise SystemExit(f"error: {len(hyp)} documents, the control has {len(control)}")
    for h_doc, c_doc in zip(hyp, control):
        if len(h_doc) != len(c_doc):
            counts["documents_left_out"] += 1
            continue
        for i, (h, c) in enumerate(zip(h_doc, c_doc)):
            if not h or h == c:
                continue
            k = next((k for k in range(1, min(back, i) + 1) if c_doc[i - k] == h), None)
            if k:
                counts[str(k)] += 1
            elif h in c_doc[i + 1:i + 1 + back]:
                counts["following"] += 1
    return counts


def repeats(sentence: str, n: int = 4, times: int = 3) -> bool:
    """Whether some n-gram of whitespace words occurs at least `times` times in the sentence."""
    words = sentence.split()
    grams = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    return bool(grams) and max(grams.values()) >= times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", type=Path, help="experiments/tier_mfr/results")
    ap.add_argument("ref", type=Path, help="the validation references (<d>-marker file)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    ref_docs = documents(a.ref)
    ref = [s for doc in ref_docs for s in doc]
    rows, bleu = {}, sacrebleu.BLEU()
    # each run's translation, and its decoding with the source's sentence count (as RUN.count)
    files = sorted(a.results.glob("*/valid.fr.gz")) + sorted(a.results.glob("*/valid.count.fr.gz"))
    control = a.results / "control/valid.fr.gz"
    control_docs = documents(control) if control.exists() else None
    for hyp_file in files:
        hyp_docs = documents(hyp_file)
        hyp = [s for doc in hyp_docs for s in doc]
        if len(hyp) != len(ref):
            continue
        b = bleu.corpus_score(hyp, [ref])
        name = hyp_file.parent.name + (".count" if ".count." in hyp_file.name else "")
        rows[name] = {"bleu": b.score, "length_ratio": b.sys_len / b.ref_len, "brevity_penalty": b.bp,
                      "precisions": b.precisions, "repeating_sentences": sum(map(repeats, hyp))}
        rows[name]["d_bleu_by_document"] = [bleu.corpus_score([join_doc(h)], [[join_doc(r)]]).score
                                             for h, r in zip(hyp_docs, ref_docs)]
        copies = ""
        if control_docs is not None:
            c = rows[name]["control_context_copies"] = context_copies(hyp_docs, control_docs)
            copies = f"  context copies {sum(v for k, v in c.items() if k.isdigit())} (following {c['following']})"
        print(f"{name:16s} BLEU {b.score:5.2f}  length ratio {b.sys_len / b.ref_len:.4f}  "
              f"BP {b.bp:.4f}  precisions {' / '.join(f'{p:.1f}' for p in b.precisions)}  "
              f"repeating {rows[name]['repeating_sentences']}{copies}")
    base = rows.get("control", {}).get("d_bleu_by_document")
    for row in rows.values():
        if base:
            row["documents_above_control"] = sum(x > c for x, c in zip(row["d_bleu_by_document"], base))
    a.out.write_text(json.dumps({"signature": str(bleu.get_signature()), "systems": rows}, indent=1))


if __name__ == "__main__":
    main()
