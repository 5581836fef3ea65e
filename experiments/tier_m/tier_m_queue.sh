#!/usr/bin/env bash
# Every pending Tier M comparison (docs/benchmarks.md) in one queue, for a machine where they take
# many CPU hours (about 2 hours per 4,000-update system on 2 cores): start it again after any
# interruption and it resumes the unfinished run from its last checkpoint and skips what is done.
# Order: the shared Doc2Doc baseline early (the method comparisons compare with it), then what
# completes a comparison soonest.
#   1. Sent2Sent            experiments/tier_m/tier_m.sh sent2sent=sent2sent_small (baselines; DocFlat's stage I)
#   2. Doc2Doc, + DLS + LAA experiments/tier_m/tier_m_length_bias.sh (the Doc2Doc baseline is shared with 3-6)
#   3. P-Transformer        p_transformer_small and its -cross-attn ablation, then position probing
#                           of Sent2Sent, Doc2Doc and P-Transformer, then the -self-tgt, -self-src
#                           and -rel ablations (docs/methods/ptransformer.md)
#   4. DocFlat              experiments/tier_m/tier_m_docflat.sh (3 × 1,000 fine-tuning updates, two-pass decoding)
#   5. G-Transformer        random init, group sentence model, fine-tuned (docs/methods/gtransformer.md)
#   6. Doc2Sent, MR         the rest of experiments/tier_m/tier_m_baselines.sh
#   7. En-Fr suites         experiments/tier_m/enfr_suites.sh (contrastive accuracy, docs/methods/discourse.md)
# Usage (from the repository root): (nohup setsid bash experiments/tier_m/tier_m_queue.sh > runs/tierm/queue.log 2>&1 &)
set -euo pipefail
cd "$(dirname "$0")/../.."   # the repository root
step() { echo "== $(date '+%F %T') $*"; "$@"; }
probe() {   # position probing of the Tier M models (docs/methods/ptransformer.md), once
  local R=runs/tierm
  [ -f $R/probe/probe.json ] || docnmt probe $R/sent2sent $R/doc2doc $R/pt \
      --train ../shared/data/ende/train/ted.en --valid ../shared/data/ende/valid/news.en \
      --test ../shared/data/ende/valid/ted.en --lengths 64 128 256 512 1024 2048 --out $R/probe
}
step bash experiments/tier_m/tier_m.sh sent2sent=sent2sent_small
step bash experiments/tier_m/tier_m_length_bias.sh
step bash experiments/tier_m/tier_m.sh pt=p_transformer_small pt_nocross=p_transformer_nocross_small
step probe || echo "probing failed: see above (the queue goes on)"
step bash experiments/tier_m/tier_m.sh pt_noselftgt=p_transformer_noselftgt_small pt_noselfsrc=p_transformer_noselfsrc_small \
                 pt_norel=p_transformer_norel_small
step bash experiments/tier_m/tier_m_docflat.sh
step bash experiments/tier_m/tier_m.sh gt=g_transformer_small gt_sent=g_transformer_sent_small gt_ft=g_transformer_finetune_small@gt_sent
step bash experiments/tier_m/tier_m_baselines.sh
step bash experiments/tier_m/enfr_suites.sh
echo "== $(date '+%F %T') queue finished"
