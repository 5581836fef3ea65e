"""Decoding time of a document model against a sentence model: whole ``docnmt translate``
processes (start-up, encoding, search, writing) of both on the same input, run back to back
``--repeats`` times, interleaved (document, sentence, document, …), so that a machine whose load
changes during the run slows both alike; the figure is the ratio document/sentence.

    python bench/doc_decode_speed.py --doc DIR --sent DIR --src FILE [--skip 300] [--sentences 400]
                                     [--repeats 3] [--threads 1] [--doc-flags "--batch-size 64"]
                                     [--code DIR] [--name NAME] [--note TEXT]

FILE is a ``<d>``-marker file; the ``--sentences`` lines after its first ``--skip`` lines (of its
first document) are translated as one document. Both models decode with the Tier M-fr protocol
(``--beam 5 --lenpen 1.0 --max-len-a 1.2 --max-len-b 10``) plus ``--doc-flags`` / ``--sent-flags``.
Writes bench/results/doc_decode_speed/NAME.json: every run's seconds, the median and best of
each model, the ratio of medians and of bests, and whether the outputs of all runs of a model
were identical. ``--code`` runs another copy of the package (a directory holding ``docnmt/``,
such as an older commit's, for a before/after figure). ``--note`` records the conditions (on a
busy machine the ratio is the figure to read, not the seconds).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOCOL = ["--beam", "5", "--lenpen", "1.0", "--max-len-a", "1.2", "--max-len-b", "10"]


def one_document(src: str, skip: int, n: int, dest: Path) -> int:
    """Write lines ``skip+1 … skip+n`` of the first document of marker file ``src`` to ``dest``
    as one document; returns how many sentences it holds."""
    lines = []
    with open(src, encoding="utf-8") as f:
        for i, line in enumerate(f):
            line = line.rstrip("\n")
            if line == "<d>":
                if lines or i > 0:
                    break
                continue
            lines.append(line)
    picked = lines[skip: skip + n]
    dest.write_text("<d>\n" + "\n".join(picked) + "\n", encoding="utf-8")
    return len(picked)


def translate(model: str, src: Path, out: Path, flags: list[str], threads: int, code: Path) -> float:
    """Seconds of one whole ``docnmt translate`` process (the package under ``code``)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(code)}
    cmd = [sys.executable, "-m", "docnmt.cli", "translate", model, "--input", str(src), "--output", str(out),
           "--force", "-q", *PROTOCOL, *flags]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True)
    return time.perf_counter() - t0


def summary(times: list[float]) -> dict:
    return {"seconds": [round(t, 2) for t in times], "median": round(statistics.median(times), 2),
            "best": round(min(times), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--doc", required=True, help="document model directory")
    ap.add_argument("--sent", required=True, help="sentence model directory")
    ap.add_argument("--src", required=True, help="<d>-marker source file")
    ap.add_argument("--skip", type=int, default=300)
    ap.add_argument("--sentences", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--doc-flags", default="", help="extra translate flags of the document model")
    ap.add_argument("--sent-flags", default="", help="extra translate flags of the sentence model")
    ap.add_argument("--code", default=str(HERE.parent), help="directory holding the docnmt package to run")
    ap.add_argument("--keep", default="", help="copy the last translations here (doc.out, sent.out)")
    ap.add_argument("--name", default="")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    name = args.name or f"{Path(args.doc).name}_vs_{Path(args.sent).name}_{args.sentences}"
    runs = {"doc": (args.doc, shlex.split(args.doc_flags)), "sent": (args.sent, shlex.split(args.sent_flags))}
    times: dict[str, list[float]] = {k: [] for k in runs}
    outputs: dict[str, set[str]] = {k: set() for k in runs}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "input.en"
        n = one_document(args.src, args.skip, args.sentences, src)
        for r in range(args.repeats):
            for key, (model, flags) in runs.items():
                out = Path(tmp) / f"{key}.{r}.out"
                times[key].append(translate(model, src, out, flags, args.threads, Path(args.code)))
                outputs[key].add(out.read_text(encoding="utf-8"))
                print(f"run {r + 1}/{args.repeats} {key}: {times[key][-1]:.2f} s", file=sys.stderr)
                if args.keep:
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    shutil.copy(out, Path(args.keep) / f"{key}.out")
    doc, sent = summary(times["doc"]), summary(times["sent"])
    result = {"doc_model": args.doc, "sent_model": args.sent, "src": Path(args.src).name, "skip": args.skip,
              "sentences": n, "protocol": " ".join(PROTOCOL), "doc_flags": args.doc_flags,
              "sent_flags": args.sent_flags, "threads": args.threads, "repeats": args.repeats,
              "code": "this checkout" if Path(args.code) == HERE.parent else args.code,
              "doc": doc, "sent": sent, "ratio_of_medians": round(doc["median"] / sent["median"], 2),
              "ratio_of_bests": round(doc["best"] / sent["best"], 2),
              "outputs_stable": {k: len(v) == 1 for k, v in outputs.items()},
              "date": time.strftime("%Y-%m-%d"), "note": args.note}
    dest = HERE / "results" / "doc_decode_speed"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{name}: document {doc['median']} s, sentence {sent['median']} s (medians of {args.repeats}): "
          f"{result['ratio_of_medians']}x (bests: {result['ratio_of_bests']}x)")


if __name__ == "__main__":
    main()
