#!/usr/bin/env bash
# Tier M comparison for the context-encoder Transformer (docs/methods/context_transformer.md; Zhang
# et al. 2018, Table 7 in miniature), all on ../shared/data/ende Tier M data (docs/benchmarks.md), fp32:
#   sent2sent_S     step 1: the Sent2Sent model, S updates (runs/tierm/sent2sent_800 by default;
#                   runs/tierm/sent2sent is the 4,000-update Tier M model of tier_m_baselines.sh)
#   ctx_step2       step 2 on top of it: every sentence parameter frozen, T updates of the new ones
#   ctx_scratch     the whole context model trained on the document data alone, S+T updates
#   sent2sent_more  the sentence model continued to S+T updates (the same total budget as step 1+2)
# Every system is decoded the same way (beam 5, length penalty 1.0, fairseq style) and scored on
# valid ted and news. Budget (environment): S=800 T=200 updates, warm-up WARM=400 (step 2: WARM2=100).
# Re-running resumes unfinished runs and skips finished decodes. Each scored run's config, metrics
# and scores are kept in experiments/tier_m/results (experiments/tier_m/keep_tierm.sh).
# Usage (from the repository root): bash experiments/tier_m/tier_m_context.sh
set -euo pipefail
cd "$(dirname "$0")/../.."   # the repository root
S=${S:-800}; T=${T:-200}; WARM=${WARM:-400}; WARM2=${WARM2:-100}
DATA=bench/.cache/tier_m
R=runs/tierm
S1=sent2sent_$S
python bench/common.py tier_m
train() { docnmt train "$DATA" --no-progress "$@"; }
score() {   # decode valid ted and news the same way for every system, and score them
  for set in ted news; do
    out=$R/$1/valid.$set.de
    [ -f "$out" ] || docnmt translate $R/$1 -i ../shared/data/ende/valid/$set.en -o "$out" -q \
                       --report "${out%.de}.coverage.json" --beam 5 --lenpen 1.0 --lenpen-style fairseq
    docnmt evaluate --hyp "$out" --ref ../shared/data/ende/valid/$set.de --json $R/$1/valid.$set.json >/dev/null
  done
  bash experiments/tier_m/keep_tierm.sh $R/$1
}
train --arch sent2sent_small --save-dir $R/$S1 --max-update "$S" --warmup-updates "$WARM"
train --arch context_transformer_small --init-from $R/$S1 --save-dir $R/ctx_step2 \
      --max-update "$T" --warmup-updates "$WARM2"
train --arch context_transformer_small --no-freeze-pretrained --save-dir $R/ctx_scratch \
      --max-update $((S + T)) --warmup-updates "$WARM"
for name in $S1 ctx_step2 ctx_scratch; do score $name; done
python experiments/tier_m/tier_m_table.py $R/$S1 $R/ctx_step2 $R/ctx_scratch
if [ ! -d $R/sent2sent_more ]; then   # resumes from step 1's last checkpoint; step 1's decodes are not its own
  cp -r $R/$S1 $R/sent2sent_more && rm -f $R/sent2sent_more/valid.*
fi
train --arch sent2sent_small --save-dir $R/sent2sent_more --max-update $((S + T)) --warmup-updates "$WARM"
score sent2sent_more
python experiments/tier_m/tier_m_table.py $R/$S1 $R/ctx_step2 $R/ctx_scratch $R/sent2sent_more
