#!/usr/bin/env bash
# The GPU run in one command: install docnmt into the machine's Python (its torch, transformers,
# sacrebleu ... are already there), then every stage of bench/gpu/run.py. See bench/gpu/README.md.
#   bash bench/gpu/run.sh OUTDIR [--dry-run] [--stages ...] [--scale X]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bench/gpu/run.sh OUTDIR [run.py options]}
shift
mkdir -p "$OUT"
# the stages run scripts from bench/gpu/, where the repository root is not on sys.path
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! (cd / && python3 -c "import docnmt") 2>/dev/null; then
  pip install -q --no-deps --no-build-isolation -e . >> "$OUT/log.txt" 2>&1 || echo "docnmt install failed" | tee -a "$OUT/log.txt"
fi
python3 bench/gpu/run.py "$OUT" "$@"
