"""Position vectors and position terms of the one Transformer: the sinusoidal and learned tables
(also those of pretrained models), no positions (ALiBi's, docnmt.methods.alibi), positions that
restart in every sentence, and the embedding layer that adds them to the token vectors
(docs/methods/baselines.md#positions, docs/pretrained.md#positions)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .attention_spec import dense_bias
from .ops import Dropout

if TYPE_CHECKING:
    from .model import ModelConfig

# the position tables (``model.positions``), see :func:`position_table`
POSITIONS = ("sinusoidal", "sinusoidal_halves", "sinusoidal_fairseq", "learned")


def sinusoidal_table(n: int, d: int, device=None) -> Tensor:
    """P[pos, 2i] = sin(pos / 10000^(2i/d)), P[pos, 2i+1] = cos(...), unscaled
    (docs/methods/baselines.md#positions)."""
    pos = torch.arange(n, dtype=torch.float32, device=device)[:, None]
    inv = torch.exp(torch.arange(0, d, 2, dtype=torch.float32, device=device) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d, device=device)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv[: d // 2])
    return table


class SinusoidalPositions(nn.Module):
    """P[offset : offset + n] of the unscaled sinusoidal table, grown on demand."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(cfg.max_positions, cfg.d_model), persistent=False)

    def forward(self, n: int, offset: int = 0) -> Tensor:
        if offset + n > self.pe.size(0):
            self.pe = sinusoidal_table(2 * (offset + n), self.pe.size(1), self.pe.device)
        return self.pe[offset: offset + n]


def position_table(kind: str, n: int, d: int, device=None) -> Tensor:
    """Rows 0 … n−1 of the sinusoidal tables of pretrained models (docs/pretrained.md#positions):
    ``sinusoidal_halves`` (Marian) holds sin(p·ω_i) in the first half and cos(p·ω_i) in the second,
    ω_i = 10000^(−2i/d), i.e. :func:`sinusoidal_table` with its columns regrouped;
    ``sinusoidal_fairseq`` (fairseq, M2M-100, NLLB) the same halves with ω_i = 10000^(−i/(d/2−1)),
    computed in fp32 as fairseq does. Row p is position p − ``position_offset`` of the model."""
    if kind == "sinusoidal":
        return sinusoidal_table(n, d, device)
    if kind == "sinusoidal_halves":
        pos = torch.arange(n, dtype=torch.float64, device=device)[:, None]
        angle = pos * torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)
        return torch.cat([angle.sin(), angle.cos()], 1).float()
    if kind == "sinusoidal_fairseq":
        half = d // 2
        freq = torch.exp(torch.arange(half, device=device).float() * -(math.log(10000) / (half - 1)))
        angle = torch.arange(n, device=device).float()[:, None] * freq[None]
        table = torch.cat([angle.sin(), angle.cos()], 1)
        return torch.cat([table, table.new_zeros(n, d - 2 * half)], 1)
    raise ValueError(f"no sinusoidal table {kind!r}")


class TablePositions(nn.Module):
    """Position vectors from a table of pretrained models: a sinusoidal one of
    :func:`position_table` (grown on demand) or a learned one (``positions: learned``, the
    parameter ``weight`` of ``max_positions + position_offset`` rows; later positions read the
    last row). Position p reads row p + ``position_offset``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.kind, self.offset, rows = cfg.positions, cfg.position_offset, cfg.max_positions + cfg.position_offset
        if self.kind == "learned":
            self.weight = nn.Parameter(torch.empty(rows, cfg.d_model).normal_(0.0, cfg.d_model ** -0.5))
        else:
            self.register_buffer("pe", position_table(self.kind, rows, cfg.d_model), persistent=False)

    def forward(self, n: int, offset: int = 0) -> Tensor:
        first = offset + self.offset
        if self.kind == "learned":
            rows = torch.arange(first, first + n, device=self.weight.device).clamp(max=self.weight.size(0) - 1)
            return self.weight[rows]
        if first + n > self.pe.size(0):
            self.pe = position_table(self.kind, 2 * (first + n), self.pe.size(1), self.pe.device)
        return self.pe[first: first + n]


class NoPositions(nn.Module):
    """No position vectors (zeros): positions enter attention another way (ALiBi's biases,
    docnmt.methods.alibi, puts this in place of a model's table)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.register_buffer("zero", torch.zeros(1, cfg.d_model), persistent=False)

    def forward(self, n: int, offset: int = 0) -> Tensor:
        return self.zero.expand(n, -1)


def _plus(bias, extra: Tensor):
    """A spec's ``bias`` (None, a tensor, a ``RelativeLogits``, or a callable giving one) plus
    the tensor ``extra``: a relative term becomes dense (the block-wise relative kernel takes no
    second bias)."""
    if bias is None:
        return extra
    if callable(bias):
        return lambda q, name: _plus(bias(q, name), extra)
    return dense_bias(bias) + extra


def positions_in_sentence(tokens: Tensor, openers: int | Tensor, first_word: int) -> Tensor:
    """Each token's position in its own sentence, counted as docnmt's plain sentence format counts
    it. A sentence begins at an ``openers`` token (one id or a tensor of ids: ``<s>``, a
    separator): its first word is at ``first_word`` (0 on the source side, whose plain format is
    ``x </s>``; 1 in the decoder input ``<s> y``), the opener at ``first_word - 1`` or 0, and a
    token before the first opener from the start (a source's first sentence, the decoder's EOD)."""
    t = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
    opens = tokens.eq(openers) if isinstance(openers, int) else torch.isin(tokens, openers)
    start = torch.where(opens, t, torch.zeros_like(t)).cummax(-1).values
    in_sentence = opens.cumsum(-1) > 0
    return torch.where(in_sentence, (t - start - 1 + first_word).clamp(min=0), t)


class Embedding(nn.Module):
    """sqrt(d)·E[x] + P[pos], then dropout (docs/methods/baselines.md#the-shared-transformer).
    Pretrained models may leave out the sqrt(d) scale, use another position table and add a
    LayerNorm before the dropout (``scale_embeddings``, ``positions``, ``embed_norm``)."""

    def __init__(self, table: nn.Embedding, cfg: ModelConfig):
        super().__init__()
        self.table, self.scale = table, math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        self.dropout = Dropout(cfg.dropout)
        plain = cfg.positions == "sinusoidal" and cfg.position_offset == 0
        self.positions = SinusoidalPositions(cfg) if plain else TablePositions(cfg)
        if cfg.embed_norm:
            self.norm = nn.LayerNorm(cfg.d_model)

    def forward(self, tokens: Tensor, offset: int = 0, dropout: bool = True, at: Tensor | None = None) -> Tensor:
        """``at``: each token's own position (B, n), each below ``offset + n``, instead of ``offset``,
        ``offset + 1``, …"""
        pos = self.positions(tokens.size(1), offset) if at is None else self.positions(offset + tokens.size(1))[at]
        x = self.table(tokens) * self.scale + pos.to(self.table.weight.dtype)
        if hasattr(self, "norm"):
            x = self.norm(x)
        return self.dropout(x) if dropout else x

