"""The verbs that measure: ``docnmt evaluate`` (BLEU and chrF of a translation, the paired
bootstrap, TCP, COMET), ``compare`` (one table of several systems), ``score-contrastive`` (a
model's accuracy on a contrastive test suite), ``entropy`` (attention entropy per module),
``probe`` (position probing of encoder layers) and ``fba-map`` (a map of the encoder's
flat-batch attention, through the method registry)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import DocnmtError
from .files import model_files, refuse_inputs, refuse_overwrite, refuse_unwritable, write_output, write_text_output
from .flags import Alias, add_verb, positive_int, typed_name

SUITE_FORMATS = ["auto", "voita", "bawden", "scat", "contrapro"]


MAX_BOOTSTRAP_SAMPLES = 10_000      # ten times the usual 1,000: seconds, and resample counts of N x sentences in memory


def bootstrap_samples(text: str) -> int:
    """--bootstrap-samples: 1 to MAX_BOOTSTRAP_SAMPLES (more runs for minutes and can fill the memory)."""
    value = positive_int(text)
    if value > MAX_BOOTSTRAP_SAMPLES:
        raise argparse.ArgumentTypeError(f"at most {MAX_BOOTSTRAP_SAMPLES:,}, not {value:,} (each resample scores "
                                         "the whole test set; 1,000 is the usual number)")
    return value


def add_evaluate(sub) -> None:
    p = add_verb(sub, "evaluate", "s-BLEU, d-BLEU and chrF of a translation against references")
    p.add_argument("--hyp", required=True, help="translation (marker format with <d> lines, or JSONL)")
    p.add_argument("--ref", required=True, help="references in the same document structure")
    p.add_argument("--compare", help="a second system's translation: paired bootstrap against --hyp")
    p.add_argument("--bootstrap-samples", type=bootstrap_samples, default=1000, metavar="N",
                   help="bootstrap resamples for the paired significance test of --compare (at most 10,000)")
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


def cmd_evaluate(args) -> int:
    from ..evaluation import evaluate_files
    refuse_inputs([args.json], [args.hyp, args.ref, args.compare, getattr(args, "src", None)])
    refuse_unwritable([args.json, args.plot])
    check_scorers(args)
    result = evaluate_files(args.hyp, args.ref, compare=args.compare, samples=args.bootstrap_samples, src=args.src,
                            by_length=args.by_length, plot=args.plot, tcp=args.tcp, tcp_tokenized=args.tcp_tokenized,
                            comet_model=args.comet_model)
    if args.json:
        write_text_output(args.json, json.dumps(result, indent=1))
    return 0


def check_scorers(args) -> None:
    """Mistyped --tcp or --comet-model paths: an error before any scoring, not after the table."""
    if getattr(args, "tcp", None):
        from ..tcp import check_testset
        check_testset(args.tcp)
    if getattr(args, "comet_model", None) and not Path(args.comet_model).exists():
        raise DocnmtError(f"--comet-model {args.comet_model}: no such file (a local COMET checkpoint)")


def add_compare(sub) -> None:
    p = add_verb(sub, "compare", "one table (Markdown, CSV) of all metrics of several systems on the same test data")
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
    p.add_argument("--suite-format", default="auto", choices=SUITE_FORMATS,
                   help="format of the --suite files (auto: from the file names and contents)")
    p.add_argument("--suite-split", default="valid", help="SCAT split of the suites")
    p.add_argument("--suite-langs", nargs=2, metavar=("SRC", "TGT"), help="languages of the suites")
    p.add_argument("--no-detokenize", action="store_true", help="Voita et al.: keep the suite's Moses tokenisation")
    p.add_argument("--tcp", metavar="PDC_DIR", help="also TCP against this PDC test directory")
    p.add_argument("--comet-model", help="also COMET with this local checkpoint")
    p.add_argument("--cxmi", action="store_true",
                   help="also how much each model uses its context: CXMI in bits per reference word piece "
                        "(as docnmt score --cxmi; model directories only)")
    p.add_argument("--bootstrap-samples", type=bootstrap_samples, default=1000, metavar="N",
                   help="bootstrap resamples of the paired significance tests (at most 10,000)")
    p.add_argument("--force", action="store_true", help="re-translate, and write into a non-compare --out")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")


def cmd_compare(args) -> int:
    from ..compare import compare
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


def add_score_contrastive(sub) -> None:
    p = add_verb(sub, "score-contrastive", "accuracy of a model on a contrastive test suite (pronouns, deixis, ...)")
    p.add_argument("model", help="model directory")
    p.add_argument("suite", help="suite file or directory: Voita et al. JSON, Bawden et al. JSON, SCAT directory, "
                                 "or contrapro.json with its text/context files")
    p.add_argument("--format", default="auto", choices=SUITE_FORMATS,
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
    p.add_argument("--batch-tokens", dest="batch_tokens", type=int, action=Alias,        # the old name
                   help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--force", action="store_true", help="overwrite existing --scores/--json/--plot files")


def cmd_score_contrastive(args) -> int:
    from ..contrastive import (
        accuracy_report,
        format_report,
        paired_test,
        read_decisions,
        right_answers,
        score_examples,
        write_scores,
    )
    from ..evaluation import against_line, plot_suite
    from ..translate import Translator
    baseline = read_decisions(args.against) if args.against else None
    outputs = (args.scores, args.json, args.plot)
    refuse_inputs(outputs, [args.suite, args.against, *model_files(args.model, args.checkpoint)])
    refuse_overwrite(outputs, args.force)
    refuse_unwritable(outputs)
    examples = read_examples(args, baseline)
    translator = Translator.load(args.model, args.checkpoint, args.device)
    scores = score_examples(translator, examples, args.max_context, progress=not args.quiet,
                            max_tokens=args.batch_tokens)
    report = accuracy_report(examples, scores)
    print(format_report(report, Path(args.suite).name))
    if baseline is not None:
        report["against"] = {"scores": args.against, **paired_test(baseline, right_answers(examples, scores))}
        print(against_line(report["against"], args.against))
    if args.scores:
        write_output(args.scores, lambda target: write_scores(target, examples, scores))
    if args.json:
        write_text_output(args.json, json.dumps(report, indent=1, ensure_ascii=False))
    if args.plot:
        plot_suite(report, Path(args.model).name, args.plot)
    return 0


def read_examples(args, baseline) -> list:
    """The suite's examples, after the checks of the numeric flags; as many as ``--against`` has."""
    from ..suites import read_suite
    if args.batch_tokens is not None and args.batch_tokens < 1:
        raise DocnmtError(f"{typed_name(args, '--max-tokens', 'batch_tokens')} must be at least 1, "
                          f"not {args.batch_tokens}")
    if args.max_context is not None and args.max_context < 0:
        raise DocnmtError(f"--max-context must be at least 0, not {args.max_context}")
    examples = read_suite(args.suite, args.format, split=args.split, detokenize=not args.no_detokenize,
                          lang=tuple(args.langs) if args.langs else None)
    if not examples:
        raise DocnmtError(f"{args.suite}: no contrastive examples")
    if baseline is not None and len(baseline) != len(examples):
        raise DocnmtError(f"--against {args.against}: {len(baseline)} examples, the suite has {len(examples)}")
    return examples


def add_entropy(sub) -> None:
    p = add_verb(sub, "entropy", "attention entropy per module (bits), self-attention distance (tokens) and the "
                                 "attention weight on other sentences than the query's own, of a model on parallel "
                                 "documents")
    p.add_argument("model", help="model directory")
    p.add_argument("--src", "--input", "-i", dest="src", required=True, help="source documents")
    p.add_argument("--ref", required=True, help="target documents")
    p.add_argument("--format", default="auto", help="input format (as for translate)")
    p.add_argument("--json", help="also write the result as JSON here")
    p.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def cmd_entropy(args) -> int:
    from ..evaluation import entropy_table
    from ..readers import read_documents
    from ..scoring import attention_entropy
    from ..translate import Translator
    refuse_inputs([args.json], [args.src, args.ref, *model_files(args.model, args.checkpoint)])
    refuse_unwritable([args.json])
    docs = read_documents(args.src, args.ref, fmt=args.format)
    translator = Translator.load(args.model, args.checkpoint, args.device)
    res = attention_entropy(translator, docs, progress=not args.quiet)
    print(entropy_table(res))
    if args.json:
        write_text_output(args.json, json.dumps(res, indent=1))
    return 0


def add_probe(sub) -> None:
    p = add_verb(sub, "probe", "position probing of encoder layers (absolute, relative, word order)")
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


def cmd_probe(args) -> int:
    from ..probe import OUTPUTS, ProbeSettings, run
    from ..readers import read_documents
    refuse_overwrite([Path(args.out) / f for f in OUTPUTS], args.force)
    splits = {name: read_documents(getattr(args, name), fmt=args.format) for name in ("train", "valid", "test")}
    settings = ProbeSettings(batch_size=args.batch_size, max_epochs=args.max_epochs, max_examples=args.max_examples)
    run(args.models, splits, Path(args.out), settings, args.lengths, own_length=args.own_length)
    return 0


def add_fba_map(sub) -> None:
    p = add_verb(sub, "fba-map", "DocFlat: the encoder flat-batch attention of one decoding batch, "
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


def cmd_fba_map(args) -> int:
    from ..methods import sentence_attention_map
    from ..readers import read_documents
    from ..translate import Translator
    refuse_overwrite(args.output, args.force)
    docs = read_documents(args.src, fmt=args.format)
    if not 1 <= args.doc <= len(docs):
        raise DocnmtError(f"--doc {args.doc}: the input has {len(docs)} documents")
    translator = Translator.load(args.model, args.checkpoint, args.device)
    weights, sents = sentence_attention_map(translator, docs[args.doc - 1], args.start - 1, args.batch_size,
                                            args.output)
    own = weights.diagonal().mean().item()
    others = (weights.sum() - weights.diagonal().sum()).item() / max(weights.numel() - len(sents), 1)
    print(f"sentences {sents[0]}-{sents[-1]}: mean weight to the same sentence {own:.4f}, "
          f"to others {others:.4f}; wrote {args.output}")
    return 0
