"""Decoding speed of one model on a CPU: docnmt fp32 and int8 against CTranslate2 fp32 and int8
(``--engine ctranslate2``, docs/performance.md#ctranslate2), the same documents, beam, batches and
threads; CTranslate2 alone (``ctranslate2-alone``: one ``translate_batch`` call over every sentence, its
own batching), the ceiling of what the engine can give; and whether the greedy outputs of docnmt and
CTranslate2 (fp32) are identical.

    python bench/decode_speed.py --model DIR --src FILE [--ref FILE] [--sentences 1000] [--beam 5]
                                 [--batch-size 64] [--threads 2] [--repeats 1] [--name NAME]

FILE is any input format ``docnmt translate`` reads; ``--ref``, its reference translations in the same
format, adds each run's cased s-BLEU (sacrebleu) beside its speed. Every run also gives target word
pieces generated per second. Writes
bench/results/decode_speed/NAME.json (NAME: the model directory's name, beam and threads) and prints
a table. Time only on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import common

RUNS = [("docnmt", "fp32"), ("docnmt", "int8"), ("ctranslate2", "fp32"), ("ctranslate2", "int8")]


def first_sentences(docs, n: int):
    """The documents holding the first ``n`` sentences (the last one cut)."""
    out, left = [], n
    for d in docs:
        if left <= 0:
            break
        d.src = d.src[:left]
        out.append(d)
        left -= len(d.src)
    return out


def timed(tr, docs, search, repeats: int) -> tuple[float, list[list[str]]]:
    """The best of ``repeats`` runs (seconds) and the translations, after a warm-up on the first
    document (which also converts the model for CTranslate2 and quantizes it for int8)."""
    tr.translate(docs[:1], search)
    best, out = float("inf"), None
    for _ in range(repeats):
        with common.Timer() as t:
            out, _ = tr.translate(docs, search)
        best = min(best, t.seconds)
    return best, [d.tgt for d in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--ref", help="reference translations of --src (same format): adds s-BLEU per run")
    ap.add_argument("--name", help="result name (default: MODEL's name, beam and threads)")
    a = ap.parse_args()
    common.set_threads(a.threads)
    import docnmt
    from docnmt.readers import read_inputs
    tr = docnmt.load(a.model, device="cpu")
    docs = first_sentences(read_inputs([a.src], "auto"), a.sentences)
    n_sents = sum(len(d.src) for d in docs)
    refs = [s for d in first_sentences(read_inputs([a.ref], "auto"), a.sentences) for s in d.src] if a.ref else None
    base = {**vars(tr.cfg.decode), "max_sentences": a.batch_size}
    results, outputs = [], {}
    for engine, precision in RUNS:
        for beam in sorted({1, a.beam}):
            search = tr.cfg.decode.__class__(**{**base, "beam": beam, "engine": engine, "precision": precision})
            seconds, out = timed(tr, docs, search, a.repeats)
            outputs[engine, precision, beam] = out
            hyps = [s for d in out for s in d]
            pieces = sum(len(tr.vocab.encode(s, "tgt")) + 1 for s in hyps)      # word pieces and </s>
            row = {"engine": engine, "precision": precision, "beam": beam, "seconds": round(seconds, 3),
                   "sentences_per_s": round(n_sents / seconds, 1), "target_pieces_per_s": round(pieces / seconds)}
            if refs is not None:
                import sacrebleu
                row["bleu"] = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
    for precision in ("fp32", "int8"):           # CTranslate2 alone: its own batching, one call (the ceiling)
        for beam in sorted({1, a.beam}):
            search = tr.cfg.decode.__class__(**{**base, "beam": beam, "engine": "ctranslate2", "precision": precision})
            seconds, hyps = raw_ctranslate2(tr, docs, search, a.repeats)
            row = {"engine": "ctranslate2-alone", "precision": precision, "beam": beam, "seconds": round(seconds, 3),
                   "sentences_per_s": round(n_sents / seconds, 1),
                   "target_pieces_per_s": round(sum(len(tr.vocab.encode(s, "tgt")) + 1 for s in hyps) / seconds)}
            if refs is not None:
                import sacrebleu
                row["bleu"] = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
    ref = {r["beam"]: r["seconds"] for r in results if (r["engine"], r["precision"]) == ("docnmt", "fp32")}
    for r in results:
        r["speedup_vs_docnmt_fp32"] = round(ref[r["beam"]] / r["seconds"], 2)
    same = {f"{e}_{p}_beam{b}": agreement(outputs["docnmt", "fp32", b], out)
            for (e, p, b), out in outputs.items() if (e, p) != ("docnmt", "fp32")}
    report = {"model": str(Path(a.model).resolve()), "src": str(Path(a.src).resolve()), "sentences": n_sents,
              "documents": len(docs), "beam": a.beam, "batch_size": a.batch_size, "threads": a.threads,
              "mode": tr.cfg.data.mode, "runs": results, "same_output_as_docnmt_fp32": same,
              "greedy_identical_ctranslate2_fp32": same[f"ctranslate2_fp32_beam{1}"] == 1.0}
    name = a.name or f"{Path(a.model).resolve().name}_b{a.beam}_t{a.threads}"
    out = common.HERE / "results" / "decode_speed" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"{'engine':12} {'precision':9} {'beam':>4} {'seconds':>8} {'sent/s':>8} {'pieces/s':>8} {'speedup':>7}"
          f" {'BLEU':>6}")
    for r in results:
        print(f"{r['engine']:12} {r['precision']:9} {r['beam']:>4} {r['seconds']:>8.2f} {r['sentences_per_s']:>8.1f} "
              f"{r['target_pieces_per_s']:>8} {r['speedup_vs_docnmt_fp32']:>7.2f} {r.get('bleu', ''):>6}")
    print(f"greedy outputs identical (docnmt fp32, CTranslate2 fp32): {report['greedy_identical_ctranslate2_fp32']}")
    print(f"saved {out}", file=sys.stderr)


def raw_ctranslate2(tr, docs, search, repeats: int) -> tuple[float, list[str]]:
    """CTranslate2's ``translate_batch`` on every sentence in one call (its own length-sorted
    batches of ``max_sentences``, one output limit for all: 1.2 x the longest source + 10), with
    docnmt's converted model and threads; the best of ``repeats`` and the translations. What
    CTranslate2 does alone, without docnmt's batching and per-sentence limits around it."""
    from docnmt.engines.ctranslate2 import engine_for
    eng = engine_for(tr, search)
    ids = [tr.vocab.encode(s) for d in docs for s in d.src]
    rows = [[eng.tokens[i] for i in x] + [eng.tokens[tr.vocab.eos]] for x in ids]
    limit = int(search.max_len_a * max(len(r) for r in rows) + search.max_len_b)
    best, out = float("inf"), None
    for _ in range(repeats):
        with common.Timer() as t:
            res = eng.ct.translate_batch(rows, beam_size=search.beam, max_batch_size=search.max_sentences,
                                         length_penalty=search.lenpen, max_decoding_length=limit,
                                         end_token=eng.tokens[tr.vocab.eos])
        best, out = min(best, t.seconds), res
    return best, [tr.vocab.decode([eng.ids[t] for t in r.hypotheses[0]], "tgt") for r in out]


def agreement(a: list[list[str]], b: list[list[str]]) -> float:
    """The share of sentences translated identically."""
    pairs = [(x, y) for da, db in zip(a, b) for x, y in zip(da, db)]
    return round(sum(x == y for x, y in pairs) / max(len(pairs), 1), 4)


if __name__ == "__main__":
    main()
