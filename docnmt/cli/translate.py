"""``docnmt translate`` (documents in, translations out; the flags of ``DECODE_FLAGS``) and
``docnmt score`` (the log-probability of given references)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import DataError, DocnmtError
from .files import model_files, refuse_inputs, refuse_overwrite, refuse_unwritable, write_output, write_text_output
from .flags import DECODE_ALIASES, FORMAT_HELP, Alias, add_flags, add_verb, collect_overrides, decode_flags, flag_labels
from .kept import KEPT_HELP, add_kept_flags, read_kept_input, translate_kept


def add_translate(sub) -> None:
    p = add_verb(sub, "translate", "translate documents",
                 epilog="Decoding defaults are the model's own (the decode section of MODEL/config.yaml); the "
                        "defaults shown are the base configuration's.")
    groups = {title: p.add_argument_group(title) for title in ("input and output", "search", "batching",
                                                                "methods", "model")}
    p.add_argument("model", help="model directory")
    g = groups["input and output"]
    g.add_argument("--input", "--src", "-i", nargs="*", metavar="FILE", help="source file(s) (default: stdin)")
    g.add_argument("--format", default="auto", help="input format: " + FORMAT_HELP + KEPT_HELP)
    g.add_argument("--output", "-o", help="output file (default: stdout); never overwritten without --force. With "
                   "input files, finished chunks of documents are journalled beside it (OUTPUT.partial.jsonl) and "
                   "the same command after a stop goes on from them")
    g.add_argument("--output-format", default="marker", choices=["marker", "jsonl"],
                   help="marker: one line per source sentence with <d> lines between documents; jsonl: one "
                        "object per document (sentences, n-best lists, scores)")
    g.add_argument("--force", action="store_true", help="overwrite --output and --report if they exist (and "
                   "delete another translation's journal beside the output; this translation's goes on)")
    add_kept_flags(g)
    g.add_argument("--report", metavar="FILE",
                   help="also write the coverage report (documents fully recovered, empty and merged sentences) "
                        "here as JSON; never overwritten without --force")
    g.add_argument("--quiet", "-q", action="store_true", help="no progress bar or report on stderr")
    g.add_argument("--context-src", metavar="FILE",
                   help="earlier sentences of the input's (first) document, one a line: its context")
    g.add_argument("--context-tgt", metavar="FILE",
                   help="their translations (edited or not), one a line: forced as the target context; only the "
                        "input's sentences are translated and written")
    g.add_argument("--print-scores", action="store_true",
                   help="add each sentence's and document's log-probability per token under the model "
                        "(plain output: 'score<TAB>translation' and '<d><TAB>score' lines, the latter only where the "
                        "input has <d> lines; JSONL: meta)")
    groups["search"].add_argument("--greedy", action="store_true", help="greedy search (beam 1)")
    g = groups["model"]
    g.add_argument("--checkpoint", help="weights to use instead of MODEL/model.safetensors")
    g.add_argument("--device", help="cpu | cuda | cuda:N (default: cuda when there is a GPU)")
    flags = decode_flags()
    add_flags(p, flags, groups)
    for alias, flag in DECODE_ALIASES.items():
        p.add_argument(alias, dest=flag[2:].replace("-", "_"), type=flags[flag][1], action=Alias,
                       help=argparse.SUPPRESS)


def cmd_translate(args) -> int:
    from .. import engines
    from ..journal import journal_path
    from ..translate import Translator
    from ..translate_io import translate_stream, write_report
    inputs = args.input or ["-"]
    if args.report and args.output and Path(args.report).resolve() == Path(args.output).resolve():
        raise DocnmtError("--report and --output name the same file")
    refuse_inputs([args.output, args.report], [*inputs, *model_files(args.model, args.checkpoint),
                                               *filter(None, [args.context_src, args.context_tgt])])
    kept = read_kept_input(args, inputs)      # SRT, WebVTT, DOCX, Markdown, HTML, text: written back whole
    # a stopped run's output and report may be there (stopped after writing them): its journal says so
    journalled = bool(args.output) and inputs != ["-"] and not kept and journal_path(args.output).exists()
    refuse_overwrite([args.output, args.report], args.force or journalled)
    refuse_unwritable([args.output, args.report])
    translator = Translator.load(args.model, args.checkpoint, args.device)
    translator.cfg = cfg = decoding_config(args, translator.cfg)
    if args.fallback_model and cfg.decode.fallback == "none":
        raise DocnmtError("--fallback-model names the model the fallback uses, but --fallback is none: "
                          "give one of them")
    if cfg.decode.fallback_model and cfg.decode.fallback != "none":      # a bad directory: an error before decoding
        from ..fallback import sentence_model
        sentence_model(translator, cfg.decode.fallback_model)
    engines.prepare(translator, {})         # --engine / --precision int8: refused or made now, before any output
    if args.print_scores and cfg.decode.nbest > 1 and args.output_format == "marker":
        raise DocnmtError("--print-scores and --nbest: n-best lines already end in each hypothesis's score; "
                          "give one of them, or --output-format jsonl for both")
    streamable = args.format in ("auto", "marker", "blankline", "plain")
    report = journal = None
    context = read_context(args.context_src, args.context_tgt)
    if kept and context:
        raise DocnmtError("--context-src/--context-tgt work with plain or <d>-marker input, not a kept format "
                          "(SRT, WebVTT, DOCX, Markdown, HTML, text)")
    report = translate_kept(translator, cfg, kept, args) if kept else None
    if not kept and inputs == ["-"] and args.output_format == "marker" and cfg.decode.nbest == 1 and streamable \
            and not context:
        report = translate_stream(translator, cfg, args.output, args.print_scores)
    if report is None:           # not streamed, or the input turned out to be JSON or XML
        report, journal = translate_documents(args, translator, cfg, inputs, context)
    if not args.quiet:
        print(report.summary(), file=sys.stderr)
    if args.report:
        write_report(report, args.report)
    if journal is not None:
        journal.remove()            # the output and report are written: nothing left to take up
    return 0


def translate_documents(args, translator, cfg, inputs: list[str], context: dict | None):
    """The input read as documents, translated (in journalled chunks where the output is a file,
    :mod:`docnmt.journal`) and written; returns the coverage report and the journal (removed by the
    caller once the report is written too) or None."""
    from .. import methods
    from ..journal import chunks, translate_journalled
    from ..limits import check_translation
    from ..readers import read_inputs
    from ..translate_io import write_translations
    docs = read_inputs(inputs, args.format)
    check_translation(translator, docs, cfg.decode, inputs, args.format)   # sizes, before any decoding
    journal = open_journal(args, translator, cfg, inputs, len(docs)) if args.output and inputs != ["-"] else None
    whole = journal is None or len(chunks(docs)) < 2 \
        or not methods.decode_walk(translator.cfg, cfg.decode).documents_apart
    if whole:
        out, report = translator.translate(docs, cfg.decode, progress=not args.quiet, origin=",".join(inputs),
                                           context=context)
    else:
        with journal.said(len(docs), "translated", args.quiet):
            out, report = translate_journalled(translator, cfg.decode, docs, journal, context=context,
                                               progress=not args.quiet, origin=",".join(inputs),
                                               scores=args.print_scores)
    write_output(args.output, lambda target: write_translations(
        translator, out, target, args.output_format, cfg.decode.nbest, args.print_scores, scored=not whole))
    return report, journal


def open_journal(args, translator, cfg, inputs, documents: int):
    """The journal of this translation into ``--output`` (:mod:`docnmt.journal`), its fingerprint
    made of what decides the translations: the model's files (the weights by size and time), the
    input and context files, the decoding settings and the output's format."""
    from .. import journal
    from ..journal import Journal, file_digest, fingerprint
    parts = {**model_digests(args, translator),
             "inputs": [file_digest(p) for p in inputs],
             "context": [file_digest(p) for p in (args.context_src, args.context_tgt) if p],
             "decode": vars(cfg.decode), "format": args.format, "output_format": args.output_format,
             "print_scores": args.print_scores, "chunk": journal.CHUNK_SENTENCES}
    return Journal.open(args.output, fingerprint(parts), documents, args.force)


def model_digests(args, translator) -> dict:
    """A journal's fingerprint of the model: its files' SHA-256, its weights by size and time."""
    from ..journal import file_digest
    model = [p for p in model_files(args.model, args.checkpoint) if p and Path(p).is_file()]
    weights = Path(translator.weights_path)
    return {"model": {str(p): file_digest(p) for p in model if Path(p).resolve() != weights.resolve()},
            "weights": file_digest(weights, content=False)}


def read_context(src: str | None, tgt: str | None) -> dict | None:
    """``--context-src`` and ``--context-tgt`` as a context (:mod:`docnmt.forced_context`), or None."""
    from ..forced_context import check_context
    from ..readers import read_text
    if tgt and not src:
        raise DocnmtError("--context-tgt needs --context-src (the sentences it translates)")
    if not src:
        return None
    sides = {side: context_lines(read_text(path).lines, path, side == "src") if path else None
             for side, path in (("src", src), ("tgt", tgt))}
    return check_context(sides, "--context-src/--context-tgt")


def context_lines(lines: list[str], path: str, source: bool) -> list[str]:
    """A context file's sentences, one a line: a ``<d>`` line, or a blank source line, is an error
    naming the file and line (``check_context`` would name only ``src[k]``, or take ``<d>`` as a
    sentence)."""
    out = [line.strip() for line in lines]
    for k, line in enumerate(out):
        if line == "<d>" or (source and not line):
            raise DataError("a context file holds the earlier sentences of one document, one a line: "
                            + ("no <d> lines" if line else "no blank lines"), path, k + 1)
    return out


def decoding_config(args, cfg):
    """The model's configuration with the decoding flags given (and --greedy) on top."""
    flags = decode_flags()
    overrides = collect_overrides(args, flags)
    if args.greedy:
        overrides["decode.beam"] = 1
    return cfg.override(overrides, flag_labels(args, flags)) if overrides else cfg


def add_score(sub) -> None:
    p = add_verb(sub, "score", "reference scores: the log-probability of every reference sentence and "
                               "document in the model's own input format")
    p.add_argument("model", help="model directory")
    p.add_argument("--src", "--input", "-i", dest="src", required=True, help="source documents (any input format)")
    p.add_argument("--ref", required=True, help="reference translations, in the same document structure")
    p.add_argument("--format", default="auto", help="input format: " + FORMAT_HELP)
    p.add_argument("--output", "-o", help="output file (stdout when omitted); never overwritten without --force. "
                   "Finished chunks of documents are journalled beside it (OUTPUT.partial.jsonl) and the same "
                   "command after a stop goes on from them")
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
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists (and delete another "
                   "scoring's journal beside it; this scoring's goes on)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary on stderr")
    p.add_argument("--precision", default="fp32", choices=["fp32", "int8"],
                   help="int8: the model's linear layers in dynamic int8 (CPU; close to fp32, not equal)")


def cmd_score(args) -> int:
    from ..evaluation import document_counts
    from ..journal import chunks, journal_path, score_journalled
    from ..readers import read_inputs, read_sentences
    from ..translate import Translator
    from ..translate_io import format_scores, reference_scores, score_summary
    refuse_inputs([args.output], [args.src, args.ref, *model_files(args.model, args.checkpoint)])
    # a stopped run's output may be there (stopped after writing it): its journal says so
    refuse_overwrite([args.output], args.force or bool(args.output) and journal_path(args.output).exists())
    refuse_unwritable([args.output])
    refuse_kept([args.src, args.ref], args.format)
    src, ref = read_inputs([args.src], args.format), read_sentences(args.ref)
    if len(src) != len(ref):
        raise DocnmtError(document_counts(args.src, len(src), args.ref, len(ref)))
    for d, (a, b) in enumerate(zip(src, ref)):
        if len(a.src) != len(b):
            raise DocnmtError(f"document {d + 1} ({a.docid}): {len(a.src)} source sentences in {args.src}, "
                              f"{len(b)} in {args.ref}")
        a.tgt = b
    translator = Translator.load(args.model, args.checkpoint, args.device)
    if args.precision == "int8":
        from ..engines.int8 import model_for
        translator.model = model_for(translator, argparse.Namespace(precision="int8"))
    # a journal beside the output is read (another scoring's is refused) even where one chunk needs none
    journal = open_score_journal(args, translator, len(src)) if args.output else None
    if journal is None or len(chunks(src)) < 2:
        scores, words = reference_scores(translator, src, cxmi=args.cxmi, progress=not args.quiet, origin=args.ref)
    else:
        with journal.said(len(src), "scored", args.quiet):
            scores, words = score_journalled(translator, src, journal, cxmi=args.cxmi, progress=not args.quiet,
                                             origin=args.ref)
    text = format_scores(src, scores, words, args.output_format)
    write_text_output(args.output, text)
    if journal is not None:
        journal.remove()            # the output is written: nothing left to take up
    if not args.quiet:
        print(score_summary(scores, words), file=sys.stderr)
    return 0


def open_score_journal(args, translator, documents: int):
    """The journal of this scoring into ``--output`` (:mod:`docnmt.journal`), its fingerprint made
    of what decides the scores: the model's files (the weights by size and time), the source and
    reference files, their format, ``--cxmi`` and ``--precision``."""
    from .. import journal
    from ..journal import Journal, file_digest, fingerprint
    parts = {"verb": "score", **model_digests(args, translator), "src": file_digest(args.src),
             "ref": file_digest(args.ref), "format": args.format, "cxmi": args.cxmi, "precision": args.precision,
             "chunk": journal.CHUNK_SENTENCES}
    return Journal.open(args.output, fingerprint(parts), documents, args.force, kind="scoring")


def refuse_kept(paths: list[str], fmt: str) -> None:
    """``score`` reads sentences in the formats ``prepare`` reads: an SRT, DOCX, Markdown... file
    would be read as lines (an SRT's cue numbers and timings as sentences), so it is one error line."""
    from ..readers.filetypes import kept_format
    for path in paths:
        kind = kept_format(path, None) if fmt == "auto" else None
        if kind:
            raise DocnmtError(f"{path}: score reads the formats of docnmt prepare, not {kind}; "
                              "translate the file with --output-format jsonl to get its sentences")
