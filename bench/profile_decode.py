"""Where the time of beam-search decoding goes: torch profiler over translating TED talks.

    python bench/profile_decode.py --model runs/tierm/sent2sent [--docs 2] [--batch-size 64]

Prints the top operators by self CPU time and the decoding throughput under the profiler (which
adds overhead: use decode_throughput.py for the figure to report).
"""
from __future__ import annotations

import argparse

import common


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--docs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=25, help="operators to list")
    a = ap.parse_args()
    common.set_threads(a.threads)
    from torch.profiler import ProfilerActivity, profile

    import docnmt
    from docnmt.readers import read_documents
    tr = docnmt.load(a.model, device="cpu")
    docs = read_documents(str(common.SHARED / "ende/valid/ted.en"), fmt="marker")[: a.docs]
    search = tr.cfg.decode.__class__(**{**vars(tr.cfg.decode), "beam": a.beam, "max_sentences": a.batch_size})
    tr.translate(docs[:1], search)                                   # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof, common.Timer() as t:
        out, _ = tr.translate(docs, search)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))
    tokens = sum(len(tr.vocab.encode(s)) + 1 for d in out for s in d.tgt)
    print(f"{tokens} target tokens in {t.seconds:.1f} s under the profiler = {tokens / t.seconds:.0f} tok/s")


if __name__ == "__main__":
    main()
