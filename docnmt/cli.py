"""The ``docnmt`` command: prepare, train, translate, evaluate, average, quickstart, presets, probe,
score-contrastive, entropy, fba-map, compare.

Flags follow fairseq's vocabulary (``--max-tokens``, ``--update-freq``, ``--lenpen``,
``--max-len-a/b``, ``--patience``, ...). Errors in the user's input are printed as one line and
exit with status 2; a traceback means a bug in docnmt.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import DocnmtError
from .readers import FORMATS

FORMAT_HELP = " | ".join(FORMATS)

# flag -> (config key, type, help, help group). ``bool`` flags are switches with a --no- form
# (``--dls`` / ``--no-dls``); a flag not given leaves the preset's or model's value.
TRAIN_FLAGS = {
    "--mode": ("data.mode", str, "sent2sent | doc2sent | doc2doc | mr | pseudodoc", "data"),
    "--context": ("data.context", int, "doc2sent / pseudodoc: number of previous sentences", "data"),
    "--max-instance-tokens": ("data.max_instance_tokens", int, "doc2doc/mr: instance budget in tokens, see "
                              "docs/methods/baselines.md#splitting-documents-into-instances-of-at-most-512-tokens",
                              "data"),
    "--separator": ("data.separator", str, "index (<sepI>) | uniform (<sep>) | group (<s> x </s>, G-Transformer) "
                    "| global_index (<sepJ> x </s>, DocFlat)", "data"),
    "--mix-sentences": ("data.mix_sentences", bool, "add every sentence pair as an instance of its own "
                        "(doc+sent / ctx+sent)", "data"),
    "--context-input": ("data.context_input", int, "sent2sent: previous source sentences as a context input",
                        "data"),
    "--context-self": ("data.context_self", bool, "pairs of sentence-level corpora get their own source as context "
                       "(the context encoder's step-2 mixing)", "data"),
    "--max-tokens": ("train.max_tokens", int, "batch budget in tokens (padded, the longer of source and target)",
                     "batching"),
    "--update-freq": ("train.update_freq", int, "batches per optimizer update", "batching"),
    "--batch-order": ("data.batch_order", str, "sorted (length buckets) | ordered (consecutive instances, "
                      "whole batches shuffled; DocFlat) | strict (ordered, never shuffled)", "batching"),
    "--dropout": ("model.dropout", float, "dropout", "model"),
    "--length-aware": ("model.length_aware", bool, "length-aware attention (logits x log n / log mean n)",
                       "methods"),
    "--sentence-positions": ("model.sentence_positions", bool, "positions restart in every sentence of an instance "
                             "(Doc2Doc, DocFlat)", "methods"),
    "--lr": ("train.lr", float, "peak learning rate", "optimisation"),
    "--warmup-updates": ("train.warmup_updates", int, "linear warm-up of the inverse-sqrt schedule",
                         "optimisation"),
    "--label-smoothing": ("train.label_smoothing", float, "label smoothing epsilon", "optimisation"),
    "--clip-norm": ("train.clip_norm", float, "gradient clipping (0 = off)", "optimisation"),
    "--seed": ("train.seed", int, "random seed", "optimisation"),
    "--max-update": ("train.max_update", int, "stop after this many updates (0 = no limit)", "stopping"),
    "--max-epoch": ("train.max_epoch", int, "stop after this many epochs (0 = no limit)", "stopping"),
    "--max-minutes": ("train.max_minutes", float, "stop after this much training time (0 = no limit)",
                      "stopping"),
    "--patience": ("train.patience", int, "stop after this many validations without improvement (0 = off)",
                   "stopping"),
    "--pretrained-lr-scale": ("train.pretrained_lr_scale", float,
                              "lr of the parameters copied by --init-from, as a share of --lr (G-Transformer: 0.2)",
                              "methods"),
    "--freeze-pretrained": ("train.freeze_pretrained", bool,
                            "train only the parameters --init-from did not set (two-step training)", "methods"),
    "--dls": ("data.dls", bool, "doc2doc: training segments resampled every epoch (dynamic length sampling)",
              "methods"),
    "--dls-start-epoch": ("data.dls_start_epoch", int, "dynamic length sampling's temperature T = exp(epoch - k): "
                          "this k", "methods"),
    "--word-dropout": ("train.word_dropout", float, "P(word -> <mask>) on source and decoder input", "methods"),
    "--word-dropout-epochs": ("train.word_dropout_epochs", int, "word dropout in epochs 1..N only (0 = all)",
                              "methods"),
    "--precision": ("train.precision", str, "auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 | fp16 (autocast)",
                    "device"),
    "--threads": ("train.threads", int, "CPU threads (0 = torch's default)", "device"),
    "--compile": ("train.compile", bool, "torch.compile the training forward pass (dynamic shapes: new batch "
                  "shapes do not compile again; for GPUs)", "device"),
    "--validate-interval-updates": ("train.validate_interval_updates", int,
                                    "validate (and save) every N updates (0 = at the end of each epoch)",
                                    "checkpoints"),
    "--save-interval-updates": ("train.save_interval_updates", int,
                                "checkpoint every N updates (0 = at the end of each epoch)", "checkpoints"),
    "--keep-last": ("train.keep_last", int, "checkpoints kept (for averaging)", "checkpoints"),
    "--best-metric": ("train.best_metric", str, "loss | nll_loss | bleu (needs --valid-bleu)", "checkpoints"),
    "--valid-bleu": ("train.valid_bleu", bool, "also translate the validation set and report its BLEU",
                     "checkpoints"),
    "--log-interval": ("train.log_interval", int, "log every N updates", "logging"),
    "--tensorboard-logdir": ("train.tensorboard_dir", str, "also log to TensorBoard here", "logging"),
}
TRAIN_GROUPS = {
    "configuration": "a preset or YAML file, then flags and --set on top",
    "data": "how documents become training instances",
    "batching": None,
    "model": None,
    "optimisation": None,
    "stopping": "training ends at the first limit reached",
    "checkpoints": "checkpoints and validation",
    "methods": "settings of particular methods",
    "device": None,
    "logging": None,
}
DECODE_FLAGS = {
    "--beam": ("decode.beam", int, "beam size (1 = greedy)", "search"),
    "--lenpen": ("decode.lenpen", float, "length penalty: score / length**lenpen", "search"),
    "--lenpen-style": ("decode.lenpen_style", str, "fairseq (length**lenpen) | gnmt (((5+length)/6)**lenpen)",
                       "search"),
    "--max-len-a": ("decode.max_len_a", float, "max output length = a * source length + b per output sentence",
                    "search"),
    "--max-len-b": ("decode.max_len_b", int, "max output length = a * source length + b per output sentence",
                    "search"),
    "--min-len": ("decode.min_len", int, "minimum output length", "search"),
    "--nbest": ("decode.nbest", int, "hypotheses written per input (plain output: Moses n-best lines)", "search"),
    "--no-repeat-ngram-size": ("decode.no_repeat_ngram_size", int,
                               "never repeat an n-gram of word pieces in a hypothesis "
                               "(0 = off; separators do not count)", "search"),
    "--max-tokens": ("decode.max_tokens", int, "batch budget: source tokens per decoding batch", "batching"),
    "--batch-size": ("decode.max_sentences", int, "instances per decoding batch", "batching"),
    "--precision": ("decode.precision", str, "auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 (autocast)",
                    "batching"),
    "--official-start": ("decode.official_start", bool,
                         "G-Transformer: start decoding from <s> like the official code (default: the "
                         "end-of-document token, as in training)", "methods"),
    "--max-instance-tokens": ("data.max_instance_tokens", int,
                              "Doc2Doc: split documents into instances of fewer tokens (0 = whole documents)",
                              "methods"),
    "--sliding": ("decode.sliding", bool, "Doc2Doc: sliding decoding of documents longer than the window",
                  "methods"),
    "--sliding-window": ("decode.sliding_window", float, "sliding window as a share of the training instance "
                         "budget", "methods"),
    "--sentence-count": ("decode.sentence_count", bool, "force the source's sentence count (separator formats)",
                         "methods"),
    "--first-pass": ("decode.first_pass", str,
                     "DocFlat: pass 1 of two-pass decoding, a sentence model's directory or a file of its "
                     "translations (one line per input sentence; default: the model itself)", "methods"),
}
# old names kept working, not shown in --help
DECODE_ALIASES = {"--batch-tokens": "--max-tokens"}


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default after its help text, unless the text already says it or there is
    none (a flag absent from the command line)."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=32, width=min(110, max(60, _terminal_width())))

    def _get_help_string(self, action):
        text = action.help or ""
        shows = action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)
        if "%(default)" in text or "default" in text.lower() or action.default is None or action.default is False \
                or action.default == argparse.SUPPRESS or not shows:
            return text
        return text + " (default: %(default)s)"


def _terminal_width() -> int:
    import shutil
    return shutil.get_terminal_size((100, 24)).columns


def base_default(key: str):
    """The base configuration's value of ``section.key`` (what applies when neither a preset nor a
    flag sets it)."""
    import dataclasses

    from .config import Config
    section, name = key.split(".", 1)
    for f in dataclasses.fields(Config.SECTIONS[section]):
        if f.name == name:
            return f.default
    raise KeyError(key)


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value == "" else str(value)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_flags(p: argparse.ArgumentParser, flags: dict, groups: dict | None = None) -> None:
    """Add ``flags`` (a table as above) to ``p``, each in its help group from ``groups`` (title ->
    argument group; missing titles are added), its help saying the base default."""
    for flag, (key, typ, help_, group) in flags.items():
        target = p
        if groups is not None:
            if group not in groups:
                groups[group] = p.add_argument_group(group)
            target = groups[group]
        shown = f" (default: {_shown(base_default(key))})" if key and "default" not in help_ else ""
        if typ is bool:
            target.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_ + shown)
        else:
            target.add_argument(flag, type=typ, help=help_ + shown,
                                metavar={int: "N", float: "NUM"}.get(typ))


def collect_overrides(args, flags: dict) -> dict:
    out = {}
    for flag, (key, *_) in flags.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if key and value is not None:
            out[key] = value
    for item in getattr(args, "set", None) or []:
        if "=" not in item:
            raise DocnmtError(f"--set expects section.key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def flag_labels(args, flags: dict) -> dict:
    """Config key -> the flag the user typed for it (``decode.max_sentences`` -> ``--batch-size``,
    ``--set train.lr``), so that a bad value is reported under that name."""
    labels = {key: flag for flag, (key, *_) in flags.items()
              if key and getattr(args, flag[2:].replace("-", "_"), None) is not None}
    for item in getattr(args, "set", None) or []:
        key = item.split("=", 1)[0]
        labels[key] = f"--set {key}"
    return labels


class Parser(argparse.ArgumentParser):
    """Usage errors as one line, like every other error of docnmt."""

    verb_hint = ""       # the verb of the command line being parsed (set by main)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)      # --be is not --beam: a typo is an error, not a guess
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        verb = self.prog.split()[-1] if self.prog != "docnmt" else self.verb_hint
        self.exit(2, f"docnmt: error: {message} (see docnmt {verb + ' ' if verb else ''}--help)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="docnmt", description="Document-level neural machine translation.",
                                 formatter_class=HelpFormatter)
    ap.add_argument("--version", action="version", version=_version())
    sub = ap.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, help_: str, epilog: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".", epilog=epilog,
                              formatter_class=HelpFormatter)

    p = verb("prepare", "read corpora, learn subwords, encode and store them")
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

    p = verb("train", "train a model",
             epilog="Defaults are the base configuration's; a preset (--arch, see `docnmt presets`) or a --config "
                    "file sets its own values, and flags and --set override both. A run's settings are kept in "
                    "SAVE_DIR/config.yaml.")
    groups = {title: p.add_argument_group(title, about) for title, about in TRAIN_GROUPS.items()}
    p.add_argument("data", help="directory written by `docnmt prepare`")
    g = groups["configuration"]
    g.add_argument("--arch", help="named preset: architecture and method (see `docnmt presets`; "
                                  "default: transformer_small)")
    g.add_argument("--config", "-c", help="YAML config file (or preset name); instead of --arch")
    g.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="any config value, e.g. --set model.ffn_dim=1024 (repeatable)")
    groups["model"].add_argument("--init-from", metavar="MODEL",
                                 help="initialise the weights from this model directory (docnmt or imported) "
                                      "or .safetensors file")
    g = groups["checkpoints"]
    g.add_argument("--save-dir", required=True, help="model directory (resumed if it holds a run)")
    g.add_argument("--force", action="store_true",
                   help="start over in a --save-dir holding a docnmt model (never in a folder with other files)")
    groups["device"].add_argument("--device", help="cpu | cuda | cuda:N (default: cuda when there is a GPU; "
                                                   "under torchrun each process takes its local rank's GPU)")
    groups["logging"].add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                                   help="progress bar on stderr: updates towards the run's nearest end "
                                        "(--max-update, --max-epoch or --max-minutes) with an ETA, and validation")
    add_flags(p, TRAIN_FLAGS, groups)
    add_flags(p, {k: (key, typ, h + " (--valid-bleu)", "checkpoints")
                  for k, (key, typ, h, _) in DECODE_FLAGS.items() if k in ("--beam", "--lenpen")}, groups)

    p = verb("translate", "translate documents",
             epilog="Decoding defaults are the model's own (the decode section of MODEL/config.yaml); the "
                    "defaults shown are the base configuration's.")
    groups = {title: p.add_argument_group(title) for title in ("input and output", "search", "batching",
                                                                "methods", "model")}
    p.add_argument("model", help="model directory")
    g = groups["input and output"]
    g.add_argument("--input", "--src", "-i", nargs="*", metavar="FILE", help="source file(s) (default: stdin)")
    g.add_argument("--format", default="auto", help="input format: " + FORMAT_HELP)
    g.add_argument("--output", "-o", help="output file (default: stdout); never overwritten without --force")
    g.add_argument("--output-format", default="marker", choices=["marker", "jsonl"],
                   help="marker: one line per source sentence with <d> lines between documents; jsonl: one "
                        "object per document (sentences, n-best lists, scores)")
    g.add_argument("--force", action="store_true", help="overwrite --output and --report if they exist")
    g.add_argument("--report", metavar="FILE",
                   help="also write the coverage report (documents fully recovered, empty and merged sentences) "
                        "here as JSON; never overwritten without --force")
    g.add_argument("--quiet", "-q", action="store_true", help="no progress bar or report on stderr")
    g.add_argument("--print-scores", action="store_true",
                   help="add each sentence's and document's log-probability per token under the model "
                        "(plain output: 'score<TAB>translation' and '<d><TAB>score' lines, the latter only where the "
                        "input has <d> lines; JSONL: meta)")
    groups["search"].add_argument("--greedy", action="store_true", help="greedy search (beam 1)")
    g = groups["model"]
    g.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    g.add_argument("--device", help="cpu | cuda | cuda:N (default: cuda when there is a GPU)")
    add_flags(p, DECODE_FLAGS, groups)
    for alias, flag in DECODE_ALIASES.items():
        p.add_argument(alias, dest=flag[2:].replace("-", "_"), type=DECODE_FLAGS[flag][1], help=argparse.SUPPRESS)

    p = verb("score", "reference scores: the log-probability of every reference sentence and "
                                     "document in the model's own input format")
    p.add_argument("model", help="model directory")
    p.add_argument("--src", "--input", "-i", dest="src", required=True, help="source documents (any input format)")
    p.add_argument("--ref", required=True, help="reference translations, in the same document structure")
    p.add_argument("--format", default="auto", help="input format: " + FORMAT_HELP)
    p.add_argument("--output", "-o", help="output file (stdout when omitted); never overwritten without --force")
    p.add_argument("--output-format", default="tsv", choices=["tsv", "jsonl"],
                   help="tsv: one line per sentence (document id, sentence number, log-probability, tokens, "
                        "NLL per token) and one per document (sentence '*'); jsonl: one object per document")
    p.add_argument("--cxmi", action="store_true",
                   help="also how much the context raises each sentence's log-probability: its word pieces "
                        "scored in context and alone (a one-sentence document); CXMI in bits per word piece "
                        "(tsv: columns word_pieces, logprob_words, logprob_words_alone, cxmi_bits; jsonl: the "
                        "same fields; the summary gives the total)")
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary on stderr")

    p = verb("evaluate", "s-BLEU, d-BLEU and chrF of a translation against references")
    p.add_argument("--hyp", required=True, help="translation (marker format with <d> lines, or JSONL)")
    p.add_argument("--ref", required=True, help="references in the same document structure")
    p.add_argument("--compare", help="a second system's translation: paired bootstrap against --hyp")
    p.add_argument("--bootstrap-samples", type=positive_int, default=1000, metavar="N",
                   help="bootstrap resamples for the paired significance test of --compare")
    p.add_argument("--json", help="also write the results as JSON here")
    p.add_argument("--by-length", action="store_true",
                   help="also d-BLEU per document-length bucket (source words with --src, else reference words)")
    p.add_argument("--src", "--input", "-i", dest="src", help="source documents (for --by-length)")
    p.add_argument("--plot", help="--by-length: write the d-BLEU vs length plot here (PNG)")

    p.add_argument("--tcp", metavar="PDC_DIR",
                   help="also TCP (Zh-En discourse metric) against a PDC test directory with en.tok and en.candidates")
    p.add_argument("--tcp-tokenized", action="store_true", help="--tcp: the hypothesis is already Moses-tokenised")
    p.add_argument("--comet-model", help="also COMET with this local checkpoint (needs --src and unbabel-comet; "
                                         "never downloads; skipped with a one-line note otherwise)")

    p = verb("score-contrastive", "accuracy of a model on a contrastive test suite (pronouns, deixis, ...)")
    p.add_argument("model", help="model directory")
    p.add_argument("suite", help="suite file or directory: Voita et al. JSON, Bawden et al. JSON, SCAT directory, "
                                 "or contrapro.json with its text/context files")
    p.add_argument("--format", default="auto", choices=["auto", "voita", "bawden", "scat", "contrapro"],
                   help="suite format (auto: from the file names and contents)")
    p.add_argument("--split", default="valid", help="SCAT split (train | valid)")
    p.add_argument("--max-context", type=int, help="at most this many context sentences (default: all the suite "
                                                   "gives that fit the model's instance budget)")
    p.add_argument("--no-detokenize", action="store_true", help="Voita et al.: keep the suite's Moses tokenisation")
    p.add_argument("--langs", nargs=2, metavar=("SRC", "TGT"),
                   help="languages of the suite (detokeniser, ContraPro files)")
    p.add_argument("--scores", help="write per-example candidate scores here (JSONL)")
    p.add_argument("--against", metavar="SCORES", help="a baseline's --scores file on the same suite: report the "
                                                       "accuracy difference and its exact McNemar p-value")
    p.add_argument("--json", help="write the accuracy report here (JSON)")
    p.add_argument("--plot", help="write accuracy by antecedent distance (or pronoun) here (PNG)")
    p.add_argument("--max-tokens", dest="batch_tokens", type=int, metavar="N",
                   help="batch budget: tokens per scoring batch (default: the model's decoding budget)")
    p.add_argument("--batch-tokens", dest="batch_tokens", type=int, help=argparse.SUPPRESS)    # the old name
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--force", action="store_true", help="overwrite existing --scores/--json/--plot files")

    p = verb("entropy", "attention entropy per module (bits), self-attention distance (tokens) and the "
                        "attention weight on other sentences than the query's own, of a model on parallel documents")
    p.add_argument("model", help="model directory")
    p.add_argument("--src", "--input", "-i", dest="src", required=True, help="source documents")
    p.add_argument("--ref", required=True, help="target documents")
    p.add_argument("--format", default="auto", help="input format (as for translate)")
    p.add_argument("--json", help="also write the result as JSON here")
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

    p = verb("fba-map", "DocFlat: the encoder flat-batch attention of one decoding batch, "
                                       "per sentence pair (PNG)")
    p.add_argument("model", help="DocFlat model directory")
    p.add_argument("--src", "--input", "-i", dest="src", required=True, help="source documents (any input format)")
    p.add_argument("--format", default="auto", help="input format (as for translate)")
    p.add_argument("--doc", type=int, default=1, help="document number (1-based)")
    p.add_argument("--start", type=int, default=1, help="first sentence of the batch (1-based)")
    p.add_argument("--batch-size", type=int, default=16, help="sentences per batch (the decoding batch)")
    p.add_argument("--output", "-o", required=True, help="PNG to write; never overwritten without --force")
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")

    p = verb("compare", "one table (Markdown, CSV) of all metrics of several systems on the same test data")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="model directories or translation files, optionally NAME=PATH")
    p.add_argument("--src", "--input", "-i", dest="src", required=True, help="source documents of the test set")
    p.add_argument("--ref", required=True, help="reference documents (marker or JSONL)")
    p.add_argument("--format", default="auto", help="format of --src (as for translate)")
    p.add_argument("--out", default="compare",
                   help="directory for compare.md/.csv/.json, plots and cached translations")
    p.add_argument("--baseline", help="system the others are tested against (default: the first)")
    p.add_argument("--suite", action="append", default=[],
                   help="also score model directories on this contrastive suite")
    p.add_argument("--suite-format", default="auto", choices=["auto", "voita", "bawden", "scat", "contrapro"],
                   help="format of the --suite files (auto: from the file names and contents)")
    p.add_argument("--suite-split", default="valid", help="SCAT split of the suites")
    p.add_argument("--suite-langs", nargs=2, metavar=("SRC", "TGT"), help="languages of the suites")
    p.add_argument("--no-detokenize", action="store_true", help="Voita et al.: keep the suite's Moses tokenisation")
    p.add_argument("--tcp", metavar="PDC_DIR", help="also TCP against this PDC test directory")
    p.add_argument("--comet-model", help="also COMET with this local checkpoint")
    p.add_argument("--cxmi", action="store_true",
                   help="also how much each model uses its context: CXMI in bits per reference word piece "
                        "(as docnmt score --cxmi; model directories only)")
    p.add_argument("--bootstrap-samples", type=positive_int, default=1000, metavar="N",
                   help="bootstrap resamples of the paired significance tests")
    p.add_argument("--force", action="store_true", help="re-translate, and write into a non-compare --out")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")

    p = verb("probe", "position probing of encoder layers (absolute, relative, word order)")
    p.add_argument("models", nargs="+", help="model directories (compared in the plots)")
    p.add_argument("--train", required=True, help="documents to train the probes on (source side is read)")
    p.add_argument("--valid", required=True, help="documents to select the probes on")
    p.add_argument("--test", required=True, help="documents to score the probes on")
    p.add_argument("--format", default="auto", help="input format (as for translate)")
    p.add_argument("--out", default="probe", help="directory for probe.json, probe.md and the PNG plots")
    p.add_argument("--force", action="store_true", help="overwrite the results of an earlier probe in --out")
    p.add_argument("--lengths", nargs="*", type=int, default=[],
                   help="also absolute-position accuracy of the top layer on inputs of at most these tokens "
                        "(each model probed at every length)")
    p.add_argument("--own-length", action="store_true",
                   help="input-length study with one model per length (the paper's setup): probe each Doc2Doc "
                        "MODEL on inputs of at most its own --max-instance-tokens and plot against that length")
    p.add_argument("--max-examples", type=int, default=20000, help="tokens or pairs per split and task")
    p.add_argument("--max-epochs", type=int, default=50, metavar="N",
                   help="training epochs of each probe at most (early stopping on --valid)")
    p.add_argument("--batch-size", type=int, default=64, metavar="N", help="examples per probe training batch")

    p = verb("average", "average the last N checkpoints of a model directory")
    p.add_argument("model", help="model directory")
    p.add_argument("--last", type=positive_int, default=5, metavar="N",
                   help="average this many of the newest checkpoints (fewer if there are fewer, said loudly)")
    p.add_argument("--output", "-o", help="file to write the averaged weights to (default: MODEL/averaged.safetensors)")
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")

    p = verb("quickstart", "prepare, train and translate the bundled chat corpus")
    p.add_argument("--workdir", default="docnmt-quickstart",
                   help="directory for the prepared data, the model and the translation")
    p.add_argument("--updates", type=positive_int, default=1200,
                   help="training updates (the result depends on these, not on how busy the machine is)")
    p.add_argument("--minutes", type=float, default=30.0,
                   help="time cap: stop training after this many minutes even if --updates are not reached "
                        "(said loudly when it happens)")
    p.add_argument("--force", action="store_true",
                   help="start over in a --workdir an earlier quick start made (without it, a second run goes on "
                        "from where the first stopped)")

    verb("presets", "list the named presets")

    p = verb("import-hf", "import a Hugging Face translation model (Marian/OPUS-MT, mBART, NLLB, "
                                         "M2M-100) into a docnmt model directory (needs pip install docnmt[hf])")
    p.add_argument("hf_dir", metavar="DIR", help="local Hugging Face directory (config.json, weights, tokenizer)")
    p.add_argument("--save-dir", required=True, help="docnmt model directory to write")
    p.add_argument("--src-lang", help="source language code of a multilingual model (mBART: en_XX, NLLB: eng_Latn, "
                                      "M2M-100: en)")
    p.add_argument("--tgt-lang", help="target language code (a multi-target Marian model: the code of its >>xx<< "
                                      "token)")
    p.add_argument("--force", action="store_true", help="replace a docnmt model in --save-dir")

    p = verb("export-hf", "write a Transformer model (sentence-level or Doc2Doc) as a Hugging Face "
                                         "directory (needs pip install docnmt[hf])")
    p.add_argument("model", help="docnmt model directory")
    p.add_argument("out", metavar="DIR", help="Hugging Face directory to write")
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--force", action="store_true", help="replace an earlier export in DIR")

    p = verb("serve", "serve models over HTTP: a JSON API, file upload and a web page "
                                     "(needs pip install docnmt[serve])")
    p.add_argument("models", nargs="+", metavar="MODEL", help="model directories, optionally NAME=DIR")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed at start)")
    p.add_argument("--api-key", default=os.environ.get("DOCNMT_API_KEY", ""),
                   help="require this key (X-API-Key or Authorization: Bearer) for the API; default "
                        "$DOCNMT_API_KEY, else none")
    p.add_argument("--workers", type=positive_int, default=1,
                   help="decoding threads, each with its own copy of every model; with two or more one is "
                        "always kept for short requests")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: cores / workers)")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--request-sentences", type=positive_int, default=5000, metavar="N",
                   help="source sentences per request, at most (413 beyond)")
    p.add_argument("--request-chars", type=positive_int, default=500_000, metavar="N",
                   help="source characters per request, at most (413 beyond)")
    p.add_argument("--request-tokens", type=positive_int, default=100_000, metavar="N",
                   help="source subword tokens per request, at most (413 beyond)")
    p.add_argument("--max-upload-mb", type=float, default=4.0, help="request body size (JSON or uploaded file)")
    p.add_argument("--max-beam", type=positive_int, default=16, help="largest beam a request may ask for")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds a request may wait and decode before it is answered 503")
    p.add_argument("--queue", type=positive_int, default=64,
                   help="requests in the service at once; more are answered 503 with Retry-After")
    p.add_argument("--batch-wait-ms", type=float, default=5.0,
                   help="how long a request waits for others to be decoded with it")
    p.add_argument("--max-tokens", dest="batch_tokens", type=positive_int, default=4000, metavar="N",
                   help="batch budget: source tokens decoded together, at most")
    p.add_argument("--batch-tokens", dest="batch_tokens", type=positive_int, help=argparse.SUPPRESS)  # the old name
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="server log level on stderr")
    return ap


def _version() -> str:
    from . import __version__
    return f"docnmt {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser.verb_hint = next((a for a in argv if a in VERBS), "")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:          # a usage error (one line, status 2), --help or --version (status 0)
        return e.code if isinstance(e.code, int) else 0
    try:
        return VERBS[args.verb](args) or 0
    except DocnmtError as e:
        print(f"docnmt: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:             # output piped into head & co.: stop quietly
        sys.stderr.close()
        return 0
    except OSError as e:                # a path that cannot be read or written
        print(f"docnmt: error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("docnmt: interrupted", file=sys.stderr)
        return 130


# --------------------------------------------------------------------------------------------
# Verbs
# --------------------------------------------------------------------------------------------

def cmd_prepare(args) -> int:
    from .prepare import prepare
    prepare(args.destdir, args.source_lang, args.target_lang, args.trainpref, args.validpref, args.testpref,
            args.vocab_size, args.spm_model, args.format, args.max_sentence_tokens, args.force,
            log=lambda m: print(m, file=sys.stderr), subword=args.subword, bpe_merges=args.bpe_merges)
    return 0


def cmd_train(args) -> int:
    from .config import Config
    from .train import Trainer
    overrides = collect_overrides(args, {**DECODE_FLAGS, **TRAIN_FLAGS})
    if args.config and args.arch:
        raise DocnmtError("give either --config or --arch, not both")
    if args.init_from:           # a model with a pretrained tokenizer brings its architecture
        from .hf import init_from_overrides
        overrides = {**init_from_overrides(args.init_from, args.data), **overrides}
    cfg = Config.load(args.config or args.arch or "transformer_small").override(
        overrides, flag_labels(args, {**DECODE_FLAGS, **TRAIN_FLAGS}))
    trainer = Trainer(cfg, args.data, args.save_dir, force=args.force, init_from=args.init_from,
                      progress_bar=args.progress, device=args.device)
    if trainer.dist.main:
        print(f"training {trainer.describe()}", file=sys.stderr)
    out = trainer.train()
    p, metric = trainer.progress, trainer.cfg.train.best_metric
    best = "" if p.best is None else (f", best validation {metric} "
                                      f"{-p.best if metric == 'bleu' else p.best:.4f}")
    print(f"model saved in {out} ({p.updates:,} updates{best}; every figure in {out / 'metrics.jsonl'})",
          file=sys.stderr)
    return 0


def cmd_translate(args) -> int:
    from .limits import check_translation
    from .readers import read_inputs, write_jsonl, write_marker
    from .translate import Translator
    inputs = args.input or ["-"]
    if args.report and args.output and Path(args.report).resolve() == Path(args.output).resolve():
        raise DocnmtError("--report and --output name the same file")
    refuse_inputs([args.output, args.report], [*inputs, *model_files(args.model, args.checkpoint)])
    refuse_overwrite([args.output, args.report], args.force)
    refuse_unwritable([args.output, args.report])
    translator = Translator.load(args.model, args.checkpoint, args.device)
    overrides = collect_overrides(args, DECODE_FLAGS)
    if args.greedy:
        overrides["decode.beam"] = 1
    cfg = translator.cfg.override(overrides, flag_labels(args, DECODE_FLAGS)) if overrides else translator.cfg
    translator.cfg = cfg
    if args.print_scores and cfg.decode.nbest > 1 and args.output_format == "marker":
        raise DocnmtError("--print-scores and --nbest: n-best lines already end in each hypothesis's score; "
                          "give one of them, or --output-format jsonl for both")
    streamable = args.format in ("auto", "marker", "blankline", "plain")
    if inputs == ["-"] and args.output_format == "marker" and cfg.decode.nbest == 1 and streamable:
        report = translate_stream(translator, cfg, args)
        if report is not None:
            if not args.quiet:
                print(report.summary(), file=sys.stderr)
            if args.report:
                Path(args.report).write_text(json.dumps(report.as_dict(), indent=1) + "\n", encoding="utf-8")
            return 0
    docs = read_inputs(inputs, args.format)
    check_translation(translator, docs, cfg.decode, inputs, args.format)   # sizes, before any decoding
    out, report = translator.translate(docs, cfg.decode, progress=not args.quiet, origin=",".join(inputs))
    target = args.output or sys.stdout
    if args.print_scores:
        add_scores(translator, out)
    if args.output_format == "jsonl":
        write_jsonl(out, target)
    elif cfg.decode.nbest > 1 or args.print_scores:
        write_scored(out, target, cfg.decode.nbest)
    else:
        write_marker(out, target, side="tgt", allow_empty=True)
    if not args.quiet:
        print(report.summary(), file=sys.stderr)
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_dict(), indent=1) + "\n", encoding="utf-8")
    return 0


def translate_stream(translator, cfg, args):
    """Standard input in a line format, translated as it arrives: a ``<d>`` line or a blank line
    ends a document, which is translated and written (and flushed) at once; with a model that uses
    no context (Sent2Sent without context input) every line is translated as soon as it is read.
    The output has the input's lines (``<d>`` and blank lines kept). Returns the coverage report,
    or None when the input turns out to be JSON or XML (then read as a whole)."""
    import io

    from .document import Document
    from .errors import DataError
    from .translate import CoverageReport
    stdin = sys.stdin.buffer
    first = stdin.readline()
    if first.lstrip(b"\xef\xbb\xbf").lstrip()[:1] in (b"{", b"<") and first.strip() != b"<d>":
        sys.stdin = io.TextIOWrapper(io.BytesIO(first + stdin.read()), encoding="utf-8")
        return None
    per_line = cfg.data.mode == "sent2sent" and not cfg.data.context_input
    out = Path(args.output).open("w", encoding="utf-8") if args.output else sys.stdout
    total = CoverageReport()
    sents: list[str] = []
    ndocs = 0

    def flush() -> None:
        nonlocal ndocs
        if not sents:
            return
        docs, rep = translator.translate([Document(str(ndocs), list(sents))], cfg.decode, origin="<stdin>")
        ndocs += 1
        if args.print_scores:
            add_scores(translator, docs)
            out.write("".join(f"{sc:.4f}\t{t}\n" for sc, t in zip(docs[0].meta["scores"], docs[0].tgt)))
        else:
            out.write("".join(t + "\n" for t in docs[0].tgt))
        out.flush()
        for field in ("documents", "sentences", "instances", "malformed_instances", "empty_sentences"):
            setattr(total, field, getattr(total, field) + getattr(rep, field))
        total.documents_with_problems += rep.documents_with_problems
        sents.clear()
    try:
        for no, raw in _numbered_lines(first, stdin):
            try:
                line = raw.decode("utf-8").lstrip("\ufeff").strip()
            except UnicodeDecodeError as e:
                raise DataError(f"invalid UTF-8 (byte 0x{raw[e.start]:02x})", "<stdin>", no) from None
            if line in ("", "<d>"):
                flush()
                out.write(line + "\n")
                out.flush()
                continue
            sents.append(line)
            if per_line:
                flush()
        flush()
    finally:
        if out is not sys.stdout:
            out.close()
    return total


def _numbered_lines(first: bytes, stream):
    """``(line number, bytes)`` of ``first`` and then every line of ``stream``, as they arrive."""
    no, line = 1, first
    while line:
        yield no, line
        no, line = no + 1, stream.readline()


def add_scores(translator, docs) -> None:
    """``meta["scores"]``: each output sentence's log-probability per token under the model, in
    its own input format (a teacher-forced pass over the output, as ``docnmt score`` does), with
    ``logprobs`` and ``tokens`` per sentence and ``score`` / ``logprob`` / ``tokens`` of the document."""
    from .document import Document
    from .scoring import document_logprobs
    scored = document_logprobs(translator, [Document(d.docid, d.src, list(d.tgt)) for d in docs], origin="translation")
    for doc, per_sent in zip(docs, scored):
        lp, n = sum(x for x, _ in per_sent), sum(k for _, k in per_sent)
        doc.meta.update(scores=[x / max(k, 1) for x, k in per_sent], logprobs=[x for x, _ in per_sent],
                        tokens=[k for _, k in per_sent], score=lp / max(n, 1), logprob=lp)


def write_scored(docs, target, nbest: int) -> None:
    """Plain output with scores. ``--nbest N`` (N > 1): Moses n-best lines ``I ||| translation |||
    score`` (I: the sentence's 0-based number in the input; score: the length-normalised
    log-probability of the beam hypothesis it comes from), N per sentence, no ``<d>`` lines.
    ``--print-scores``: the marker format with ``score<TAB>translation`` lines and ``<d><TAB>score``
    document lines (log-probability per token under the model); a first document read without a
    ``<d>`` line (plain text) gets none, so the output has its input's lines."""
    from .readers import _output
    with _output(target) as fh:
        i = 0
        for k, doc in enumerate(docs):
            if nbest > 1:
                alts = doc.meta.get("nbest") or [[t] for t in doc.tgt]
                alt_scores = doc.meta.get("nbest_scores") or [[None] * len(a) for a in alts]
                for texts, scores in zip(alts, alt_scores):
                    for text, score in zip(texts, scores):
                        fh.write(f"{i} ||| {text} ||| {'' if score is None else f'{score:.4f}'}\n")
                    i += 1
                continue
            if k or not doc.meta.get("unmarked"):     # as write_marker: a plain input's lines stay aligned
                fh.write(f"<d>\t{doc.meta['score']:.4f}\n")
            for text, score in zip(doc.tgt, doc.meta["scores"]):
                fh.write(f"{score:.4f}\t{text}\n")


def cmd_score(args) -> int:
    import math

    from .readers import read_inputs, read_sentences
    from .scoring import context_usage, document_logprobs
    from .translate import Translator
    refuse_inputs([args.output], [args.src, args.ref, *model_files(args.model, args.checkpoint)])
    refuse_overwrite([args.output], args.force)
    refuse_unwritable([args.output])
    src, ref = read_inputs([args.src], args.format), read_sentences(args.ref)
    if len(src) != len(ref):
        raise DocnmtError(document_counts(args.src, len(src), args.ref, len(ref)))
    for d, (a, b) in enumerate(zip(src, ref)):
        if len(a.src) != len(b):
            raise DocnmtError(f"document {d + 1} ({a.docid}): {len(a.src)} source sentences in {args.src}, "
                              f"{len(b)} in {args.ref}")
        a.tgt = b
    translator = Translator.load(args.model, args.checkpoint, args.device)
    scores = document_logprobs(translator, src, progress=not args.quiet, origin=args.ref, with_words=args.cxmi)
    # --cxmi: the word pieces' log-probability in context (from the same pass) and alone,
    # (with, alone, pieces) per sentence
    words = context_usage(translator, src, progress=not args.quiet, origin=args.ref,
                          in_context=[[s[2:] for s in doc] for doc in scores]) if args.cxmi else None
    scores = [[s[:2] for s in doc] for doc in scores]
    nll = lambda lp, n: -lp / max(n, 1)  # noqa: E731
    bits = lambda gain, n: gain / max(n, 1) / math.log(2)  # noqa: E731
    lines = []
    if args.output_format == "tsv":
        lines.append("document\tsentence\tlogprob\ttokens\tnll_per_token"
                     + ("\tword_pieces\tlogprob_words\tlogprob_words_alone\tcxmi_bits" if words else ""))
    for d, (doc, per_sent) in enumerate(zip(src, scores)):
        lp, n = sum(x for x, _ in per_sent), sum(k for _, k in per_sent)
        per_words = words["documents"][d] if words else [None] * len(per_sent)
        doc_words = tuple(map(sum, zip(*per_words))) if words else None
        cx = lambda w: {"word_pieces": w[2], "logprob_words": w[0], "logprob_words_alone": w[1],  # noqa: E731
                        "cxmi_bits": bits(w[0] - w[1], w[2])} if w else {}
        if args.output_format == "jsonl":
            lines.append(json.dumps({"id": doc.docid, "logprob": lp, "tokens": n, "nll_per_token": nll(lp, n),
                                     **cx(doc_words), "sentences": [
                                         {"logprob": x, "tokens": k, "nll_per_token": nll(x, k), **cx(w)}
                                         for (x, k), w in zip(per_sent, per_words)]}, ensure_ascii=False))
            continue
        cells = lambda x, k, w: f"\t{x:.4f}\t{k}\t{nll(x, k):.4f}" + (  # noqa: E731
            f"\t{w[2]}\t{w[0]:.4f}\t{w[1]:.4f}\t{bits(w[0] - w[1], w[2]):.4f}" if w else "")
        lines += [f"{doc.docid}\t{i}" + cells(x, k, w) for i, ((x, k), w) in enumerate(zip(per_sent, per_words), 1)]
        lines.append(f"{doc.docid}\t*" + cells(lp, n, doc_words))
    text = "\n".join(lines) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if not args.quiet:
        total = sum(x for doc in scores for x, _ in doc)
        tokens = sum(k for doc in scores for _, k in doc)
        print(f"{sum(map(len, scores))} sentences, {tokens} target tokens: NLL {nll(total, tokens):.4f} nats/token "
              f"({nll(total, tokens) / math.log(2):.4f} bits), perplexity {math.exp(nll(total, tokens)):.2f}",
              file=sys.stderr)
        if words:
            by_pos = ", ".join(f"{p}: {v:+.4f}" for p, v in words["cxmi_by_position"].items())
            print(f"CXMI {words['cxmi_bits_per_token']:+.4f} bits per word piece (the context made "
                  f"{100 * words['sentences_more_likely_with_context']:.1f}% of the reference sentences more likely; "
                  f"by sentence position {by_pos})", file=sys.stderr)
    return 0


def document_counts(a, n_a: int, b, n_b: int) -> str:
    """"A has 1 document, B has 5 documents", with a hint where one side looks unmarked."""
    docs = lambda n: f"{n} document{'s' * (n != 1)}"  # noqa: E731
    hint = (" (documents are separated by <d> lines: a translation keeps its source's <d> lines)"
            if 1 in (n_a, n_b) else "")
    return f"{a} has {docs(n_a)}, {b} has {docs(n_b)}{hint}"


def refuse_overwrite(paths, force: bool) -> None:
    """A clear error before any work if an output file (or one of several; None: not asked
    for) exists and ``--force`` was not given."""
    for path in paths if isinstance(paths, (tuple, list)) else [paths]:
        if path and Path(path).is_dir():
            raise DocnmtError(f"{path}: is a directory; give a file name")
        if path and Path(path).exists() and not force and Path(path).is_file():   # not /dev/null, a pipe
            raise DocnmtError(f"{path} exists; pass --force to overwrite it")


def refuse_unwritable(paths) -> None:
    """A clear error before any work if an output file (None or "-": not asked for) could not be
    written: a directory, a missing parent directory, no write permission."""
    for path in paths:
        if not path or path == "-":
            continue
        p = Path(path)
        parent = p.parent if str(p.parent) else Path(".")
        if p.is_dir():
            raise DocnmtError(f"{path}: is a directory; give a file name")
        if not parent.is_dir():
            raise DocnmtError(f"{path}: cannot write file: no such directory {parent}")
        if not os.access(p if p.exists() else parent, os.W_OK):
            raise DocnmtError(f"{path}: cannot write file: permission denied")


MODEL_FILES = ("config.yaml", "model.safetensors", "spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json",
               "tokenizer.json", "source.spm", "target.spm", "pieces.json")      # the last four: import-hf


def model_files(model: str | None, checkpoint: str | None = None) -> list:
    """The files a command reads from a model directory (outputs may live beside them)."""
    return [*(Path(model) / f for f in MODEL_FILES), checkpoint] if model else []


def refuse_inputs(outputs, inputs) -> None:
    """A clear error, with or without ``--force``, if an output would be written over an input:
    the same file, or a file inside an input directory (a contrastive suite's)."""
    ins = [Path(p).resolve() for p in inputs if p and p != "-"]
    for out in outputs:
        if not out or out == "-":
            continue
        o = Path(out).resolve()
        for i in ins:
            if o == i or i in o.parents:
                raise DocnmtError(f"{out} is an input of this command ({i}); write the output elsewhere")


def cmd_probe(args) -> int:
    from .probe import OUTPUTS, ProbeSettings, run
    refuse_overwrite([Path(args.out) / f for f in OUTPUTS], args.force)
    from .readers import read_documents
    splits = {name: read_documents(getattr(args, name), fmt=args.format) for name in ("train", "valid", "test")}
    settings = ProbeSettings(batch_size=args.batch_size, max_epochs=args.max_epochs, max_examples=args.max_examples)
    run(args.models, splits, Path(args.out), settings, args.lengths, own_length=args.own_length)
    return 0


def cmd_evaluate(args) -> int:
    from .metrics import evaluate_documents, format_table, paired_bootstrap
    from .readers import read_sentences
    refuse_inputs([args.json], [args.hyp, args.ref, args.compare, getattr(args, "src", None)])
    refuse_unwritable([args.json, args.plot])
    check_scorers(args)
    hyp, ref = read_sentences(args.hyp, hypothesis=True), read_sentences(args.ref)
    if len(hyp) != len(ref):
        raise DocnmtError(document_counts(args.hyp, len(hyp), args.ref, len(ref)))
    result = evaluate_documents(hyp, ref)
    print(format_table(result))
    mismatched = result["n_mismatched_docs"]
    if mismatched * 2 > len(ref):     # most documents: s-level scores cover few sentences, or none
        result["warning"] = (f"{mismatched} of {len(ref)} documents have a different number of sentences in "
                             f"{args.hyp} and {args.ref}; s-level scores leave them out "
                             f"({result['n_sents_scored']} of {result['n_sents']} sentences scored)")
        print(f"WARNING: {result['warning']}", file=sys.stderr)
    if args.compare:
        other = read_sentences(args.compare, hypothesis=True)
        levels = [lvl for lvl in ("s", "d") if lvl == "d" or result["s_bleu"]]
        result["bootstrap"] = {lvl: paired_bootstrap(hyp, other, ref, level=lvl, n_samples=args.bootstrap_samples)
                               for lvl in levels}
        result["bootstrap_chrf"] = {lvl: paired_bootstrap(hyp, other, ref, level=lvl, metric="chrf",
                                                          n_samples=args.bootstrap_samples) for lvl in levels}
        for name, tests in (("BLEU", result["bootstrap"]), ("chrF", result["bootstrap_chrf"])):
            for lvl, b in tests.items():
                # the paths as given: two systems' outputs often share a file name in different run directories
                print(f"paired bootstrap ({lvl}-{name}, {b['n_samples']} samples): --hyp {args.hyp} {b['a']:.2f}, "
                      f"--compare {args.compare} {b['b']:.2f}; compare - hyp = {b['delta']:+.2f}, "
                      f"p = {b['p_value']:.4f}, 95% CI [{b['ci95_b_minus_a'][0]:+.2f}, {b['ci95_b_minus_a'][1]:+.2f}]")
    if args.by_length:
        result["by_length"] = _by_length(args, hyp, ref)
    if args.tcp:
        from .tcp import format_tcp, tcp_documents
        result["tcp"] = tcp_documents(hyp, args.tcp, tokenized=args.tcp_tokenized)
        print(format_tcp(result["tcp"]))
    if args.comet_model:
        result["comet"] = _comet(args, hyp, ref)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def check_scorers(args) -> None:
    """Mistyped --tcp or --comet-model paths: an error before any scoring, not after the table."""
    if getattr(args, "tcp", None):
        from .tcp import check_testset
        check_testset(args.tcp)
    if getattr(args, "comet_model", None) and not Path(args.comet_model).exists():
        raise DocnmtError(f"--comet-model {args.comet_model}: no such file (a local COMET checkpoint)")


def _by_length(args, hyp, ref) -> list[dict]:
    from .metrics import bleu_by_length, plot_by_length
    from .readers import read_sentences
    src = read_sentences(args.src, source=True) if args.src else ref
    if len(src) != len(ref) or any(len(s) != len(r) for s, r in zip(src, ref)):
        raise DocnmtError(f"{args.src}: not the same documents and sentences as {args.ref}")
    lengths = [sum(len(s.split()) for s in d) for d in src]
    rows = bleu_by_length(hyp, ref, lengths)
    unit = "source" if args.src else "reference"
    print(f"\nd-BLEU by document length ({unit} words)\n{'bucket':>16} {'docs':>5} {'cased':>7} {'lc':>7}")
    for r in rows:
        print(f"{r['bucket']:>16} {r['n_docs']:5d} {r['d_bleu']:7.2f} {r['d_bleu_lc']:7.2f}")
    if args.plot:
        plot_by_length(rows, args.plot, title=Path(args.hyp).name)
    return rows


def _comet(args, hyp, ref) -> dict | None:
    from .comet import aligned_sentences, comet_score
    from .readers import read_sentences
    if not args.src:
        print("COMET skipped: it needs the source documents (--src)")
        return None
    src = read_sentences(args.src, source=True)
    if len(src) != len(ref):
        raise DocnmtError(document_counts(args.src, len(src), args.ref, len(ref)))
    srcs, hyps, refs, kept = aligned_sentences(src, hyp, ref)
    res = comet_score(args.comet_model, srcs, hyps, refs)
    if isinstance(res, str):
        print(res)
        return None
    res.update(documents=kept, of_documents=len(ref))
    print(f"COMET {res['score']:.4f} ({len(res['scores'])} sentences of {kept}/{len(ref)} documents "
          f"whose sentence counts agree; {res['model']})")
    return res


def cmd_score_contrastive(args) -> int:
    from .contrastive import (
        accuracy_report,
        format_report,
        paired_test,
        plot_accuracy_by,
        read_decisions,
        right_answers,
        score_examples,
        write_scores,
    )
    from .suites import read_suite
    from .translate import Translator
    baseline = read_decisions(args.against) if args.against else None
    refuse_inputs((args.scores, args.json, args.plot),
                  [args.suite, args.against, *model_files(args.model, args.checkpoint)])
    refuse_overwrite((args.scores, args.json, args.plot), args.force)
    refuse_unwritable((args.scores, args.json, args.plot))
    if args.batch_tokens is not None and args.batch_tokens < 1:
        raise DocnmtError(f"--max-tokens must be at least 1, not {args.batch_tokens}")
    if args.max_context is not None and args.max_context < 0:
        raise DocnmtError(f"--max-context must be at least 0, not {args.max_context}")
    examples = read_suite(args.suite, args.format, split=args.split, detokenize=not args.no_detokenize,
                          lang=tuple(args.langs) if args.langs else None)
    if not examples:
        raise DocnmtError(f"{args.suite}: no contrastive examples")
    if baseline is not None and len(baseline) != len(examples):
        raise DocnmtError(f"--against {args.against}: {len(baseline)} examples, the suite has {len(examples)}")
    translator = Translator.load(args.model, args.checkpoint, args.device)
    scores = score_examples(translator, examples, args.max_context, progress=not args.quiet,
                            max_tokens=args.batch_tokens)
    report = accuracy_report(examples, scores)
    print(format_report(report, Path(args.suite).name))
    if baseline is not None:
        t = report["against"] = {"scores": args.against,
                                 **paired_test(baseline, right_answers(examples, scores))}
        print(f"against {args.against}: {100 * t['delta']:+.2f} points ({t['only_b']} examples right only here, "
              f"{t['only_a']} only there; exact McNemar p = {t['p_value']:.3f})")
    if args.scores:
        write_scores(args.scores, examples, scores)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, ensure_ascii=False))
    if args.plot:
        key = next((k for k in ("distance", "pronoun", "type", "phenomenon") if k in report["by"]), None)
        if key:
            plot_accuracy_by({Path(args.model).name: report}, key, args.plot)
    return 0


def cmd_entropy(args) -> int:
    from .readers import read_documents
    from .scoring import attention_entropy
    from .translate import Translator
    refuse_inputs([args.json], [args.src, args.ref, *model_files(args.model, args.checkpoint)])
    refuse_unwritable([args.json])
    docs = read_documents(args.src, args.ref, fmt=args.format)
    translator = Translator.load(args.model, args.checkpoint, args.device)
    res = attention_entropy(translator, docs, progress=not args.quiet)
    print(f"{res['instances']} instances, teacher-forced NLL {res['nll_bits_per_token']:.3f} bits/token")
    dist, share = res["self_distance_tokens"], res["context_share"]
    print(f"{'module':<22}{'entropy (bits)':>15}{'mean distance (tokens)':>24}{'on other sentences':>20}")
    for k, v in res["entropy_bits"].items():
        print(f"{k:<22}{v:15.3f}" + (f"{dist[k]:24.1f}" if k in dist else f"{'-':>24}")
              + (f"{100 * share[k]:19.1f}%" if k in share else f"{'-':>20}"))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


def cmd_fba_map(args) -> int:
    from .methods.docflat import plot_attention_map, sentence_attention_map
    from .readers import read_documents
    from .translate import Translator
    refuse_overwrite(args.output, args.force)
    docs = read_documents(args.src, fmt=args.format)
    if not 1 <= args.doc <= len(docs):
        raise DocnmtError(f"--doc {args.doc}: the input has {len(docs)} documents")
    translator = Translator.load(args.model, args.checkpoint, args.device)
    weights, sents = sentence_attention_map(translator, docs[args.doc - 1], args.start - 1, args.batch_size)
    plot_attention_map(weights, sents, args.output,
                       f"document {docs[args.doc - 1].docid}: encoder FBA, sentences {sents[0]}-{sents[-1]}")
    own = weights.diagonal().mean().item()
    print(f"sentences {sents[0]}-{sents[-1]}: mean weight to the same sentence {own:.4f}, "
          f"to others {(weights.sum() - weights.diagonal().sum()).item() / max(weights.numel() - len(sents), 1):.4f}; "
          f"wrote {args.output}")
    return 0


def cmd_compare(args) -> int:
    from .compare import compare
    check_scorers(args)
    compare(args.runs, args.src, args.ref, args.out, baseline=args.baseline, fmt=args.format, suites=args.suite,
            suite_format=args.suite_format,
            suite_options={"split": args.suite_split, "detokenize": not args.no_detokenize,
                           "lang": tuple(args.suite_langs) if args.suite_langs else None},
            tcp_dir=args.tcp, comet_model=args.comet_model, cxmi=args.cxmi,
            samples=args.bootstrap_samples, force=args.force, log=lambda m: print(m, file=sys.stderr),
            progress=not args.quiet)
    print((Path(args.out) / "compare.md").read_text())
    return 0


def cmd_average(args) -> int:
    from .checkpoint import average_checkpoints, list_checkpoints
    ckpts = list_checkpoints(Path(args.model))[-args.last:]
    if not ckpts:
        raise DocnmtError(f"{args.model}: no checkpoints to average")
    out = Path(args.output or Path(args.model) / "averaged.safetensors")
    refuse_overwrite(out, args.force)
    refuse_unwritable([out])
    if len(ckpts) < args.last:
        print(f"WARNING: --last {args.last} asked for, but {args.model} has only {len(ckpts)} checkpoint"
              f"{'s' * (len(ckpts) != 1)}: averaging those", file=sys.stderr)
    average_checkpoints(ckpts, out)
    print(f"averaged {len(ckpts)} checkpoints ({', '.join(c.name for c in ckpts)}) into {out}", file=sys.stderr)
    return 0


def cmd_quickstart(args) -> int:
    from .quickstart import run
    return run(Path(args.workdir), args.minutes, args.force, args.updates)


def cmd_presets(args) -> int:
    import shutil
    import textwrap

    from .config import preset_description, preset_names
    names = preset_names()
    width = max(map(len, names)) + 2
    text_width = max(40, shutil.get_terminal_size((110, 24)).columns - width)
    for name in names:
        lines = textwrap.wrap(preset_description(name), text_width, break_on_hyphens=False,
                              break_long_words=False) or [""]
        print(f"{name:<{width}}{lines[0]}")
        for line in lines[1:]:
            print(" " * width + line)
    return 0


def cmd_serve(args) -> int:
    try:
        from .serve import Settings, serve
    except ImportError as e:
        raise DocnmtError(f"docnmt serve needs the serve extra ({e.name} is missing): "
                          "pip install 'docnmt[serve]'") from None
    settings = Settings(max_sentences=args.request_sentences, max_chars=args.request_chars,
                        max_tokens=args.request_tokens,
                        max_upload_bytes=int(args.max_upload_mb * 2**20), max_beam=args.max_beam,
                        timeout=args.timeout, queue=args.queue, batch_wait=args.batch_wait_ms / 1000,
                        batch_tokens=args.batch_tokens, workers=args.workers, api_key=args.api_key)
    serve(args.models, args.host, args.port, settings, args.device, args.threads, args.log_level,
          announce=lambda m: print(m, file=sys.stderr, flush=True))
    return 0


def cmd_import_hf(args) -> int:
    from .hf import import_hf
    import_hf(args.hf_dir, args.save_dir, args.src_lang, args.tgt_lang, args.force,
              log=lambda m: print(m, file=sys.stderr))
    return 0


def cmd_export_hf(args) -> int:
    from .hf import export_hf
    export_hf(args.model, args.out, args.checkpoint, args.force, log=lambda m: print(m, file=sys.stderr))
    return 0


VERBS = {"prepare": cmd_prepare, "train": cmd_train, "translate": cmd_translate, "score": cmd_score,
         "evaluate": cmd_evaluate,
         "average": cmd_average, "quickstart": cmd_quickstart, "presets": cmd_presets, "probe": cmd_probe,
         "score-contrastive": cmd_score_contrastive, "entropy": cmd_entropy, "fba-map": cmd_fba_map,
         "compare": cmd_compare, "serve": cmd_serve, "import-hf": cmd_import_hf, "export-hf": cmd_export_hf}

if __name__ == "__main__":
    sys.exit(main())
