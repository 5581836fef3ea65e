"""The classic Moses + BPE pipeline, an optional alternative to SentencePiece (``docnmt[moses]``).

Text is tokenised with sacremoses' Moses tokenizer of its language (the source language for the
source side, the target language for the target side) and split into subwords with a joint BPE
model learned by subword-nmt on both tokenised sides; non-final subwords end in ``@@``. The
vocabulary is every subword of the training data (most frequent first, ties alphabetical) after
ids 0-3, then docnmt's symbols -- the same layout and interface as :class:`docnmt.vocab.Vocab`.
Decoding drops the special symbols, removes the ``@@`` continuations and Moses-detokenises.

Files: ``bpe.codes`` (subword-nmt's merges), ``bpe.vocab.json`` (subword -> training frequency,
in id order) and ``vocab.json`` (backend, languages, docnmt's symbols).
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Iterable

from sacremoses import MosesDetokenizer, MosesTokenizer
from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe

from .errors import DataError
from .vocab import BaseVocab, default_symbols, read_meta

CONTINUATION_RE = re.compile(r"@@( |$)")


@functools.lru_cache(maxsize=None)
def moses(lang: str) -> tuple[MosesTokenizer, MosesDetokenizer]:
    return MosesTokenizer(lang), MosesDetokenizer(lang)


def tokenize(text: str, lang: str) -> list[str]:
    """Moses tokens of ``text`` (no HTML escaping, so decoding needs no unescaping)."""
    return moses(lang)[0].tokenize(text, escape=False)


class MosesBPEVocab(BaseVocab):
    """Moses tokenisation + joint subword-nmt BPE with docnmt's symbols (see module docstring)."""

    backend = "moses-bpe"

    def __init__(self, codes: str, pieces: dict[str, int], src_lang: str, tgt_lang: str, extra_symbols: list[str]):
        self.codes, self.pieces = codes, dict(pieces)
        self.langs = {"src": src_lang, "tgt": tgt_lang}
        self.bpe = BPE(io.StringIO(codes))
        self.names = ["<pad>", "<unk>", "<s>", "</s>", *self.pieces]
        self.index = {p: i for i, p in enumerate(self.pieces, start=4)}
        super().__init__(len(self.names), extra_symbols)

    def encode_batch(self, texts: list[str], side: str = "src") -> list[list[int]]:
        lang, index, unk = self.langs[side], self.index, self.unk
        return [[index.get(p, unk) for p in self.bpe.segment_tokens(tokenize(t, lang))] for t in texts]

    def _detokenize(self, ids: list[int], side: str) -> str:
        text = CONTINUATION_RE.sub("", " ".join(self.names[i] for i in ids))
        return moses(self.langs[side])[1].detokenize(text.split(), unescape=False)

    def _piece(self, i: int) -> str:
        return self.names[i]

    def _meta(self) -> dict:
        return {"src_lang": self.langs["src"], "tgt_lang": self.langs["tgt"]}

    def _save_files(self, directory: Path) -> None:
        (directory / "bpe.codes").write_text(self.codes, encoding="utf-8")
        (directory / "bpe.vocab.json").write_text(json.dumps(self.pieces, ensure_ascii=False, indent=0),
                                                  encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path) -> "MosesBPEVocab":
        directory = Path(directory)
        meta = read_meta(directory, "bpe.codes", "bpe.vocab.json")
        if not all(isinstance(meta.get(k), str) for k in ("src_lang", "tgt_lang")):
            raise DataError("not a Moses+BPE vocab.json (no src_lang and tgt_lang)", directory / "vocab.json")
        path = directory / "bpe.vocab.json"
        try:
            pieces = json.loads(path.read_text(encoding="utf-8"))
            codes = (directory / "bpe.codes").read_text(encoding="utf-8")
        except (UnicodeDecodeError, ValueError) as e:
            raise DataError(f"not readable ({e}); run `docnmt prepare` again", path) from None
        if not isinstance(pieces, dict):
            raise DataError("not a subword -> frequency mapping; run `docnmt prepare` again", path)
        try:
            return cls(codes, pieces, meta["src_lang"], meta["tgt_lang"], meta["extra_symbols"])
        except (ValueError, IndexError) as e:     # subword-nmt on a codes file it cannot parse
            raise DataError(f"not a subword-nmt codes file ({e})", directory / "bpe.codes") from None

    @classmethod
    def train(cls, texts_src: Iterable[str], texts_tgt: Iterable[str], src_lang: str, tgt_lang: str,
              merges: int = 30000, extra_symbols: list[str] | None = None, min_frequency: int = 2) -> "MosesBPEVocab":
        """Moses-tokenise both sides and learn ``merges`` joint BPE merges on them."""
        words = Counter(w for lang, texts in ((src_lang, texts_src), (tgt_lang, texts_tgt))
                        for t in texts for w in tokenize(t, lang))
        codes = io.StringIO()
        with contextlib.redirect_stderr(io.StringIO()):  # subword-nmt's progress bar
            learn_bpe(io.StringIO("".join(f"{w} {c}\n" for w, c in sorted(words.items()))), codes, merges,
                      min_frequency, is_dict=True)
        bpe = BPE(io.StringIO(codes.getvalue()))
        freq: Counter = Counter()
        for w, c in words.items():
            for p in bpe.segment_tokens([w]):
                freq[p] += c
        pieces = dict(sorted(freq.items(), key=lambda pc: (-pc[1], pc[0])))
        return cls(codes.getvalue(), pieces, src_lang, tgt_lang,
                   default_symbols() if extra_symbols is None else extra_symbols)
