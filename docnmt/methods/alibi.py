"""ALiBi (Press et al., 2022; docs/methods/length_bias.md#alibi), a switch any model can use:
``model.alibi: true`` removes the position vectors and adds −m_h·|i − j| to the logits of every
self-attention kind instead (:class:`LinearBiases`), so positions enter attention as distances.
It adds no parameters or saved buffers: a model's state dict is the same with or without it."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..attention_spec import AttnSpec
from ..positions import NoPositions, _plus
from .base import Extension, Setting


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi's head slopes: m_h = 2^(−8h/H), h = 1 … H, for H a power of 2; otherwise those of
    the power of 2 below H, then every other slope of twice that power."""
    p = 2 ** math.floor(math.log2(heads))
    geometric = lambda n: [2 ** (-8 * (h + 1) / n) for h in range(n)]  # noqa: E731
    return torch.tensor(geometric(p) + geometric(2 * p)[0::2][: heads - p])


class LinearBiases(nn.Module):
    """Adds −m_h·|i − j| to the logits of every self-attention kind (``enc_self*``,
    ``dec_self*``; the decoder's causal mask hides j > i), through each spec's ``bias``;
    cross-attention and a method's other attentions get none. Query i is at position
    ``offset + i`` (incremental decoding), keys at 0 … n_keys − 1. A model piece
    (:meth:`docnmt.model.Transformer.add_piece`)."""

    def __init__(self, heads: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)

    def bias(self, n_q: int, n_keys: int, offset: int = 0) -> Tensor:
        q = torch.arange(offset, offset + n_q, device=self.slopes.device)
        dist = (q[:, None] - torch.arange(n_keys, device=self.slopes.device)[None, :]).abs()
        return -self.slopes[None, :, None, None] * dist                                  # (1, h, nq, nk)

    def add(self, specs: dict[str, AttnSpec], side: str, n_q: int, n_keys: int, offset: int = 0) -> None:
        extra = self.bias(n_q, n_keys, offset)
        for kind, spec in specs.items():
            if kind.startswith(f"{side}_self"):
                spec.bias = _plus(spec.bias, extra)

    def encoder(self, specs: dict[str, AttnSpec], src: Tensor, pad: Tensor) -> None:
        self.add(specs, "enc", src.size(1), src.size(1))

    def decoder(self, specs: dict[str, AttnSpec], tgt_in: Tensor, src_pad: Tensor, offset: int, pad_id: int) -> None:
        self.add(specs, "dec", tgt_in.size(1) - offset, tgt_in.size(1), offset)


def attach(model) -> None:
    """Make ``model`` an ALiBi model: no position vectors, the biases as a model piece ``alibi``."""
    for side in (model.encoder, model.decoder):
        side.embed.positions = NoPositions(model.cfg)
    model.add_piece("alibi", LinearBiases(model.cfg.heads))


def _attach(model, cfg, vocab) -> None:
    if cfg.model.alibi:
        attach(model)


EXTENSION = Extension(name="alibi", model_pieces=_attach, settings=(
    Setting("model.alibi", False, "ALiBi: no position vectors; self-attention logits - m_h |i - j| instead"),
))
