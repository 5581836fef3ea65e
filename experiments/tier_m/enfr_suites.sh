#!/usr/bin/env bash
# Worked example of docs/methods/discourse.md: a Sent2Sent model on ../shared/data/enfr/train (news +
# DiaBLa, ~21K pairs) and document models fine-tuned from it the same way (DOC_ARCHS: Doc2Doc,
# and DocFlat's DOC2DOC baseline, DocFlat_C and DocFlat_D, docs/methods/docflat.md), scored on the Bawden et al. and
# SCAT suites. Re-running resumes; STEPS_SENT / STEPS_DOC set the update budgets, R the output
# directory (runs/enfr). Usage (from the repository root): bash experiments/tier_m/enfr_suites.sh
set -euo pipefail
cd "$(dirname "$0")/../.."   # the repository root
S=../shared/data/enfr
SENT=${STEPS_SENT:-800}; DOC=${STEPS_DOC:-400}; R=${R:-runs/enfr}
DOC_ARCHS=${DOC_ARCHS:-"doc2doc_small pseudodoc_small docflat_small docflat_d_small"}
[ -f $R/data/vocab.json ] || docnmt prepare -s en -t fr --trainpref $S/train/news $S/train/diabla \
  --destdir $R/data --vocab-size 8000
docnmt train $R/data --arch sent2sent_small --save-dir $R/sent2sent --max-update $SENT \
  --warmup-updates 300 --save-interval-updates 200 --no-progress
for arch in $DOC_ARCHS; do
  docnmt train $R/data --arch $arch --save-dir $R/${arch%_small} --init-from $R/sent2sent \
    --max-update $DOC --warmup-updates 100 --lr 5e-4 --save-interval-updates 200 --no-progress
done
for m in sent2sent $(for arch in $DOC_ARCHS; do echo ${arch%_small}; done); do
  for suite in $S/suites/bawden2018_discourse_test_sets_enfr/test-sets/anaphora.json \
               $S/suites/bawden2018_discourse_test_sets_enfr/test-sets/lexical-choice.json \
               $S/suites/scat_yin2021_enfr; do
    name=$(basename $suite .json)
    [ -f $R/$m/$name.json ] || docnmt score-contrastive $R/$m $suite -q --json $R/$m/$name.json \
      --scores $R/$m/$name.scores.jsonl
  done
done
