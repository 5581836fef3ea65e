"""Fixtures of the experiments' own tests (``python -m pytest experiments``).

They need nothing outside the repository: the tiny data comes from the BConTrasT chats bundled
with docnmt (``docnmt/quickstart_data``) and the tiny model is trained with the ``docnmt`` command
line, as an experiment would; the GPU run's dry run prepares its miniature from ``tests/data/enfr``.

``chat_docs``    The first 3 validation chats, each cut to its first 12 turns (36 pairs).
``tiny_dir``     ``raw/chat.{en,de,docids}`` (the first 6 validation chats) and ``data/`` prepared
                 from them with ``docnmt prepare`` (400 pieces).
``tiny_model``   ``tiny_model("doc2doc")`` -> a tiny Doc2Doc model trained on ``tiny_dir / "data"``
                 (12 updates, 96-token instances so that a chat is split), read-only.
"""
from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHATS = ROOT / "docnmt" / "quickstart_data"


def docnmt(*argv) -> None:
    proc = subprocess.run([sys.executable, "-m", "docnmt.cli", *map(str, argv)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def read_chats(n_docs: int, max_turns: int) -> list[tuple[str, list[str], list[str]]]:
    """The first ``n_docs`` validation chats as (id, English turns, German turns), cut to ``max_turns``."""
    src, tgt = (gzip.open(CHATS / f"valid.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
                for lang in ("en", "de"))
    ids = gzip.open(CHATS / "valid.docids.gz", "rt").read().split()
    docs, d = [], -1
    for s, t in zip(src, tgt):
        if s == "<d>":
            d += 1
            if d == n_docs:
                break
            docs.append((ids[d], [], []))
        elif len(docs[-1][1]) < max_turns:
            docs[-1][1].append(s)
            docs[-1][2].append(t)
    return docs


@pytest.fixture(scope="session")
def chat_docs():
    from docnmt.document import Document
    return [Document(i, s, t) for i, s, t in read_chats(3, 12)]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("chats")
    raw = root / "raw"
    raw.mkdir()
    docs = read_chats(6, 40)
    for lang, side in (("en", 1), ("de", 2)):
        (raw / f"chat.{lang}").write_text("".join("<d>\n" + "".join(t + "\n" for t in d[side]) for d in docs),
                                          encoding="utf-8")
    (raw / "chat.docids").write_text("".join(d[0] + "\n" for d in docs))
    docnmt("prepare", "-s", "en", "-t", "de", "--trainpref", raw / "chat", "--validpref", raw / "chat",
           "--destdir", root / "data", "--vocab-size", "400")
    return root


@pytest.fixture(scope="session")
def tiny_model(tiny_dir: Path):
    def get(name: str) -> Path:
        assert name == "doc2doc", name
        path = tiny_dir / name
        if not (path / "model.safetensors").exists():
            docnmt("train", tiny_dir / "data", "--arch", "transformer_tiny", "--save-dir", path, "--max-update", "12",
                   "--no-progress", "--set", "data.mode=doc2doc", "--set", "data.max_instance_tokens=96",
                   "--set", "model.d_model=32", "--set", "model.ffn_dim=64", "--set", "model.heads=2",
                   "--set", "train.validate_interval_updates=0", "--set", "train.max_epoch=0")
        return path
    return get
