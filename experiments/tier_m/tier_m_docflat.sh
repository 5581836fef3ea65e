#!/usr/bin/env bash
# Tier M comparison for DocFlat (docs/methods/docflat.md; the paper's Table 2 and Figure 6 in
# miniature), on ../shared/data/ende Tier M data (docs/benchmarks.md), fp32. Every system is stage II
# of the paper's recipe: fine-tuned for T updates from the same Tier M Sent2Sent model (SENT: by
# default the 4,000-update runs/tierm/sent2sent of experiments/tier_m/tier_m_baselines.sh;
# SENT=runs/tierm/sent2sent_800 is the 800-update one of experiments/tier_m/tier_m_context.sh), each in R=runs/tierm/from_<SENT's name>/<system>,
# checkpoints every 100 updates, the last 5 averaged, decoded in two
# passes (pass 1: SENT's beam-5 translation, made once; pass 2: the system with the context
# forced) with beam 5, length penalty 1.0, 16 consecutive sentences per decoding batch, and scored
# on valid ted and news:
#   pseudodoc_small   the DOC2DOC baseline (same data, batches, fine-tuning, decoding; no FBA)
#   docflat_small     DocFlat_C          docflat_d_small   DocFlat_D
# Then BLEU of DocFlat_C on valid ted against the decoding batch size (1, 4, 16, 32), table and
# plot ($R/docflat_small/bleu_by_batch_size.png; dashed: the DOC2DOC baseline at 16).
# Budget (environment): T=1000 updates. Re-running resumes unfinished runs, skips finished decodes.
# Each system's config, metrics, scores and plot are kept in experiments/tier_m/results (experiments/tier_m/keep_tierm.sh).
# A longer stage II need not start over: FROM=DIR (a finished R) starts each new run from a copy of
# DIR/<system>'s checkpoints and continues it to T, e.g.
#   T=2000 FROM=runs/tierm/from_sent2sent R=runs/tierm/from_sent2sent_2000 bash experiments/tier_m/tier_m_docflat.sh
# Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."   # the repository root
T=${T:-1000}; SENT=${SENT:-runs/tierm/sent2sent}
SYSTEMS=${SYSTEMS:-"pseudodoc_small docflat_small docflat_d_small"}
DATA=bench/.cache/tier_m
R=${R:-runs/tierm/from_$(basename "$SENT")}
[ -f "$SENT/model.safetensors" ] || { echo "needs the Tier M Sent2Sent model $SENT (bash experiments/tier_m/tier_m_baselines.sh trains it)" >&2; exit 2; }
python bench/common.py tier_m
for set in ted news; do   # pass 1, shared by every system and batch size
  [ -f "$SENT/valid.$set.de" ] || docnmt translate "$SENT" -i ../shared/data/ende/valid/$set.en \
                                    -o "$SENT/valid.$set.de" -q --beam 5 --lenpen 1.0
done
decode() {   # system, valid set, decoding batch size, output
  [ -f "$4" ] || docnmt translate $R/$1 --checkpoint $R/$1/averaged.safetensors -i ../shared/data/ende/valid/$2.en \
                   -o "$4" -q --beam 5 --lenpen 1.0 --first-pass "$SENT/valid.$2.de" --batch-size "$3"
  docnmt evaluate --hyp "$4" --ref ../shared/data/ende/valid/$2.de --json "${4%.de}.json" >/dev/null
}
for name in $SYSTEMS; do
  if [ -n "${FROM:-}" ] && [ ! -e $R/$name ]; then   # continue FROM's run: its checkpoints and logs, no outputs
    mkdir -p $R/$name
    cp -r "$FROM/$name"/{checkpoints,config.yaml,vocab.json,spm.model,model.safetensors,metrics.jsonl,train.log} $R/$name/
  fi
  docnmt train "$DATA" --no-progress --arch $name --init-from "$SENT" --save-dir $R/$name \
         --max-update "$T" --save-interval-updates 100
  [ -f $R/$name/averaged.safetensors ] || docnmt average $R/$name --last 5
  for set in ted news; do decode $name $set 16 $R/$name/valid.$set.de; done
  bash experiments/tier_m/keep_tierm.sh $R/$name
done
python experiments/tier_m/tier_m_table.py "$SENT" $(for name in $SYSTEMS; do echo $R/$name; done)
points=()
for b in 1 4 16 32; do
  out=$R/docflat_small/valid.ted.de
  [ "$b" = 16 ] || out=$R/docflat_small/valid.ted.b$b.de
  decode docflat_small ted $b "$out"
  points+=("$b=${out%.de}.json")
done
python experiments/tier_m/plot_sweep.py $R/docflat_small/bleu_by_batch_size.png --series DocFlat_C "${points[@]}" \
       --baseline "DOC2DOC at 16=$R/pseudodoc_small/valid.ted.json" \
       --xlabel "decoding batch size (consecutive sentences)" \
       --title "DocFlat_C, valid ted: BLEU against the decoding batch size"
bash experiments/tier_m/keep_tierm.sh $R/docflat_small
