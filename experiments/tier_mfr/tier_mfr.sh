#!/usr/bin/env bash
# Tier M-fr (docs/benchmarks.md): do the document-level methods beat a sentence model when data is
# not the bottleneck? 0.9M Hansard En-Fr pairs, one joint 8K SentencePiece model, transformer_small,
# --max-tokens 4096, fp32.
#   Stage 1  Sent2Sent, 6,000 updates (about one pass over Hansard).
#   Stage 2  every system from the stage-1 weights for 2,000 updates, one schedule for all (peak lr
#            4e-4 = stage 1's final lr, 200 warm-up updates), each method's own fine-tuning recipe on
#            top: the control (Sent2Sent continued), Doc2Doc, G-Transformer (pretrained weights at
#            0.2 x lr, word dropout 0.1), P-Transformer, DocFlat_D, the context-encoder Transformer
#            (sentence weights frozen), the G-Transformer again with docnmt's
#            method.sentence_positions=true (positions restart in every sentence, as stage 1's did:
#            docs/methods/gtransformer.md#positions; the paper's document-wide positions cost 8 BLEU
#            here), that one with the copied weights at the full lr (as the control trains them),
#            and G-Transformer + DLS + LAA with sentence positions (the DLS curriculum continued at
#            epoch 11: segments of every length up to 512 tokens). Then, for two runs closest to the
#            control in recipe, a recipe difference taken away: the context-encoder Transformer with
#            its sentence weights trained too (and again with the control's target tokens per
#            update), and the full-lr G-Transformer without word dropout.
#   Scores   beam 5, length penalty 1.0 on all six enfr/valid/hansard sittings: s-/d-BLEU and chrF with
#            paired bootstrap against the control, coverage; Bawden anaphora and lexical choice and
#            SCAT valid with exact McNemar tests against the control. DocFlat's pass 1 is the
#            control's translation. Context usage: CXMI on the validation sittings
#            (experiments/tier_mfr/tier_mfr_context.py) beside the attention entropies of the last validation.
#            The separator formats (Doc2Doc, P-Transformer) are decoded a second time with the
#            source's sentence count forced (translate --sentence-count; their papers use no
#            constraint): what losing the sentence alignment costs them, apart from the rest.
#            Stage 1 is scored too (before the context encoder, whose sentence weights are stage
#            1's). Most systems are also tested against a second baseline, the one their claim is
#            about (ALSO below): the context encoder against stage 1, the G-Transformer with
#            sentence positions against the paper's G-Transformer, its full-lr variant and
#            G-Transformer + DLS + LAA against the G-Transformer with sentence positions, each
#            run that takes a recipe difference away against the run that has it, and each
#            training-aid run against the same method without the aid.
# Each stage-2 system is scored as soon as it is trained (the control first). Everything resumes:
# run it again after any interruption (runs/ holds checkpoints every 200 updates); finished steps
# are skipped. Each run's config, metrics, learning curve, scores, coverage, validation translation
# and per-example suite scores are kept in experiments/tier_mfr/results/<run>/ (experiments/tier_mfr/tier_mfr_keep.py),
# the weights of the control, G-Transformer and the best other document model as fp16
# safetensors there too, and stage 1's weights (fp16) that every stage-2 run starts from. If runs/
# is lost (a fresh checkout), the queue goes on from what was kept: stage 2 from the kept stage-1
# weights, skipping every run already scored; a run trained but not yet scored is scored from the
# fp16 weights kept when its training ended (weights_restored.json says so in its kept results, and
# tier_mfr_table.py in its row). Weights are not tracked in the working tree (.gitignore): the ones
# kept so far are in the repository's history, and each kept run's weights.json says where (commit,
# path, SHA-256); the queue puts them back first (experiments/restore_weights.py, which refuses a
# file whose hash differs). To keep a new one past a lost runs/: `git add -f` and commit it, then
# `python experiments/restore_weights.py --record FILE` and `git rm --cached FILE`.
# Usage (from anywhere):   (nohup setsid bash experiments/tier_mfr/tier_mfr.sh > runs/tier_mfr/queue.log 2>&1 &)
#   ONLY="control gt"   restrict stage 2 / scoring to these runs;  TRAIN_ONLY=1  skip decoding/scoring
#                       (gt_best_pair, doc2doc_best_pair: the pair of training aids the README's rule picks,
#                       e.g. ONLY="gt_margin gt_best_pair"; skipped while not every single aid is scored)
#   SCORE_JOBS=2        Doc2Doc's and P-Transformer's two decodes side by side (with a core to spare)
#   RETRAIN="pt"        train and score these runs again although their scores are kept (not stage 1:
#                       to train it again, remove experiments/tier_mfr/results/stage1 and every kept run)
#   --dry-run           the whole queue on a few Hansard documents with 20 + 10 updates, in
#                       runs/tier_mfr_dry, kept results in runs/tier_mfr_dry_kept (a few minutes;
#                       checks every step before the real run; remove runs/tier_mfr_dry and run it
#                       again to check the recovery from a lost runs/: every run is restored)
set -euo pipefail
cd "$(dirname "$0")/../.."   # the repository root
R=runs/tier_mfr; DATA=bench/.cache/tier_mfr; S=../shared/data/enfr; KEEP=experiments/tier_mfr/results
STAGE1=6000; STAGE2=2000; ENFR=
if [ "${1:-}" = --dry-run ]; then
  R=runs/tier_mfr_dry; DATA=$R/data; KEEP=runs/tier_mfr_dry_kept; S=$R/enfr; STAGE1=20; STAGE2=10; ENFR=$S
  python bench/common.py tier_mfr_dry "$S"
fi
mkdir -p "$R" "$KEEP"
step() { echo "== $(date '+%F %T') $*"; "$@"; }
newer() {   # whether file $1 exists and is newer than every other file named (a score still up to date)
  local f; [ -f "$1" ] || return 1
  for f in "${@:2}"; do [ "$1" -nt "$f" ] || return 1; done
}

python bench/common.py tier_mfr "$DATA" ${ENFR:+--enfr "$ENFR"}
# the kept weights (stage 1's, which every stage-2 run starts from and is checked against; the control's,
# which the search analysis scores with), back from the repository's history, their SHA-256 checked
for w in "$KEEP"/*/weights.json; do
  if [ -f "$w" ]; then python experiments/restore_weights.py "$w"; fi
done
COMMON=(--save-interval-updates 200 --set train.validate_interval_updates=500 --no-progress)
# stage 1's weights are kept (fp16, 15 MB: a repository file of fp32 weights would be 31 MB) and every
# stage-2 run starts from that copy, so a lost runs/ (a fresh checkout) costs only what was not kept yet
if [ -f "$KEEP/stage1/model.safetensors" ] && [ ! -f "$R/stage1/config.yaml" ]; then
  echo "== stage 1: not in $R; stage 2 starts from the weights kept in $KEEP/stage1"
else
  [ -f "$R/stage1/config.yaml" ] || rm -rf "${R:?}/stage1"     # scores of the kept weights, not a run
  step docnmt train "$DATA" --arch sent2sent_small --max-update $STAGE1 --save-dir "$R/stage1" "${COMMON[@]}"
  python experiments/tier_mfr/tier_mfr_keep.py --weights "$R/stage1" "$KEEP/stage1"
fi
S1W=$KEEP/stage1/model.safetensors     # each kept stage-2 run records the hash of what it started from

FT=(--init-from "$KEEP/stage1" --max-update $STAGE2 --lr 4e-4 --warmup-updates 200 "${COMMON[@]}")
declare -A ARCH=(
  [control]="--arch sent2sent_small"
  [gt]="--arch g_transformer_finetune_small"
  [gt_sentpos]="--arch g_transformer_finetune_small --set method.sentence_positions=true"
  [doc2doc]="--arch doc2doc_small"
  [pt]="--arch p_transformer_small"
  [docflat_d]="--arch docflat_d_small"
  [context]="--arch context_transformer_small"
  # the copied weights at the full learning rate, as the control trains them: the one difference
  # left between gt_sentpos and the control's recipe besides the group format and word dropout
  [gt_sentpos_lr1]="--arch g_transformer_finetune_small --set method.sentence_positions=true --pretrained-lr-scale 1.0"
  # on gt_sentpos: document-wide positions cost the paper's G-Transformer 8 BLEU here (gt vs gt_sentpos)
  [gt_dls_laa]="--arch g_transformer_dls_laa_small --pretrained-lr-scale 0.2 --word-dropout 0.1 --set data.dls_epoch_offset=10 --set method.sentence_positions=true"
  # positions that restart in every sentence (docnmt's --sentence-positions), the one difference from
  # the paper's recipe: what gt_sentpos showed for the G-Transformer, for the separator formats; last,
  # since at init they start no better (experiments/tier_mfr/results/{doc2doc,docflat_d}_positions_at_init.json)
  [docflat_d_sentpos]="--arch docflat_d_small --sentence-positions"
  [doc2doc_sentpos]="--arch doc2doc_small --sentence-positions"
  # a recipe difference to the control taken away (on two runs closest to it in recipe): the
  # context encoder's sentence weights trained too (its paper freezes them, the control trains
  # them), and the full-lr G-Transformer without the paper's word dropout (the control has none)
  [context_full]="--arch context_transformer_small --set train.freeze_pretrained=false"
  # its context input counts against --max-tokens, so at 4096 an update holds 57% of the control's
  # target tokens (experiments/tier_mfr/results/batches.json); at 7168 it holds as many (4,034 against 4,013)
  [context_full_tok]="--arch context_transformer_small --set train.freeze_pretrained=false --max-tokens 7168"
  [gt_sentpos_lr1_nowd]="--arch g_transformer_finetune_small --set method.sentence_positions=true --pretrained-lr-scale 1.0 --word-dropout 0"
  # gt_dls_laa on gt_sentpos_lr1_nowd's recipe: the length-bias comparison (experiments/length_bias) pairs the
  # two, so that DLS + LAA is the one difference
  [gt_dls_laa_lr1_nowd]="--arch g_transformer_dls_laa_small --set method.sentence_positions=true --pretrained-lr-scale 1.0 --word-dropout 0 --set data.dls_epoch_offset=10"
  # the training aids (docs/methods/{coword_dropout,split_pairs,context_margin}.md), each alone on the
  # G-Transformer closest to the control (gt_sentpos_lr1_nowd) and on Doc2Doc: does any make a document
  # model use its context (CXMI, the Hansard pronoun suite) at no more than 0.3 d-BLEU?
  [gt_coword]="--arch g_transformer_finetune_small --set method.sentence_positions=true --pretrained-lr-scale 1.0 --word-dropout 0 --coword-dropout 0.1"
  [gt_split]="--arch g_transformer_finetune_small --set method.sentence_positions=true --pretrained-lr-scale 1.0 --word-dropout 0 --split-pairs 0.3"
  [gt_margin]="--arch g_transformer_finetune_small --set method.sentence_positions=true --pretrained-lr-scale 1.0 --word-dropout 0 --context-margin 0.5"
  [doc2doc_coword]="--arch doc2doc_small --coword-dropout 0.1"
  [doc2doc_split]="--arch doc2doc_small --split-pairs 0.3"
  [doc2doc_margin]="--arch doc2doc_small --context-margin 0.5"
  # the best pair of aids (issue 67 asks for it once each aid alone is scored): every pair is defined,
  # the one chosen is run with ONLY=<name> or ONLY=gt_best_pair / doc2doc_best_pair (none in the default queue)
  [gt_coword_split]="--arch g_transformer_finetune_small --set method.sentence_positions=true --pretrained-lr-scale 1.0 --word-dropout 0 --coword-dropout 0.1 --split-pairs 0.3"
  [gt_coword_margin]="--arch g_transformer_finetune_small --set method.sentence_positions=true --pretrained-lr-scale 1.0 --word-dropout 0 --coword-dropout 0.1 --context-margin 0.5"
  [gt_split_margin]="--arch g_transformer_finetune_small --set method.sentence_positions=true --pretrained-lr-scale 1.0 --word-dropout 0 --split-pairs 0.3 --context-margin 0.5"
  [doc2doc_coword_split]="--arch doc2doc_small --coword-dropout 0.1 --split-pairs 0.3"
  [doc2doc_coword_margin]="--arch doc2doc_small --coword-dropout 0.1 --context-margin 0.5"
  [doc2doc_split_margin]="--arch doc2doc_small --split-pairs 0.3 --context-margin 0.5"
)
RUNS=${ONLY:-"control gt gt_sentpos stage1 context gt_sentpos_lr1 docflat_d doc2doc pt gt_dls_laa context_full gt_sentpos_lr1_nowd context_full_tok gt_dls_laa_lr1_nowd docflat_d_sentpos doc2doc_sentpos gt_coword gt_split gt_margin doc2doc_coword doc2doc_split doc2doc_margin"}     # stage1: scored only
# one output limit for every system: 1.2 x source + 10 word pieces per sentence (the sentence presets'
# default; Doc2Doc's and P-Transformer's presets carry the P-Transformer paper's 1.1 and 7, which would give
# them less room than the others: docs/methods/baselines.md#decoding-document-instances)
DECODE=(--beam 5 --lenpen 1.0 --lenpen-style fairseq --max-len-a 1.2 --max-len-b 10 -q)
# translations decode as many instances per batch as fit (the same translations as a run's own batch
# setting; runs trained before the document presets did so held 8 instances per batch)
BATCH=(--batch-size 64 --max-tokens 16384)
BAWDEN=$S/suites/bawden2018_discourse_test_sets_enfr/test-sets

declare -A ALSO=([context]=stage1 [gt_dls_laa]=gt_sentpos [gt_sentpos]=gt [gt_sentpos_lr1]=gt_sentpos
                [docflat_d_sentpos]=docflat_d [doc2doc_sentpos]=doc2doc [context_full]=context
                [context_full_tok]=context_full [gt_sentpos_lr1_nowd]=gt_sentpos_lr1
                [gt_dls_laa_lr1_nowd]=gt_sentpos_lr1_nowd [gt_coword]=gt_sentpos_lr1_nowd [gt_split]=gt_sentpos_lr1_nowd [gt_margin]=gt_sentpos_lr1_nowd
                [doc2doc_coword]=doc2doc [doc2doc_split]=doc2doc [doc2doc_margin]=doc2doc
                [gt_coword_split]=gt_sentpos_lr1_nowd [gt_coword_margin]=gt_sentpos_lr1_nowd [gt_split_margin]=gt_sentpos_lr1_nowd
                [doc2doc_coword_split]=doc2doc [doc2doc_coword_margin]=doc2doc [doc2doc_split_margin]=doc2doc)    # second baselines: valid.vs_<baseline>.json
also() {   # the paired bootstrap of run $1 against its second baseline, into $2 (when both are translated;
  # a baseline scored in an earlier queue, its run gone from $R, is compared through its kept translation)
  local base=${ALSO[$1]:-} other
  [ -n "$base" ] && [ -f "$R/$1/valid.fr" ] || return 0
  other=$R/$base/valid.fr
  if [ ! -f "$other" ] && [ -f "$KEEP/$base/valid.fr.gz" ]; then
    other=$R/kept_translations/$base.valid.fr
    mkdir -p "$R/kept_translations"
    [ -f "$other" ] || gunzip -c "$KEEP/$base/valid.fr.gz" > "$other"
  fi
  [ -f "$other" ] || return 0
  newer "$2" "$R/$1/valid.fr" "$other" \
    || step docnmt evaluate --hyp "$R/$1/valid.fr" --ref "$S/valid/hansard.fr" --compare "$other" --json "$2"
}

count_decode() {   # count_decode RUN MODEL [EXTRA...]: a separator format decoded with the source's sentence count forced
  step docnmt translate "$2" -i "$S/valid/hansard.en" -o "$R/$1/valid.count.fr" "${DECODE[@]}" "${BATCH[@]}" "${@:3}" \
    --sentence-count --report "$R/$1/valid.count.coverage.json"
}

score() {   # translate and score one trained run (the control's first: the others are compared with it)
  local name=$1 model=$R/$1 out=$R/$1/valid.fr extra=() against=() base=() suite s
  # stage 1: the kept weights every stage-2 run starts from (the scores still go to runs/, then are kept)
  [ "$name" = stage1 ] && model=$KEEP/stage1
  mkdir -p "$R/$name"
  case $name in docflat_d*) extra=(--first-pass "$R/control/valid.fr");;    # two-pass: the control is pass 1
    # the training-aid runs of Doc2Doc as Doc2Doc itself was decoded (before the sentence fallback became
    # the document formats' default), so that the aid is the one difference: sentences lost stay lost
    doc2doc_?*) extra=(--fallback none);;
  esac
  # SCORE_JOBS=2: the separator formats' second decode (the source's sentence count forced) beside the first,
  # on another core (two independent processes: the same translations as one after the other)
  local count_pid=
  case $name in doc2doc*|pt)
    if [ "${SCORE_JOBS:-1}" -ge 2 ] && [ ! -f "$R/$name/valid.count.fr" ]; then
      count_decode "$name" "$model" "${extra[@]}" & count_pid=$!
    fi;;
  esac
  [ -f "$out" ] || step docnmt translate "$model" -i "$S/valid/hansard.en" -o "$out" "${DECODE[@]}" "${BATCH[@]}" "${extra[@]}" \
                         --report "$R/$name/valid.coverage.json"
  [ -z "$count_pid" ] || wait "$count_pid"     # (its failure stops the queue, as set -e does for the rest)
  [ "$name" != control ] && against=(--compare "$R/control/valid.fr")
  # (scored again only when a translation is newer: a restarted queue does not redo the bootstrap)
  newer "$R/$name/valid.json" "$out" "$R/control/valid.fr" \
    || step docnmt evaluate --hyp "$out" --ref "$S/valid/hansard.fr" "${against[@]}" --json "$R/$name/valid.json"
  also "$name" "$R/$name/valid.vs_${ALSO[$name]:-}.json"
  case $name in doc2doc*|pt)   # the separator formats again, the source's sentence count forced (a second row)
    [ -f "$R/$name/valid.count.fr" ] || count_decode "$name" "$model" "${extra[@]}"
    newer "$R/$name/valid.count.json" "$R/$name/valid.count.fr" "$R/control/valid.fr" \
      || step docnmt evaluate --hyp "$R/$name/valid.count.fr" --ref "$S/valid/hansard.fr" --compare "$R/control/valid.fr" \
      --json "$R/$name/valid.count.json";;
  esac
  [ "$name" = stage1 ] || [ -f "$R/$name/valid.cxmi.json" ] \
    || step python experiments/tier_mfr/tier_mfr_context.py "$model" --src "$S/valid/hansard.en" --ref "$S/valid/hansard.fr"
  case $name in gt_*)   # search or model error: each model's beam objective on its own output and on the other's
    # (an analysis, not a score: its failure is reported and the run still scored and kept)
    # (done again when either translation is newer: it measures those translations)
    newer "$R/$name/valid.vs_control.search.json" "$out" "$R/control/valid.fr" || step python experiments/tier_mfr/tier_mfr_search.py "$model" \
      --src "$S/valid/hansard.en" --ref "$S/valid/hansard.fr" --hyp "$out" --other "$R/control/valid.fr" \
      --out "$R/$name/valid.vs_control.search.json" "${DECODE[@]}" || echo "== search analysis of $name failed; going on"
    newer "$KEEP/control/valid.vs_$name.search.json" "$out" "$R/control/valid.fr" || step python experiments/tier_mfr/tier_mfr_search.py "$KEEP/control" \
      --src "$S/valid/hansard.en" --ref "$S/valid/hansard.fr" --hyp "$R/control/valid.fr" --other "$out" \
      --out "$KEEP/control/valid.vs_$name.search.json" "${DECODE[@]}" || echo "== search analysis of control vs $name failed; going on";;
  esac
  # the in-domain suites: experiments/hansard_pronouns (ContraPro's layout, built from the validation sittings)
  for suite in "$BAWDEN/anaphora.json" "$BAWDEN/lexical-choice.json" "$S/suites/scat_yin2021_enfr" \
               experiments/hansard_pronouns/suite/all experiments/hansard_pronouns/suite/antecedent; do
    s=$(basename "$suite" .json); langs=()
    case $suite in *hansard_pronouns*) s=hansard_$s; langs=(--langs en fr);; esac
    base=(); [ "$name" != control ] && base=(--against "$R/control/$s.scores.jsonl")
    [ -f "$R/$name/$s.json" ] || step docnmt score-contrastive "$model" "$suite" -q --json "$R/$name/$s.json" \
                                      --scores "$R/$name/$s.scores.jsonl" "${langs[@]}" "${base[@]}"
  done
  if [ "$name" = stage1 ]; then python experiments/tier_mfr/tier_mfr_keep.py --scores-only --started-from "$S1W" "$R/$name" "$KEEP/$name"
  else python experiments/tier_mfr/tier_mfr_keep.py --started-from "$S1W" "$R/$name" "$KEEP/$name"; fi
}

restored() {   # tier_mfr_keep.py --restore...: true if restored, false if there is nothing to restore
  # (its exit 3); any other failure stops the queue instead of training a kept run again for hours
  local rc=0
  python experiments/tier_mfr/tier_mfr_keep.py "$@" || rc=$?
  [ $rc = 0 ] || [ $rc = 3 ] || { echo "== tier_mfr_keep.py $* failed (exit $rc): queue stopped"; exit $rc; }
  return $rc
}

keep_if_best() {   # the best other document model's weights (tier_mfr_table.py --best-other), kept as soon
  # as it is scored, since runs/ may be lost before the queue ends; a model it displaces loses its weights,
  # and so does a scored run that is not the best (its weights were kept only until it was scored)
  local name=$1 dir best
  best=$(python experiments/tier_mfr/tier_mfr_table.py --best-other "$KEEP") \
    || { echo "== the best other document model could not be found; every kept weight stays"; return 0; }
  if [ "$best" != "$name" ]; then
    case $name in control|gt) ;; *) rm -f "$KEEP/$name"/{model.safetensors,spm.model,vocab.json};; esac
    return 0
  fi
  python experiments/tier_mfr/tier_mfr_keep.py --weights --started-from "$S1W" "$R/$name" "$KEEP/$name"
  for dir in "$KEEP"/*/; do
    dir=${dir%/}
    case $(basename "$dir") in control|gt|stage1|"$name") ;; *) rm -f "$dir"/{model.safetensors,spm.model,vocab.json};; esac
  done
}

pick_pair() {   # gt_best_pair / doc2doc_best_pair: the pair of aids the README's rule picks (tier_mfr_table.py
  # --best-pair), printed; nothing, with a line on stderr, while the method's three single-aid runs are not all scored
  case $1 in
    *_best_pair) python experiments/tier_mfr/tier_mfr_table.py --best-pair "${1%_best_pair}" "$KEEP" \
                   || echo "== $1: not chosen yet (the method's three single-aid runs are not all scored)" >&2;;
    *) echo "$1";;
  esac
}

# each run is scored as soon as it is trained, so results arrive one system at a time
for name in $RUNS; do
  name=$(pick_pair "$name"); [ -n "$name" ] || continue
  if [ "$name" = stage1 ]; then     # not trained here: scored (or its kept scores put back)
    if [ -f "$R/stage1/config.yaml" ] \
       || ! restored --restore --scores-only --started-from "$S1W" "$KEEP/stage1" "$R/stage1"; then
      [ "${TRAIN_ONLY:-0}" = 1 ] || score stage1
    fi
    continue
  fi
  # a run scored and kept (from the same stage 1) before runs/ was lost: put back what later runs
  # are compared with, go on
  retrain=0; case " ${RETRAIN:-} " in *" $name "*) retrain=1;; esac
  if [ ! -f "$R/$name/config.yaml" ] && [ $retrain = 0 ] \
     && restored --restore --started-from "$S1W" "$KEEP/$name" "$R/$name"; then
    continue
  fi
  # trained to the end before runs/ was lost, but not scored: its kept weights come back and are scored
  if [ $retrain = 1 ] && [ -f "$R/$name/weights_restored.json" ]; then rm -rf "${R:?}/$name"; fi
  if [ ! -f "$R/$name/config.yaml" ] && [ $retrain = 0 ] \
     && restored --restore-trained --started-from "$S1W" "$KEEP/$name" "$R/$name"; then :; fi
  [ -f "$R/$name/config.yaml" ] || rm -rf "${R:?}/$name"     # files restored earlier, not a run
  if [ ! -f "$R/$name/weights_restored.json" ]; then
    # shellcheck disable=SC2086
    step docnmt train "$DATA" ${ARCH[$name]} --save-dir "$R/$name" "${FT[@]}"
    # every run's weights kept (fp16) as soon as it is trained: a lost runs/ then costs its scoring, not its
    # training; a run's are removed once it is scored, unless published (control, gt) or the best other
    python experiments/tier_mfr/tier_mfr_keep.py --weights --started-from "$S1W" "$R/$name" "$KEEP/$name"
  fi
  if [ "${TRAIN_ONLY:-0}" != 1 ]; then score "$name"; keep_if_best "$name"; fi   # (not `||`: set -e must hold inside)
done
[ "${TRAIN_ONLY:-0}" = 1 ] && exit 0
# scored before their second baseline was (ONLY=...) or restored without it: that test, kept at once
for name in "${!ALSO[@]}"; do
  [ -f "$KEEP/$name/valid.vs_${ALSO[$name]}.json" ] || [ ! -d "$KEEP/$name" ] \
    || also "$name" "$KEEP/$name/valid.vs_${ALSO[$name]}.json"
done
best=$(python experiments/tier_mfr/tier_mfr_table.py --best-other "$KEEP")
[ -n "$best" ] && python experiments/tier_mfr/tier_mfr_keep.py --weights "$R/$best" "$KEEP/$best"
python experiments/tier_mfr/tier_mfr_table.py "$KEEP" | tee "$KEEP/table.md"
# whether each system's choice on the suites changes with the context at all
python experiments/tier_mfr/tier_mfr_suites.py "$KEEP" --suites "$S/suites" --out "$KEEP/suites_context.json" \
  || echo "== suites analysis failed"
echo "== $(date '+%F %T') Tier M-fr queue finished"
