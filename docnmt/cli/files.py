"""The command line's checks of its output files, made before any work: never write over an
existing file without ``--force``, never over an input or a model's own files, and say at once
when a file could not be written."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import DocnmtError

MODEL_FILES = ("config.yaml", "model.safetensors", "spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json",
               "tokenizer.json", "source.spm", "target.spm", "pieces.json")      # the last four: import-hf


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


def write_output(path: str | None, write) -> None:
    """``write(target)`` to standard output, or to ``path`` through a temporary file renamed over it
    (``checkpoint.atomic_write``; through a link, the file it names): a run stopped while writing
    leaves no half-written output. A file that is not regular (/dev/null, a pipe) is written directly."""
    from ..checkpoint import atomic_write
    if path and (Path(path).is_file() or not Path(path).exists()):
        atomic_write(Path(path).resolve(), write)
    else:
        write(path or sys.stdout)


def write_text_output(path: str | None, text: str) -> None:
    """``text`` to standard output, or to ``path`` as :func:`write_output` writes it."""
    write_output(path, lambda target: Path(target).write_text(text, encoding="utf-8") if isinstance(target, str)
                 else target.write(text))
