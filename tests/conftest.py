"""Shared fixtures of the docnmt test suite.

Real data lives in ``/work/shared/data`` (next to the repository); every fixture that needs it
skips the test when it is absent. The data fixtures are session-scoped and built once (about a
second in all): treat what they return as read-only.

Fixtures
--------
``shared_data``      Path of the real-data directory (skips when missing).
``ted_valid_prefix`` Path prefix of ``ende/valid/ted`` (``ted.en``, ``ted.de``, ``ted.docids``).
``ted_valid``        All 12 documents of ``ende/valid/ted`` (1,080 sentence pairs).
``ted_docs``         The first 3 of them, each cut to its first 12 sentences (36 pairs).
``tiny_vocab``       A 600-piece joint SentencePiece :class:`~docnmt.vocab.Vocab` learned on both
                     sides of ``ende/valid/ted``, with docnmt's default extra symbols.
``tiny_corpus``      ``Corpus.encode(ted_docs, tiny_vocab)``: 3 documents, 36 sentences.
``write_files``      ``write_files(dir, {name: text or bytes})`` writes small files, returns paths.
``run_cli``          ``run_cli(*argv)`` runs ``docnmt.cli.main`` in-process and returns
                     ``(exit_status, stdout, stderr)``.
``cli_error``        ``cli_error(*argv)`` runs it expecting a user error: exit status 2, exactly
                     one ``docnmt: error: ...`` line on stderr, no traceback; returns that line.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from docnmt.data import Corpus
from docnmt.document import Document
from docnmt.readers import read_documents
from docnmt.vocab import Vocab

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

TED_DOCS = 3        # documents in ``ted_docs``
TED_SENTS = 12      # sentences kept per document in ``ted_docs``
TINY_VOCAB_SIZE = 600


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real-data directory ``/work/shared/data``; the test is skipped when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def ted_valid_prefix(shared_data: Path) -> Path:
    """Prefix of the IWSLT17 tst2015 TED corpus (marker format): ``PREFIX.en``/``.de``/``.docids``."""
    return shared_data / "ende" / "valid" / "ted"


@pytest.fixture(scope="session")
def ted_valid(ted_valid_prefix: Path) -> list[Document]:
    """All documents of ``ende/valid/ted`` read with their ids (12 documents, 1,080 pairs)."""
    p = ted_valid_prefix
    return read_documents(f"{p}.en", f"{p}.de", fmt="marker", docids=f"{p}.docids")


@pytest.fixture(scope="session")
def ted_docs(ted_valid: list[Document]) -> list[Document]:
    """The first 3 TED documents, each truncated to its first 12 sentence pairs (read-only)."""
    return [replace(d, src=d.src[:TED_SENTS], tgt=d.tgt[:TED_SENTS], meta=dict(d.meta))
            for d in ted_valid[:TED_DOCS]]


@pytest.fixture(scope="session")
def tiny_vocab(ted_valid: list[Document]) -> Vocab:
    """A 600-piece joint BPE vocabulary trained on both sides of ``ende/valid/ted``."""
    return Vocab.train([s for d in ted_valid for s in d.src + d.tgt], size=TINY_VOCAB_SIZE)


@pytest.fixture(scope="session")
def tiny_corpus(ted_docs: list[Document], tiny_vocab: Vocab) -> Corpus:
    """``ted_docs`` encoded with ``tiny_vocab`` (3 documents x 12 sentences, both sides)."""
    return Corpus.encode(ted_docs, tiny_vocab)


@pytest.fixture
def write_files():
    """``write_files(directory, {name: str | bytes})`` -> ``{name: Path}``.

    Text is written as UTF-8 exactly as given (no newline translation); bytes verbatim.
    """
    def write(directory: Path, files: dict[str, str | bytes]) -> dict[str, Path]:
        paths = {}
        for name, content in files.items():
            path = Path(directory) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str):
                content = content.encode("utf-8")
            path.write_bytes(content)
            paths[name] = path
        return paths
    return write


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*argv)`` -> ``(status, stdout, stderr)`` of ``docnmt.cli.main(argv)`` run in-process.

    Arguments are converted with ``str`` so paths can be passed directly.
    """
    from docnmt.cli import main

    def run(*argv) -> tuple[int, str, str]:
        capsys.readouterr()  # drop anything printed before
        status = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return status, out, err
    return run


def _one_line_error(status: int, err: str) -> str:
    assert "Traceback" not in err, err
    assert status == 2, f"exit status {status}, stderr: {err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docnmt: error: "), f"not one error line: {err!r}"
    return lines[0]


@pytest.fixture
def cli_error(run_cli):
    """``cli_error(*argv)`` -> the error line of a command that must fail on bad user input
    (status 2, one ``docnmt: error:`` line on stderr, no traceback)."""
    def run(*argv) -> str:
        status, _, err = run_cli(*argv)
        return _one_line_error(status, err)
    return run
