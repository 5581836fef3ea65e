"""Subword vocabulary: a joint SentencePiece model plus docnmt's special symbols.

Ids 0-3 are SentencePiece's pad, unk, ``<s>`` and ``</s>``; the SentencePiece pieces follow, and
docnmt's own symbols are appended after them (never produced from text, only inserted by the
instance formats): ``<mask>`` (word dropout), ``<eod>`` (end of document), ``<sep>`` and
``<sep1>`` ... ``<sepN>`` (sentence separators). A method that needs more symbols adds them to
``extra_symbols`` before the vocabulary is built; the list is saved next to the model.
The classic Moses tokenisation + subword-nmt BPE pipeline (``docnmt[moses]``) has the same
layout and interface: :class:`docnmt.subword.MosesBPEVocab` (``vocab.json`` names the backend).
A model imported from Hugging Face keeps its tokenizer and its ids: :class:`PretrainedVocab`
(docs/pretrained.md#the-vocabulary).
"""
from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import sentencepiece as spm

from .errors import ConfigError, DataError

if TYPE_CHECKING:
    import torch

PAD, UNK, BOS, EOS = 0, 1, 2, 3
DEFAULT_MAX_SEP = 512
SPM_MAX_SENTENCE_BYTES = 4192      # SentencePiece's default max_sentence_length: longer lines are not learned from


def default_symbols(max_sep: int = DEFAULT_MAX_SEP) -> list[str]:
    return ["<mask>", "<eod>", "<sep>"] + [f"<sep{i}>" for i in range(1, max_sep + 1)]


def require_files(directory: Path, *files: str) -> None:
    missing = [f for f in files if not (directory / f).exists()]
    if missing:
        raise DataError(f"no vocabulary here (missing {', '.join(missing)}); run `docnmt prepare` first", directory)


def read_meta(directory: Path, *files: str) -> dict:
    """``vocab.json`` of a vocabulary directory, after checking that it and ``files`` exist."""
    require_files(directory, "vocab.json", *files)
    path = directory / "vocab.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DataError(f"not a docnmt vocab.json ({e}); run `docnmt prepare` again", path) from None
    symbols = meta.get("extra_symbols") if isinstance(meta, dict) else None
    if not isinstance(symbols, list) or not all(isinstance(x, str) for x in symbols):
        raise DataError("not a docnmt vocab.json (no list of extra_symbols); run `docnmt prepare` again", path)
    return meta


def load_spm(proto: bytes, origin) -> spm.SentencePieceProcessor:
    """A SentencePiece processor of a serialized model, or a DataError naming ``origin``."""
    try:
        return spm.SentencePieceProcessor(model_proto=proto)
    except (RuntimeError, TypeError, OSError):
        raise DataError(f"not a SentencePiece model ({len(proto)} bytes that do not parse as one)", origin) from None


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
        # every separator symbol (<sep>, <sep1> …): what opens a new sentence inside an instance
        self.sep_ids = {self.symbol_ids[s] for s in self.extra if s.startswith("<sep")}

    def __len__(self) -> int:
        return self.n_pieces + len(self.extra)

    @property
    def word_ids(self) -> tuple[int, int]:
        """The ids of the backend's ordinary pieces: ``range(*word_ids)``."""
        return EOS + 1, self.n_pieces

    def word_mask(self, ids: "torch.Tensor") -> "torch.Tensor":
        """True where ``ids`` holds an ordinary word piece: in the backend's piece range and none of
        pad, unk, ``<s>``, ``</s>`` (a pretrained vocabulary's range may include them), never a
        docnmt symbol (separators, EOD, ``<mask>``)."""
        import torch
        lo, hi = self.word_ids
        specials = torch.tensor([self.pad, self.unk, self.bos, self.eos], device=ids.device)
        return (ids >= lo) & (ids < hi) & ~torch.isin(ids, specials)

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

    def __init__(self, model_proto: bytes, extra_symbols: list[str], origin: str = "SentencePiece model"):
        self.proto = model_proto
        self.sp = load_spm(model_proto, origin)
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
        if backend == PretrainedVocab.backend:
            return PretrainedVocab.load(directory)
        if backend != "spm":
            raise ConfigError(f"{directory}/vocab.json: unknown subword backend {backend!r}")
        require_files(directory, "spm.model")
        return cls((directory / "spm.model").read_bytes(), meta["extra_symbols"], directory / "spm.model")

    @classmethod
    def train(cls, texts: Iterable[str], size: int = 8000, extra_symbols: list[str] | None = None,
              model_type: str = "bpe", max_sentences: int = 2_000_000, seed: int = 1) -> "Vocab":
        """Learn a joint SentencePiece model on ``texts`` (source and target sentences)."""
        texts = [t for t in texts if t.strip()]
        if len(texts) > max_sentences:
            texts = random.Random(seed).sample(texts, max_sentences)
        buf = io.BytesIO()
        usable = sum(1 for t in texts if len(t.encode("utf-8")) <= SPM_MAX_SENTENCE_BYTES)
        if not usable:
            raise DataError(f"no sentence to learn the subword model from: SentencePiece skips sentences over "
                            f"{SPM_MAX_SENTENCE_BYTES} bytes, and {'all' if texts else 'no'} {len(texts)} are")
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(texts), model_writer=buf, vocab_size=size, model_type=model_type,
                character_coverage=1.0, pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
                input_sentence_size=max_sentences, shuffle_input_sentence=True, num_threads=2,
                minloglevel=2, hard_vocab_limit=False, max_sentence_length=SPM_MAX_SENTENCE_BYTES)
        except RuntimeError as e:
            need = re.search(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)", str(e))
            if need:
                raise ConfigError(f"--vocab-size {size} is too small: the training text has {int(need.group(1)) - 4} "
                                  f"distinct characters, so at least {need.group(1)} pieces are needed") from None
            raise DataError(f"SentencePiece could not learn a model of {size} pieces: {str(e).splitlines()[0]}") \
                from None
        return cls(buf.getvalue(), default_symbols() if extra_symbols is None else extra_symbols)


# --------------------------------------------------------------------------------------------
# The tokenizer of a model imported from Hugging Face (docnmt.hf)
# --------------------------------------------------------------------------------------------

def clean_up_spaces(text: str) -> str:
    """transformers' ``clean_up_tokenization_spaces``: no space before punctuation and English
    contractions."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text


class PretrainedVocab(BaseVocab):
    """The tokenizer of an imported model with the model's own ids (``docnmt import-hf``).

    Ids below ``first_piece`` are the model's specials (pad, unk, ``</s>``, ...), ids from
    ``first_piece`` to ``n_pieces`` its ordinary pieces; the ids after them are ``extra``: first
    the model's own extra tokens (language codes, ``<mask>``, unnamed rows), then the symbols
    docnmt added at import, ``<start>`` (the decoder's start token, whose embedding is a copy of
    the pretrained decoder start's) and docnmt's usual symbols. ``meta`` (``vocab.json``) says
    which ids pad, unk and ``</s>`` are and how text is split (``tokenizer``):

    * ``sentencepiece`` (Marian, M2M-100): pieces of ``source.spm`` (source side) or
      ``target.spm`` (target side) looked up in ``pieces.json`` (the model's token of every id);
      a leading ``>>xx<<`` language token is kept whole; detokenised as the model's tokenizer does
      (``detok``: ``marian`` with the source model, ``sentencepiece`` with the target model);
    * ``tokenizers`` (mBART, NLLB): ``tokenizer.json`` through the tokenizers library, without
      its special tokens (``pip install docnmt[hf]``).
    """

    backend = "pretrained"

    def __init__(self, meta: dict, files: dict[str, bytes]):
        self.meta, self.files = dict(meta), dict(files)
        self.pad, self.unk, self.eos = meta["pad"], meta["unk"], meta["eos"]
        self.first_piece = meta["first_piece"]
        self.kind = meta["tokenizer"]
        if self.kind == "sentencepiece":
            self.spm = {side: spm.SentencePieceProcessor(model_proto=files[f"{side}.spm"])
                        for side in ("source", "target")}
            self.pieces = json.loads(files["pieces.json"])
            self.index = {p: i for i, p in enumerate(self.pieces[: meta["n_pieces"]])}
        elif self.kind == "tokenizers":
            try:
                from tokenizers import Tokenizer
            except ModuleNotFoundError:
                raise ConfigError("this model's tokenizer needs the tokenizers library: "
                                  "pip install docnmt[hf]") from None
            self.tok = Tokenizer.from_str(files["tokenizer.json"].decode("utf-8"))
        else:
            raise ConfigError(f"unknown pretrained tokenizer {self.kind!r}")
        super().__init__(meta["n_pieces"], meta["extra_symbols"])
        self.bos = self.symbol_ids["<start>"]

    @property
    def word_ids(self) -> tuple[int, int]:
        return self.first_piece, self.n_pieces

    def is_special(self, i: int) -> bool:
        return i < self.first_piece or i >= self.n_pieces

    def encode_batch(self, texts: list[str], side: str = "src") -> list[list[int]]:
        if self.kind == "tokenizers":
            return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]
        sp, index, unk = self.spm["source" if side == "src" else "target"], self.index, self.unk
        out = []
        for text in texts:
            code = []
            if text.startswith(">>") and "<<" in text:           # a Marian target-language token
                end = text.index("<<") + 2
                code, text = [index.get(text[:end], unk)], text[end:]
            out.append(code + [index.get(p, unk) for p in sp.encode(text, out_type=str)])
        return out

    def _detokenize(self, ids: list[int], side: str) -> str:
        if self.kind == "tokenizers":
            text = self.tok.decode(ids, skip_special_tokens=True)
        elif self.meta.get("detok") == "marian":
            text = self.spm["source"].decode_pieces([self.pieces[i] for i in ids]).replace("\u2581", " ").strip()
        else:
            text = self.spm["target"].decode([self.pieces[i] for i in ids]).strip()
        return clean_up_spaces(text) if self.meta.get("clean_up_spaces") else text

    def _piece(self, i: int) -> str:
        return self.tok.id_to_token(i) if self.kind == "tokenizers" else self.pieces[i]

    def _save_files(self, directory: Path) -> None:
        for name, data in self.files.items():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            (directory / name).write_bytes(data)

    def _meta(self) -> dict:
        return {**{k: v for k, v in self.meta.items() if k not in ("backend", "extra_symbols")},
                "files": sorted(self.files)}

    @classmethod
    def load(cls, directory: str | Path) -> "PretrainedVocab":
        """The vocabulary saved in ``directory``: ``vocab.json`` and the files it lists (the
        tokenizer's, and the original model's tokenizer and configuration files under
        ``hf_tokenizer/``, which export-hf writes back)."""
        directory = Path(directory)
        meta = read_meta(directory)
        names = meta.get("files") or (["tokenizer.json"] if meta.get("tokenizer") == "tokenizers"
                                      else ["source.spm", "target.spm", "pieces.json"])
        require_files(directory, *names)
        return cls(meta, {n: (directory / n).read_bytes() for n in names})
