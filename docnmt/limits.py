"""What the machine can take: memory of a device, and the checks `translate` runs on its input
and search settings before any decoding, so that a request too large for the model or the
machine is one clear error (or a warning with the figure) up front instead of a crash or an
allocation failure after minutes.

The figures are lower bounds of the dominant tensors, not a profile: one search step holds the
scores of every hypothesis over the vocabulary (instances × beam × vocabulary, fp32, twice:
log-probabilities and their sum with the beam scores), and attention over an instance of n tokens
holds heads × n² fp32 scores per layer.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

from . import methods
from .errors import ConfigError, DataError
from .readers import locate_sentence

GIB = 2**30
WARN_SHARE = 0.25      # warn when one tensor takes more than this share of the device's memory


def memory_bytes(device: torch.device) -> int:
    """The memory of ``device`` (a GPU's, else the machine's RAM); 0 when unknown."""
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError, RuntimeError):
        return 0


def check_translation(translator, docs, search, paths: list, fmt: str = "auto", log=None) -> None:
    """Before decoding ``docs`` (read from ``paths``) with ``search`` (a full
    :class:`~docnmt.config.DecodeConfig`, extension settings included): every sentence fits the model (else a
    DataError naming its file and line), the search's score tensors fit the device, and a
    document decoded whole (``--max-instance-tokens 0``) is refused when its attention cannot
    fit, or warned about with its size when it is longer than the model's positions; an instance
    budget above the model's positions is warned about (a length-bias experiment's, docs/methods/length_bias.md)."""
    log = log or (lambda m: print(m, file=sys.stderr))
    cfg, vocab = translator.cfg, translator.vocab
    have = memory_bytes(translator.device)
    limit = cfg.model.max_positions - 2
    lengths = [np.fromiter((len(s) for s in vocab.encode_batch(d.src, "src")), dtype=np.int64, count=len(d.src))
               for d in docs]
    for k, lens in enumerate(lengths):
        over = np.flatnonzero(lens > limit)
        if len(over):
            path, line, own = locate_sentence(paths, fmt, k, int(over[0]))
            where = "" if own else f"document {docs[k].docid!r}, sentence {int(over[0]) + 1}: "
            raise DataError(f"{where}{int(lens[over[0]])} subword tokens, more than the {limit} a sentence may have "
                            f"in this model ({cfg.model.max_positions} positions)", path, line)
    if search.beam > len(vocab):
        raise ConfigError(f"--beam {search.beam} is more than this model's {len(vocab)} symbols")
    batch = search.max_sentences
    rows = min(batch, max(len(docs), 1)) * search.beam
    scores = 2 * 4 * rows * len(vocab)
    if have and scores > have:
        raise ConfigError(f"--beam {search.beam} with --batch-size {batch}: each search step needs "
                          f"{scores / GIB:.1f} GiB for the scores of {rows:,} hypotheses over {len(vocab):,} symbols, "
                          f"more than the {have / GIB:.1f} GiB of this {translator.device.type}; lower --batch-size "
                          "or --beam")
    walk = methods.decode_walk(cfg, search)
    budget = cfg.data.max_instance_tokens
    if cfg.data.is_document_level and budget > cfg.model.max_positions and not walk.cuts_documents:
        log(f"warning: --max-instance-tokens {budget} is more than the model's {cfg.model.max_positions} positions: "
            "instances longer than it was built for (time grows with the square of the length)")
    whole = cfg.data.is_document_level and budget <= 0 and not walk.cuts_documents
    if not whole or not docs:
        return
    k = int(np.argmax([int(lens.sum()) + len(lens) + 1 for lens in lengths]))
    n = int(lengths[k].sum()) + len(lengths[k]) + 1       # the sentences, a separator each, the end token
    attention = 4 * cfg.model.heads * n * n
    figure = (f"document {docs[k].docid!r} is one instance of {n:,} tokens (--max-instance-tokens 0); attention "
              f"over it needs {attention / GIB:.1f} GiB per layer")
    if have and attention > have:
        raise ConfigError(f"{figure}, more than the {have / GIB:.1f} GiB of this {translator.device.type}: split "
                          "documents with --max-instance-tokens or decode with --sliding")
    if n > cfg.model.max_positions or (have and attention > WARN_SHARE * have):
        log(f"warning: {figure}; the model has {cfg.model.max_positions} positions, and time grows with the square "
            "of the length (--max-instance-tokens splits documents)")
