"""Errors docnmt reports to users as one clear line (never a traceback)."""
from __future__ import annotations


class DocnmtError(Exception):
    """Base class of every user-facing error; the CLI prints it and exits with status 2."""


class DataError(DocnmtError):
    """Bad input data, located by file and (1-based) line when known."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        self.path = None if path is None else str(path)
        self.line = line
        self.message = message
        where = ""
        if self.path is not None:
            where = self.path + (f":{line}" if line is not None else "") + ": "
        super().__init__(where + message)


class ConfigError(DocnmtError):
    """Unknown or invalid configuration keys or values."""
