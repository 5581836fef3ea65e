"""P-Transformer (Li et al.): position-aware attention and a relative position term
(docs/methods/ptransformer.md).

No public code exists; this is docnmt's reference implementation. It is one
:class:`~docnmt.model.AttentionPolicy`; the Transformer, its layers and the data formats are
the core's (Doc2Doc with ``<sepI>`` separators, Doc2Sent, Sent2Sent, mixtures).

* **Position-aware attention** (docs/methods/ptransformer.md#position-aware-attention): the
  unscaled sinusoidal embedding P of each token's absolute position is added to the *inputs* of
  the query and key projections, never the values
  (``AttnSpec.q_add`` / ``k_add``): Q = (X+P)W_Q, K = (X+P)W_K, V = XW_V in self-attention, and
  Q = (X_t+P_t)W_Q, K = (H_s+P_s)W_K, V = H_sW_V in cross-attention (Eq. 7; Eq. 6 swaps them).
  No new parameters. In incremental decoding the new query uses P at its own position.
* **Relative term** (Music-Transformer style, docs/methods/ptransformer.md#relative-position-term)
  in every self-attention:
  logits[i, j] += q_i · E[r(i, j)] / sqrt(d_h) with r(i, j) = clip(j − i, −M, M) + M, computed
  as the core's ``RelativeLogits``: per block of queries, the products with only the table rows
  the block needs, skewed into place; never the I×I×d_h tensor, nor (in training) the I×I term.
  The queries are the position-aware ones. By default one table E ((2M+1) × d_h) is shared by all heads, layers,
  encoder and decoder (the paper's +65.6K parameters imply it,
  docs/methods/ptransformer.md#pt-table-sharing).

Choices where the paper is silent (docs/methods/ptransformer.md#pt-relative-form and
#pt-table-sharing): sign j − i (key minus query); scaling 1/sqrt(d_h) on both terms; table size
2·M+1 with M = ``rel_max_distance`` (512), clipped beyond; E initialised N(0, d_h^-1/2);
``rel_sharing``: ``all`` (default), ``side`` (one table for the encoder, one for the decoder) or
``layer`` (one per self-attention layer). P reaches the first layer's queries and keys twice
(the embedding already contains it), as the paper's formulation implies.

Data format (docs/methods/ptransformer.md#pt-format): the decoder input starts with ``<sos>``
(BOS) and the separators are ``<sep1>`` … ``<sep512>`` (Doc2Sent context numbered from 1;
``data.separator: uniform`` for the one-``<sep>`` ablation), but the source is
``x¹ <sep1> … xᴺ </s>`` without a leading ``<sos>`` (docs/methods/ptransformer.md#pt-source-start):
every docnmt Doc2Doc model shares that source format, so comparisons stay like for like, and
source positions start one token earlier.

Ablations (the paper's Table V): ``pos_attn_cross`` / ``pos_attn_enc_self`` /
``pos_attn_dec_self`` switch P off in one kind of attention, ``rel_positions`` the relative term.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..attention import AttnSpec, RelativeLogits
from ..errors import ConfigError
from ..model import AttentionPolicy, ModelConfig, SinusoidalPositions, Transformer
from .base import Method

SHARING = ("all", "side", "layer")


@dataclass
class PTransformerOptions:
    """The ``method:`` section of a P-Transformer: position-aware attention per attention kind,
    the relative term, its clipping distance and how its table is shared."""

    pos_attn_enc_self: bool = True
    pos_attn_dec_self: bool = True
    pos_attn_cross: bool = True
    rel_positions: bool = True
    rel_max_distance: int = 512
    rel_sharing: str = "all"        # all | side | layer

    def __post_init__(self):
        if self.rel_sharing not in SHARING:
            raise ConfigError(f"unknown rel_sharing {self.rel_sharing!r}; choose one of {', '.join(SHARING)}")
        if self.rel_max_distance < 1:
            raise ConfigError(f"rel_max_distance must be at least 1, not {self.rel_max_distance!r}")


class PositionAwarePolicy(AttentionPolicy):
    """Specs with P added to query/key inputs and, in self-attention, the relative logit term."""

    def __init__(self, cfg: ModelConfig, opts: PTransformerOptions):
        super().__init__(cfg)
        self.opts = opts
        self.d_head = cfg.d_model // cfg.heads
        tables = {"all": 1, "side": 2, "layer": cfg.encoder_layers + cfg.decoder_layers}[opts.rel_sharing]
        # "embed" in the name: Transformer.reset_parameters leaves it to this initialisation
        self.rel_embed = nn.Parameter(torch.randn(tables, 2 * opts.rel_max_distance + 1, self.d_head)
                                      * self.d_head ** -0.5) if opts.rel_positions else None
        self.positions = SinusoidalPositions(cfg)

    # ---- relative term ---------------------------------------------------------------------
    def table(self, name: str) -> Tensor:
        side, layer = name.split(".")[:2]
        if self.opts.rel_sharing == "all":
            return self.rel_embed[0]
        if self.opts.rel_sharing == "side":
            return self.rel_embed[0 if side == "enc" else 1]
        return self.rel_embed[int(layer) + (0 if side == "enc" else self.cfg.encoder_layers)]

    def relative_bias(self, q: Tensor, name: str, offset: int, n_keys: int) -> RelativeLogits:
        """q_i · E[clip(j − i) + M] / sqrt(d_h) for queries at positions offset, offset+1, …
        and keys at 0 … n_keys−1, in the core's structured form: attention multiplies each
        block of queries with only the table rows its distances need and never builds the
        (B, h, nq, nk) term (``.dense()`` does, for reference)."""
        M = self.opts.rel_max_distance
        return RelativeLogits(q, self.table(name), M - offset, n_keys, 1 / math.sqrt(q.size(-1)))

    def _relative(self, offset: int, n_keys: int):
        if self.rel_embed is None:
            return None
        return lambda q, name: self.relative_bias(q, name, offset, n_keys)

    # ---- the specs -------------------------------------------------------------------------
    def encoder_specs(self, src: Tensor, src_pad: Tensor) -> dict[str, AttnSpec]:
        p = self.positions(src.size(1)) if self.opts.pos_attn_enc_self else None
        return {"enc_self": AttnSpec(mask=src_pad[:, None, None, :], q_add=p, k_add=p,
                                     bias=self._relative(0, src.size(1)))}

    def decoder_specs(self, tgt: Tensor, src: Tensor, src_pad: Tensor, offset: int) -> dict[str, AttnSpec]:
        p_t = self.positions(tgt.size(1) - offset, offset)
        self_p = p_t if self.opts.pos_attn_dec_self else None
        cross = self.opts.pos_attn_cross
        return {"dec_self": AttnSpec(is_causal=True, q_add=self_p, k_add=self_p,
                                     bias=self._relative(offset, tgt.size(1))),
                "cross": AttnSpec(mask=src_pad[:, None, None, :], q_add=p_t if cross else None,
                                  k_add=self.positions(src.size(1)) if cross else None)}


def build(cfg: ModelConfig, opts: PTransformerOptions | None = None) -> Transformer:
    return Transformer(cfg, PositionAwarePolicy(cfg, opts or PTransformerOptions()))


def _check(cfg) -> None:
    if cfg.model.sentence_positions:
        raise ConfigError("model.sentence_positions is not for a P-Transformer: its position-aware attention "
                          "reads positions through the whole instance")


METHOD = Method("ptransformer", lambda cfg, opts, vocab: build(cfg, opts), PTransformerOptions, check=_check)
