#!/usr/bin/env bash
# The GPU run in one command: docnmt from this checkout on the machine's Python (its torch,
# transformers, sacrebleu ... are already there), then every stage of bench/gpu/run.py.
# See bench/gpu/README.md.
#   bash bench/gpu/run.sh OUTDIR [--dry-run] [--stages ...] [--scale X]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bench/gpu/run.sh OUTDIR [run.py options]}
shift
mkdir -p "$OUT"
# no install: the checkout on PYTHONPATH serves every stage (they run scripts from bench/gpu/ and
# `python -m docnmt.cli`, never the `docnmt` console script)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 bench/gpu/run.py "$OUT" "$@"
