"""The vocabulary's rows padded to a multiple of ``model.pad_vocab_to`` (GPU matrix products run
on aligned kernels when the output layer's width is a multiple of 64; an 8,515-entry vocabulary is not
even one of 8): the hooks that save and load a padded model's vocabulary matrices without the
padding rows, and the positions of the real labels the loss reads. The model side (which rows the
output layer predicts) is :meth:`docnmt.model.Transformer.output_weight`; the loss leaves the
padding rows' logits out (:func:`docnmt.ops.projected_label_smoothed_ce`'s ``classes``)."""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def padded(cfg, n: int) -> int:
    """``n`` rows rounded up to a multiple of the model config ``cfg``'s ``pad_vocab_to``."""
    return -(-n // cfg.pad_vocab_to) * cfg.pad_vocab_to


def vocab_matrices(model) -> list[Tensor]:
    """A Transformer's parameters with a row per vocabulary id (padded rows included)."""
    out = {id(t.weight): t.weight for t in (model.encoder.embed.table, model.decoder.embed.table)}
    if not model.cfg.tie_output:
        out[id(model.output.weight)] = model.output.weight
    return list(out.values())


def label_positions(labels: Tensor, pad_id: int) -> Tensor:
    """The positions of the real (non-pad) tokens in ``labels`` flattened, in order (computed on
    ``labels``' device: on a GPU the host waits for it)."""
    return labels.flatten().ne(pad_id).nonzero().squeeze(1)


def strip_vocab_padding(model, state: dict, prefix: str, metadata) -> None:
    """State-dict hook: the vocabulary matrices without their padding rows, so that saved weights
    have the vocabulary's shape whatever ``pad_vocab_to`` (and export, averaging and
    ``--init-from`` see the unpadded model)."""
    rows = model.cfg.vocab_size
    padded = {(w.data_ptr(), w.shape) for w in vocab_matrices(model)}
    for key, value in state.items():
        if key.startswith(prefix) and (value.data_ptr(), value.shape) in padded:
            state[key] = value[:rows]


def pad_vocab_rows(model, state: dict, prefix: str, metadata, strict, missing, unexpected, errors) -> None:
    """Load hook: vocabulary matrices saved without padding rows (:func:`strip_vocab_padding`, or
    by a model without ``pad_vocab_to``) get zero rows up to the model's padded shape."""
    names = {id(w) for w in vocab_matrices(model)}
    for name, param in model.named_parameters(remove_duplicate=False):
        value = state.get(prefix + name)
        if id(param) in names and value is not None and value.shape[0] < param.shape[0]:
            state[prefix + name] = F.pad(value, (0, 0, 0, param.shape[0] - value.shape[0]))
