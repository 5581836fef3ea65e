"""``docnmt translate`` of a file that comes back whole, only its text translated: SRT, WebVTT,
DOCX, Markdown, HTML, or plain text in paragraphs (``--format text``); docs/formats.md."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import DataError, DocnmtError

KEPT_HELP = (" | srt | vtt | docx | markdown | html | text (paragraphs split into sentences); these come back whole "
             "in their own format (docs/formats.md)")


def add_kept_flags(g) -> None:
    """``--lang`` and ``--max-line-chars`` in the "input and output" group."""
    g.add_argument("--lang", default="en",
                   help="SRT, WebVTT, DOCX, Markdown, HTML and --format text input: the source language whose "
                        "rules split the text into sentences (a code such as en, de, fr, zh)")
    g.add_argument("--max-line-chars", type=int, metavar="N",
                   help="SRT and WebVTT: wrap every cue's translation anew into lines of at most N characters")


def _terminal() -> bool:
    return sys.stdout.isatty()


def read_kept_input(args, inputs: list[str]):
    """The input as a :class:`~docnmt.readers.kept.Layout` when it is one of these formats (by
    ``--format``, else its extension, else its content), else None."""
    from ..readers.filetypes import KEPT, kept_format, read_kept
    fmt, data = None, None
    if args.format in KEPT:
        fmt = args.format
    elif args.format == "auto" and inputs != ["-"]:
        fmt = next((f for p in inputs if (f := kept_format(p, None))), None)       # by extension
        if fmt is None and len(inputs) == 1:
            data = _read(inputs[0])
            fmt = kept_format(inputs[0], data)                                      # by content
    if fmt is None:
        if args.max_line_chars is not None:
            raise DocnmtError("--max-line-chars is for SRT and WebVTT input")
        return None
    if len(inputs) > 1:
        raise DocnmtError(f"{fmt} input: give one file at a time (-i FILE -o FILE)")
    if fmt == "docx" and not args.output and args.output_format == "marker" and _terminal():
        raise DocnmtError("a translated DOCX is a binary file: give -o FILE.docx (or redirect standard output)")
    data = _read(inputs[0]) if data is None else data
    name = "<stdin>" if inputs == ["-"] else inputs[0]
    return read_kept(data, name, fmt, args.lang, args.max_line_chars), name


def _read(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise DataError("no such file", path) from None
    except OSError as e:
        raise DataError(f"cannot read file: {e.strerror or e}", path) from None


def translate_kept(translator, cfg, kept, args):
    """The file translated and written to ``--output`` (stdout) in its own format (or as JSONL with
    ``--output-format jsonl``); the coverage report."""
    from ..document import Document
    from ..limits import check_translation
    from ..translate_io import write_translations
    layout, name = kept
    if args.output_format == "marker" and (args.print_scores or cfg.decode.nbest > 1):
        given = " and ".join(f for f, on in (("--print-scores", args.print_scores),
                                             ("--nbest", cfg.decode.nbest > 1)) if on)
        raise DocnmtError(f"{given}: a file written back in its own format has no place for "
                          "scores or alternatives; add --output-format jsonl")
    doc = Document(Path(name).name, layout.sentences)
    limit = cfg.model.max_positions - 2
    for k, ids in enumerate(translator.vocab.encode_batch(doc.src, "src")):
        if len(ids) > limit:
            raise DataError(f"sentence {k + 1} ({doc.src[k][:40]!r}…): {len(ids)} subword tokens, more than the "
                            f"{limit} a sentence may have in this model", name)
    check_translation(translator, [doc], cfg.decode, [name], "plain")
    out, report = translator.translate([doc], cfg.decode, progress=not args.quiet, origin=name)
    if args.output_format == "jsonl":
        write_translations(translator, out, args.output or sys.stdout, "jsonl", cfg.decode.nbest, args.print_scores)
    elif args.output:
        Path(args.output).write_bytes(layout.write(out[0].tgt))
    else:
        sys.stdout.buffer.write(layout.write(out[0].tgt))
        sys.stdout.flush()
    return report
