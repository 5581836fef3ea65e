"""The one encoder-decoder Transformer every docnmt method is built on.

Read top to bottom: the configuration, sublayers and layers, positions and the attention policy,
then encoder, decoder and model. Attention itself (:class:`~docnmt.attention.AttnSpec`, the
kernels, :class:`~docnmt.attention.MultiheadAttention`) lives in :mod:`docnmt.attention`; the fast
CPU building blocks (linear layers, dropout, the fused loss) in :mod:`docnmt.ops`.

Methods differ from the baseline mainly in attention, so attention takes its variations as an
``AttnSpec``; which spec each attention call receives is decided by the model's
:class:`AttentionPolicy` (a module, so it may own parameters such as a relative-position table).
The default policy gives padding masks and causality only. Layers are lists of residual
:class:`Sublayer` s, so a method can replace the attention inside a sublayer (combined
local/global attention) or insert a new sublayer (gated context attention) without copying a
layer. The extension points are listed in README.md, "Extending".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import AttnSpec, KVCache, MultiheadAttention
from .ops import Dropout, Linear, linear, projected_label_smoothed_ce


@dataclass
class ModelConfig:
    """Architecture hyper-parameters shared by every method (the ``model:`` section of a config).
    A method's own settings are the ``method:`` section (see :mod:`docnmt.methods`)."""

    vocab_size: int = 0
    pad_id: int = 0
    d_model: int = 512
    heads: int = 8
    ffn_dim: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    pre_norm: bool = False
    share_embeddings: bool = True
    max_positions: int = 1024
    # length-aware attention (docs/methods/length_bias.md): logits × max(log n, 0.1) / log n̄, on any model
    length_aware: bool = False


# --------------------------------------------------------------------------------------------
# Sublayers and layers
# --------------------------------------------------------------------------------------------

@dataclass
class State:
    """What flows beside the hidden states through one encoder or decoder pass.

    ``specs`` maps an attention kind ("enc_self", "dec_self", "cross", or a method's own kinds)
    to its :class:`AttnSpec`; ``extra`` carries method-specific tensors (tags, context memory).
    """

    specs: dict[str, AttnSpec]
    memory: Tensor | None = None
    cache: dict | None = None
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

    def transform(self, x: Tensor, state: State) -> Tensor:
        return self.fc2(self.act_dropout(F.relu(self.fc1(x))))


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


# --------------------------------------------------------------------------------------------
# Positions and the attention policy
# --------------------------------------------------------------------------------------------

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


class AttentionPolicy(nn.Module):
    """Builds the :class:`AttnSpec` of every attention kind from the token batches.

    This is the main extension point: a method subclasses it to add group masks, position terms,
    relative-position biases or logit scales. Positions are 0-based per sequence, pads ignored
    (right padding; docs/methods/baselines.md#positions). ``offset`` is the position of the first
    decoder query (> 0 in incremental decoding).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg

    def encoder_specs(self, src: Tensor, src_pad: Tensor) -> dict[str, AttnSpec]:
        return {"enc_self": AttnSpec(mask=src_pad[:, None, None, :])}

    def decoder_specs(self, tgt: Tensor, src: Tensor, src_pad: Tensor, offset: int,
                      incremental: bool) -> dict[str, AttnSpec]:
        """Specs for decoder queries ``tgt[:, offset:]``; ``tgt`` is the whole prefix."""
        # Right padding: causality alone keeps real queries off target pads, and pad queries
        # (whose outputs are ignored) always see the first token, so no row is fully blocked.
        return {"dec_self": AttnSpec(is_causal=True),
                "cross": AttnSpec(mask=src_pad[:, None, None, :])}


# --------------------------------------------------------------------------------------------
# Encoder, decoder, model
# --------------------------------------------------------------------------------------------

class Embedding(nn.Module):
    """sqrt(d)·E[x] + P[pos], then dropout (docs/methods/baselines.md#the-shared-transformer)."""

    def __init__(self, table: nn.Embedding, cfg: ModelConfig):
        super().__init__()
        self.table, self.scale = table, math.sqrt(cfg.d_model)
        self.dropout = Dropout(cfg.dropout)
        self.positions = SinusoidalPositions(cfg)

    def forward(self, tokens: Tensor, offset: int = 0, dropout: bool = True) -> Tensor:
        x = self.table(tokens) * self.scale + self.positions(tokens.size(1), offset).to(self.table.weight.dtype)
        return self.dropout(x) if dropout else x


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


@dataclass
class EncoderOut:
    """The encoder's output; ``extra`` holds a method's batch-first tensors for the decoder
    (e.g. an encoded context), one row per input like ``memory``.

    In beam search (:meth:`expand_beams`) every row is repeated once per beam except ``memory``
    and ``extra``, which keep one row per input (``beams`` decoder rows share it): attention to
    them (cross-attention, a context attention) reads each input's keys and values once for all
    its beams instead of once per beam."""

    src: Tensor
    pad: Tensor
    memory: Tensor
    extra: dict = field(default_factory=dict)
    beams: int = 1

    def expand_beams(self, k: int) -> "EncoderOut":
        rows = torch.arange(self.src.size(0), device=self.src.device).repeat_interleave(k)
        out = self.select(rows)
        return replace(out, memory=self.memory, extra=self.extra, beams=k)

    def select(self, index: Tensor) -> "EncoderOut":
        """Rows ``index``; with beams, whole beam groups (memory and extra follow their inputs)."""
        mem_index = index if self.beams == 1 else index.view(-1, self.beams)[:, 0] // self.beams
        return EncoderOut(self.src.index_select(0, index), self.pad.index_select(0, index),
                          self.memory.index_select(0, mem_index),
                          {k: v.index_select(0, mem_index) for k, v in self.extra.items()}, self.beams)


class Transformer(nn.Module):
    """Encoder-decoder Transformer; ``policy`` decides every attention call's spec and the
    layer builders ``(cfg, i) -> Layer`` decide each layer's sublayers."""

    def __init__(self, cfg: ModelConfig, policy: AttentionPolicy | None = None,
                 make_encoder_layer: Callable[[ModelConfig, int], Layer] = encoder_layer,
                 make_decoder_layer: Callable[[ModelConfig, int], Layer] = decoder_layer):
        super().__init__()
        self.cfg = cfg
        src_table = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        tgt_table = src_table if cfg.share_embeddings else nn.Embedding(cfg.vocab_size, cfg.d_model,
                                                                       padding_idx=cfg.pad_id)
        self.encoder = Encoder(cfg, Embedding(src_table, cfg),
                               [make_encoder_layer(cfg, i) for i in range(cfg.encoder_layers)])
        self.decoder = Decoder(cfg, Embedding(tgt_table, cfg),
                               [make_decoder_layer(cfg, i) for i in range(cfg.decoder_layers)])
        self.policy = policy or AttentionPolicy(cfg)
        # a module that adjusts every spec (length-aware attention, docnmt.methods.length_bias), or None
        self.length_scale: nn.Module | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith(".bias") and "norm" not in name:
                nn.init.zeros_(p)
        for mod in self.modules():
            if isinstance(mod, MultiheadAttention):   # each of W_Q, W_K, W_V as its own d×d matrix
                for part in mod.in_proj.weight.data.chunk(3):
                    nn.init.xavier_uniform_(part, gain=1 / math.sqrt(2))
        for table in {id(t): t for t in (self.encoder.embed.table, self.decoder.embed.table)}.values():
            nn.init.normal_(table.weight, 0.0, self.cfg.d_model ** -0.5)
            with torch.no_grad():
                table.weight[self.cfg.pad_id].zero_()

    def set_training_lengths(self, mean_src: float, mean_tgt: float) -> None:
        """The trainer's hook at the start of every epoch: the mean instance lengths (tokens)."""
        if self.length_scale is not None:
            self.length_scale.set_means(mean_src, mean_tgt)

    def encode(self, src: Tensor, **inputs: Tensor) -> EncoderOut:
        """Encode ``src``; ``inputs`` are a method's other batch tensors (``ctx``), which
        :meth:`encode_extra` turns into ``EncoderOut.extra`` for the encoder and decoder layers."""
        pad = src.eq(self.cfg.pad_id)
        specs = self.policy.encoder_specs(src, pad)
        if self.length_scale is not None:
            self.length_scale.encoder(specs, pad)
        extra = self.encode_extra(**inputs)
        return EncoderOut(src, pad, self.encoder(self.embed_source(src, extra), State(specs, extra=extra)), extra)

    def encode_extra(self, **inputs: Tensor) -> dict:
        """Method hook: tensors every layer can read from ``State.extra`` (none here)."""
        return {}

    def embed_source(self, src: Tensor, extra: dict) -> Tensor:
        """Method hook: the encoder's input vectors for ``src``; it may add batch-first tensors
        to ``extra`` (the future ``EncoderOut.extra``)."""
        return self.encoder.embed(src)

    def embed_target(self, tgt_in: Tensor, offset: int, enc: EncoderOut) -> Tensor:
        """Method hook: the decoder's input vectors for the tokens ``tgt_in[:, offset:]``."""
        return self.decoder.embed(tgt_in[:, offset:], offset)

    def decode(self, tgt_in: Tensor, enc: EncoderOut, cache: dict | None = None) -> Tensor:
        """Decoder hidden states for ``tgt_in`` (the whole prefix). With a ``cache``
        (incremental decoding) only the tokens not yet cached are fed, and only their states
        are returned; the policy still sees the whole prefix (e.g. to recompute sentence tags)."""
        offset = cache.get("_len", 0) if cache is not None else 0
        specs = self.policy.decoder_specs(tgt_in, enc.src, enc.pad, offset, cache is not None)
        if self.length_scale is not None:
            self.length_scale.decoder(specs, tgt_in, enc.pad, offset, self.cfg.pad_id)
        state = State(specs, memory=enc.memory, cache=cache, extra=enc.extra, beams=enc.beams)
        out = self.decoder(self.embed_target(tgt_in, offset, enc), state)
        if cache is not None:
            cache["_len"] = tgt_in.size(1)
        return out

    def output_projection(self, hidden: Tensor) -> Tensor:
        return linear(hidden, self.decoder.embed.table.weight)

    def forward(self, src: Tensor, tgt_in: Tensor, labels: Tensor | None = None, label_smoothing: float = 0.0,
                **inputs: Tensor):
        """Teacher-forced logits (B, T, V); with ``labels``, the training loss instead:
        (summed label-smoothed loss, summed NLL, number of target tokens). The loss path runs
        the output projection only on real (non-pad) positions, fused with the loss."""
        hidden = self.decode(tgt_in, self.encode(src, **inputs))
        if labels is None:
            return self.output_projection(hidden)
        select = labels.ne(self.cfg.pad_id)
        loss, nll = projected_label_smoothed_ce(hidden[select], self.decoder.embed.table.weight, labels[select],
                                                label_smoothing)
        return loss, nll, int(select.sum())

    @staticmethod
    def expand_cache(cache: dict, index: Tensor) -> None:
        """A cache filled with one row per input becomes one with rows ``index`` (each input
        repeated once per beam). Static (cross-attention) entries are dropped: the next step
        computes them again from the encoder output, in the layout its beams need."""
        for name in cache.get("_static", set()) & cache.keys():
            del cache[name]
        Transformer.reorder_cache(cache, index)

    @staticmethod
    def reorder_cache(cache: dict, index: Tensor, static_index: Tensor | None = None, beams: int = 1) -> None:
        """Reorder the cached keys/values of decoder self-attention rows by ``index``; the static
        (cross-attention) ones only by ``static_index``, when rows of whole inputs were dropped
        (beams of one input share them; keys kept once per input follow the inputs)."""
        static, per_input = cache.get("_static", set()), cache.get("_per_input", set())
        for name, kv in list(cache.items()):
            if name.startswith("_"):
                continue
            idx = static_index if name in static else index
            if idx is not None and name in per_input:
                idx = idx.view(-1, beams)[:, 0] // beams
            if isinstance(kv, KVCache):
                kv.index_select(index)
            elif idx is not None:
                cache[name] = (kv[0].index_select(0, idx), kv[1].index_select(0, idx))
