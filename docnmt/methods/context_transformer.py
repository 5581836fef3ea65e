"""The context-encoder Transformer (Zhang et al., 2018) as a delta on the core
(docs/methods/context_transformer.md).

* The context input (``data.context_input: N``): the N previous source sentences of the same
  document, concatenated, then ``</s>`` (just ``</s>`` for a document's first sentence).
* A context encoder of ``context_layers`` (N_c) ordinary encoder layers over it, reading the
  sentence model's source embedding without dropout (docs/methods/context_transformer.md#context-encoder).
* In every encoder and decoder layer, a :class:`GatedContextSublayer` inserted after
  self-attention (through ``Layer.inserted``, so the sentence model's parameter names stay and
  its weights load by name): D = ContextAttention(A, C, C), then the context gate
  λ = σ(W_i A + W_s D) (no biases) replaces the residual, A' = LN(λ ⊙ A + (1 − λ) ⊙ D)
  (docs/methods/context_transformer.md#integration-gated-context-attention-in-every-layer).
  ``context_gate: false`` is the plain residual ablation; ``context_in`` puts the context in the
  encoder, the decoder or both.
* Two-step training (docs/methods/context_transformer.md#two-step-training) is the core trainer's
  ``--init-from`` + ``train.freeze_pretrained``: step 2 copies the sentence model and trains only the
  new parameters.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..attention import AttentionProbe, AttnSpec, MultiheadAttention
from ..errors import ConfigError
from ..model import (
    AttentionPolicy,
    AttentionSublayer,
    Encoder,
    FeedForwardSublayer,
    Layer,
    ModelConfig,
    State,
    Sublayer,
    Transformer,
    decoder_layer,
    encoder_layer,
)
from ..ops import Linear
from .base import Method

PLACES = ("both", "encoder", "decoder")


@dataclass
class ContextOptions:
    """The ``method:`` section of a context-encoder Transformer."""

    context_layers: int = 1          # N_c layers of the context encoder
    context_gate: bool = True        # false: the plain residual instead of the context gate (ablation)
    context_in: str = "both"         # both | encoder | decoder: where the context attention goes

    def __post_init__(self):
        if self.context_in not in PLACES:
            raise ConfigError(f"unknown context_in {self.context_in!r}; choose one of {', '.join(PLACES)}")


class GatedContextSublayer(Sublayer):
    """Attention from the layer's states to the encoded context, joined by the context gate."""

    def __init__(self, cfg: ModelConfig, name: str, gated: bool = True):
        super().__init__(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.attn = MultiheadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, name)
        self.gated = gated
        if self.gated:
            self.gate_input = Linear(cfg.d_model, cfg.d_model, bias=False)     # W_i
            self.gate_context = Linear(cfg.d_model, cfg.d_model, bias=False)   # W_s

    def transform(self, x: Tensor, state: State) -> Tensor:
        ctx, ctx_pad = state.extra["context"], state.extra["context_pad"]
        if ctx_pad.size(0) != x.size(0):    # beams share their input's context (folded like cross-attention)
            ctx_pad = ctx_pad.repeat_interleave(state.beams, 0)
        return self.attn(x, ctx, AttnSpec(mask=ctx_pad[:, None, None, :]), state.cache, static_kv=True)

    def combine(self, x: Tensor, y: Tensor) -> Tensor:
        if not self.gated:
            return super().combine(x, y)
        lam = torch.sigmoid(self.gate_input(x) + self.gate_context(y))
        if AttentionProbe.active is not None:    # an evaluation pass: the weight given to the context
            AttentionProbe.active.record_context_weight(self.attn.name, (1 - lam).mean(-1))
        return lam * x + (1 - lam) * y


class ContextTransformer(Transformer):
    """The Transformer with a context encoder and gated context attention in its layers."""

    def __init__(self, cfg: ModelConfig, opts: ContextOptions | None = None, policy: AttentionPolicy | None = None):
        opts = opts or ContextOptions()
        enc, dec = opts.context_in in ("both", "encoder"), opts.context_in in ("both", "decoder")

        def enc_layer(c: ModelConfig, i: int) -> Layer:
            layer = encoder_layer(c, i)
            return Layer(list(layer.sublayers),
                         {1: GatedContextSublayer(c, f"enc.{i}.context", opts.context_gate)} if enc else None)

        def dec_layer(c: ModelConfig, i: int) -> Layer:
            layer = decoder_layer(c, i)
            return Layer(list(layer.sublayers),
                         {1: GatedContextSublayer(c, f"dec.{i}.context", opts.context_gate)} if dec else None)

        super().__init__(cfg, policy, enc_layer, dec_layer)
        self.context_encoder = Encoder(cfg, self.encoder.embed, [
            Layer([AttentionSublayer(cfg, "enc_self", f"ctx.{i}.self"), FeedForwardSublayer(cfg)])
            for i in range(opts.context_layers)])
        self.reset_parameters()

    def encode_extra(self, ctx: Tensor | None = None, **_: Tensor) -> dict:
        if ctx is None:
            raise ConfigError("a context-encoder Transformer needs a context input (data.context_input > 0)")
        pad = ctx.eq(self.cfg.pad_id)
        x = self.encoder.embed(ctx, dropout=False)        # the sentence model's embedding, no dropout
        state = State({"enc_self": AttnSpec(mask=pad[:, None, None, :])})
        return {"context": self.context_encoder(x, state), "context_pad": pad}


def build(cfg: ModelConfig, opts: ContextOptions | None = None) -> ContextTransformer:
    return ContextTransformer(cfg, opts)


def _check(cfg) -> None:
    if cfg.data.context_input <= 0:
        raise ConfigError("a context-encoder Transformer needs data.context_input > 0 (previous sentences)")


METHOD = Method("context_transformer", lambda cfg, opts, vocab: build(cfg, opts), ContextOptions, check=_check,
                context_input=True)

