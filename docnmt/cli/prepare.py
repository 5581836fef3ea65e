"""``docnmt prepare``: read corpora, learn subwords, encode and store them."""
from __future__ import annotations

import sys

from .flags import FORMAT_HELP, add_verb, positive_int


def add_prepare(sub) -> None:
    p = add_verb(sub, "prepare", "read corpora, learn subwords, encode and store them")
    p.add_argument("--source-lang", "-s", required=True, help="source language code (the suffix of source files)")
    p.add_argument("--target-lang", "-t", required=True, help="target language code (the suffix of target files)")
    p.add_argument("--trainpref", nargs="+", required=True, help="training corpus prefixes (PREFIX.LANG files)")
    p.add_argument("--validpref", nargs="+", help="validation corpus prefixes")
    p.add_argument("--testpref", nargs="+", help="test corpus prefixes")
    p.add_argument("--destdir", required=True, help="directory to write the prepared data to")
    p.add_argument("--subword", default="spm", choices=["spm", "moses-bpe"],
                   help="spm: joint SentencePiece model (--vocab-size); moses-bpe: the classic pipeline, Moses "
                        "tokenisation + joint subword-nmt BPE (--bpe-merges; needs pip install docnmt[moses])")
    p.add_argument("--vocab-size", type=positive_int, default=8000, metavar="N", help="spm: joint SentencePiece "
                                                                                      "pieces")
    p.add_argument("--bpe-merges", type=positive_int, default=30000, metavar="N",
                   help="moses-bpe: joint BPE merge operations")
    p.add_argument("--spm-model", help="reuse this SentencePiece model file, or the subword model (either kind) "
                                       "of a data/model directory")
    p.add_argument("--format", default="auto", help="input format: " + FORMAT_HELP)
    p.add_argument("--max-sentence-tokens", type=positive_int, default=1022, metavar="N",
                   help="a longer sentence (in subword tokens) is an error naming it")
    p.add_argument("--force", action="store_true",
                   help="replace a --destdir that docnmt prepared (built beside it, swapped when complete)")


def cmd_prepare(args) -> int:
    from ..prepare import prepare
    prepare(args.destdir, args.source_lang, args.target_lang, args.trainpref, args.validpref, args.testpref,
            args.vocab_size, args.spm_model, args.format, args.max_sentence_tokens, args.force,
            log=lambda m: print(m, file=sys.stderr), subword=args.subword, bpe_merges=args.bpe_merges)
    return 0
