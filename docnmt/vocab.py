"""Subword vocabulary: a joint SentencePiece model plus docnmt's special symbols.

Ids 0-3 are SentencePiece's pad, unk, ``<s>`` and ``</s>``; the SentencePiece pieces follow, and
docnmt's own symbols are appended after them (never produced from text, only inserted by the
instance formats): ``<mask>`` (word dropout), ``<eod>`` (end of document), ``<sep>`` and
``<sep1>`` ... ``<sepN>`` (sentence separators). A method that needs more symbols adds them to
``extra_symbols`` before the vocabulary is built; the list is saved next to the model.
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
SPECIAL_RE = re.compile(r"<(?:s|/s|pad|unk|mask|eod|sep\d*|sos|eos|idx_\d+)>")


def default_symbols(max_sep: int = DEFAULT_MAX_SEP) -> list[str]:
    return ["<mask>", "<eod>", "<sep>"] + [f"<sep{i}>" for i in range(1, max_sep + 1)]


class Vocab:
    """A SentencePiece model with docnmt's symbols appended (see module docstring)."""

    pad, unk, bos, eos = PAD, UNK, BOS, EOS

    def __init__(self, model_proto: bytes, extra_symbols: list[str]):
        self.proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        self.n_pieces = self.sp.get_piece_size()
        self.extra = list(extra_symbols)
        self.symbol_ids = {s: self.n_pieces + i for i, s in enumerate(self.extra)}
        self.max_sep = sum(1 for s in self.extra if re.fullmatch(r"<sep\d+>", s))

    def __len__(self) -> int:
        return self.n_pieces + len(self.extra)

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

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts)

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenised text of the ordinary pieces in ``ids`` (every special symbol removed)."""
        return self.sp.decode([i for i in ids if not self.is_special(i)])

    def piece(self, i: int) -> str:
        return self.extra[i - self.n_pieces] if i >= self.n_pieces else self.sp.id_to_piece(i)

    # ---- persistence -------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        (directory / "spm.model").write_bytes(self.proto)
        (directory / "vocab.json").write_text(json.dumps({"extra_symbols": self.extra}, indent=0))

    @classmethod
    def load(cls, directory: str | Path) -> "Vocab":
        directory = Path(directory)
        if not (directory / "vocab.json").exists() or not (directory / "spm.model").exists():
            raise DataError("no vocabulary here (spm.model, vocab.json); run `docnmt prepare` first", directory)
        extra = json.loads((directory / "vocab.json").read_text())["extra_symbols"]
        return cls((directory / "spm.model").read_bytes(), extra)

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
