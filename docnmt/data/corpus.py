"""The encoded corpus: stored once, sentence by sentence.

A flat int32 token array per side, sentence offsets into it, and document boundaries
(``doc_offsets``) -- memory-mapped ``.npy`` files, so instances of any mode are cheap *views*
over the same store and can be rebuilt every epoch.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..document import Document
from ..errors import DataError
from ..vocab import Vocab


class Side:
    """One language side: all sentences' tokens concatenated, plus offsets."""

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray):
        self.tokens, self.offsets = tokens, offsets
        self.lengths = np.diff(offsets).astype(np.int64)

    @classmethod
    def from_lists(cls, sents: list[list[int]]) -> "Side":
        lengths = np.fromiter((len(s) for s in sents), dtype=np.int64, count=len(sents))
        offsets = np.zeros(len(sents) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = [t for s in sents for t in s]
        return cls(np.asarray(flat, dtype=np.int32), offsets)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]: self.offsets[i + 1]]


class Corpus:
    """An encoded document-level corpus (see module docstring). ``tgt`` may be ``None``."""

    def __init__(self, src: Side, tgt: Side | None, doc_offsets: np.ndarray, docids: list[str],
                 sentence_level: np.ndarray | None = None, generated: np.ndarray | None = None):
        self.src, self.tgt, self.doc_offsets, self.docids = src, tgt, doc_offsets, docids
        # documents that come from a sentence-level corpus (single sentences, no real context)
        self.sentence_level = (np.zeros(len(docids), dtype=bool) if sentence_level is None
                               else np.asarray(sentence_level, dtype=bool))
        # documents a training extension made (split pairs' halves), not read from the data
        self.generated = (np.zeros(len(docids), dtype=bool) if generated is None
                          else np.asarray(generated, dtype=bool))

    @property
    def n_docs(self) -> int:
        return len(self.docids)

    @property
    def n_sents(self) -> int:
        return len(self.src.lengths)

    def doc_range(self, d: int) -> range:
        return range(int(self.doc_offsets[d]), int(self.doc_offsets[d + 1]))

    def doc_of(self, sents):
        """The document of each sentence index (an array, or one int for one index)."""
        return np.searchsorted(self.doc_offsets, sents, side="right") - 1

    @classmethod
    def encode(cls, docs: list[Document], vocab: Vocab, max_sentence_tokens: int = 1024,
               origin: str = "input") -> "Corpus":
        """Encode documents with ``vocab``; a sentence over ``max_sentence_tokens`` is an error."""
        sides = [[s for d in docs for s in d.src]]
        if docs and docs[0].tgt is not None:
            sides.append([s for d in docs for s in d.tgt])
        encoded = [vocab.encode_batch(texts, side) for side, texts in zip(("src", "tgt"), sides)]
        for ids in encoded:
            for k, sent in enumerate(ids):
                if len(sent) > max_sentence_tokens:
                    d, j = _locate(docs, k)
                    raise DataError(f"document {docs[d].docid!r}, sentence {j + 1}: {len(sent)} subword tokens, "
                                    f"more than the {max_sentence_tokens} a sentence may have", origin)
        doc_offsets = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum([len(d.src) for d in docs], out=doc_offsets[1:])
        tgt = Side.from_lists(encoded[1]) if len(encoded) > 1 else None
        return cls(Side.from_lists(encoded[0]), tgt, doc_offsets, [d.docid for d in docs],
                   np.asarray([bool(d.meta.get("sentence_level")) for d in docs], dtype=bool))

    # ---- persistence (memory-mapped) ---------------------------------------------------------
    def save(self, directory: str | Path, split: str) -> None:
        directory = Path(directory)
        for name, side in (("src", self.src), ("tgt", self.tgt)):
            if side is not None:
                np.save(directory / f"{split}.{name}.tokens.npy", side.tokens)
                np.save(directory / f"{split}.{name}.offsets.npy", side.offsets)
        np.save(directory / f"{split}.docs.npy", self.doc_offsets)
        (directory / f"{split}.docids.json").write_text(json.dumps(self.docids))
        if self.sentence_level.any():
            np.save(directory / f"{split}.sentence_level.npy", self.sentence_level)

    @classmethod
    def load(cls, directory: str | Path, split: str) -> "Corpus":
        directory = Path(directory)
        if not (directory / f"{split}.docs.npy").exists():
            raise DataError(f"no prepared '{split}' split here (run `docnmt prepare`)", directory)

        def side(name):
            if not (directory / f"{split}.{name}.tokens.npy").exists():
                return None
            return Side(np.load(directory / f"{split}.{name}.tokens.npy", mmap_mode="r"),
                        np.load(directory / f"{split}.{name}.offsets.npy"))
        docids = json.loads((directory / f"{split}.docids.json").read_text())
        flags = directory / f"{split}.sentence_level.npy"
        return cls(side("src"), side("tgt"), np.load(directory / f"{split}.docs.npy"), docids,
                   np.load(flags) if flags.exists() else None)


def _locate(docs: list[Document], k: int) -> tuple[int, int]:
    for d, doc in enumerate(docs):
        if k < len(doc.src):
            return d, k
        k -= len(doc.src)
    raise IndexError(k)
