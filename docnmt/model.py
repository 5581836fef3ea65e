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
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import AttnSpec, KVCache, MultiheadAttention, RelativeLogits
from .errors import ConfigError
from .ops import Dropout, Linear, linear, projected_label_smoothed_ce

# the feed-forward activations (``model.activation``; Hugging Face's names: gelu_new = gelu_tanh, swish = silu)
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu}
# the position tables (``model.positions``), see :func:`position_table`
POSITIONS = ("sinusoidal", "sinusoidal_halves", "sinusoidal_fairseq", "learned")


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
    # ALiBi (docs/methods/length_bias.md#alibi): no position vectors; self-attention logits − m_h·|i − j| instead
    alibi: bool = False
    # positions restart in every sentence of a multi-sentence instance, each sentence counted as the
    # plain sentence format counts it (docs/methods/baselines.md#sentence-positions): a document
    # model fine-tuned from a sentence model keeps the position vectors that model was trained with
    sentence_positions: bool = False
    # The architecture options of pretrained models (docs/pretrained.md#the-architecture-options); the
    # defaults are docnmt's own Transformer. Layer norm position: ``pre_norm`` (pre-LN models end the
    # encoder and the decoder with a LayerNorm).
    activation: str = "relu"           # feed-forward activation: relu | gelu | gelu_tanh | silu
    positions: str = "sinusoidal"      # sinusoidal | sinusoidal_halves | sinusoidal_fairseq | learned
    position_offset: int = 0           # row of the position table that position 0 reads (2 in mBART, M2M-100)
    scale_embeddings: bool = True      # token embeddings × sqrt(d_model)
    embed_norm: bool = False           # a LayerNorm after token embeddings + positions
    output_bias: bool = False          # a fixed logit bias per token (Hugging Face's final_logits_bias)
    tie_output: bool = True            # output projection = the decoder's embedding matrix (else its own)
    src_lang_token: int = -1           # a token put before every source (a language code); -1: none
    src_lang_last: bool = False        # ... after the source's last token instead (mBART-25)
    tgt_lang_token: int = -1           # a token fed after the decoder's start token (a forced language code)
    output_tokens: int = 0             # the output layer predicts ids below this only (an imported model's
                                       # own tokens, not the symbols docnmt added); 0: every id

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"unknown activation {self.activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        if self.positions not in POSITIONS:
            raise ConfigError(f"unknown positions {self.positions!r}; choose one of {', '.join(POSITIONS)}")
        if self.position_offset < 0:
            raise ConfigError(f"position_offset must be at least 0, not {self.position_offset}")
        if self.output_tokens < 0:
            raise ConfigError(f"output_tokens must be at least 0, not {self.output_tokens}")
        if self.sentence_positions and (self.alibi or self.tgt_lang_token >= 0):
            raise ConfigError("sentence_positions restarts position vectors in every sentence: not with "
                              + ("ALiBi (model.alibi), which has none" if self.alibi else
                                 "a target language token after the start token (mBART, NLLB)"))


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
    """The position vectors of an ALiBi model (``alibi``): zeros; positions enter attention as
    :class:`LinearBiases` instead."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.register_buffer("zero", torch.zeros(1, cfg.d_model), persistent=False)

    def forward(self, n: int, offset: int = 0) -> Tensor:
        return self.zero.expand(n, -1)


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi's head slopes (Press et al., 2022): m_h = 2^(−8h/H), h = 1 … H, for H a power of 2;
    otherwise those of the power of 2 below H, then every other slope of twice that power."""
    p = 2 ** math.floor(math.log2(heads))
    geometric = lambda n: [2 ** (-8 * (h + 1) / n) for h in range(n)]  # noqa: E731
    return torch.tensor(geometric(p) + geometric(2 * p)[0::2][: heads - p])


class LinearBiases(nn.Module):
    """ALiBi (``model.alibi``): adds −m_h·|i − j| to the logits of every self-attention kind
    (``enc_self*``, ``dec_self*``; the decoder's causal mask hides j > i), through each spec's
    ``bias``; cross-attention and a method's other attentions get none. Query i is at position
    ``offset + i`` (incremental decoding), keys at 0 … n_keys − 1."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(cfg.heads), persistent=False)

    def bias(self, n_q: int, n_keys: int, offset: int = 0) -> Tensor:
        q = torch.arange(offset, offset + n_q, device=self.slopes.device)
        dist = (q[:, None] - torch.arange(n_keys, device=self.slopes.device)[None, :]).abs()
        return -self.slopes[None, :, None, None] * dist                                  # (1, h, nq, nk)

    def add(self, specs: dict[str, AttnSpec], side: str, n_q: int, n_keys: int, offset: int = 0) -> None:
        extra = self.bias(n_q, n_keys, offset)
        for kind, spec in specs.items():
            if kind.startswith(f"{side}_self"):
                spec.bias = _plus(spec.bias, extra)


def _plus(bias, extra: Tensor):
    """A spec's ``bias`` (None, a tensor, :class:`RelativeLogits`, or a callable giving one) plus
    the tensor ``extra``: a relative term becomes dense (the block-wise relative kernel takes no
    second bias)."""
    if bias is None:
        return extra
    if callable(bias):
        return lambda q, name: _plus(bias(q, name), extra)
    return (bias.dense() if isinstance(bias, RelativeLogits) else bias) + extra


@contextmanager
def rows_apart(model: nn.Module, enabled: bool = True):
    """While inside, every module of ``model`` that looks across the rows of its batch (it has a
    ``rows_apart`` attribute: DocFlat's flat-batch attention and its baselines) keeps each row to
    itself, so a batch computes what each of its rows would alone (teacher-forced scoring of a
    method with ``score_alone``: pass ``enabled=method.score_alone``). The shared Transformer's
    rows never meet."""
    mods = [(m, m.rows_apart) for m in model.modules() if hasattr(m, "rows_apart")] if enabled else []
    for m, _ in mods:
        m.rows_apart = True
    try:
        yield model
    finally:
        for m, before in mods:
            m.rows_apart = before


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

    def decoder_specs(self, tgt: Tensor, src: Tensor, src_pad: Tensor, offset: int) -> dict[str, AttnSpec]:
        """Specs for decoder queries ``tgt[:, offset:]``; ``tgt`` is the whole prefix."""
        # Right padding: causality alone keeps real queries off target pads, and pad queries
        # (whose outputs are ignored) always see the first token, so no row is fully blocked.
        return {"dec_self": AttnSpec(is_causal=True),
                "cross": AttnSpec(mask=src_pad[:, None, None, :])}


# --------------------------------------------------------------------------------------------
# Encoder, decoder, model
# --------------------------------------------------------------------------------------------

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
        self.positions = NoPositions(cfg) if cfg.alibi else SinusoidalPositions(cfg) if plain else TablePositions(cfg)
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
        self.alibi = LinearBiases(cfg) if cfg.alibi else None
        # the ids that open a sentence (``sentence_positions``; set by :meth:`set_sentence_openers`)
        self.register_buffer("sentence_openers", torch.zeros(0, dtype=torch.long), persistent=False)
        if not cfg.tie_output:
            self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.output_bias:
            self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
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

    def set_sentence_openers(self, ids: list[int]) -> None:
        """The tokens that open a sentence of an instance (``<s>``, the separators), from which
        ``sentence_positions`` restarts the count."""
        self.sentence_openers = torch.tensor(sorted(ids), dtype=torch.long, device=self.sentence_openers.device)

    def source_first_word(self) -> int:
        """Where a plain sentence model's source puts its first word: 1 after a language code
        (``src_lang_token`` first), else 0."""
        return int(self.cfg.src_lang_token >= 0 and not self.cfg.src_lang_last)

    def _positions(self, tokens: Tensor, first_word: int) -> Tensor | None:
        if not self.cfg.sentence_positions:
            return None
        if not self.sentence_openers.numel():
            raise RuntimeError("sentence_positions needs set_sentence_openers() (docnmt.methods.build_model calls it)")
        return positions_in_sentence(tokens, self.sentence_openers, first_word)

    def encode(self, src: Tensor, **inputs: Tensor) -> EncoderOut:
        """Encode ``src``; ``inputs`` are a method's other batch tensors (``ctx``), which
        :meth:`encode_extra` turns into ``EncoderOut.extra`` for the encoder and decoder layers."""
        src = self.with_source_language(src)
        pad = src.eq(self.cfg.pad_id)
        specs = self.policy.encoder_specs(src, pad)
        if self.alibi is not None:
            self.alibi.add(specs, "enc", src.size(1), src.size(1))
        if self.length_scale is not None:
            self.length_scale.encoder(specs, pad)
        extra = self.encode_extra(**inputs)
        return EncoderOut(src, pad, self.encoder(self.embed_source(src, extra), State(specs, extra=extra)), extra)

    def with_source_language(self, src: Tensor) -> Tensor:
        """``src`` with ``src_lang_token`` before each row, or after its last token
        (``src_lang_last``); unchanged without one. The encoder output has this new position."""
        lang = self.cfg.src_lang_token
        if lang < 0:
            return src
        if not self.cfg.src_lang_last:
            return torch.cat([src.new_full((src.size(0), 1), lang), src], 1)
        out = torch.nn.functional.pad(src, (0, 1), value=self.cfg.pad_id)
        out[torch.arange(src.size(0), device=src.device), src.ne(self.cfg.pad_id).sum(1)] = lang
        return out

    def encode_extra(self, **inputs: Tensor) -> dict:
        """Method hook: tensors every layer can read from ``State.extra`` (none here)."""
        return {}

    def embed_source(self, src: Tensor, extra: dict) -> Tensor:
        """Method hook: the encoder's input vectors for ``src``; it may add batch-first tensors
        to ``extra`` (the future ``EncoderOut.extra``)."""
        return self.encoder.embed(src, at=self._positions(src, first_word=self.source_first_word()))

    def embed_target(self, tgt_in: Tensor, offset: int, enc: EncoderOut) -> Tensor:
        """Method hook: the decoder's input vectors for the tokens ``tgt_in[:, offset:]`` (with
        ``sentence_positions``, positions from the whole prefix)."""
        at = self._positions(tgt_in, first_word=1)
        return self.decoder.embed(tgt_in[:, offset:], offset, at=None if at is None else at[:, offset:])

    def decode(self, tgt_in: Tensor, enc: EncoderOut, cache: dict | None = None) -> Tensor:
        """Decoder hidden states for ``tgt_in`` (the whole prefix). With a ``cache``
        (incremental decoding) only the tokens not yet cached are fed, and only their states
        are returned; the policy still sees the whole prefix (e.g. to recompute sentence tags)."""
        offset = cache.get("_len", 0) if cache is not None else 0
        lang = self.cfg.tgt_lang_token
        if lang >= 0:     # the forced language code after the start token: one more position
            tgt_in = torch.cat([tgt_in[:, :1], tgt_in.new_full((tgt_in.size(0), 1), lang), tgt_in[:, 1:]], 1)
        specs = self.policy.decoder_specs(tgt_in, enc.src, enc.pad, offset)
        if self.alibi is not None:
            self.alibi.add(specs, "dec", tgt_in.size(1) - offset, tgt_in.size(1), offset)
        if self.length_scale is not None:
            self.length_scale.decoder(specs, tgt_in, enc.pad, offset, self.cfg.pad_id)
        state = State(specs, memory=enc.memory, cache=cache, extra=enc.extra, beams=enc.beams)
        out = self.decoder(self.embed_target(tgt_in, offset, enc), state)
        if cache is not None:
            cache["_len"] = tgt_in.size(1)
        if lang >= 0 and offset == 0:   # the start token's state predicts the language code: not returned
            out = out[:, 1:]
        return out

    def output_weight(self) -> Tensor:
        """The (V, d) output projection: the decoder's embeddings, or its own matrix (``tie_output``);
        only its first ``output_tokens`` rows when that is set."""
        weight = self.decoder.embed.table.weight if self.cfg.tie_output else self.output.weight
        return weight[: self.cfg.output_tokens] if self.cfg.output_tokens else weight

    def output_bias(self) -> Tensor | None:
        if not self.cfg.output_bias:
            return None
        return self.final_logits_bias[: self.cfg.output_tokens] if self.cfg.output_tokens else self.final_logits_bias

    def output_projection(self, hidden: Tensor) -> Tensor:
        bias = self.output_bias()
        logits = linear(hidden, self.output_weight(), None if bias is None else bias.to(hidden.dtype))
        if self.cfg.output_tokens:      # the ids the output layer does not predict: -inf
            rest = self.cfg.vocab_size - self.cfg.output_tokens
            logits = torch.cat([logits, logits.new_full((*logits.shape[:-1], rest), float("-inf"))], -1)
        return logits

    def forward(self, src: Tensor, tgt_in: Tensor, labels: Tensor | None = None, label_smoothing: float = 0.0,
                **inputs: Tensor):
        """Teacher-forced logits (B, T, V); with ``labels``, the training loss instead:
        (summed label-smoothed loss, summed NLL, number of target tokens). The loss path runs
        the output projection only on real (non-pad) positions, fused with the loss."""
        hidden = self.decode(tgt_in, self.encode(src, **inputs))
        if labels is None:
            return self.output_projection(hidden)
        select = labels.ne(self.cfg.pad_id)
        hidden, weight, bias = hidden[select], self.output_weight(), self.output_bias()
        if bias is not None:      # the fixed bias as one more input dimension of value 1
            hidden = torch.cat([hidden, hidden.new_ones(hidden.size(0), 1)], 1)
            weight = torch.cat([weight, bias[:, None].to(weight.dtype)], 1)
        loss, nll = projected_label_smoothed_ce(hidden, weight, labels[select], label_smoothing)
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
