#!/usr/bin/env bash
# Tier M comparison for the length-bias methods (docs/methods/length_bias.md; the paper's Figures 1
# and 5 in miniature), on ../shared/data/ende Tier M data (docs/benchmarks.md), fp32:
#   doc2doc          the Doc2Doc baseline (doc2doc_small, ≤512-token instances), 4,000 updates
#   doc2doc_dls_laa  the same with dynamic length sampling and length-aware attention
#                    (doc2doc_dls_laa_small), 4,000 updates
# Both are trained and scored on valid ted + news by experiments/tier_m/tier_m.sh (resumable). Then valid ted
# (12 whole talks) is decoded by each with instances of at most B source tokens, B = 64 … 896
# (the training maximum is 512; 896 keeps source and target inside the 1,024 positions), and
# with sliding decoding of the whole talks (windows of 0.8 × 512 tokens), beam 5, length penalty
# 1.0; d-BLEU is over the whole talks in every case, so the figures are comparable. Prints the
# table and writes runs/tierm/length_bias.png. Re-running skips finished decodes. Each system's
# config, metrics and scores (length/ included) are kept in experiments/tier_m/results (experiments/tier_m/keep_tierm.sh).
# Usage (from the repository root): bash experiments/tier_m/tier_m_length_bias.sh
set -euo pipefail
cd "$(dirname "$0")/../.."   # the repository root
R=runs/tierm
BUDGETS=${BUDGETS:-"64 128 256 512 896"}
SYSTEMS="doc2doc doc2doc_dls_laa"
bash experiments/tier_m/tier_m.sh doc2doc=doc2doc_small doc2doc_dls_laa=doc2doc_dls_laa_small
decode() {   # system, output, extra translate options
  local out=$2
  [ -f "$out" ] || docnmt translate $R/$1 -i ../shared/data/ende/valid/ted.en -o "$out" -q \
                     --report "${out%.de}.coverage.json" --beam 5 --lenpen 1.0 "${@:3}"
  docnmt evaluate --hyp "$out" --ref ../shared/data/ende/valid/ted.de --json "${out%.de}.json" >/dev/null
}
args=()
for name in $SYSTEMS; do
  mkdir -p $R/$name/length
  points=()
  for b in $BUDGETS; do
    if [ "$b" = 512 ]; then   # the models' own budget: tier_m.sh's decode of valid ted
      points+=("512=$R/$name/valid.ted.json"); continue
    fi
    decode $name $R/$name/length/ted.b$b.de --max-instance-tokens "$b"
    points+=("$b=$R/$name/length/ted.b$b.json")
  done
  decode $name $R/$name/length/ted.sliding.de --sliding
  args+=(--series "$name" "${points[@]}" --baseline "$name, sliding=$R/$name/length/ted.sliding.json")
  bash experiments/tier_m/keep_tierm.sh $R/$name
done
python experiments/tier_m/plot_sweep.py $R/length_bias.png --metrics d_bleu "${args[@]}" \
       --xlabel "decoding instance budget (source tokens; trained on ≤512)" \
       --title "valid ted (whole talks): d-BLEU against the decoding instance length"
