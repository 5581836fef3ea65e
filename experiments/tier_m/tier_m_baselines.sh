#!/usr/bin/env bash
# Tier M baselines (docs/methods/baselines.md): Sent2Sent, Doc2Sent, Doc2Doc, MR Doc2Doc on ../shared/data/ende,
# 4,000 updates each (presets *_small), then beam-5 decoding of the validation sets and scoring.
# Options are those of tier_m.sh (--minutes M to fit a time slot, --precision bf16); re-running
# resumes every unfinished run from its last checkpoint. Usage: bash experiments/tier_m/tier_m_baselines.sh [options]
set -euo pipefail
cd "$(dirname "$0")"
exec bash ./tier_m.sh "$@" sent2sent=sent2sent_small doc2sent=doc2sent_small doc2doc=doc2doc_small mr=mr_small
