"""Shared fixtures of the docnmt test suite.

Every test reads real data from inside the repository: the BConTrasT chats bundled with the
package (``docnmt/quickstart_data``, CC BY-SA 4.0) for the documents, vocabularies and tiny models
below, and the small slices in ``tests/data`` (``_tiny.DATA``; what they are and their licences:
``tests/data/README.md``) for the format readers and the test suites. No test skips for want of
data: under ``DOCNMT_ONLY_ALLOWED_SKIPS=1`` (set by ``.ci/run``) a run fails when anything but the
GPU checks and the browser test without Chromium skipped (``tests/_skips.py``). The data fixtures
and the tiny trained models are session-scoped and built once: treat what they return as read-only
(train into ``tmp_path``).

Markers
-------
``slow``             End-to-end checks (training, whole pipelines): ``python -m pytest -m "not slow"``
                     is the quick inner loop; ``python -m pytest`` runs everything. Every test under
                     ``tests/integration/`` is marked ``slow`` here.
``cuda``             The GPU checks in ``tests/cuda/`` (``python -m pytest -m cuda``): skipped without
                     CUDA; ``DOCNMT_CUDA_TESTS_ON_CPU=1`` runs them on the CPU at small sizes (the
                     dry run of ``bench/gpu/run.sh``).

Torch runs one intra-op thread during the tests unless ``OMP_NUM_THREADS`` is set (``pytest_configure``).

Fixtures
--------
``chat_valid_prefix`` Path prefix of the bundled BConTrasT dev chats unpacked (``chat.en``, ``chat.de``,
                     ``chat.docids``).
``chat_valid``       All 78 of those chats (1,902 turn pairs, en-de).
``chat_docs``        The first 3 of them, each cut to its first 12 turns (36 pairs).
``tiny_vocab``       A 600-piece joint SentencePiece :class:`~docnmt.vocab.Vocab` learned on both
                     sides of ``chat_valid``, with docnmt's default extra symbols.
``tiny_corpus``      ``Corpus.encode(chat_docs, tiny_vocab)``: 3 documents, 36 sentences.
``tiny_dir``         ``_tiny.tiny_data`` made once: ``raw/chat.{en,de,docids}`` (the first 12 dev
                     chats, at most 40 turns each: 260 pairs) and ``data/`` prepared from them (400 pieces).
``tiny_model``       ``tiny_model(name)`` -> directory of a tiny model of ``TINY_MODELS`` trained on
                     ``tiny_dir / "data"``, trained on first use and shared by every test after.
``write_files``      ``write_files(dir, {name: text or bytes})`` writes small files, returns paths.
``run_cli``          ``run_cli(*argv)`` runs ``docnmt.cli.main`` in-process and returns
                     ``(exit_status, stdout, stderr)``.
``cli_error``        ``cli_error(*argv)`` runs it expecting a user error: exit status 2, exactly
                     one ``docnmt: error: ...`` line on stderr, no traceback; returns that line.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from _skips import pytest_configure as skip_rule
from _tiny import DOCFLAT, tiny_config, tiny_data, unpack_chats
from docnmt.data import Corpus
from docnmt.document import Document
from docnmt.readers import read_documents
from docnmt.vocab import Vocab

INTEGRATION = Path(__file__).resolve().parent / "integration"
CUDA = Path(__file__).resolve().parent / "cuda"

CHAT_DOCS = 3       # documents in ``chat_docs``
CHAT_SENTS = 12     # turns kept per document in ``chat_docs``
TINY_VOCAB_SIZE = 600


def pytest_configure(config):
    """On a busy machine (load average above half the cores) one intra-op thread unless
    ``OMP_NUM_THREADS`` says otherwise: next to a training job torch's default threads spin on the
    shared cores (``tests/test_train.py -m "not slow"``: 129 s with two threads, 18 s with one, on a
    2-core machine). On an idle machine torch's default is faster (whole suite 3 min 23 s against
    3 min 50 s with one thread)."""
    if "OMP_NUM_THREADS" not in os.environ and os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
        torch.set_num_threads(1)
    skip_rule(config)           # DOCNMT_ONLY_ALLOWED_SKIPS=1: only the allowed skips (tests/_skips.py)


@pytest.hookimpl(tryfirst=True)         # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items):
    """Whole pipelines (``tests/integration/``) are slow; ``tests/cuda/`` is marked ``cuda``. The
    fast tests run first, so a full run (CI) reports their failures within minutes."""
    for item in items:
        if INTEGRATION in item.path.parents:
            item.add_marker(pytest.mark.slow)
        if CUDA in item.path.parents:
            item.add_marker(pytest.mark.cuda)
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)      # stable: file order kept


@pytest.fixture(scope="session")
def chat_valid_prefix(tmp_path_factory) -> Path:
    """Prefix of the bundled BConTrasT dev chats (marker format), unpacked: ``PREFIX.en``/``.de``/``.docids``."""
    return unpack_chats(tmp_path_factory.mktemp("chats"), "valid")


@pytest.fixture(scope="session")
def chat_valid(chat_valid_prefix: Path) -> list[Document]:
    """All dev chats read with their ids (78 documents, 1,902 pairs)."""
    p = chat_valid_prefix
    return read_documents(f"{p}.en", f"{p}.de", fmt="marker", docids=f"{p}.docids")


@pytest.fixture(scope="session")
def chat_docs(chat_valid: list[Document]) -> list[Document]:
    """The first 3 dev chats, each truncated to its first 12 turn pairs (read-only)."""
    return [replace(d, src=d.src[:CHAT_SENTS], tgt=d.tgt[:CHAT_SENTS], meta=dict(d.meta))
            for d in chat_valid[:CHAT_DOCS]]


@pytest.fixture(scope="session")
def tiny_vocab(chat_valid: list[Document]) -> Vocab:
    """A 600-piece joint BPE vocabulary trained on both sides of ``chat_valid``."""
    return Vocab.train([s for d in chat_valid for s in d.src + d.tgt], size=TINY_VOCAB_SIZE)


@pytest.fixture(scope="session")
def tiny_corpus(chat_docs: list[Document], tiny_vocab: Vocab) -> Corpus:
    """``chat_docs`` encoded with ``tiny_vocab`` (3 documents x 12 sentences, both sides)."""
    return Corpus.encode(chat_docs, tiny_vocab)


@pytest.fixture
def strict_recompiles():
    """``strict_recompiles(n)``: torch.compile raises, instead of silently running eager, once a
    function has compiled n times; dynamo's state and settings are restored after the test.
    (dynamo's own ``config.patch``: pytest's monkeypatch cannot restore an aliased dynamo setting.)"""
    import torch._dynamo
    patches = []

    def strict(limit: int) -> None:
        patch = torch._dynamo.config.patch(recompile_limit=limit, fail_on_recompile_limit_hit=True)
        patch.__enter__()
        patches.append(patch)
        torch._dynamo.reset()
    yield strict
    for patch in reversed(patches):
        patch.__exit__(None, None, None)
    torch._dynamo.reset()


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


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """``_tiny.tiny_data`` run once: ``raw/chat.*`` marker files and the prepared ``data/`` (read-only)."""
    root = tmp_path_factory.mktemp("tiny")
    tiny_data(root)
    return root


# The tiny models tests share instead of training their own: name -> (mode, updates, config overrides).
TINY_MODELS = {
    "sent2sent": ("sent2sent", 40, {}),
    "doc2doc": ("doc2doc", 150, {}),          # test_discourse: enough updates to prefer real sentences
    "gtransformer": ("doc2doc", 6, {"method.name": "gtransformer", "data.separator": "group",
                                    "method.combined_enc_self": 1, "method.combined_dec_self": 1,
                                    "method.combined_cross": 1}),
    "doc2sent": ("doc2sent", 6, {"data.context": 2}),
    "context": ("sent2sent", 6, {"method.name": "context_transformer", "data.context_input": 2}),
    "docflat": ("pseudodoc", 6, DOCFLAT),
    "ptransformer_laa": ("doc2doc", 6, {"method.name": "ptransformer", "model.length_aware": True}),
    "mbe": ("pseudodoc", 6, {**DOCFLAT, "method.flat_block": "mbe"}),
}


@pytest.fixture(scope="session")
def tiny_model(tiny_dir: Path):
    """``tiny_model(name)`` -> ``tiny_dir / name``, the save directory of ``TINY_MODELS[name]`` trained on
    ``tiny_dir / "data"`` (trained on first use, then shared: load it, never train into it)."""
    from docnmt.training import Trainer

    def get(name: str) -> Path:
        path = tiny_dir / name
        if not (path / "model.safetensors").exists():
            mode, updates, over = TINY_MODELS[name]
            cfg = tiny_config(mode, max_update=updates).override(over)
            Trainer.from_dirs(cfg, tiny_dir / "data", path, progress_bar=False).train()
        return path
    return get
