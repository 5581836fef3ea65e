"""Decoding input files: :class:`Text` (a file's name and its text) and :func:`read_text`, the one
place input is decoded; the names and checks every reader shares."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable

from ..errors import DataError

DOC_MARK = "<d>"
STDIN = "-"

Split = list[tuple[int, list[str]]]  # documents as (line where each starts, sentences)


@dataclass(frozen=True)
class Text:
    """A decoded input file: the name errors use and its whole text."""

    name: str
    text: str

    @cached_property
    def lines(self) -> list[str]:
        """The lines, without their LF or CRLF ending."""
        lines = self.text.split("\n")
        if lines[-1] == "":
            lines.pop()
        return [line[:-1] if line.endswith("\r") else line for line in lines]

    @property
    def base(self) -> str:
        """The file name without its folder, for default document ids."""
        return "stdin" if self.name == "<stdin>" else os.path.basename(self.name)


def read_text(path: str | os.PathLike) -> Text:
    """Read ``path`` (``"-"``: standard input) as strict UTF-8: the one place input is decoded."""
    stdin = str(path) == STDIN
    name = "<stdin>" if stdin else str(path)
    try:
        data = sys.stdin.buffer.read() if stdin else Path(path).read_bytes()
    except FileNotFoundError:
        raise DataError("no such file", name) from None
    except OSError as e:
        raise DataError(f"cannot read file: {e.strerror or e}", name) from None
    text = decode(data, name)
    return Text(name, text[1:] if text.startswith("\ufeff") else text)


def decode(data: bytes, name: str) -> str:
    """``data`` as strict UTF-8 (a leading BOM kept); an error naming ``name`` and the line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"invalid UTF-8 (byte 0x{data[e.start]:02x})", name, line) from None


def load(path) -> Text | None:
    """:func:`read_text` of ``path``, or None for no path (no target file)."""
    return None if path is None else read_text(path)


def check_unique(ids: Iterable[tuple[str, int | None]], name: str) -> None:
    """An error for the first document id (with its line) seen twice."""
    seen: dict[str, int | None] = {}
    for docid, no in ids:
        if docid in seen:
            raise DataError(f"duplicate document id {docid!r}", name, no)
        seen[docid] = no
