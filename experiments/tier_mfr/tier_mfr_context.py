"""How much a Tier M-fr model uses its context on the validation sittings: CXMI (docnmt score --cxmi,
docs/methods/discourse.md#context-usage-cxmi), the mean over reference tokens of
log2 p(y | x, context) - log2 p(y | x alone), with the share of sentences the context made more
likely and the CXMI by sentence position; and, teacher-forced on the same data (docnmt entropy),
each attention kind's entropy and its weight on other sentences than the query's own. Writes
RUN_DIR/valid.cxmi.json (kept by experiments/tier_mfr/tier_mfr_keep.py, columns of
experiments/tier_mfr/tier_mfr_table.py).

    python experiments/tier_mfr/tier_mfr_context.py RUN_DIR --src ../shared/data/enfr/valid/hansard.en \
        --ref ../shared/data/enfr/valid/hansard.fr
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from docnmt.readers import read_documents
from docnmt.scoring import attention_entropy, context_usage
from docnmt.translate import Translator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="model directory")
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--out", help="default RUN/valid.cxmi.json")
    args = ap.parse_args()
    out = Path(args.out or Path(args.run) / "valid.cxmi.json")
    start = time.time()
    translator = Translator.load(args.run, None, "cpu")
    docs = read_documents(args.src, args.ref)
    usage = context_usage(translator, docs)
    usage.pop("documents")
    attention = attention_entropy(translator, docs)
    usage.update(entropy_bits=attention["entropy_bits"], context_share=attention["context_share"],
                 self_distance_tokens=attention["self_distance_tokens"])
    usage.update(seconds=round(time.time() - start, 1), src=args.src, ref=args.ref)
    out.write_text(json.dumps(usage, indent=1) + "\n")
    print(f"{args.run}: CXMI {usage['cxmi_bits_per_token']:+.4f} bits per word piece over {usage['tokens']} pieces, "
          f"{100 * usage['sentences_more_likely_with_context']:.1f}% of {usage['sentences']} sentences more likely "
          f"with context; attention on other sentences {attention['context_share']} ({usage['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
