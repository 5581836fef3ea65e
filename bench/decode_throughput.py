"""Decoding throughput (target tokens/s, beam 5) on real TED documents, and batched = unbatched.

    python bench/decode_throughput.py --model runs/sent2sent [--batch-size 64] [--docs 12]
    python bench/decode_throughput.py --model runs/doc2doc --batch-size 8

Translates ende/valid/ted (IWSLT17 tst2015) with the model's own mode (sentences for Sent2Sent,
<=512-token instances for Doc2Doc), times it, counts generated target subword tokens (with
</s>), then re-translates the first documents one instance at a time and checks the output is
identical. Saves bench/results/decode_<model name>.json.
"""
from __future__ import annotations

import argparse
import sys

import common


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batch-tokens", type=int, default=16000)
    ap.add_argument("--docs", type=int, default=12, help="TED talks to translate")
    ap.add_argument("--check-docs", type=int, default=1, help="talks re-translated unbatched")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="fp32", help="fp32 | bf16 (autocast)")
    a = ap.parse_args()
    common.set_threads(a.threads)
    import docnmt
    from docnmt.readers import read_documents
    tr = docnmt.load(a.model, device="cpu")
    docs = read_documents(str(common.SHARED / "ende/valid/ted.en"), fmt="marker")[: a.docs]
    search = tr.cfg.decode.__class__(**{**vars(tr.cfg.decode), "beam": a.beam, "max_sentences": a.batch_size,
                                        "max_tokens": a.batch_tokens, "precision": a.precision})
    tr.translate(docs[:1], search)                                   # warm-up
    with common.Timer() as t:
        out, report = tr.translate(docs, search)
    tokens = sum(len(tr.vocab.encode(s)) + 1 for d in out for s in d.tgt)
    single = tr.cfg.decode.__class__(**{**vars(search), "max_sentences": 1})
    check, _ = tr.translate(docs[: a.check_docs], single)
    same = all(x.tgt == y.tgt for x, y in zip(out, check))
    r = {"model": a.model, "mode": tr.cfg.data.mode, "precision": a.precision, "beam": a.beam, "batch_size": a.batch_size,
         "documents": len(docs), "sentences": report.sentences, "instances": report.instances,
         "target_tokens": tokens, "seconds": t.seconds, "target_tokens_per_s": tokens / t.seconds,
         "batched_equals_unbatched": same, "threads": a.threads, "coverage": report.summary()}
    print(f"{r['mode']}: {r['instances']} instances, {tokens} target tokens in {t.seconds:.1f} s = "
          f"{r['target_tokens_per_s']:.0f} tok/s (beam {a.beam}, batch {a.batch_size}, {a.precision}); "
          f"batched == unbatched on {a.check_docs} talk(s): {same}")
    common.save(f"decode_{tr.cfg.data.mode}_b{a.batch_size}_{a.precision}", r)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
