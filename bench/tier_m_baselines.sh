#!/usr/bin/env bash
# Tier M baselines (PROTOCOL.md): Sent2Sent, Doc2Sent, Doc2Doc, MR Doc2Doc on ../shared/data/ende,
# 4,000 updates each (presets *_small), then beam-5 decoding of the validation sets and scoring.
# Each run resumes from its last checkpoint when re-run, so the script can be interrupted and
# started again (e.g. with --max-minutes to fit a time slot: pass it as the first argument).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-0}
DATA=bench/.cache/tier_m
python -c "import sys; sys.path.insert(0, 'bench'); import common; common.tier_m_data()"
for sys in sent2sent doc2sent doc2doc mr; do
  docnmt train "$DATA" --arch ${sys}_small --save-dir runs/tierm/$sys --max-minutes "$MINUTES" --no-progress
done
for sys in sent2sent doc2sent doc2doc mr; do
  for set in ted news; do
    out=runs/tierm/$sys/valid.$set.de
    [ -f "$out" ] || docnmt translate runs/tierm/$sys -i ../shared/data/ende/valid/$set.en -o "$out" -q
    docnmt evaluate --hyp "$out" --ref ../shared/data/ende/valid/$set.de --json runs/tierm/$sys/valid.$set.json
  done
done
