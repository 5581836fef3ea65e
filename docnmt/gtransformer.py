"""G-Transformer (Bao et al., 2021) as a delta on the core Transformer (SPEC §3).

Four pieces, each an extension point of :mod:`docnmt.model` or :mod:`docnmt.search`:

* :func:`group_tags`: sentence tags from ``<s>`` counts (SPEC §3.1), recomputed from the whole
  prefix at every decoding step (the policy sees the prefix);
* :class:`GroupAttentionPolicy`: group masks for encoder self-, decoder self- and cross-attention
  (SPEC §3.2) under the usual kinds, given as tags (``AttnSpec.groups``) so that attention runs
  sentence block by sentence block (:func:`docnmt.model.attention_grouped`) instead of over a
  dense N×N mask; the global (padding/causal only) masks under ``<kind>_global``;
* :class:`CombinedAttentionSublayer`: an :class:`~docnmt.model.AttentionSublayer` whose output
  is the gated mix of its local (group) attention and a second, global attention (SPEC §3.3);
  the top ``combined_*`` layers of each kind get it, the layers below plain group attention;
* :class:`FrameConstraint`: the finite-state "frame" of SPEC §3.5 as a beam-search processor,
  so every output has exactly the source's sentences.

The data format is :class:`docnmt.data.GroupJoiner` (``data.separator: group``): sentences
wrapped in ``<s> … </s>``, decoding starts from EOD like training does (SPEC C3).

Ablations (``model.group_ablation``, the paper's Tables 3, 5 and 6):
``only_group`` (no global attention anywhere), ``only_global`` (the top layers use global
attention alone, the lower ones group attention), ``no_target_context`` (no global branch in
decoder self-attention), ``no_source_context`` (none in encoder self- and cross-attention).
"""
from __future__ import annotations

import torch
from torch import Tensor

from .errors import ConfigError
from .model import (AttentionPolicy, AttentionSublayer, AttnSpec, FeedForwardSublayer, Layer, Linear,
                    ModelConfig, MultiheadAttention, State, Transformer)

ABLATIONS = ("none", "only_group", "only_global", "no_target_context", "no_source_context")


def group_tags(tokens: Tensor, bos: int, pad: int, eod: int) -> Tensor:
    """tag_t = [x_t ∉ {PAD, EOD}] · #{u ≤ t : x_u = <s>} (SPEC §3.1)."""
    tags = tokens.eq(bos).cumsum(-1)
    return tags.masked_fill(tokens.eq(pad) | tokens.eq(eod), 0)


class GroupAttentionPolicy(AttentionPolicy):
    """Group masks under ``enc_self``/``dec_self``/``cross``; global ones under ``*_global``."""

    def __init__(self, cfg: ModelConfig, bos: int, eod: int):
        super().__init__(cfg)
        self.bos, self.eod = bos, eod

    def tags(self, tokens: Tensor) -> Tensor:
        return group_tags(tokens, self.bos, self.cfg.pad_id, self.eod)

    def encoder_specs(self, src: Tensor, src_pad: Tensor) -> dict[str, AttnSpec]:
        key_pad = src_pad[:, None, None, :]
        tags = self.tags(src)
        return {"enc_self": AttnSpec(mask=key_pad, groups=(tags, tags)),
                "enc_self_global": AttnSpec(mask=key_pad)}

    def decoder_specs(self, tgt: Tensor, src: Tensor, src_pad: Tensor, offset: int,
                      incremental: bool) -> dict[str, AttnSpec]:
        key_pad = src_pad[:, None, None, :]
        tags = self.tags(tgt)          # from the whole prefix: dynamic tags while decoding
        q_tags = tags[:, offset:]
        return {"dec_self": AttnSpec(is_causal=True, groups=(q_tags, tags)),
                "dec_self_global": AttnSpec(is_causal=True),
                "cross": AttnSpec(mask=key_pad, groups=(q_tags, self.tags(src))),
                "cross_global": AttnSpec(mask=key_pad)}


class CombinedAttentionSublayer(AttentionSublayer):
    """H = g ⊙ H_L + (1 − g) ⊙ H_G with g = σ(W_g [H_L; H_G] + b_g) element-wise (SPEC §3.3).

    ``attn`` is the local (group) attention -- the same parameter names as a sentence model's
    attention, so fine-tuning copies it directly -- and ``attn_global`` the global one. The
    residual, dropout and LayerNorm around the mix are the sublayer's usual ones.
    """

    def __init__(self, cfg: ModelConfig, kind: str, name: str, cross: bool = False):
        super().__init__(cfg, kind, name, cross)
        self.attn_global = MultiheadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, name + ".global")
        self.gate = Linear(2 * cfg.d_model, cfg.d_model)

    def transform(self, x: Tensor, state: State) -> Tensor:
        local = super().transform(x, state)
        kv = state.memory if self.cross else x
        glob = self.attn_global(x, kv, state.specs[self.kind + "_global"], state.cache, static_kv=self.cross)
        g = torch.sigmoid(self.gate(torch.cat([local, glob], dim=-1)))
        return glob + g * (local - glob)


def combined_counts(cfg: ModelConfig) -> dict[str, int]:
    """How many top layers of each attention kind get global attention, after the ablation."""
    if cfg.group_ablation not in ABLATIONS:
        raise ConfigError(f"unknown group_ablation {cfg.group_ablation!r}; choose one of {', '.join(ABLATIONS)}")
    k = {"enc_self": cfg.combined_enc_self, "dec_self": cfg.combined_dec_self, "cross": cfg.combined_cross}
    off = {"only_group": k.keys(), "no_target_context": ["dec_self"],
           "no_source_context": ["enc_self", "cross"]}.get(cfg.group_ablation, [])
    return {kind: 0 if kind in off else n for kind, n in k.items()}


def _attention(cfg: ModelConfig, kind: str, name: str, i: int, n_layers: int, cross: bool = False):
    if i < n_layers - combined_counts(cfg)[kind]:
        return AttentionSublayer(cfg, kind, name, cross)                     # group attention
    if cfg.group_ablation == "only_global":
        return AttentionSublayer(cfg, kind + "_global", name, cross)
    return CombinedAttentionSublayer(cfg, kind, name, cross)


def encoder_layer(cfg: ModelConfig, i: int) -> Layer:
    return Layer([_attention(cfg, "enc_self", f"enc.{i}.self", i, cfg.encoder_layers), FeedForwardSublayer(cfg)])


def decoder_layer(cfg: ModelConfig, i: int) -> Layer:
    n = cfg.decoder_layers
    return Layer([_attention(cfg, "dec_self", f"dec.{i}.self", i, n),
                  _attention(cfg, "cross", f"dec.{i}.cross", i, n, cross=True),
                  FeedForwardSublayer(cfg)])


def build(cfg: ModelConfig, bos: int, eod: int) -> Transformer:
    combined_counts(cfg)   # validates the ablation name
    return Transformer(cfg, GroupAttentionPolicy(cfg, bos, eod), encoder_layer, decoder_layer)


class FrameConstraint:
    """The official generator's sentence frame (SPEC §3.5) as a logit mask, per hypothesis.

    For source sentence k with n_k word tokens, target sentence k holds between 1 and
    ⌊a·n_k + b⌋ words; ``</s>`` is allowed once it has a word and forced at the maximum; after
    ``</s>`` the next sentence's ``<s>`` is forced while source sentences remain, then EOD.
    ``<s>`` and EOD are banned everywhere else. Hypotheses therefore always have exactly the
    source's number of sentences. ``src`` is the padded source batch in the group format.
    """

    def __init__(self, src: Tensor, bos: int, eos: int, pad: int, eod: int, a: float = 1.2, b: float = 10):
        self.bos, self.eos, self.eod = bos, eos, eod
        self.specials = torch.tensor([bos, eos, pad, eod], device=src.device)
        tags = group_tags(src, bos, pad, eod)
        self.n_sents = src.eq(bos).sum(1)                                            # (B,)
        counts = torch.zeros(src.size(0), int(self.n_sents.max()) + 1, dtype=torch.long, device=src.device)
        counts.scatter_add_(1, tags, (~torch.isin(src, self.specials)).long())      # words per tag
        self.max_words = (a * counts[:, 1:].float() + b).floor().long()              # (B, N_max)
        real = torch.arange(self.max_words.size(1), device=src.device) < self.n_sents[:, None]
        self.max_words = self.max_words * real

    def max_len(self) -> Tensor:
        """Per-row length limit that the frame always fits in: every sentence at its maximum,
        its ``<s>``/``</s>``, and EOD. (The official global cap ⌊1.2·S + 10·N⌋ takes the
        batch's maxima, which would make outputs depend on batching.)"""
        return self.max_words.sum(1) + 2 * self.n_sents + 1

    def __call__(self, step: int, tokens: Tensor, lprobs: Tensor, rows: Tensor, limit: Tensor) -> None:
        # ``limit`` is not needed: max_len() leaves room for every sentence at its maximum
        # tokens[:, 0] is the start token (EOD): neither <s> nor a word
        n_bos, n_eos = tokens.eq(self.bos).sum(1), tokens.eq(self.eos).sum(1)
        inside = n_bos > n_eos
        pos = torch.arange(tokens.size(1), device=tokens.device)
        last_bos = torch.where(tokens.eq(self.bos), pos, 0).max(1).values
        words = (~torch.isin(tokens, self.specials) & (pos > last_bos[:, None])).sum(1)
        limit = self.max_words[rows, n_eos.clamp(max=self.max_words.size(1) - 1)]
        more = n_eos < self.n_sents[rows]
        force = torch.where(inside, torch.where(words >= limit, self.eos, -1),
                            torch.where(more, self.bos, self.eod))
        r = (force >= 0).nonzero().squeeze(1)
        if r.numel():
            keep = lprobs[r, force[r]].clone()
            lprobs[r] = float("-inf")
            lprobs[r, force[r]] = keep
        free = force < 0
        lprobs[free, self.bos] = float("-inf")
        lprobs[free, self.eod] = float("-inf")
        lprobs[free & (words == 0), self.eos] = float("-inf")
