"""The context-encoder Transformer (Zhang et al., 2018) as a delta on the core (SPEC §7).

* The context input (``data.context_input: N``): the N previous source sentences of the same
  document, concatenated, then ``</s>`` (just ``</s>`` for a document's first sentence).
* A context encoder of ``context_layers`` (N_c) ordinary encoder layers over it, reading the
  sentence model's source embedding without dropout (SPEC §7.2).
* In every encoder and decoder layer, a :class:`GatedContextSublayer` inserted after
  self-attention (through ``Layer.inserted``, so the sentence model's parameter names stay and
  its weights load by name): D = ContextAttention(A, C, C), then the context gate
  λ = σ(W_i A + W_s D) (no biases) replaces the residual, A' = LN(λ ⊙ A + (1 − λ) ⊙ D) (SPEC §7.3).
  ``context_gate: false`` is the plain residual ablation; ``context_in`` puts the context in the
  encoder, the decoder or both.
* Two-step training (SPEC §7.4) is the core trainer's ``--init-from`` + ``train.freeze_pretrained``:
  step 2 copies the sentence model and trains only the new parameters.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .errors import ConfigError
from .model import (AttentionPolicy, AttentionSublayer, AttnSpec, Encoder, FeedForwardSublayer, Layer, Linear,
                    ModelConfig, MultiheadAttention, State, Sublayer, Transformer, decoder_layer, encoder_layer)

PLACES = ("both", "encoder", "decoder")


class GatedContextSublayer(Sublayer):
    """Attention from the layer's states to the encoded context, joined by the context gate."""

    def __init__(self, cfg: ModelConfig, name: str):
        super().__init__(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.attn = MultiheadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, name)
        self.gated = cfg.context_gate
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
        return lam * x + (1 - lam) * y


class ContextTransformer(Transformer):
    """The Transformer with a context encoder and gated context attention in its layers."""

    def __init__(self, cfg: ModelConfig, policy: AttentionPolicy | None = None):
        if cfg.context_in not in PLACES:
            raise ConfigError(f"unknown context_in {cfg.context_in!r}; choose one of {', '.join(PLACES)}")
        enc, dec = cfg.context_in in ("both", "encoder"), cfg.context_in in ("both", "decoder")

        def enc_layer(c: ModelConfig, i: int) -> Layer:
            layer = encoder_layer(c, i)
            return Layer(list(layer.sublayers), {1: GatedContextSublayer(c, f"enc.{i}.context")} if enc else None)

        def dec_layer(c: ModelConfig, i: int) -> Layer:
            layer = decoder_layer(c, i)
            return Layer(list(layer.sublayers), {1: GatedContextSublayer(c, f"dec.{i}.context")} if dec else None)

        super().__init__(cfg, policy, enc_layer, dec_layer)
        self.context_encoder = Encoder(cfg, self.encoder.embed, [
            Layer([AttentionSublayer(cfg, "enc_self", f"ctx.{i}.self"), FeedForwardSublayer(cfg)])
            for i in range(cfg.context_layers)])
        self.reset_parameters()

    def encode_extra(self, ctx: Tensor | None = None, **_: Tensor) -> dict:
        if ctx is None:
            raise ConfigError("a context-encoder Transformer needs a context input (data.context_input > 0)")
        pad = ctx.eq(self.cfg.pad_id)
        x = self.encoder.embed(ctx, dropout=False)        # the sentence model's embedding, no dropout
        state = State({"enc_self": AttnSpec(mask=pad[:, None, None, :])})
        return {"context": self.context_encoder(x, state), "context_pad": pad}


def build(cfg: ModelConfig) -> ContextTransformer:
    return ContextTransformer(cfg)

