"""The layers of the one Transformer: what flows beside the hidden states (:class:`State`),
residual :class:`Sublayer` s (attention, feed-forward), :class:`Layer` s made of them, and the
encoder/decoder stack. A method replaces the attention inside a sublayer or inserts a sublayer
(README.md, "Extending")."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import torch.nn.functional as F
from torch import Tensor, nn

from .attention import AttnSpec, MultiheadAttention
from .decoder_state import DecoderCache
from .ops import Dropout, Linear

if TYPE_CHECKING:
    from .model import ModelConfig
    from .positions import Embedding

# the feed-forward activations (``model.activation``; Hugging Face's names: gelu_new = gelu_tanh, swish = silu)
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu}


@dataclass
class State:
    """What flows beside the hidden states through one encoder or decoder pass.

    ``specs`` maps an attention kind ("enc_self", "dec_self", "cross", or a method's own kinds)
    to its :class:`AttnSpec`; ``extra`` carries method-specific tensors (tags, context memory).
    """

    specs: dict[str, AttnSpec]
    memory: Tensor | None = None
    cache: DecoderCache | None = None
    extra: dict = field(default_factory=dict)
    beams: int = 1          # in beam search: consecutive rows that are hypotheses of one input


class Sublayer(nn.Module):
    """A residual sublayer: post-LN ``LN(x + drop(f(x)))`` or pre-LN ``x + drop(f(LN(x)))``.

    Subclasses define ``transform(x, state) -> Tensor`` (the sublayer's function);
    :meth:`combine` is the residual connection, which a method may replace (e.g. a context gate).
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def combine(self, x: Tensor, y: Tensor) -> Tensor:
        return x + self.dropout(y)

    def forward(self, x: Tensor, state: State) -> Tensor:
        if self.pre_norm:
            return self.combine(x, self.transform(self.norm(x), state))
        return self.norm(self.combine(x, self.transform(x, state)))


class AttentionSublayer(Sublayer):
    """Self-attention (``kv=None``) or attention over ``state.memory`` (cross-attention).

    ``kind`` names the spec this sublayer reads from ``state.specs``; ``attn`` is any module with
    the :class:`MultiheadAttention` call signature, so it can be swapped (combined attention).
    """

    def __init__(self, cfg: ModelConfig, kind: str, name: str, cross: bool = False):
        super().__init__(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.kind, self.cross = kind, cross
        self.attn = MultiheadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, name)

    def transform(self, x: Tensor, state: State) -> Tensor:
        kv = state.memory if self.cross else x
        return self.attn(x, kv, state.specs[self.kind], state.cache, static_kv=self.cross)


class FeedForwardSublayer(Sublayer):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.fc1 = Linear(cfg.d_model, cfg.ffn_dim)
        self.fc2 = Linear(cfg.ffn_dim, cfg.d_model)
        self.act_dropout = Dropout(cfg.activation_dropout)
        self.act = ACTIVATIONS[cfg.activation]

    def transform(self, x: Tensor, state: State) -> Tensor:
        return self.fc2(self.act_dropout(self.act(self.fc1(x))))


class Layer(nn.Module):
    """An encoder or decoder layer: its sublayers applied in order.

    ``inserted`` adds sublayers of a method without renumbering the base ones: ``{i: sub}``
    runs ``sub`` just before ``sublayers[i]`` (parameter names ``inserted.{i}.…``), so weights of
    the base model still load by name (the context-encoder Transformer's gated context attention).
    """

    def __init__(self, sublayers: list[Sublayer], inserted: dict[int, Sublayer] | None = None):
        super().__init__()
        self.sublayers = nn.ModuleList(sublayers)
        self.inserted = nn.ModuleDict({str(i): sub for i, sub in (inserted or {}).items()})

    def forward(self, x: Tensor, state: State) -> Tensor:
        for i, sub in enumerate(self.sublayers):
            if str(i) in self.inserted:
                x = self.inserted[str(i)](x, state)
            x = sub(x, state)
        return x


def encoder_layer(cfg: ModelConfig, i: int) -> Layer:
    return Layer([AttentionSublayer(cfg, "enc_self", f"enc.{i}.self"), FeedForwardSublayer(cfg)])


def decoder_layer(cfg: ModelConfig, i: int) -> Layer:
    return Layer([AttentionSublayer(cfg, "dec_self", f"dec.{i}.self"),
                  AttentionSublayer(cfg, "cross", f"dec.{i}.cross", cross=True),
                  FeedForwardSublayer(cfg)])



class Encoder(nn.Module):
    """Embedding, layers, and the final LayerNorm of pre-LN models (also the decoder's shape)."""

    def __init__(self, cfg: ModelConfig, embed: Embedding, layers: list[Layer]):
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(layers)
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else None

    def forward(self, x: Tensor, state: State) -> Tensor:
        for layer in self.layers:
            x = layer(x, state)
        return x if self.final_norm is None else self.final_norm(x)


class Decoder(Encoder):
    pass

