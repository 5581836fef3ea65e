#!/usr/bin/env bash
# Tier M runs (PROTOCOL.md) of any presets: train (resumable), decode the validation sets with
# beam 5, score. Usage:
#   bench/tier_m.sh [--minutes M] NAME=PRESET[@INIT_NAME] ...
# NAME is the run directory under runs/tierm; @INIT_NAME starts it from that run's weights
# (fine-tuning, e.g. g_transformer_finetune_small from g_transformer_sent_small).
# Example (G-Transformer, issue 3):
#   bench/tier_m.sh gt=g_transformer_small gt_sent=g_transformer_sent_small \
#                   gt_ft=g_transformer_finetune_small@gt_sent
# Re-running resumes every unfinished run from its last checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=0
if [ "${1:-}" = "--minutes" ]; then MINUTES=$2; shift 2; fi
DATA=bench/.cache/tier_m
python -c "import sys; sys.path.insert(0, 'bench'); import common; common.tier_m_data()"
for spec in "$@"; do
  name=${spec%%=*}; preset=${spec#*=}; init=""
  if [[ $preset == *@* ]]; then init="--init-from runs/tierm/${preset#*@}"; preset=${preset%@*}; fi
  docnmt train "$DATA" --arch "$preset" --save-dir "runs/tierm/$name" --max-minutes "$MINUTES" --no-progress $init
done
for spec in "$@"; do
  name=${spec%%=*}
  for set in ted news; do
    out=runs/tierm/$name/valid.$set.de
    [ -f "$out" ] || docnmt translate "runs/tierm/$name" -i "../shared/data/ende/valid/$set.en" -o "$out" -q
    docnmt evaluate --hyp "$out" --ref "../shared/data/ende/valid/$set.de" --json "runs/tierm/$name/valid.$set.json"
  done
done
