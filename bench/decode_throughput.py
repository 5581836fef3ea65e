"""Decoding throughput (target tokens/s, beam 5) on real TED documents, and batched = unbatched.

    python bench/decode_throughput.py --model runs/sent2sent [--batch-size 64] [--docs 12]
    python bench/decode_throughput.py --model runs/doc2doc --batch-size 8
    python bench/decode_throughput.py --model runs/sent2sent runs/ctx --lenpen 1.0   # cost vs the first
    python bench/decode_throughput.py --model runs/pseudodoc runs/docflat --batch-size 16   # two passes each
    python bench/decode_throughput.py --model runs/doc2doc runs/pt --batch-size 8 --tag u4000   # ..._u4000.json

Translates ende/valid/ted (IWSLT17 tst2015) with the model's own mode (sentences for Sent2Sent,
<=512-token instances for Doc2Doc), times it, counts generated target subword tokens (with
</s>), then re-translates the first documents one instance at a time and checks the output is
identical (not for DocFlat, whose decoding batch is the context). Saves bench/results/decode_<model name>.json.
"""
from __future__ import annotations

import argparse
import sys

import common


def measure(model: str, a) -> dict:
    import docnmt
    from docnmt.readers import read_documents
    tr = docnmt.load(model, device="cpu")
    docs = read_documents(str(common.SHARED / "ende/valid/ted.en"), fmt="marker")[: a.docs]
    search = tr.cfg.decode.__class__(**{**vars(tr.cfg.decode), "beam": a.beam, "max_sentences": a.batch_size,
                                        "max_tokens": a.batch_tokens, "precision": a.precision})
    if a.lenpen is not None:
        search.lenpen, search.lenpen_style = a.lenpen, "fairseq"
    tr.translate(docs[:1], search)                                   # warm-up
    with common.Timer() as t:
        out, report = tr.translate(docs, search)
    tokens = sum(len(tr.vocab.encode(s)) + 1 for d in out for s in d.tgt)
    same = None                     # a DocFlat batch is the context (FBA): batching changes it by design
    if tr.cfg.model.method != "docflat":
        single = tr.cfg.decode.__class__(**{**vars(search), "max_sentences": 1})
        check, _ = tr.translate(docs[: a.check_docs], single)
        same = all(x.tgt == y.tgt for x, y in zip(out, check))
    r = {"model": model, "method": tr.cfg.model.method, "mode": tr.cfg.data.mode, "precision": a.precision,
         "beam": a.beam, "lenpen": search.lenpen, "lenpen_style": search.lenpen_style, "batch_size": a.batch_size,
         "documents": len(docs), "sentences": report.sentences, "instances": report.instances,
         "target_tokens": tokens, "seconds": t.seconds, "target_tokens_per_s": tokens / t.seconds,
         "batched_equals_unbatched": same, "threads": a.threads, "coverage": report.summary()}
    print(f"{model}: {r['method']}/{r['mode']}, {r['instances']} instances, {tokens} target tokens in "
          f"{t.seconds:.1f} s = {r['target_tokens_per_s']:.0f} tok/s (beam {a.beam}, batch {a.batch_size}, "
          f"{a.precision}); batched == unbatched on {a.check_docs} talk(s): {'n/a' if same is None else same}",
          flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, nargs="+",
                    help="model directories; with several, times are also given relative to the first")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--lenpen", type=float, help="override the models' length penalty (fairseq style)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batch-tokens", type=int, default=16000)
    ap.add_argument("--docs", type=int, default=12, help="TED talks to translate")
    ap.add_argument("--check-docs", type=int, default=1, help="talks re-translated unbatched")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="fp32", help="fp32 | bf16 (autocast)")
    ap.add_argument("--tag", default="", help="appended to the results file name (keeps an earlier "
                    "measurement of the same methods, e.g. --tag u4000)")
    a = ap.parse_args()
    common.set_threads(a.threads)
    results = [measure(m, a) for m in a.model]
    ref = results[0]
    for r in results[1:]:
        r["seconds_vs_first"] = r["seconds"] / ref["seconds"]
        r["tokens_per_s_vs_first"] = r["target_tokens_per_s"] / ref["target_tokens_per_s"]
        print(f"{r['model']} vs {ref['model']}: {r['seconds_vs_first']:.2f}x the time, "
              f"{r['tokens_per_s_vs_first']:.2f}x the tokens/s")
    name = "_".join(f"{r['method']}-{r['mode']}" if r["method"] != "transformer" else r["mode"] for r in results)
    tag = f"_{a.tag}" if a.tag else ""
    common.save(f"decode_{name}_b{a.batch_size}_{a.precision}{tag}", results if len(results) > 1 else ref)
    return 0 if all(r["batched_equals_unbatched"] is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
