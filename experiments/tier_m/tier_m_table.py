"""One Markdown table of Tier M runs: updates, trained parameters, validation loss, BLEU.

    python experiments/tier_m/tier_m_table.py [--tag u1000] runs/tierm/sent2sent runs/tierm/ctx_step2 ...
    python experiments/tier_m/tier_m_table.py experiments/tier_m/results/pt_nocross ...
        # the copies experiments/tier_m/tier_m.sh keeps in git

Reads each model directory's ``metrics.jsonl`` (the last validation) and the ``valid.ted.json`` /
``valid.news.json`` written by ``docnmt evaluate --json`` (as ``experiments/tier_m/tier_m*.sh`` do; with
``--tag T`` the ``valid.ted.T.json`` ones that ``experiments/tier_m/tier_m.sh --max-update N`` writes, T = uN,
and the last validation at or before update N, so a run continued past N still gives its uN row),
and prints cased s-BLEU and d-BLEU per validation set, the decoder cross-attention entropy in
bits where the run measured it (``attention_entropy``), and, where the decode wrote one
(``docnmt translate --report``, as ``experiments/tier_m/tier_m.sh`` does), the coverage report of each set:
documents fully recovered / documents, the paper's Table VII (P-Transformer), and empty sentences.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SETS = ("ted", "news")


def row(run: Path, tag: str = "") -> list[str]:
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    valid = [r for r in history if "valid_loss" in r]
    if tag.startswith("u") and tag[1:].isdigit():     # the validation the uN decodes go with
        valid = [r for r in valid if r.get("updates", 0) <= int(tag[1:])]
    last = valid[-1] if valid else {}
    cells = [run.name, f"{last.get('updates', 0):,}", f"{last.get('valid_loss', float('nan')):.2f}",
             f"{last.get('valid_nll_loss', float('nan')):.2f}", f"{last.get('valid_ppl', float('nan')):.1f}"]
    cross = last.get("valid_entropy_cross")
    cells.append("–" if cross is None else f"{cross:.2f}")
    for s in SETS:
        path = run / f"valid.{s}{'.' + tag if tag else ''}.json"
        if path.exists():
            r = json.loads(path.read_text())
            sb = r["s_bleu"]["score"] if r.get("s_bleu") else float("nan")
            cells.append(f"{sb:.2f} / {r['d_bleu']['score']:.2f}")
        else:
            cells.append("–")
    for s in SETS:
        path = run / f"valid.{s}{'.' + tag if tag else ''}.coverage.json"
        if path.exists():
            c = json.loads(path.read_text())
            cells.append(f"{c['documents_fully_recovered']}/{c['documents']}, {c['empty_sentences']:,} empty")
        else:
            cells.append("–")
    return cells


def main(runs: list[str]) -> None:
    tag = ""
    if runs[:1] == ["--tag"]:
        tag, runs = runs[1], runs[2:]
    head = ["run", "updates", "valid loss (bits)", "valid NLL (bits)", "valid ppl", "cross-attn entropy (bits)",
            *(f"{s} s-BLEU / d-BLEU" for s in SETS), *(f"{s} documents fully recovered" for s in SETS)]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for run in runs:
        print("| " + " | ".join(row(Path(run), tag)) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
