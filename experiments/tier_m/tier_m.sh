#!/usr/bin/env bash
# Tier M runs (docs/benchmarks.md) of any presets: train (resumable), decode the validation sets with
# beam 5, score. Run from the repository root. Usage:
#   bash experiments/tier_m/tier_m.sh [--minutes M] [--max-update N] [--train-only] [--precision fp32|bf16] NAME=PRESET[@INIT_NAME] ...
# NAME is the run directory under runs/tierm; @INIT_NAME starts it from that run's weights
# (fine-tuning, e.g. g_transformer_finetune_small from g_transformer_sent_small).
# --precision bf16 trains under bf16 autocast (1.4-1.5x faster on a CPU with AVX512-BF16, the
# default on GPU); every system of one comparison must use the same precision.
# --max-update N stops every run at update N instead of the preset's budget (a comparison that
# fits one sitting; resuming later without it continues the same runs to the full budget); the
# decodes are then named valid.SET.uN.de so they never pass for the full-budget ones.
# --train-only trains and skips decoding and scoring.
# Example (G-Transformer, docs/methods/gtransformer.md):
#   bash experiments/tier_m/tier_m.sh gt=g_transformer_small gt_sent=g_transformer_sent_small \
#                   gt_ft=g_transformer_finetune_small@gt_sent
# Re-running resumes every unfinished run from its last checkpoint (one every 200 updates and every epoch).
# Each decoded run's config.yaml, metrics.jsonl, scores and plots are copied to experiments/tier_m/results/NAME
# (experiments/tier_m/keep_tierm.sh), where experiments/tier_m/tier_m_table.py reads them as it reads runs/tierm/NAME.
set -euo pipefail
cd "$(dirname "$0")/../.."   # the repository root
MINUTES=0
PRECISION=""
MAXUPD=""
TAG=""
DECODE=1
while [[ "${1:-}" == --* ]]; do
  case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --precision) PRECISION="--precision $2"; shift 2 ;;
    --max-update) MAXUPD="--max-update $2"; TAG=".u$2"; shift 2 ;;
    --train-only) DECODE=0; shift ;;
    *) echo "tier_m.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
DATA=bench/.cache/tier_m
python bench/common.py tier_m
for spec in "$@"; do
  name=${spec%%=*}; preset=${spec#*=}; init=""
  if [[ $preset == *@* ]]; then init="--init-from runs/tierm/${preset#*@}"; preset=${preset%@*}; fi
  # shellcheck disable=SC2086
  docnmt train "$DATA" --arch "$preset" --save-dir "runs/tierm/$name" --max-minutes "$MINUTES" --save-interval-updates 200 \
    --no-progress $PRECISION $MAXUPD $init
done
[ $DECODE = 1 ] || exit 0
for spec in "$@"; do
  name=${spec%%=*}
  for set in ted news; do
    out=runs/tierm/$name/valid.$set$TAG.de
    [ -f "$out" ] || docnmt translate "runs/tierm/$name" -i "../shared/data/ende/valid/$set.en" -o "$out" -q \
                       --report "${out%.de}.coverage.json"
    docnmt evaluate --hyp "$out" --ref "../shared/data/ende/valid/$set.de" --json "${out%.de}.json"
  done
  bash experiments/tier_m/keep_tierm.sh "runs/tierm/$name"   # runs/ is not tracked, and a fresh checkout has none
done
