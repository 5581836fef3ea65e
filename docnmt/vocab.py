"""Subword vocabulary: a joint SentencePiece model plus docnmt's special symbols.

Ids 0-3 are SentencePiece's pad, unk, ``<s>`` and ``</s>``; the SentencePiece pieces follow, and
docnmt's own symbols are appended after them (never produced from text, only inserted by the
instance formats): ``<mask>`` (word dropout), ``<eod>`` (end of document), ``<sep>`` and
``<sep1>`` ... ``<sepN>`` (sentence separators). A method that needs more symbols adds them to
``extra_symbols`` before the vocabulary is built; the list is saved next to the model.
The classic Moses tokenisation + subword-nmt BPE pipeline (``docnmt[moses]``) has the same
layout and interface: :class:`docnmt.subword.MosesBPEVocab` (``vocab.json`` names the backend).
"""
from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path
from typing import Iterable

import sentencepiece as spm

from .errors import ConfigError, DataError

PAD, UNK, BOS, EOS = 0, 1, 2, 3
DEFAULT_MAX_SEP = 512


def default_symbols(max_sep: int = DEFAULT_MAX_SEP) -> list[str]:
    return ["<mask>", "<eod>", "<sep>"] + [f"<sep{i}>" for i in range(1, max_sep + 1)]


def require_files(directory: Path, *files: str) -> None:
    missing = [f for f in files if not (directory / f).exists()]
    if missing:
        raise DataError(f"no vocabulary here (missing {', '.join(missing)}); run `docnmt prepare` first", directory)


def read_meta(directory: Path, *files: str) -> dict:
    """``vocab.json`` of a vocabulary directory, after checking that it and ``files`` exist."""
    require_files(directory, "vocab.json", *files)
    return json.loads((directory / "vocab.json").read_text())


def moses_bpe() -> type:
    """:class:`docnmt.subword.MosesBPEVocab`, imported only when used (an optional extra)."""
    try:
        from .subword import MosesBPEVocab
    except ModuleNotFoundError as e:
        if e.name not in ("sacremoses", "subword_nmt"):
            raise
        raise ConfigError("the Moses+BPE pipeline needs: pip install docnmt[moses]") from None
    return MosesBPEVocab


class BaseVocab:
    """What every subword backend shares: ids 0-3 (pad, unk, ``<s>``, ``</s>``), then the
    backend's ``n_pieces`` - 4 ordinary pieces, then docnmt's ``extra`` symbols.

    A backend implements ``encode_batch(texts, side)``, ``_detokenize(ids, side)``,
    ``_piece(i)``, ``_save_files(directory)`` and ``_meta()`` (extra keys of ``vocab.json``).
    ``side`` ("src" or "tgt") says which language a text is in; backends with one joint model
    (SentencePiece) ignore it.
    """

    pad, unk, bos, eos = PAD, UNK, BOS, EOS
    backend = ""

    def __init__(self, n_pieces: int, extra_symbols: list[str]):
        self.n_pieces = n_pieces
        self.extra = list(extra_symbols)
        self.symbol_ids = {s: self.n_pieces + i for i, s in enumerate(self.extra)}
        self.max_sep = sum(1 for s in self.extra if re.fullmatch(r"<sep\d+>", s))

    def __len__(self) -> int:
        return self.n_pieces + len(self.extra)

    @property
    def word_ids(self) -> tuple[int, int]:
        """The ids of the backend's ordinary pieces: ``range(*word_ids)``."""
        return EOS + 1, self.n_pieces

    def id(self, symbol: str) -> int:
        if symbol in self.symbol_ids:
            return self.symbol_ids[symbol]
        raise ConfigError(f"symbol {symbol} is not in this vocabulary")

    def sep(self, index: int | None) -> int:
        """``<sepI>`` (clipped to the largest reserved index) or the uniform ``<sep>``."""
        if index is None:
            return self.id("<sep>")
        return self.id(f"<sep{min(index, self.max_sep)}>")

    def is_special(self, i: int) -> bool:
        return i < 4 or i >= self.n_pieces

    def encode(self, text: str, side: str = "src") -> list[int]:
        return self.encode_batch([text], side)[0]

    def decode(self, ids: Iterable[int], side: str = "tgt") -> str:
        """Detokenised text of the ordinary pieces in ``ids`` (every special symbol removed)."""
        return self._detokenize([int(i) for i in ids if not self.is_special(i)], side)

    def piece(self, i: int) -> str:
        return self.extra[i - self.n_pieces] if i >= self.n_pieces else self._piece(i)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        self._save_files(directory)
        meta = {"backend": self.backend, **self._meta(), "extra_symbols": self.extra}
        (directory / "vocab.json").write_text(json.dumps(meta, indent=0))

    def _meta(self) -> dict:
        return {}


class Vocab(BaseVocab):
    """A SentencePiece model with docnmt's symbols appended (see module docstring).

    ``Vocab.load`` reads any backend's directory (a Moses+BPE one gives a
    :class:`docnmt.subword.MosesBPEVocab`)."""

    backend = "spm"

    def __init__(self, model_proto: bytes, extra_symbols: list[str]):
        self.proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        super().__init__(self.sp.get_piece_size(), extra_symbols)

    def encode_batch(self, texts: list[str], side: str = "src") -> list[list[int]]:
        return self.sp.encode(texts)

    def _detokenize(self, ids: list[int], side: str) -> str:
        return self.sp.decode(ids)

    def _piece(self, i: int) -> str:
        return self.sp.id_to_piece(i)

    def _save_files(self, directory: Path) -> None:
        (directory / "spm.model").write_bytes(self.proto)

    @classmethod
    def load(cls, directory: str | Path) -> BaseVocab:
        directory = Path(directory)
        meta = read_meta(directory)
        backend = meta.get("backend", "spm")
        if backend == "moses-bpe":
            return moses_bpe().load(directory)
        if backend != "spm":
            raise ConfigError(f"{directory}/vocab.json: unknown subword backend {backend!r}")
        require_files(directory, "spm.model")
        return cls((directory / "spm.model").read_bytes(), meta["extra_symbols"])

    @classmethod
    def train(cls, texts: Iterable[str], size: int = 8000, extra_symbols: list[str] | None = None,
              model_type: str = "bpe", max_sentences: int = 2_000_000, seed: int = 1) -> "Vocab":
        """Learn a joint SentencePiece model on ``texts`` (source and target sentences)."""
        texts = [t for t in texts if t.strip()]
        if len(texts) > max_sentences:
            texts = random.Random(seed).sample(texts, max_sentences)
        buf = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=buf, vocab_size=size, model_type=model_type,
            character_coverage=1.0, pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
            input_sentence_size=max_sentences, shuffle_input_sentence=True, num_threads=2,
            minloglevel=2, hard_vocab_limit=False)
        return cls(buf.getvalue(), default_symbols() if extra_symbols is None else extra_symbols)
