"""G-Transformer (Bao et al., 2021) as a delta on the core Transformer (docs/methods/gtransformer.md).

Its pieces, each an extension point of :mod:`docnmt.model`, :mod:`docnmt.data` or :mod:`docnmt.search`:

* :func:`group_tags`: sentence tags from ``<s>`` counts (docs/methods/gtransformer.md), recomputed from the whole
  prefix at every decoding step (the policy sees the prefix);
* :class:`GroupAttentionPolicy`: group masks for encoder self-, decoder self- and cross-attention
  (docs/methods/gtransformer.md#attention-masks) under the usual kinds, given as tags
  (``AttnSpec.groups``) so that attention runs sentence block by sentence block
  (:func:`docnmt.model.attention_grouped`) instead of over a dense N×N mask; the global
  (padding/causal only) masks under ``<kind>_global``;
* :class:`CombinedAttentionSublayer`: an :class:`~docnmt.model.AttentionSublayer` whose output
  is the gated mix of its local (group) attention and a second, global attention;
  the top ``combined_*`` layers of each kind get it, the layers below plain group attention;
* :class:`FrameConstraint`: the finite-state "frame" (docs/methods/gtransformer.md#decoding-the-sentence-frame) as a
  beam-search processor,
  so every output has exactly the source's sentences.

* :class:`GroupJoiner`, the data format (``data.separator: group``): sentences wrapped in
  ``<s> … </s>``; decoding starts from EOD like training does.

Settings (the ``method:`` section, :class:`GTransformerOptions`): how many top layers of each
attention kind get combined attention, and the paper's ablations (``group_ablation``; which row
of the paper's Tables 3, 5 and 6 each one is: docs/methods/gtransformer.md#ablations):
``only_group`` (no global attention anywhere), ``only_global`` (the top layers use global
attention alone, the lower ones group attention), ``no_target_context`` (no global branch in
decoder self-attention), ``no_source_context`` (none in encoder self- and cross-attention),
``no_language_locality`` (encoder and decoder self-attention global in every layer, no group
mask), ``no_translation_locality`` (cross-attention global in every layer).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..attention import AttnSpec, MultiheadAttention
from ..data.formats import Joiner, split_at_eos
from ..errors import ConfigError
from ..model import (
    AttentionPolicy,
    AttentionSublayer,
    FeedForwardSublayer,
    Layer,
    ModelConfig,
    State,
    Transformer,
    positions_in_sentence,
)
from ..ops import Linear
from ..vocab import Vocab
from .base import Method, Setting

ABLATIONS = ("none", "only_group", "only_global", "no_target_context", "no_source_context",
             "no_language_locality", "no_translation_locality")
# the locality ablations: attention kinds that lose their group mask in every layer (plain global attention)
UNGROUPED = {"no_language_locality": ("enc_self", "dec_self"), "no_translation_locality": ("cross",)}


@dataclass
class GTransformerOptions:
    """The ``method:`` section of a G-Transformer."""

    combined_enc_self: int = 2      # top encoder layers whose self-attention is combined (group + global)
    combined_dec_self: int = 2      # the same for decoder self-attention
    combined_cross: int = 2         # the same for cross-attention
    group_ablation: str = "none"    # none | only_group | only_global | no_target_context | no_source_context
                                    # | no_language_locality | no_translation_locality
    sentence_positions: bool = False  # positions restart in every sentence, plus a learned sentence-index vector
                                      # that starts at zero (docnmt's; docs/methods/gtransformer.md#positions)
    gate_bias: float = 0.0          # the combination gates' bias at init (docnmt's; the paper's: 0): > 0 starts
                                    # every combined attention near its local attention
                                    # (docs/methods/gtransformer.md#gate-bias)

    def __post_init__(self):
        if self.group_ablation not in ABLATIONS:
            raise ConfigError(f"unknown group_ablation {self.group_ablation!r}; choose one of {', '.join(ABLATIONS)}")


def group_tags(tokens: Tensor, bos: int, pad: int, eod: int) -> Tensor:
    """tag_t = [x_t ∉ {PAD, EOD}] · #{u ≤ t : x_u = <s>} (docs/methods/gtransformer.md)."""
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

    def decoder_specs(self, tgt: Tensor, src: Tensor, src_pad: Tensor, offset: int) -> dict[str, AttnSpec]:
        key_pad = src_pad[:, None, None, :]
        tags = self.tags(tgt)          # from the whole prefix: dynamic tags while decoding
        q_tags = tags[:, offset:]
        return {"dec_self": AttnSpec(is_causal=True, groups=(q_tags, tags), first_key=first_key(tags, offset)),
                "dec_self_global": AttnSpec(is_causal=True),
                "cross": AttnSpec(mask=key_pad, groups=(q_tags, self.tags(src))),
                "cross_global": AttnSpec(mask=key_pad)}


def first_key(tags: Tensor, offset: int) -> int | None:
    """While decoding step by step (``offset`` > 0), the first decoder position that group
    self-attention's queries of this step and every later one can see: the start of the earliest
    current sentence over the rows (its first key with the query's tag). Earlier keys stay
    hidden for good: a row's tags only grow (beam search never feeds a tag-0 token after the
    start: its end token EOD ends a hypothesis), a beam reorder copies rows and a finished input
    drops them, so the cache forgets them (``AttnSpec.first_key``). None while a query has tag 0
    (the start token, which sees every key), in a full pass, and on CUDA (a host read per step;
    attention reads the keys whole there)."""
    if offset == 0 or tags.is_cuda:
        return None
    q_tags = tags[:, offset:]
    if not bool(q_tags.gt(0).all()):
        return None
    return int(tags.eq(q_tags[:, :1]).int().argmax(1).min())


class CombinedAttentionSublayer(AttentionSublayer):
    """H = g ⊙ H_L + (1 − g) ⊙ H_G with g = σ(W_g [H_L; H_G] + b_g) element-wise.

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


def combined_counts(opts: GTransformerOptions) -> dict[str, int]:
    """How many top layers of each attention kind get global attention, after the ablation."""
    k = {"enc_self": opts.combined_enc_self, "dec_self": opts.combined_dec_self, "cross": opts.combined_cross}
    off = {"only_group": k.keys(), "no_target_context": ["dec_self"],
           "no_source_context": ["enc_self", "cross"]}.get(opts.group_ablation, [])
    return {kind: 0 if kind in off else n for kind, n in k.items()}


def layer_builders(opts: GTransformerOptions):
    """The encoder and decoder layer builders ``(cfg, i) -> Layer`` of a G-Transformer."""
    counts = combined_counts(opts)

    def attention(cfg: ModelConfig, kind: str, name: str, i: int, n_layers: int, cross: bool = False):
        if kind in UNGROUPED.get(opts.group_ablation, ()):
            return AttentionSublayer(cfg, kind + "_global", name, cross)          # no group mask at all
        if i < n_layers - counts[kind]:
            return AttentionSublayer(cfg, kind, name, cross)                     # group attention
        if opts.group_ablation == "only_global":
            return AttentionSublayer(cfg, kind + "_global", name, cross)
        return CombinedAttentionSublayer(cfg, kind, name, cross)

    def encoder_layer(cfg: ModelConfig, i: int) -> Layer:
        return Layer([attention(cfg, "enc_self", f"enc.{i}.self", i, cfg.encoder_layers), FeedForwardSublayer(cfg)])

    def decoder_layer(cfg: ModelConfig, i: int) -> Layer:
        n = cfg.decoder_layers
        return Layer([attention(cfg, "dec_self", f"dec.{i}.self", i, n),
                      attention(cfg, "cross", f"dec.{i}.cross", i, n, cross=True),
                      FeedForwardSublayer(cfg)])
    return encoder_layer, decoder_layer


class SentencePositionsTransformer(Transformer):
    """The G-Transformer with ``sentence_positions: true``: every sentence's words take the
    positions a plain sentence model gives them (source words from 0, the decoder's ``<s>`` at 0),
    so the local attention of a model fine-tuned from a sentence model reads the position vectors
    it was trained with, and the order of the sentences comes from a learned vector per sentence
    index (its group tag), added to the input and zero at the start: below the combined layers,
    every sentence of a document is then computed as if it were alone."""

    def __init__(self, cfg: ModelConfig, policy: GroupAttentionPolicy, encoder_layer, decoder_layer):
        super().__init__(cfg, policy, encoder_layer, decoder_layer)
        self.sentence_embed = torch.nn.Embedding(cfg.max_positions, cfg.d_model)
        torch.nn.init.zeros_(self.sentence_embed.weight)

    def _embed(self, embed, tokens: Tensor, offset: int, first_word: int) -> Tensor:
        # positions and sentence tags need the whole prefix; only the tokens from ``offset`` on are
        # embedded (one per decoding step)
        at = positions_in_sentence(tokens, self.policy.bos, first_word)[:, offset:]
        tags = self.policy.tags(tokens)[:, offset:].clamp(max=self.sentence_embed.num_embeddings - 1)
        x = embed(tokens[:, offset:], offset, dropout=False, at=at)
        return embed.dropout(x + self.sentence_embed(tags).to(x.dtype))

    def embed_source(self, src: Tensor, extra: dict) -> Tensor:
        return self._embed(self.encoder.embed, src, 0, first_word=self.source_first_word())

    def embed_target(self, tgt_in: Tensor, offset: int, enc) -> Tensor:
        return self._embed(self.decoder.embed, tgt_in, offset, first_word=1)    # positions from the whole prefix


def build(cfg: ModelConfig, opts: GTransformerOptions, bos: int, eod: int) -> Transformer:
    kind = SentencePositionsTransformer if opts.sentence_positions else Transformer
    model = kind(cfg, GroupAttentionPolicy(cfg, bos, eod), *layer_builders(opts))
    for mod in model.modules():           # (after the model's own initialisation, which zeroes biases)
        if isinstance(mod, CombinedAttentionSublayer):
            torch.nn.init.constant_(mod.gate.bias, opts.gate_bias)
    return model


class FrameConstraint:
    """The official generator's sentence frame as a logit mask, per hypothesis.

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


class GroupJoiner(Joiner):
    """G-Transformer's format : every sentence wrapped as ``<s> x </s>`` on both
    sides, no other separator; the decoder starts from the end-of-document token EOD and the
    labels end with it: input ``EOD <s> y1 </s> … </s>``, labels ``<s> y1 </s> … </s> EOD``."""

    def __init__(self, vocab: Vocab, separator: str = "group"):
        super().__init__(vocab, separator)
        self.sep_ids = set()
        self.start = self.end = vocab.id("<eod>")

    @staticmethod
    def overhead(n_sents: np.ndarray, side: str) -> np.ndarray:
        return 2 * n_sents + (side == "tgt")    # <s> … </s> per sentence, and EOD

    def output_specials(self, sentence_targets: bool) -> set[int]:
        return {self.vocab.bos, self.vocab.eos}

    def join(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        bos, eos = [self.vocab.bos], [self.vocab.eos]
        return np.concatenate([np.concatenate([bos, s, eos]) for s in sents]).astype(np.int32)

    def source(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        return self.join(sents)

    def sentence_ids(self, tokens: Tensor) -> Tensor:
        """Sentence ``k`` is ``<s> … </s>``; the decoder's leading EOD is in none (-1): like
        G-Transformer's tag 0, it belongs to no group."""
        return tokens.eq(self.vocab.bos).long().cumsum(-1) - 1

    def prefix(self, sents: list[list[int]], first: int = 1) -> list[int]:
        return [int(t) for t in self.join([np.asarray(s, dtype=np.int32) for s in sents])] if sents else []

    def split(self, ids: list[int], n: int) -> tuple[list[list[int]], bool]:
        """Sentences end at ``</s>``; ``<s>``, EOD and pads are dropped . Missing
        sentences come back empty, extra ones are appended to the last."""
        return split_at_eos(ids, n, self.vocab.eos, {self.vocab.bos, self.vocab.pad, self.end})


# --------------------------------------------------------------------------------------------
# Hooks
# --------------------------------------------------------------------------------------------

def _build(cfg: ModelConfig, opts: GTransformerOptions, vocab: Vocab) -> Transformer:
    return build(cfg, opts, vocab.bos, vocab.id("<eod>"))


def _check(cfg) -> None:
    if cfg.data.separator != "group":
        raise ConfigError("a G-Transformer needs the group data format (data.separator: group)")
    if cfg.model.sentence_positions:
        raise ConfigError("a G-Transformer restarts its positions with method.sentence_positions (which adds its "
                          "sentence-index vectors), not model.sentence_positions")
    if cfg.method.sentence_positions and cfg.model.tgt_lang_token >= 0:
        raise ConfigError("method.sentence_positions does not follow a target language token after the start "
                          "token (mBART, NLLB)")


def _start_token(translator, search, first: int) -> int | None:
    """``<s>`` with ``decode.official_start`` (the official generator's start, which training
    never shows); otherwise the format's EOD."""
    return translator.vocab.bos if search.official_start else None


def _search_args(translator, search, rows, src: Tensor) -> dict:
    """The sentence frame: every output has exactly the source's sentences."""
    v = translator.vocab
    frame = FrameConstraint(src, v.bos, v.eos, v.pad, translator.joiner.end)
    return {"processors": [frame], "max_len": frame.max_len()}


OFFICIAL_START = Setting("decode.official_start", False, "G-Transformer: start decoding from <s> like the official "
                         "code (default: the end-of-document token, as in training)", "--official-start")

METHOD = Method("gtransformer", _build, GTransformerOptions, check=_check, formats={"group": GroupJoiner},
                start_token=_start_token, search_args=_search_args, settings=(OFFICIAL_START,))
