"""The ``docnmt`` command: prepare, train, translate, evaluate, average, quickstart, presets, probe,
score-contrastive, entropy, fba-map, compare.

Flags follow fairseq's vocabulary (``--max-tokens``, ``--update-freq``, ``--lenpen``,
``--max-len-a/b``, ``--patience``, ...). Errors in the user's input are printed as one line and
exit with status 2; a traceback means a bug in docnmt.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import DocnmtError
from .readers import FORMATS

FORMAT_HELP = " | ".join(FORMATS)

# flag -> (config key, type, help); shared by `train` (and the decode ones by `translate`)
TRAIN_FLAGS = {
    "--arch": (None, str, "named architecture/experiment preset (see `docnmt presets`)"),
    "--mode": ("data.mode", str, "sent2sent | doc2sent | doc2doc | mr | pseudodoc"),
    "--context": ("data.context", int, "doc2sent / pseudodoc: number of previous sentences"),
    "--max-instance-tokens": ("data.max_instance_tokens", int, "doc2doc/mr: instance budget in tokens, see "
                              "docs/methods/baselines.md#splitting-documents-into-instances-of-at-most-512-tokens"),
    "--separator": ("data.separator", str, "index (<sepI>) | uniform (<sep>) | group (<s> x </s>, G-Transformer) "
                    "| global_index (<sepJ> x </s>, DocFlat)"),
    "--batch-order": ("data.batch_order", str, "sorted (length buckets) | ordered (consecutive instances, "
                      "whole batches shuffled; DocFlat) | strict (ordered, never shuffled)"),
    "--mix-sentences": ("data.mix_sentences", str, "true: add sentence pairs (doc+sent / ctx+sent)"),
    "--dls": ("data.dls", str, "true: doc2doc training segments resampled every epoch (dynamic length sampling)"),
    "--dls-start-epoch": ("data.dls_start_epoch", int, "DLS temperature T = exp(epoch - k): this k"),
    "--length-aware": ("model.length_aware", str, "true: length-aware attention (logits x log n / log mean n)"),
    "--max-tokens": ("train.max_tokens", int, "tokens per batch (padded, max of source/target)"),
    "--update-freq": ("train.update_freq", int, "batches per optimizer update"),
    "--lr": ("train.lr", float, "peak learning rate"),
    "--warmup-updates": ("train.warmup_updates", int, "linear warm-up of the inverse-sqrt schedule"),
    "--max-update": ("train.max_update", int, "stop after this many updates"),
    "--max-epoch": ("train.max_epoch", int, "stop after this many epochs"),
    "--max-minutes": ("train.max_minutes", float, "stop after this much training time"),
    "--patience": ("train.patience", int, "stop after this many validations without improvement"),
    "--dropout": ("model.dropout", float, "dropout"),
    "--label-smoothing": ("train.label_smoothing", float, "label smoothing epsilon"),
    "--clip-norm": ("train.clip_norm", float, "gradient clipping (0 = off)"),
    "--pretrained-lr-scale": ("train.pretrained_lr_scale", float,
                              "lr of the parameters copied by --init-from, as a share of --lr (G-Transformer: 0.2)"),
    "--freeze-pretrained": ("train.freeze_pretrained", str,
                            "true: train only the parameters --init-from did not set (two-step training)"),
    "--context-input": ("data.context_input", int, "sent2sent: previous source sentences as a context input"),
    "--context-self": ("data.context_self", str,
                       "true: pairs of sentence-level corpora get their own source as context (step 2 mixing)"),
    "--word-dropout": ("train.word_dropout", float, "P(word -> <mask>) on source and decoder input"),
    "--word-dropout-epochs": ("train.word_dropout_epochs", int, "word dropout in epochs 1..N only (0 = all)"),
    "--seed": ("train.seed", int, "random seed"),
    "--precision": ("train.precision", str, "auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 | fp16 (autocast)"),
    "--validate-interval-updates": ("train.validate_interval_updates", int, "validate every N updates"),
    "--save-interval-updates": ("train.save_interval_updates", int, "checkpoint every N updates"),
    "--keep-last": ("train.keep_last", int, "checkpoints kept (for averaging)"),
    "--best-metric": ("train.best_metric", str, "loss | nll_loss | bleu"),
    "--tensorboard-logdir": ("train.tensorboard_dir", str, "also log to TensorBoard here"),
    "--threads": ("train.threads", int, "CPU threads (0 = torch default)"),
    "--log-interval": ("train.log_interval", int, "log every N updates"),
}
DECODE_FLAGS = {
    "--beam": ("decode.beam", int, "beam size (1 = greedy)"),
    "--lenpen": ("decode.lenpen", float, "length penalty: score / length**lenpen"),
    "--lenpen-style": ("decode.lenpen_style", str, "fairseq (length**lenpen) | gnmt (((5+length)/6)**lenpen)"),
    "--max-len-a": ("decode.max_len_a", float, "max output length = a * source length + b"),
    "--max-len-b": ("decode.max_len_b", int, "max output length = a * source length + b"),
    "--min-len": ("decode.min_len", int, "minimum output length"),
    "--nbest": ("decode.nbest", int, "hypotheses kept per input (JSONL output)"),
    "--no-repeat-ngram-size": ("decode.no_repeat_ngram_size", int,
                               "never repeat an n-gram of word pieces in a hypothesis "
                               "(0 = off; separators do not count)"),
    "--batch-tokens": ("decode.max_tokens", int, "source tokens per decoding batch"),
    "--batch-size": ("decode.max_sentences", int, "instances per decoding batch"),
    "--precision": ("decode.precision", str, "auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 (autocast)"),
    "--official-start": ("decode.official_start", str,
                         "true: G-Transformer starts decoding from <s> like the official code "
                         "(default: EOD, as in training)"),
    "--max-instance-tokens": ("data.max_instance_tokens", int,
                              "Doc2Doc: split documents into instances of fewer tokens (0 = whole documents)"),
    "--sliding": ("decode.sliding", str, "true: Doc2Doc sliding decoding of documents longer than the window"),
    "--sliding-window": ("decode.sliding_window", float, "sliding window as a share of the training instance budget"),
    "--sentence-count": ("decode.sentence_count", str, "true: force the source's sentence count (separator formats)"),
    "--first-pass": ("decode.first_pass", str,
                     ("DocFlat: pass 1 of two-pass decoding, a sentence model's directory or a file of its "
                      "translations (one line per input sentence; default: the model itself)")),
}


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_flags(p: argparse.ArgumentParser, flags: dict) -> None:
    for flag, (_, typ, help_) in flags.items():
        p.add_argument(flag, type=typ, help=help_)


def collect_overrides(args, flags: dict) -> dict:
    out = {}
    for flag, (key, _, _) in flags.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if key and value is not None:
            out[key] = value
    for item in getattr(args, "set", None) or []:
        if "=" not in item:
            raise DocnmtError(f"--set expects section.key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="docnmt", description="Document-level neural machine translation.")
    ap.add_argument("--version", action="version", version=_version())
    sub = ap.add_subparsers(dest="verb", required=True)

    p = sub.add_parser("prepare", help="read corpora, learn subwords, encode and store them")
    p.add_argument("--source-lang", "-s", required=True)
    p.add_argument("--target-lang", "-t", required=True)
    p.add_argument("--trainpref", nargs="+", required=True, help="corpus prefixes (PREFIX.LANG files)")
    p.add_argument("--validpref", nargs="+")
    p.add_argument("--testpref", nargs="+")
    p.add_argument("--destdir", required=True)
    p.add_argument("--subword", default="spm", choices=["spm", "moses-bpe"],
                   help="spm: joint SentencePiece model (--vocab-size); moses-bpe: the classic pipeline, Moses "
                        "tokenisation + joint subword-nmt BPE (--bpe-merges; needs pip install docnmt[moses])")
    p.add_argument("--vocab-size", type=positive_int, default=8000, help="spm: joint SentencePiece pieces")
    p.add_argument("--bpe-merges", type=positive_int, default=30000, help="moses-bpe: joint BPE merge operations")
    p.add_argument("--spm-model", help="reuse this SentencePiece model file, or the subword model (either kind) "
                                       "of a data/model directory")
    p.add_argument("--format", default="auto", help=FORMAT_HELP)
    p.add_argument("--max-sentence-tokens", type=positive_int, default=1022,
                   help="a longer sentence (in subword tokens) is an error naming it")
    p.add_argument("--force", action="store_true", help="overwrite a non-empty --destdir")

    p = sub.add_parser("train", help="train a model")
    p.add_argument("data", help="directory written by `docnmt prepare`")
    p.add_argument("--save-dir", required=True, help="model directory (resumed if it holds a run)")
    p.add_argument("--config", "-c", help="YAML config or preset name")
    add_flags(p, TRAIN_FLAGS)
    add_flags(p, {k: v for k, v in DECODE_FLAGS.items() if k in ("--beam", "--lenpen")})
    p.add_argument("--valid-bleu", action="store_true", help="also translate the validation set and report BLEU")
    p.add_argument("--init-from", help="initialise the weights from this model directory or .safetensors")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="any config value")
    p.add_argument("--force", action="store_true",
                   help="start over in a --save-dir holding a docnmt model (never in a folder with other files)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("translate", help="translate documents")
    p.add_argument("model", help="model directory")
    p.add_argument("--input", "-i", nargs="*", help="source file(s); stdin when omitted")
    p.add_argument("--format", default="auto", help="input format: " + FORMAT_HELP)
    p.add_argument("--output", "-o", help="output file (stdout when omitted); never overwritten without --force")
    p.add_argument("--output-format", default="marker", choices=["marker", "jsonl"])
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--greedy", action="store_true", help="greedy search (beam 1)")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--force", action="store_true")
    p.add_argument("--report", metavar="FILE",
                   help="also write the coverage report (documents fully recovered, empty and merged sentences) "
                        "here as JSON; never overwritten without --force")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or report on stderr")
    add_flags(p, DECODE_FLAGS)

    p = sub.add_parser("evaluate", help="s-BLEU, d-BLEU and chrF of a translation against references")
    p.add_argument("--hyp", required=True, help="translation (marker format with <d> lines, or JSONL)")
    p.add_argument("--ref", required=True, help="references in the same document structure")
    p.add_argument("--compare", help="a second system's translation: paired bootstrap against --hyp")
    p.add_argument("--bootstrap-samples", type=positive_int, default=1000)
    p.add_argument("--json", help="also write the results as JSON here")
    p.add_argument("--by-length", action="store_true",
                   help="also d-BLEU per document-length bucket (source words with --src, else reference words)")
    p.add_argument("--src", help="source documents (for --by-length)")
    p.add_argument("--plot", help="--by-length: write the d-BLEU vs length plot here (PNG)")

    p.add_argument("--tcp", metavar="PDC_DIR",
                   help="also TCP (Zh-En discourse metric) against a PDC test directory with en.tok and en.candidates")
    p.add_argument("--tcp-tokenized", action="store_true", help="--tcp: the hypothesis is already Moses-tokenised")
    p.add_argument("--comet-model", help="also COMET with this local checkpoint (needs --src and unbabel-comet; "
                                         "never downloads; skipped with a one-line note otherwise)")

    p = sub.add_parser("score-contrastive",
                       help="accuracy of a model on a contrastive test suite (pronouns, deixis, ...)")
    p.add_argument("model", help="model directory")
    p.add_argument("suite", help="suite file or directory: Voita et al. JSON, Bawden et al. JSON, SCAT directory, "
                                 "or contrapro.json with its text/context files")
    p.add_argument("--format", default="auto", choices=["auto", "voita", "bawden", "scat", "contrapro"])
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
    p.add_argument("--batch-tokens", type=int, help="tokens per scoring batch")
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--force", action="store_true", help="overwrite existing --scores/--json/--plot files")

    p = sub.add_parser("entropy", help="attention entropy per module (bits) and self-attention distance (tokens) "
                                       "of a model on parallel documents")
    p.add_argument("model", help="model directory")
    p.add_argument("--src", required=True, help="source documents")
    p.add_argument("--ref", required=True, help="target documents")
    p.add_argument("--format", default="auto", help="input format (as for translate)")
    p.add_argument("--json", help="also write the result as JSON here")
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--quiet", "-q", action="store_true")

    p = sub.add_parser("fba-map", help="DocFlat: the encoder flat-batch attention of one decoding batch, "
                                       "per sentence pair (PNG)")
    p.add_argument("model", help="DocFlat model directory")
    p.add_argument("--src", "-i", required=True, help="source documents (any input format)")
    p.add_argument("--format", default="auto", help="input format (as for translate)")
    p.add_argument("--doc", type=int, default=1, help="document number (1-based)")
    p.add_argument("--start", type=int, default=1, help="first sentence of the batch (1-based)")
    p.add_argument("--batch-size", type=int, default=16, help="sentences per batch (the decoding batch)")
    p.add_argument("--output", "-o", required=True, help="PNG to write; never overwritten without --force")
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--force", action="store_true")

    p = sub.add_parser("compare",
                       help="one table (Markdown, CSV) of all metrics of several systems on the same test data")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="model directories or translation files, optionally NAME=PATH")
    p.add_argument("--src", required=True, help="source documents of the test set")
    p.add_argument("--ref", required=True, help="reference documents (marker or JSONL)")
    p.add_argument("--format", default="auto", help="format of --src (as for translate)")
    p.add_argument("--out", default="compare",
                   help="directory for compare.md/.csv/.json, plots and cached translations")
    p.add_argument("--baseline", help="system the others are tested against (default: the first)")
    p.add_argument("--suite", action="append", default=[],
                   help="also score model directories on this contrastive suite")
    p.add_argument("--suite-format", default="auto", choices=["auto", "voita", "bawden", "scat", "contrapro"])
    p.add_argument("--suite-split", default="valid", help="SCAT split of the suites")
    p.add_argument("--suite-langs", nargs=2, metavar=("SRC", "TGT"), help="languages of the suites")
    p.add_argument("--no-detokenize", action="store_true", help="Voita et al.: keep the suite's Moses tokenisation")
    p.add_argument("--tcp", metavar="PDC_DIR", help="also TCP against this PDC test directory")
    p.add_argument("--comet-model", help="also COMET with this local checkpoint")
    p.add_argument("--bootstrap-samples", type=positive_int, default=1000)
    p.add_argument("--force", action="store_true", help="re-translate, and write into a non-compare --out")
    p.add_argument("--quiet", "-q", action="store_true")

    p = sub.add_parser("probe", help="position probing of encoder layers (absolute, relative, word order)")
    p.add_argument("models", nargs="+", help="model directories (compared in the plots)")
    p.add_argument("--train", required=True, help="documents to train the probes on (source side is read)")
    p.add_argument("--valid", required=True, help="documents to select the probes on")
    p.add_argument("--test", required=True, help="documents to score the probes on")
    p.add_argument("--format", default="auto", help="input format (as for translate)")
    p.add_argument("--out", default="probe", help="directory for probe.json, probe.md and the PNG plots")
    p.add_argument("--force", action="store_true", help="overwrite the results of an earlier probe in --out")
    p.add_argument("--lengths", nargs="*", type=int, default=[],
                   help="also absolute-position accuracy of the top layer on inputs of at most these tokens")
    p.add_argument("--max-examples", type=int, default=20000, help="tokens or pairs per split and task")
    p.add_argument("--max-epochs", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=64)

    p = sub.add_parser("average", help="average the last N checkpoints of a model directory")
    p.add_argument("model", help="model directory")
    p.add_argument("--last", type=positive_int, default=5)
    p.add_argument("--output", "-o", help="default MODEL/averaged.safetensors")
    p.add_argument("--force", action="store_true")

    p = sub.add_parser("quickstart", help="prepare, train and translate the bundled chat corpus")
    p.add_argument("--workdir", default="docnmt-quickstart")
    p.add_argument("--minutes", type=float, default=6.0, help="training time budget")
    p.add_argument("--force", action="store_true", help="start over in a --workdir an earlier quick start made")

    sub.add_parser("presets", help="list the named presets")
    return ap


def _version() -> str:
    from . import __version__
    return f"docnmt {__version__}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
    if args.valid_bleu:
        overrides["train.valid_bleu"] = True
    if args.config and args.arch:
        raise DocnmtError("give either --config or --arch, not both")
    cfg = Config.load(args.config or args.arch or "transformer_small").override(overrides)
    trainer = Trainer(cfg, args.data, args.save_dir, force=args.force, init_from=args.init_from,
                      progress_bar=not args.no_progress)
    out = trainer.train()
    print(f"model saved in {out}", file=sys.stderr)
    return 0


def cmd_translate(args) -> int:
    from .readers import read_inputs, write_jsonl, write_marker
    from .translate import Translator
    inputs = args.input or ["-"]
    if args.report and args.output and Path(args.report).resolve() == Path(args.output).resolve():
        raise DocnmtError("--report and --output name the same file")
    refuse_inputs([args.output, args.report], [*inputs, *model_files(args.model, args.checkpoint)])
    refuse_overwrite([args.output, args.report], args.force)
    translator = Translator.load(args.model, args.checkpoint, args.device)
    overrides = collect_overrides(args, DECODE_FLAGS)
    if args.greedy:
        overrides["decode.beam"] = 1
    cfg = translator.cfg.override(overrides) if overrides else translator.cfg
    translator.cfg = cfg
    docs = read_inputs(inputs, args.format)
    out, report = translator.translate(docs, cfg.decode, progress=not args.quiet, origin=",".join(inputs))
    target = args.output or sys.stdout
    if args.output_format == "jsonl":
        write_jsonl(out, target)
    else:
        write_marker(out, target, side="tgt", allow_empty=True)
    if not args.quiet:
        print(report.summary(), file=sys.stderr)
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_dict(), indent=1) + "\n", encoding="utf-8")
    return 0


def refuse_overwrite(paths, force: bool) -> None:
    """A clear error before any work if an output file (or one of several; None: not asked
    for) exists and ``--force`` was not given."""
    for path in paths if isinstance(paths, (tuple, list)) else [paths]:
        if path and Path(path).exists() and not force:
            raise DocnmtError(f"{path} exists; pass --force to overwrite it")


MODEL_FILES = ("config.yaml", "model.safetensors", "spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json")


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
    run(args.models, splits, Path(args.out), settings, args.lengths)
    return 0


def cmd_evaluate(args) -> int:
    from .metrics import evaluate_documents, format_table, paired_bootstrap
    from .readers import read_sentences
    refuse_inputs([args.json], [args.hyp, args.ref, args.compare, getattr(args, "src", None)])
    hyp, ref = read_sentences(args.hyp, hypothesis=True), read_sentences(args.ref)
    if len(hyp) != len(ref):
        raise DocnmtError(f"{args.hyp} has {len(hyp)} documents, {args.ref} has {len(ref)}")
    result = evaluate_documents(hyp, ref)
    print(format_table(result))
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


def _by_length(args, hyp, ref) -> list[dict]:
    from .metrics import bleu_by_length, plot_by_length
    from .readers import read_sentences
    src = read_sentences(args.src) if args.src else ref
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
    src = read_sentences(args.src)
    if len(src) != len(ref):
        raise DocnmtError(f"{args.src} has {len(src)} documents, {args.ref} has {len(ref)}")
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
    docs = read_documents(args.src, args.ref, fmt=args.format)
    translator = Translator.load(args.model, args.checkpoint, args.device)
    res = attention_entropy(translator, docs, progress=not args.quiet)
    print(f"{res['instances']} instances, teacher-forced NLL {res['nll_bits_per_token']:.3f} bits/token")
    dist = res["self_distance_tokens"]
    print(f"{'module':<22}{'entropy (bits)':>15}{'mean distance (tokens)':>24}")
    for k, v in res["entropy_bits"].items():
        print(f"{k:<22}{v:15.3f}" + (f"{dist[k]:24.1f}" if k in dist else f"{'-':>24}"))
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
    compare(args.runs, args.src, args.ref, args.out, baseline=args.baseline, fmt=args.format, suites=args.suite,
            suite_format=args.suite_format,
            suite_options={"split": args.suite_split, "detokenize": not args.no_detokenize,
                           "lang": tuple(args.suite_langs) if args.suite_langs else None},
            tcp_dir=args.tcp, comet_model=args.comet_model,
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
    average_checkpoints(ckpts, out)
    print(f"averaged {len(ckpts)} checkpoints ({', '.join(c.name for c in ckpts)}) into {out}", file=sys.stderr)
    return 0


def cmd_quickstart(args) -> int:
    from .quickstart import run
    return run(Path(args.workdir), args.minutes, args.force)


def cmd_presets(args) -> int:
    from .config import PRESET_DIR, preset_names
    for name in preset_names():
        first = (PRESET_DIR / f"{name}.yaml").read_text().splitlines()[0].lstrip("# ")
        print(f"{name:20s} {first}")
    return 0


VERBS = {"prepare": cmd_prepare, "train": cmd_train, "translate": cmd_translate, "evaluate": cmd_evaluate,
         "average": cmd_average, "quickstart": cmd_quickstart, "presets": cmd_presets, "probe": cmd_probe,
         "score-contrastive": cmd_score_contrastive, "entropy": cmd_entropy, "fba-map": cmd_fba_map,
         "compare": cmd_compare}

if __name__ == "__main__":
    sys.exit(main())
