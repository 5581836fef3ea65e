"""Which of the length-bias differences are more than noise (README.md#results): the paired
bootstrap (1,000 resamples of the 900 sentence pairs, docnmt.metrics.paired_bootstrap) of

* each budget against the training budget (512), per model and decoding;
* sliding against plain decoding at each budget, per model;
* G-Transformer + DLS + LAA against the G-Transformer at each setting.

Only sentence-level scores are tested: with three documents a document-level resample is
meaningless. Reads the decodes ``run.py`` kept in the work directory; writes ``results/paired.json``.

    python experiments/length_bias/paired.py
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from run import HERE, ROOT, key, settings

from docnmt.metrics import paired_bootstrap
from docnmt.readers import read_sentences

MODELS = ("gt_sentpos_lr1_nowd", "gt_dls_laa_lr1_nowd")     # without DLS + LAA, with


def pairs() -> list[tuple[str, str, str]]:
    """(what, A, B): B is tested against A; a name is ``<model>.<setting>``."""
    out = []
    for m in MODELS:
        for b, sliding in settings():
            if b != 512:
                out.append(("budget", f"{m}.{key(512, sliding)}", f"{m}.{key(b, sliding)}"))
            if sliding:
                out.append(("sliding", f"{m}.{key(b, False)}", f"{m}.{key(b, True)}"))
    out += [("dls_laa", f"{MODELS[0]}.{key(b, s)}", f"{MODELS[1]}.{key(b, s)}") for b, s in settings()]
    return out


def slim(test: dict) -> dict:
    """A bootstrap result without what every row shares (the signature and sample count are in the header)."""
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in test.items()
            if k in ("a", "b", "delta", "p_value")} | {"ci95": [round(x, 2) for x in test["ci95_b_minus_a"]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "length_bias"))
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--samples", type=int, default=1000)
    args = ap.parse_args()
    work = Path(args.work)
    ref = read_sentences(next(work.glob("valid*.fr")))
    hyp = lambda name: read_sentences(work / f"{name}.fr", hypothesis=True)  # noqa: E731
    rows, signatures = [], {}
    for what, a, b in pairs():
        ha, hb = hyp(a), hyp(b)
        bleu = paired_bootstrap(ha, hb, ref, level="s", n_samples=args.samples)
        chrf = paired_bootstrap(ha, hb, ref, level="s", metric="chrf", n_samples=args.samples)
        rows.append({"what": what, "a": a, "b": b, "s_bleu": slim(bleu), "s_chrf": slim(chrf)})
        signatures = {"bleu": bleu["signature"], "chrf": chrf["signature"]}
        print(f"{what:8s} {b:38s} vs {a:38s} s-BLEU {bleu['delta']:+.2f} (p={bleu['p_value']:.3f})  "
              f"s-chrF {chrf['delta']:+.2f} (p={chrf['p_value']:.3f})", flush=True)
    out = Path(args.results) / "paired.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    head = {"test": "paired bootstrap over sentence pairs (B - A)", "samples": args.samples,
            "sentences": sum(len(doc) for doc in ref), "signatures": signatures}
    out.write_text("{\"about\": " + json.dumps(head) + ",\n \"rows\": [\n"
                   + ",\n".join("  " + json.dumps(r) for r in rows) + "\n]}\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
