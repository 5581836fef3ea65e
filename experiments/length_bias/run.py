"""The length-bias claim at Tier M-fr (README.md): a G-Transformer decoded with instance budgets of
128 to 4K tokens and as whole documents, with and without sliding decoding; d-BLEU, s-BLEU and the
documents fully recovered per setting, one JSON and one plot.

The documents are ``--sents`` sentences of debate from each of the first ``--docs`` Hansard validation sittings,
after the first ``--skip`` (a sitting opens with its table of contents and lists of names, which a
model copies), so a whole document is far longer than the 512-token training instances. Every decode is kept in the
work directory and skipped when there. Sliding decoding (``--sliding``) slides a window of 0.8 x
the instance budget over each whole document, so it is run at every budget but whole documents.

    python experiments/length_bias/run.py --model experiments/tier_mfr/results/gt_sentpos_lr1_nowd --name gt_sentpos
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENFR = ROOT.parent / "shared" / "data" / "enfr"
BUDGETS = [128, 256, 512, 1024, 2048, 4096, 0]          # 0: the whole document as one instance
DECODE = ["--beam", "5", "--lenpen", "1.0", "--max-len-a", "1.2", "--max-len-b", "10", "-q",
          # as many instances per batch as fit (the same translations as 8 per batch, fewer passes;
          # the 128 and 256 decodes of gt_sentpos_lr1_nowd ran with its config's 8, so their seconds are not comparable)
          "--batch-size", "64", "--max-tokens", "32768"]


def cut(src: Path, dest: Path, docs: int, skip: int, sents: int) -> None:
    """Sentences ``skip`` to ``skip + sents`` of the first ``docs`` documents of a <d>-marker file."""
    out, n, d = [], 0, 0
    for line in src.read_text(encoding="utf-8").splitlines():
        if line == "<d>":
            d += 1
            if d > docs:
                break
            out.append(line)
            n = 0
        else:
            if skip <= n < skip + sents:
                out.append(line)
            n += 1
    dest.write_text("\n".join(out) + "\n", encoding="utf-8")


def document_lengths(src: Path, spm_model: Path) -> list[dict]:
    """Each document's sentences and source length in the model's word pieces, with and without one
    end-of-sentence token per sentence (what an instance holding the whole document counts)."""
    import sentencepiece

    from docnmt.readers import read_sentences
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    out = []
    for doc in read_sentences(src):
        pieces = sum(len(sp.encode(s)) for s in doc)
        out.append({"sentences": len(doc), "word_pieces": pieces, "with_sentence_ends": pieces + len(doc)})
    return out


def key(budget: int, sliding: bool) -> str:
    """A setting's name in the results and the work directory: ``512``, ``512+sliding``, ``whole``."""
    return f"{budget or 'whole'}{'+sliding' if sliding else ''}"


def docnmt(*argv) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "docnmt.cli", *map(str, argv)], cwd=ROOT, env=env, check=True)


def settings() -> list[tuple[int, bool]]:
    """Every budget plain, and every budget but whole documents with sliding decoding, whose window
    is 0.8 x the budget (a whole document has no window to slide)."""
    return [(b, False) for b in BUDGETS] + [(b, True) for b in BUDGETS if b]


def main() -> None:
    from docnmt.journal import journal_path
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True, help="the run's name in the results")
    ap.add_argument("--skip", type=int, default=300, help="sentences skipped at the start of each sitting")
    ap.add_argument("--sents", type=int, default=300, help="sentences kept from each sitting")
    ap.add_argument("--docs", type=int, default=3, help="sittings")
    ap.add_argument("--work", default=str(ROOT / "runs" / "length_bias"))
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--keys", default="", help="only these settings, comma-separated (e.g. 4096,whole+sliding): "
                    "two processes can share one model's decodes")
    args = ap.parse_args()
    work, results = Path(args.work), Path(args.results)
    work.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    src, ref = (work / f"valid{args.docs}x{args.skip}+{args.sents}.{lang}" for lang in ("en", "fr"))
    for lang, path in (("en", src), ("fr", ref)):
        if not path.exists():
            cut(ENFR / "valid" / f"hansard.{lang}", path, args.docs, args.skip, args.sents)
    lengths = results / "documents.json"
    spm_model = Path(args.model) / "spm.model"
    if not lengths.exists() and spm_model.exists():
        docs = document_lengths(src, spm_model)
        lengths.write_text(json.dumps({"source": src.name, "documents": docs}, indent=1) + "\n")
    out_json = results / f"{args.name}.json"
    rows = json.loads(out_json.read_text()) if out_json.exists() else {}
    for budget, sliding in settings():
        name = key(budget, sliding)
        if name in rows or (args.keys and name not in args.keys.split(",")):
            continue
        hyp, report, scores = (work / f"{args.name}.{name}.{ext}" for ext in ("fr", "coverage.json", "bleu.json"))
        timing = work / f"{args.name}.{name}.seconds"
        if not (hyp.exists() and report.exists() and timing.exists()):      # a finished decode is kept
            # a stopped decode's journal would let translate go on and the time cover only the rest
            journal_path(hyp).unlink(missing_ok=True)
            start = time.time()
            docnmt("translate", args.model, "-i", src, "-o", hyp, "--report", report, "--force",
                   "--max-instance-tokens", budget, "--sliding" if sliding else "--no-sliding", *DECODE)
            timing.write_text(f"{time.time() - start:.1f}\n")
        seconds = float(timing.read_text())
        scores.unlink(missing_ok=True)
        docnmt("evaluate", "--hyp", hyp, "--ref", ref, "--json", scores)
        rows = json.loads(out_json.read_text()) if out_json.exists() else {}     # another process's rows kept
        rows[name] = {"budget": budget, "sliding": sliding, "seconds": seconds,
                     "scores": json.loads(scores.read_text()), "coverage": json.loads(report.read_text())}
        out_json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"{args.name} {name}: {seconds} s", flush=True)


if __name__ == "__main__":
    main()
