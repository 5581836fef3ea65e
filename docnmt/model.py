"""The one encoder-decoder Transformer every docnmt method is built on: its configuration, the
attention policy, the encoder output and the model.

The pieces live beside it: layers and sublayers in :mod:`docnmt.layers`, position vectors and
ALiBi in :mod:`docnmt.positions`, attention (:class:`~docnmt.attention_spec.AttnSpec`, the kernel
table, :class:`~docnmt.attention.MultiheadAttention`) in :mod:`docnmt.attention`, the decoder's
incremental state (:class:`~docnmt.decoder_state.DecoderCache`) in :mod:`docnmt.decoder_state`,
the fast CPU building blocks (linear layers, dropout, the fused loss) in :mod:`docnmt.ops`. Their
public names are importable from here too.

Methods differ from the baseline mainly in attention, so attention takes its variations as an
``AttnSpec``; which spec each attention call receives is decided by the model's
:class:`AttentionPolicy` (a module, so it may own parameters such as a relative-position table).
The default policy gives padding masks and causality only. Layers are lists of residual
``Sublayer`` s, so a method can replace the attention inside a sublayer (combined
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

from .attention import AttentionSettings, AttnSpec, MultiheadAttention
from .decoder_state import DecoderCache
from .errors import ConfigError
from .layers import (  # noqa: F401  (re-exported)
    ACTIVATIONS,
    AttentionSublayer,
    Decoder,
    Encoder,
    FeedForwardSublayer,
    Layer,
    State,
    Sublayer,
    decoder_layer,
    encoder_layer,
)
from .ops import linear, projected_label_smoothed_ce
from .padded_vocab import label_positions, pad_vocab_rows, padded, strip_vocab_padding, vocab_matrices
from .positions import (  # noqa: F401  (re-exported)
    POSITIONS,
    Embedding,
    NoPositions,
    SinusoidalPositions,
    TablePositions,
    _plus,
    position_table,
    positions_in_sentence,
    sinusoidal_table,
)


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
    pad_vocab_to: int = 1              # embedding and output matrices get rows up to a multiple of this (64 suits
                                       # GPU matrix products); the extra rows are never predicted nor saved
                                       # (docs/performance.md#vocabulary-rows-padded-to-a-multiple-of-64)

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"unknown activation {self.activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        if self.positions not in POSITIONS:
            raise ConfigError(f"unknown positions {self.positions!r}; choose one of {', '.join(POSITIONS)}")
        if self.position_offset < 0:
            raise ConfigError(f"position_offset must be at least 0, not {self.position_offset}")
        if self.output_tokens < 0:
            raise ConfigError(f"output_tokens must be at least 0, not {self.output_tokens}")
        if self.pad_vocab_to < 1:
            raise ConfigError(f"pad_vocab_to must be at least 1 (1: no padding), not {self.pad_vocab_to}")

    @property
    def classes(self) -> int:
        """The ids the output layer predicts: ``output_tokens``, else every id."""
        return self.output_tokens or self.vocab_size



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

    int8_output = None      # the output layer of an int8 copy (docnmt.engines.int8); None: output_weight()

    def __init__(self, cfg: ModelConfig, policy: AttentionPolicy | None = None,
                 make_encoder_layer: Callable[[ModelConfig, int], Layer] = encoder_layer,
                 make_decoder_layer: Callable[[ModelConfig, int], Layer] = decoder_layer):
        super().__init__()
        self.cfg = cfg
        rows = padded(cfg, cfg.vocab_size)      # the vocabulary's rows, padded (ModelConfig.pad_vocab_to)
        src_table = nn.Embedding(rows, cfg.d_model, padding_idx=cfg.pad_id)
        tgt_table = src_table if cfg.share_embeddings else nn.Embedding(rows, cfg.d_model, padding_idx=cfg.pad_id)
        self.encoder = Encoder(cfg, Embedding(src_table, cfg),
                               [make_encoder_layer(cfg, i) for i in range(cfg.encoder_layers)])
        self.decoder = Decoder(cfg, Embedding(tgt_table, cfg),
                               [make_decoder_layer(cfg, i) for i in range(cfg.decoder_layers)])
        self.policy = policy or AttentionPolicy(cfg)
        # the names of the modules a switch added that adjust every attention spec (:meth:`add_piece`)
        self.pieces: list[str] = []
        # the ids after which positions restart (:meth:`set_sentence_openers`); none: positions run on
        self.register_buffer("sentence_openers", torch.zeros(0, dtype=torch.long), persistent=False)
        if not cfg.tie_output:
            self.output = nn.Linear(cfg.d_model, rows, bias=False)
        if cfg.output_bias:
            self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
        self._attention_settings = AttentionSettings()
        self.reset_parameters()
        if rows > cfg.vocab_size:       # saved and loaded without the padding rows
            self.register_state_dict_post_hook(strip_vocab_padding)
            self.register_load_state_dict_pre_hook(pad_vocab_rows)

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
        with torch.no_grad():
            for weight in vocab_matrices(self):    # padding rows: zero, and never a gradient, so zero for good
                weight[self.cfg.vocab_size:].zero_()

    @property
    def attention_settings(self) -> AttentionSettings:
        """How this model's attention may run on CUDA (FlexAttention, cuDNN's SDPA), its own
        whatever other models in the process use; set it to give every attention module of the
        model new settings (``AttentionSettings.of(cfg.train)``)."""
        return self._attention_settings

    @attention_settings.setter
    def attention_settings(self, settings: AttentionSettings) -> None:
        self._attention_settings = settings
        for mod in self.modules():
            if isinstance(mod, MultiheadAttention):
                mod.settings = settings

    def add_piece(self, name: str, piece: nn.Module) -> None:
        """Extension point: ``piece`` adjusts every attention spec, ``piece.encoder(specs, src,
        pad)`` before the encoder and ``piece.decoder(specs, tgt_in, src_pad, offset, pad_id)``
        before the decoder (ALiBi's biases, length-aware attention's scale: docnmt.methods); a
        ``set_training_lengths(mean_src, mean_tgt)`` of its own hears the trainer's epoch means.
        It is the submodule ``name`` (its buffers are saved as ``name.*``)."""
        if name in self.pieces or hasattr(self, name):
            raise ValueError(f"the model already has a {name!r}")
        self.add_module(name, piece)
        self.pieces.append(name)

    def remove_piece(self, name: str) -> None:
        self.pieces.remove(name)
        delattr(self, name)

    def _pieces(self) -> list[nn.Module]:
        return [getattr(self, name) for name in self.pieces]

    def set_training_lengths(self, mean_src: float, mean_tgt: float) -> None:
        """The trainer's hook at the start of every epoch: the mean instance lengths (tokens)."""
        for piece in self._pieces():
            if hasattr(piece, "set_training_lengths"):
                piece.set_training_lengths(mean_src, mean_tgt)

    def set_sentence_openers(self, ids: list[int]) -> None:
        """Extension point: positions restart at every token of ``ids`` (``<s>``, the separators),
        each sentence counted as the plain sentence format counts it (the sentence-positions
        switch, docnmt.methods.sentence_positions)."""
        self.sentence_openers = torch.tensor(sorted(ids), dtype=torch.long, device=self.sentence_openers.device)

    def source_first_word(self) -> int:
        """Where a plain sentence model's source puts its first word: 1 after a language code
        (``src_lang_token`` first), else 0."""
        return int(self.cfg.src_lang_token >= 0 and not self.cfg.src_lang_last)

    def _positions(self, tokens: Tensor, first_word: int) -> Tensor | None:
        if not self.sentence_openers.numel():
            return None
        return positions_in_sentence(tokens, self.sentence_openers, first_word)

    def encode(self, src: Tensor, **inputs: Tensor) -> EncoderOut:
        """Encode ``src``; ``inputs`` are a method's other batch tensors (``ctx``), which
        :meth:`encode_extra` turns into ``EncoderOut.extra`` for the encoder and decoder layers."""
        src = self.with_source_language(src)
        pad = src.eq(self.cfg.pad_id)
        specs = self.policy.encoder_specs(src, pad)
        for piece in self._pieces():
            piece.encoder(specs, src, pad)
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
        sentence openers, positions from the whole prefix)."""
        at = self._positions(tgt_in, first_word=1)
        return self.decoder.embed(tgt_in[:, offset:], offset, at=None if at is None else at[:, offset:])

    def decode(self, tgt_in: Tensor, enc: EncoderOut, cache: DecoderCache | None = None) -> Tensor:
        """Decoder hidden states for ``tgt_in`` (the whole prefix). With a ``cache``
        (incremental decoding) only the tokens not yet cached are fed, and only their states
        are returned; the policy still sees the whole prefix (e.g. to recompute sentence tags)."""
        if cache is not None and not isinstance(cache, DecoderCache):
            raise TypeError(f"the decoder's cache is a docnmt.decoder_state.DecoderCache, not {type(cache).__name__}")
        lang = self.cfg.tgt_lang_token
        if lang >= 0:     # the forced language code after the start token: one more position
            tgt_in = torch.cat([tgt_in[:, :1], tgt_in.new_full((tgt_in.size(0), 1), lang), tgt_in[:, 1:]], 1)
        offset = cache.start(tgt_in.size(1)) if cache is not None else 0
        specs = self.policy.decoder_specs(tgt_in, enc.src, enc.pad, offset)
        for piece in self._pieces():
            piece.decoder(specs, tgt_in, enc.pad, offset, self.cfg.pad_id)
        state = State(specs, memory=enc.memory, cache=cache, extra=enc.extra, beams=enc.beams)
        out = self.decoder(self.embed_target(tgt_in, offset, enc), state)
        if cache is not None:
            cache.advance(tgt_in.size(1))
        if lang >= 0 and offset == 0:   # the start token's state predicts the language code: not returned
            out = out[:, 1:]
        return out

    def output_weight(self) -> Tensor:
        """The output projection: the decoder's embeddings, or its own matrix (``tie_output``); the
        rows of the ids it predicts (:attr:`ModelConfig.classes`), padded to a multiple of
        ``pad_vocab_to`` (rows the loss and :meth:`output_projection` leave out)."""
        weight = self.decoder.embed.table.weight if self.cfg.tie_output else self.output.weight
        rows = padded(self.cfg, self.cfg.classes)
        return weight[:rows] if rows < weight.size(0) else weight

    def output_bias(self) -> Tensor | None:
        """The fixed logit bias of :meth:`output_weight`'s rows (zero on its padding rows)."""
        if not self.cfg.output_bias:
            return None
        classes = self.cfg.classes
        return F.pad(self.final_logits_bias[:classes], (0, padded(self.cfg, classes) - classes))

    def output_projection(self, hidden: Tensor) -> Tensor:
        """Logits (..., vocab_size): the padding rows' left out, the ids the output layer does not
        predict (``output_tokens``) at -inf."""
        bias = self.output_bias()
        logits = self.int8_output(hidden) if self.int8_output is not None else linear(     # int8: its bias inside
            hidden, self.output_weight(), None if bias is None else bias.to(hidden.dtype))
        classes = self.cfg.classes
        if logits.size(-1) > classes:
            logits = logits[..., :classes]
        if classes < self.cfg.vocab_size:
            rest = self.cfg.vocab_size - classes
            logits = torch.cat([logits, logits.new_full((*logits.shape[:-1], rest), float("-inf"))], -1)
        return logits

    def forward(self, src: Tensor, tgt_in: Tensor, labels: Tensor | None = None, label_smoothing: float = 0.0,
                label_rows: Tensor | None = None, **inputs: Tensor):
        """Teacher-forced logits (B, T, V); with ``labels``, the training loss instead:
        (summed label-smoothed loss, summed NLL, number of target tokens). The loss path runs
        the output projection only on real (non-pad) positions, fused with the loss.
        ``label_rows``: those positions in the flattened labels, when the caller has them
        (:func:`label_rows`, made on the host: finding them here waits for the device)."""
        hidden = self.decode(tgt_in, self.encode(src, **inputs))
        if labels is None:
            return self.output_projection(hidden)
        if label_rows is None:
            label_rows = label_positions(labels, self.cfg.pad_id)
        hidden = hidden.flatten(0, 1).index_select(0, label_rows)
        target = labels.flatten().index_select(0, label_rows)
        weight, bias = self.output_weight(), self.output_bias()
        if bias is not None:      # the fixed bias as one more input dimension of value 1
            hidden = torch.cat([hidden, hidden.new_ones(hidden.size(0), 1)], 1)
            weight = torch.cat([weight, bias[:, None].to(weight.dtype)], 1)
        loss, nll = projected_label_smoothed_ce(hidden, weight, target, label_smoothing, classes=self.cfg.classes)
        return loss, nll, label_rows.numel()

