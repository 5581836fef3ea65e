"""The ``docnmt`` command: prepare, train, translate, score, evaluate, compare, score-contrastive,
entropy, probe, fba-map, average, presets, import-hf, export-hf, export-ct2, quickstart, serve.

This module parses the command line and dispatches to the verb's handler (``VERBS``); each verb
family is a module of this package with its parser (``add_<verb>``) beside its handler
(``cmd_<verb>``), and the flag tables are in :mod:`.flags`. Flags follow fairseq's vocabulary
(``--max-tokens``, ``--update-freq``, ``--lenpen``, ``--max-len-a/b``, ``--patience``, ...).
Errors in the user's input are printed as one line and exit with status 2; a traceback means a
bug in docnmt.
"""
from __future__ import annotations

import argparse
import sys

from ..errors import DocnmtError
from . import evaluate, models, prepare, serve, train, translate
from .flags import HelpFormatter, Parser

# verb -> (add its parser, its handler), in the order of ``docnmt --help``
COMMANDS = {
    "prepare": (prepare.add_prepare, prepare.cmd_prepare),
    "train": (train.add_train, train.cmd_train),
    "translate": (translate.add_translate, translate.cmd_translate),
    "score": (translate.add_score, translate.cmd_score),
    "evaluate": (evaluate.add_evaluate, evaluate.cmd_evaluate),
    "score-contrastive": (evaluate.add_score_contrastive, evaluate.cmd_score_contrastive),
    "entropy": (evaluate.add_entropy, evaluate.cmd_entropy),
    "fba-map": (evaluate.add_fba_map, evaluate.cmd_fba_map),
    "compare": (evaluate.add_compare, evaluate.cmd_compare),
    "probe": (evaluate.add_probe, evaluate.cmd_probe),
    "average": (models.add_average, models.cmd_average),
    "quickstart": (models.add_quickstart, models.cmd_quickstart),
    "presets": (models.add_presets, models.cmd_presets),
    "import-hf": (models.add_import_hf, models.cmd_import_hf),
    "export-hf": (models.add_export_hf, models.cmd_export_hf),
    "export-ct2": (models.add_export_ct2, models.cmd_export_ct2),
    "serve": (serve.add_serve, serve.cmd_serve),
}
VERBS = {name: handler for name, (_, handler) in COMMANDS.items()}

__all__ = ["VERBS", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="docnmt", description="Document-level neural machine translation.",
                formatter_class=HelpFormatter)
    ap.add_argument("--version", action="version", version=_version())
    sub = ap.add_subparsers(dest="verb", required=True, metavar="VERB")
    for add, _ in COMMANDS.values():
        add(sub)
    return ap


def _version() -> str:
    from .. import __version__
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
