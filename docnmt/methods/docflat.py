"""DocFlat (Document Flattening, docs/methods/docflat.md) as a delta on the core: flat-batch
attention (FBA) with a neural context gate (NCG) on the input embeddings. The choices named
below (``df-…``) are anchors of that page, e.g. docs/methods/docflat.md#df-flatten-scope.

* One :class:`FlatBatchSublayer` per side (``flat_sides``), inserted before the first sublayer
  of the first encoder / decoder layer (``Layer.inserted``, so a sentence model's weights load
  by name for the paper's fine-tuning recipe). It sees the whole batch: the n instances of a
  batch, each padded to m tokens, are flattened into one sequence of n·m positions, pads
  removed, and attended with multi-head attention -- on the decoder side causally over the
  flattened index (``flat_dec_mask: flattened``, paper-literal) or over time steps of every
  instance (``time_aligned``, ``df-decoder-mask``) -- then Ĥ goes back to (n, m, e) (pads get 0).
  ``flat_scope: current`` (``df-flatten-scope``) restricts what an instance sees of the others to their current
  sentence (the tokens from the last ``<sepj>`` on); its own tokens stay visible.
* ``flat_block: abd`` is the paper's ABD baseline in the same place (encoder side): instances
  mean-pooled, attended across the batch, broadcast back; with ``flat_gate: identity`` it is the
  paper's LN(H + ·).
* ``flat_block: mbe`` is the paper's MBE baseline (:class:`MeanBatchEmbedding`): the mean
  source token embedding of the batch prepended to the source and/or target as a new position.
* The gate: g = σ(ψ(Ĥ)) with ψ a position-wise Linear(e, e) (``df-gate-psi``; bias 0 at start,
  ``df-placement-init``); H' = LN((1 − g) ⊙ H + g ⊙ drop(Ĥ)). ``discrete`` (DocFlat_D) uses
  1[g ≥ γ] forward and ∂g/∂s backward (straight-through, ``df-discrete-gradient``);
  ``identity`` (DocFlat_I) is LN(H + drop(Ĥ)).
* Data (``data.mode: pseudodoc``, ``data.separator: global_index``): sentence i with its
  ``context`` previous sentences on both sides, each sentence as ``<sepj> w… </s>`` with j its
  index in the document (``df-index-tokens``, ``df-sentence-end``); batches are runs of
  consecutive pseudo-documents (``data.batch_order: ordered``, docs/methods/docflat.md#batching-and-ordering).
  The paper's data-shuffling ablation (``shuffled_data: true`` with ``data.batch_order: sorted``)
  trains on shuffled, length-bucketed batches instead and still decodes consecutive batches.
* Decoding (:meth:`docnmt.translate.Translator.translate`) is two-pass, the ``two_pass`` switch
  of every pseudo-document model (:mod:`.two_pass`,
  docs/methods/docflat.md#decoding-two-passes-batch-by-batch): each batch of
  ``decode.max_sentences`` consecutive sentences is translated sentence by sentence, then
  every pseudo-document is decoded with its context's first-pass translation forced as the
  target prefix, the current sentences of a batch together. In beam search the decoder FBA of
  the hypothesis of rank r of an instance attends to the rank-r hypotheses of all instances of
  the batch (``df-beams``); an instance whose search has finished leaves that context. What
  translated pass 1 (the model itself, a sentence model, a file) is logged as a warning when it
  is the model itself, and recorded in the coverage report (``first_pass``).

Size exception: module — the method's two blocks (FBA with its gate, and the ABD and MBE
baselines the paper compares it with) and its data format read together, as the paper
presents them; two-pass decoding and the attention map live in their own modules.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..attention import AttnSpec, MultiheadAttention, attention_reference
from ..data.formats import Joiner, split_at_eos
from ..decoder_state import DecoderCache
from ..errors import ConfigError
from ..model import AttentionPolicy, Layer, ModelConfig, State, Sublayer, Transformer, decoder_layer, encoder_layer
from ..ops import Linear
from ..vocab import Vocab
from .base import Method

log = logging.getLogger("docnmt.docflat")

GATES = ("continuous", "discrete", "identity")
BLOCKS = ("fba", "abd", "mbe")
DEC_MASKS = ("flattened", "time_aligned")
SIDES = ("both", "encoder", "decoder")
SCOPES = ("all", "current")


@dataclass
class DocFlatOptions:
    """The ``method:`` section of a DocFlat model: flat-batch attention and the neural context
    gate on the input embeddings of the encoder and/or decoder."""

    flat_block: str = "fba"           # fba: flat-batch attention | abd / mbe: the paper's ABD / MBE baselines
    flat_sides: str = "both"          # both | encoder | decoder
    flat_gate: str = "continuous"     # continuous (DocFlat_C) | discrete (DocFlat_D) | identity (DocFlat_I)
    flat_gamma: float = 0.5           # threshold of the discrete gate
    flat_dec_mask: str = "flattened"  # flattened: causal over the flattened batch | time_aligned: over time steps
    flat_scope: str = "all"           # all: every token of the batch | current: others' current sentences only
    shuffled_data: bool = False       # the paper's data-shuffling ablation: train on shuffled, length-bucketed
                                      # batches (with data.batch_order: sorted); decoding stays consecutive
    flat_gate_bias: float = 0.0       # ψ's bias at init (docnmt's; the paper gives none): < 0 starts the context
                                      # gate mostly shut, the input kept (docs/methods/docflat.md#df-gate-bias)

    def __post_init__(self):
        for value, allowed, key in ((self.flat_gate, GATES, "flat_gate"),
                                    (self.flat_dec_mask, DEC_MASKS, "flat_dec_mask"),
                                    (self.flat_sides, SIDES, "flat_sides"), (self.flat_block, BLOCKS, "flat_block"),
                                    (self.flat_scope, SCOPES, "flat_scope")):
            if value not in allowed:
                raise ConfigError(f"unknown {key} {value!r}; choose one of {', '.join(allowed)}")
        if self.flat_block == "abd" and self.flat_sides != "encoder":
            raise ConfigError("the ABD baseline is an encoder-side block: set method.flat_sides: encoder")


def flatten_batch(x: Tensor, pad: Tensor) -> tuple[Tensor, Tensor]:
    """(n, m, e) and its pad mask (n, m) -> the real positions in batch order (1, T, e), and
    their indices into the n·m flattened positions."""
    idx = (~pad).reshape(-1).nonzero().squeeze(1)
    return x.reshape(-1, x.size(-1)).index_select(0, idx)[None], idx


def unflatten_batch(y: Tensor, idx: Tensor, shape: torch.Size) -> Tensor:
    """Inverse of :func:`flatten_batch`: (1, T, e) back to ``shape`` (n, m, e), 0 at pads."""
    return y.new_zeros(shape[0] * shape[1], y.size(-1)).index_copy(0, idx, y[0]).view(*shape[:2], -1)


def discrete_gate(g: Tensor, gamma: float) -> Tensor:
    """1[g ≥ γ] in the forward pass, the gradient of g in the backward pass (straight-through)."""
    return (g >= gamma).to(g.dtype) + g - g.detach()


class FlatBatchSublayer(Sublayer):
    """Flat-batch attention over every token of the batch, joined by the neural context gate.
    With ``rows_apart`` (:func:`docnmt.model.rows_apart`) each instance attends to its own tokens
    only, as it would alone in a batch."""

    rows_apart = False

    def __init__(self, cfg: ModelConfig, side: str, opts: DocFlatOptions | None = None):
        super().__init__(cfg.d_model, cfg.dropout, cfg.pre_norm)
        opts = opts or DocFlatOptions()
        self.side, self.gate_kind, self.gamma = side, opts.flat_gate, opts.flat_gamma
        self.time_aligned = side == "dec" and opts.flat_dec_mask == "time_aligned"
        self.block = opts.flat_block
        self.attn = MultiheadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, f"{side}.fba")
        if self.gate_kind != "identity":
            self.gate = Linear(cfg.d_model, cfg.d_model)       # ψ

    def transform(self, x: Tensor, state: State) -> Tensor:
        pad = state.specs[f"{self.side}_fba"].mask[:, 0, 0, -x.size(1):]
        if self.block == "abd":
            return self._between_datapoints(x, pad)
        if state.cache is not None and self.side == "dec":
            return self._incremental(x, state)
        if self.rows_apart:       # every row to itself: attention within each row (causal in time on the decoder)
            return self.attn(x, x, AttnSpec(mask=pad[:, None, None, :], is_causal=self.side == "dec"))
        flat, idx = flatten_batch(x, pad)
        return unflatten_batch(self.attn(flat, flat, self.flat_spec(x, idx, state)), idx, x.shape)

    def flat_spec(self, x: Tensor, idx: Tensor, state: State) -> AttnSpec:
        """The mask over the flattened real positions ``idx`` of the (n, m) batch: causal on
        the decoder side (over the flattened index, or over time steps when time-aligned), and
        under ``flat_scope: current`` another instance's context tokens hidden."""
        n, m = x.shape[:2]
        causal = self.side == "dec" and not self.time_aligned
        private = state.specs.get(f"{self.side}_fba_private")
        if private is None and not self.time_aligned:
            return AttnSpec(is_causal=causal)
        flat_pos = torch.arange(n * m, device=x.device)[idx]
        inst, pos = flat_pos // m, flat_pos % m
        hidden = None if private is None else private.mask[:, 0, 0, -m:].reshape(-1)[idx]

        def blocked(i: Tensor, j: Tensor) -> Tensor:    # query i, key j: flattened real positions
            out = pos[j] > pos[i] if self.time_aligned else (j > i if causal else i < 0)
            if hidden is not None:      # flat_scope current: keys of other instances only in their current sentence
                out = out | (hidden[j] & (inst[j] != inst[i]))
            return out

        every = torch.arange(len(idx), device=x.device)
        return AttnSpec(mask=blocked(every[:, None], every[None, :])[None, None],
                        visible=lambda b, h, i, j: ~blocked(i, j))

    def _between_datapoints(self, x: Tensor, pad: Tensor) -> Tensor:
        """The ABD baseline: each instance mean-pooled over its real tokens, attention across the
        n instances of the batch, the result broadcast back to every token of the instance."""
        real = (~pad).to(x.dtype)[..., None]
        pooled = (x * real).sum(1) / real.sum(1).clamp_min(1)                  # (n, e)
        spec = AttnSpec()
        if self.rows_apart:                                                    # each instance sees itself
            spec = AttnSpec(mask=~torch.eye(len(pooled), dtype=torch.bool, device=x.device)[None, None])
        mixed = self.attn(pooled[None], pooled[None], spec)[0]                 # (n, e)
        return mixed[:, None, :].expand_as(x) * real

    def _incremental(self, x: Tensor, state: State) -> Tensor:
        """Decoder FBA while decoding: the new tokens of every row attend to the cached prefixes
        of the rows of the same beam rank (rows are input-major, ``state.beams`` per input)."""
        attn, K = self.attn, state.beams
        R, n_new, _ = x.shape
        offset = state.cache.length
        q, k, v = attn._split(attn.project(x, slice(0, 3))).chunk(3, dim=1)
        k, v = state.cache.append(attn.name, k, v)
        B, h, t, d = R // K, q.size(1), k.size(2), q.size(3)
        by_rank = lambda z: z.view(B, K, h, -1, d).permute(1, 2, 0, 3, 4).reshape(K, h, -1, d)  # noqa: E731
        dev = x.device
        inst_q = torch.arange(B, device=dev).repeat_interleave(n_new)
        pos_q = offset + torch.arange(n_new, device=dev).repeat(B)
        inst_k = torch.arange(B, device=dev).repeat_interleave(t)
        pos_k = torch.arange(t, device=dev).repeat(B)
        visible = pos_k[None, :] <= pos_q[:, None]     # what exists when the query is generated
        same = inst_k[None, :] == inst_q[:, None]
        if not self.time_aligned:   # flattened-causal: own prefix and earlier instances' prefixes
            visible = visible & (same | (inst_k[None, :] < inst_q[:, None]))
        if self.rows_apart:
            visible = visible & same
        keys_of_rank = lambda mask: mask[:, 0, 0, :t].reshape(B, K, t).transpose(0, 1).reshape(K, 1, 1, B * t)  # noqa: E731
        blocked = ~visible[None, None] | keys_of_rank(state.specs["dec_fba"].mask)
        if "dec_fba_private" in state.specs:
            blocked = blocked | (keys_of_rank(state.specs["dec_fba_private"].mask) & ~same)
        out = attention_reference(by_rank(q), by_rank(k), by_rank(v), AttnSpec(mask=blocked))
        out = out.view(K, h, B, n_new, d).permute(2, 0, 3, 1, 4).reshape(R, n_new, h * d)
        return attn.out_proj(out)

    def combine(self, x: Tensor, y: Tensor) -> Tensor:
        if self.gate_kind == "identity":
            return super().combine(x, y)
        g = torch.sigmoid(self.gate(y))
        if self.gate_kind == "discrete":
            g = discrete_gate(g, self.gamma)
        return x + g * (self.dropout(y) - x)


class DocFlatPolicy(AttentionPolicy):
    """The default specs plus the key padding of each side's flat-batch attention, and under
    ``flat_scope: current`` (``df-flatten-scope``) its context tokens (``*_fba_private``): in the source, those
    before the last index token ``<sepi>``, which starts the current sentence; in the target,
    those before the same ``<sepi>`` -- all of a prefix that has not reached it yet, so a decoder
    token is private or not by the same rule in training and in step-by-step decoding."""

    def __init__(self, cfg: ModelConfig, sep_range: tuple[int, int] | None = None, scope: str = "all"):
        super().__init__(cfg)
        self.sep_range, self.scope = sep_range, scope

    @staticmethod
    def _last(match: Tensor) -> Tensor:
        """(B, n) -> the position of the last True per row, -1 where none."""
        pos = torch.arange(1, match.size(1) + 1, device=match.device)
        return (match.long() * pos).amax(1) - 1

    def _private(self, n: int, start: Tensor) -> Tensor:
        return (torch.arange(n, device=start.device)[None, :] < start[:, None])[:, None, None, :]

    def _current_sep(self, src: Tensor) -> Tensor:
        lo, hi = self.sep_range
        last = self._last((src >= lo) & (src <= hi))
        return torch.where(last >= 0, src.gather(1, last.clamp_min(0)[:, None])[:, 0], -1)

    def encoder_specs(self, src: Tensor, src_pad: Tensor) -> dict[str, AttnSpec]:
        specs = {**super().encoder_specs(src, src_pad), "enc_fba": AttnSpec(mask=src_pad[:, None, None, :])}
        if self.scope == "current":
            specs["enc_fba_private"] = AttnSpec(
                mask=self._private(src.size(1), self._last(src == self._current_sep(src)[:, None])))
        return specs

    def decoder_specs(self, tgt: Tensor, src: Tensor, src_pad: Tensor, offset: int) -> dict[str, AttnSpec]:
        specs = super().decoder_specs(tgt, src, src_pad, offset)
        specs["dec_fba"] = AttnSpec(mask=tgt.eq(self.cfg.pad_id)[:, None, None, :], is_causal=True)
        if self.scope == "current":
            sep = self._current_sep(src).repeat_interleave(tgt.size(0) // src.size(0))     # beams: rows input-major
            start = self._last(tgt == sep[:, None])
            start = torch.where((start < 0) & (sep >= 0), tgt.size(1), start)   # <sepi> not reached yet
            specs["dec_fba_private"] = AttnSpec(mask=self._private(tgt.size(1), start))
        return specs


class MeanBatchEmbedding(Transformer):
    """The DocFlat paper's MBE baseline: the mean of the batch's source token embeddings prepended
    to the source and/or the target (``flat_sides``) as one new position 0. Sequences get a
    ``mean_token`` there whose input vector is replaced by sqrt(d)·mean E[x] over every
    real source token of the batch, plus P[0] (no dropout on it); the decoder's output at that
    position is dropped, so callers see the usual shapes and positions shift by one. The mean is
    taken once per batch when encoding and kept in ``EncoderOut.extra`` (one row per input), so
    while decoding it stays the whole batch's even after some inputs have finished. (The source
    length of ``--max-len-a/b`` counts the new position.)"""

    rows_apart = False      # docnmt.model.rows_apart: each row's own mean instead of the batch's

    def __init__(self, cfg: ModelConfig, mean_token: int, sides: str = "both"):
        super().__init__(cfg, AttentionPolicy(cfg))
        self.mean_token = mean_token
        self.on_src, self.on_tgt = sides != "decoder", sides != "encoder"

    def batch_mean(self, src: Tensor) -> Tensor:
        """(B, n) source tokens -> (B, e): the batch's mean input vector, on every row."""
        embed, real = self.encoder.embed, src.ne(self.cfg.pad_id)
        if self.rows_apart:
            mean = (embed.table(src) * real[..., None]).sum(1) / real.sum(1, keepdim=True).clamp_min(1)
        else:
            mean = (embed.table(src) * real[..., None]).sum((0, 1)) / real.sum().clamp_min(1)
        vec = mean * embed.scale + embed.positions(1, 0)[0].to(mean.dtype)
        return vec.expand(src.size(0), -1)

    def _prepend(self, tokens: Tensor) -> Tensor:
        return torch.nn.functional.pad(tokens, (1, 0), value=self.mean_token)

    def encode(self, src: Tensor, **inputs: Tensor):
        return super().encode(self._prepend(src) if self.on_src else src, **inputs)

    def embed_source(self, src: Tensor, extra: dict) -> Tensor:
        x = super().embed_source(src, extra)
        extra["mbe"] = self.batch_mean(src[:, 1:] if self.on_src else src)
        if not self.on_src:
            return x
        return torch.cat([extra["mbe"][:, None].to(x.dtype), x[:, 1:]], 1)

    def decode(self, tgt_in: Tensor, enc, cache: DecoderCache | None = None) -> Tensor:
        if not self.on_tgt:
            return super().decode(tgt_in, enc, cache)
        first = cache is None or cache.length == 0
        out = super().decode(self._prepend(tgt_in), enc, cache)
        return out[:, 1:] if first else out

    def embed_target(self, tgt_in: Tensor, offset: int, enc) -> Tensor:
        x = super().embed_target(tgt_in, offset, enc)
        if not self.on_tgt or offset > 0:
            return x
        mean = enc.extra["mbe"].repeat_interleave(enc.beams, 0)        # decoder rows: inputs × beams
        return torch.cat([mean[:, None].to(x.dtype), x[:, 1:]], 1)


def build(cfg: ModelConfig, opts: DocFlatOptions | None = None, sep_range: tuple[int, int] | None = None,
          mean_token: int = 1) -> Transformer:
    """A DocFlat model; ``sep_range`` holds the ids of the index tokens ``<sep1>`` … ``<sepN>``
    (contiguous in a docnmt vocabulary), which mark where ``flat_scope: current`` starts;
    ``mean_token`` is the token of the MBE baseline's new position (its vector is replaced)."""
    opts = opts or DocFlatOptions()
    if opts.flat_scope == "current" and sep_range is None:
        raise ConfigError("flat_scope: current needs the ids of the index tokens <sepj> "
                          "(docflat.build(..., sep_range))")
    if opts.flat_block == "mbe":
        return MeanBatchEmbedding(cfg, mean_token, opts.flat_sides)

    def with_fba(make, side: str, on: bool):
        def make_layer(c: ModelConfig, i: int) -> Layer:
            layer = make(c, i)
            return Layer(list(layer.sublayers), {0: FlatBatchSublayer(c, side, opts)} if on and i == 0 else None)
        return make_layer

    model = Transformer(cfg, DocFlatPolicy(cfg, sep_range, opts.flat_scope),
                        with_fba(encoder_layer, "enc", opts.flat_sides != "decoder"),
                        with_fba(decoder_layer, "dec", opts.flat_sides != "encoder"))
    for mod in model.modules():           # (after the model's own initialisation, which zeroes biases)
        if isinstance(mod, FlatBatchSublayer) and hasattr(mod, "gate"):
            torch.nn.init.constant_(mod.gate.bias, opts.flat_gate_bias)
    return model


class GlobalIndexJoiner(Joiner):
    """DocFlat's format (docs/methods/docflat.md#data-format): sentence j of a document is ``<sepj> w… </s>`` on
    both sides, j its 1-based index in the whole document, so instances whose positions all
    restart at 0 still carry their order across a flattened batch. The decoder starts from the
    first sentence's index token: input ``<sepa> ya </s> … <sepi> yi``, labels
    ``ya </s> … yi </s>``. The index tokens are docnmt's reserved ``<sepI>`` symbols, so DocFlat
    needs no vocabulary of its own and fine-tunes from any docnmt sentence model; past the
    largest (512) the numbering starts again at ``<sep1>`` (docs/methods/docflat.md#df-index-tokens):
    sentences close enough to share a batch keep distinct index tokens, in order except across the wrap."""

    def __init__(self, vocab: Vocab, separator: str = "global_index"):
        super().__init__(vocab, "index")

    @staticmethod
    def overhead(n_sents: np.ndarray, side: str) -> np.ndarray:
        return 2 * n_sents - (side == "tgt")      # <sepj> … </s> per sentence; decoder input lacks the last </s>

    def output_specials(self, sentence_targets: bool) -> set[int]:
        return set()        # generation writes the current sentence only; its context is forced

    def sep(self, i: int) -> int:
        """The index token of sentence ``i`` (1-based): ``<sepI>``, I = i modulo the largest
        reserved index (``<sep1>`` again after it)."""
        return self.vocab.sep((i - 1) % self.vocab.max_sep + 1)

    def start_for(self, first: int) -> int:
        return self.sep(first)

    def join(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        eos = np.asarray([self.vocab.eos], dtype=np.int32)
        parts = [p for j, s in enumerate(sents) for p in (np.asarray([self.sep(first + j)], dtype=np.int32),
                                                          np.asarray(s, dtype=np.int32), eos)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def source(self, sents: list[np.ndarray], first: int = 1) -> np.ndarray:
        return self.join(sents, first)

    def sentence_ids(self, tokens: Tensor) -> Tensor:
        """Every sentence opens with its index token (``<sepj> w… </s>``), its ``</s>`` included."""
        return (self.separators_before(tokens) - 1).clamp_min(0)

    def decoder_io(self, sents: list[np.ndarray], first: int = 1) -> tuple[np.ndarray, np.ndarray]:
        body = self.join(sents, first)
        return body[:-1], body[1:]

    def prefix(self, sents: list[list[int]], first: int = 1) -> list[int]:
        """The tokens after the start token that force ``sents``, ending with the next index token."""
        if not sents:
            return []
        body = self.join([np.asarray(s, dtype=np.int32) for s in sents], first)
        return [int(t) for t in body[1:]] + [self.sep(first + len(sents))]

    def split(self, ids: list[int], n: int) -> tuple[list[list[int]], bool]:
        return split_at_eos(ids, n, self.vocab.eos, {self.vocab.bos, self.vocab.pad, *self.sep_ids})


# --------------------------------------------------------------------------------------------
# Hooks
# --------------------------------------------------------------------------------------------

def _build(cfg: ModelConfig, opts: DocFlatOptions, vocab: Vocab) -> Transformer:
    return build(cfg, opts, (vocab.sep(1), vocab.sep(vocab.max_sep)), vocab.id("<mask>"))


def _check(cfg) -> None:
    if cfg.data.mode != "pseudodoc":
        raise ConfigError("a DocFlat model needs pseudo-documents (data.mode: pseudodoc)")
    if cfg.method.shuffled_data and cfg.data.batch_order != "sorted":
        raise ConfigError("method.shuffled_data (the data-shuffling ablation) trains on shuffled batches: "
                          "set data.batch_order: sorted")
    if cfg.data.batch_order == "sorted" and not cfg.method.shuffled_data:
        raise ConfigError("a DocFlat model needs pseudo-documents in ordered batches (data.batch_order: ordered "
                          "or strict; sorted only with method.shuffled_data: true, the data-shuffling ablation)")


METHOD = Method("docflat", _build, DocFlatOptions, check=_check, formats={"global_index": GlobalIndexJoiner},
                score_alone=True)
