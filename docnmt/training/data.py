"""The data of a training run: the prepared splits, read and checked (:func:`load_corpus`); the
vocabulary, training corpus and validation instances together (:class:`TrainingData`, built in
memory or read from a prepared directory), each epoch's training instances, and a batch through
the model (:func:`forward_loss`)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from .. import methods
from ..config import Config
from ..data import Corpus, InstanceSet, build_instances, model_inputs
from ..errors import ConfigError, DataError
from ..vocab import BaseVocab, Vocab


def forward_loss(model, batch: dict, eps: float) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Loss of one batch (through the model's forward; a DDP wrapper forwards it to the model);
    with the positions of its real labels when the batch has them (``label_rows``, made on the host)."""
    rows = {"label_rows": batch["label_rows"]} if "label_rows" in batch else {}
    return model(batch["src"], batch["tgt_in"], batch["labels"], eps, **rows, **model_inputs(batch))


def bucket_length(n: int, step: int = 64) -> int:
    """The length a batch of ``n`` positions is padded to under ``--compile``: a multiple of ``step``
    up to 8 × ``step``, then of an eighth of the power of two above ``n`` (at most 4 lengths per
    doubling, ≤ 12.5% padding), so that a run meets a handful of shapes, not one per batch."""
    unit = max(step, 1 << max(0, (n - 1).bit_length() - 3))
    return -(-n // unit) * unit


def bucketed(batch: dict, pad: int, most: int) -> dict:
    """``batch`` with its source and its target (decoder input and labels) padded on the right to
    :func:`bucket_length` (never past ``most`` positions, unless already longer): the pads are
    masked as any row's pads are, so the loss is the same."""
    out = dict(batch)
    for keys in (("src",), ("tgt_in", "labels")):
        n = batch[keys[0]].size(1)
        to = max(n, min(bucket_length(n), most))
        for k in keys:
            out[k] = torch.nn.functional.pad(batch[k], (0, to - n), value=pad)
    return out


def to_device(batch: dict, device: torch.device) -> dict:
    """A batch's tensors on the training device (to a GPU through pinned memory, without waiting)."""
    if device.type != "cuda":
        return {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
    return {k: (v.pin_memory().to(device, non_blocking=True) if torch.is_tensor(v) else v)
            for k, v in batch.items()}



def _check_files(directory: Path, split: str) -> None:
    """Every file of a prepared split readable, else a DataError naming it (a truncated copy, a disk error)."""
    for f in sorted(Path(directory).glob(f"{split}.*")):
        try:
            if f.suffix == ".npy":
                np.load(f, mmap_mode="r")
            elif f.suffix == ".json":
                json.loads(f.read_text(encoding="utf-8"))
        except Exception as e:             # numpy and json raise many kinds (ValueError, EOFError, OSError, ...)
            raise DataError(f"not a readable prepared data file ({type(e).__name__}: {e}); run `docnmt prepare` "
                            "again", f) from None


def load_corpus(directory: Path, split: str, vocab_size: int) -> Corpus:
    """A prepared split, checked: every file readable and consistent with the others and with
    the vocabulary, else a DataError naming the file (a truncated copy, a disk error)."""
    from ..data.corpus import Side
    _check_files(directory, split)
    corpus = Corpus.load(directory, split)

    def bad(name: str, what: str):
        return DataError(f"{what}; the prepared data is damaged: run `docnmt prepare` again",
                         Path(directory) / f"{split}.{name}")
    sides = [(n, side) for n, side in (("src", corpus.src), ("tgt", corpus.tgt)) if isinstance(side, Side)]
    if not sides:
        raise bad("src.tokens.npy", "missing")
    for name, side in sides:
        off, tok = side.offsets, side.tokens
        if off.ndim != 1 or not len(off) or off[0] != 0 or off[-1] != len(tok) or (np.diff(off) < 0).any():
            raise bad(f"{name}.offsets.npy", f"sentence offsets do not fit the {len(tok)} tokens")
        if tok.ndim != 1 or tok.dtype.kind not in "iu" or (len(tok) and (tok.min() < 0 or tok.max() >= vocab_size)):
            raise bad(f"{name}.tokens.npy", f"token ids outside the vocabulary's {vocab_size}")
        if len(off) != len(corpus.src.offsets):
            raise bad(f"{name}.offsets.npy", "source and target sentence counts differ")
    docs = corpus.doc_offsets
    if docs.ndim != 1 or not len(docs) or docs[0] != 0 or docs[-1] != corpus.n_sents or (np.diff(docs) < 0).any():
        raise bad("docs.npy", f"document offsets do not fit the {corpus.n_sents} sentences")
    if not isinstance(corpus.docids, list) or len(corpus.docids) != corpus.n_docs:
        raise bad("docids.json", f"not {corpus.n_docs} document ids")
    return corpus


class TrainingData:
    """What a run trains and validates on: the vocabulary, the training corpus (its instances
    are drawn per epoch by :meth:`train_set`) and the validation instances (``valid``; None
    without a validation corpus), in the data format of the config's ``data:`` section."""

    def __init__(self, cfg: Config, vocab: BaseVocab, train: Corpus, valid: Corpus | None = None):
        self.cfg, self.vocab, self.train_corpus = cfg, vocab, train
        self.joiner = methods.data_joiner(vocab, cfg.data)
        self.valid = None if valid is None else \
            InstanceSet(valid, build_instances(valid, cfg.data, training=False), self.joiner)

    @classmethod
    def load(cls, cfg: Config, directory: str | Path) -> "TrainingData":
        """The data a ``docnmt prepare`` directory holds (its validation split where it has one)."""
        directory = Path(directory)
        vocab = Vocab.load(directory)
        train = load_corpus(directory, "train", len(vocab))
        valid = load_corpus(directory, "valid", len(vocab)) if (directory / "valid.docs.npy").exists() else None
        return cls(cfg, vocab, train, valid)

    def train_set(self, epoch: int) -> InstanceSet:
        """The training instances of an epoch (dynamic length sampling draws them anew), over the
        training corpus as the extensions extend it (split-pair training's documents)."""
        d = self.cfg.data
        rows = methods.training_rows(self.train_corpus, d, epoch, self.cfg.train.seed)
        if not len(rows):
            raise ConfigError(f"no training instances: data.min_train_doc_sents ({d.min_train_doc_sents}) or "
                              f"data.max_train_sent_tokens ({d.max_train_sent_tokens}) drops every training document")
        corpus, rows = methods.training_data(self.cfg, self.train_corpus, rows, self.vocab, epoch)
        return InstanceSet(corpus, rows, self.joiner)
