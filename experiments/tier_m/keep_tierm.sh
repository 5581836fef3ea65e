#!/usr/bin/env bash
# Copy what the Tier M tables are made of from run directories under runs/tierm to the same paths
# under experiments/tier_m/results, which git tracks (runs/ is not, and a fresh checkout has none):
# config.yaml, metrics.jsonl, and every score report (*.json but vocab.json) and plot (*.png) of
# the run, its subdirectories included (e.g. length/ted.b64.json). experiments/tier_m/tier_m_table.py reads the
# copies as it reads the runs. Usage (paths relative to the repository root):
#   bash experiments/tier_m/keep_tierm.sh runs/tierm/NAME [runs/tierm/from_X/NAME ...]
set -euo pipefail
cd "$(dirname "$0")/../.."   # the repository root
for run in "$@"; do
  run=${run%/}
  case $run in runs/tierm/*) ;; *) echo "keep_tierm.sh: $run is not under runs/tierm" >&2; exit 2 ;; esac
  dest=experiments/tier_m/results/${run#runs/tierm/}
  mkdir -p "$dest"
  for f in config.yaml metrics.jsonl; do [ ! -f "$run/$f" ] || cp "$run/$f" "$dest/"; done
  (cd "$run" && find . -path ./checkpoints -prune -o \( -name '*.json' -o -name '*.png' \) ! -name vocab.json -type f -print0) |
    while IFS= read -r -d '' f; do mkdir -p "$dest/$(dirname "$f")"; cp "$run/$f" "$dest/$f"; done
done
