"""Attention: the kernel table that decides which kernel computes an attention call, the
per-model attention settings, multi-head attention with its decoder cache, and the attention probe.

What a call computes is its :class:`~docnmt.attention_spec.AttnSpec` (mask parts, query/key
additions, bias, scale; :mod:`docnmt.attention_spec`); the kernels live in :mod:`docnmt.kernels`,
the decoder cache in :mod:`docnmt.decoder_state`. This module re-exports all of their public names.

**The kernel table** (:data:`KERNEL_TABLE`; :func:`choose_kernel` takes its first row that applies;
docs/attention.md has the same table):

=========  ======  ============================================================================
kernel     device  when
=========  ======  ============================================================================
reference  any     at most 16 queries, no dropout, no gradient to the queries (decoding steps)
flex       cuda    a part that prefers it (group tags, a ``visible`` mask), every part has a
                   mask_mod, no bias, no dropout, more than 1 query, the model's ``flex`` on
grouped    any     one group-tag part, every other part a key-level mask or causal, no bias,
                   more than 1 query
relative   any     a ``RelativeLogits`` bias, no group tags, no dropout
masked     any     everything else: SDPA with every part as one dense mask (or as ``is_causal``)
=========  ======  ============================================================================

Around the chosen kernel: on CPU a bf16 call with gradients is computed in fp32 (CPU's bf16 SDPA
backward is about 3x slower); on CUDA, SDPA may use cuDNN's fused attention only when the model's
``cudnn`` setting allows it; and where beams of one input share its keys (cross-attention in
beam search) :class:`MultiheadAttention` folds the beams into the query axis before the call.

**Attention settings** (:class:`AttentionSettings`) belong to a model
(``Transformer.attention_settings``, from ``train.flex_attention`` and ``train.cudnn_attention``),
so two models in one process (``docnmt serve a=… b=…``) each keep their own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor, nn

from .attention_spec import (  # noqa: F401  (re-exported)
    AttnSpec,
    Causal,
    Groups,
    Mask,
    MaskPart,
    _blocked,
    attention_reference,
    attention_weights,
    dense_bias,
    group_mask,
)
from .decoder_state import CacheError, DecoderCache, KVCache  # noqa: F401  (re-exported)
from .kernels import (  # noqa: F401  (re-exported)
    RELATIVE_BLOCK,
    RelativeLogits,
    attention_flex,
    attention_grouped,
    attention_masked,
    attention_relative,
    compiled_flex_functions,
)
from .ops import Linear, linear


@dataclass(frozen=True)
class AttentionSettings:
    """How a model's attention may run on CUDA (no effect on CPU):

    * ``flex``: group and visibility masks through FlexAttention, compiled in every new process
      (about 65-110 s on an H200 for the first batch), which pays off on long instances (half the
      memory of a dense mask at 16K tokens) but not in short runs of short instances, where the
      paths the CPU takes do the same computation (``train.flex_attention``);
    * ``cudnn``: SDPA may choose cuDNN's fused attention, which builds an execution plan for every
      new input shape (tenths of a second; on an H200 document training ran 11x slower with it on),
      so it is off unless ``train.cudnn_attention`` asks for it (long instances of few shapes).

    A graph already compiled (``--compile``) keeps the settings it was compiled with."""

    flex: bool = True
    cudnn: bool = False

    @classmethod
    def of(cls, train_cfg) -> "AttentionSettings":
        """The settings of a config's ``train:`` section."""
        return cls(flex=bool(train_cfg.flex_attention), cudnn=bool(train_cfg.cudnn_attention))

    def sdpa_backends(self) -> list:
        from torch.nn.attention import SDPBackend
        backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        return backends + [SDPBackend.CUDNN_ATTENTION] if self.cudnn else backends


DEFAULT_SETTINGS = AttentionSettings()


def use_cudnn_attention(enabled: bool) -> None:
    """Process-wide: whether SDPA calls *outside* docnmt's models (a Hugging Face model in a
    benchmark) may use cuDNN's fused attention. docnmt's models follow their own
    :class:`AttentionSettings`."""
    torch.backends.cuda.enable_cudnn_sdp(enabled)


# --------------------------------------------------------------------------------------------
# The kernel table
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Call:
    """What the kernel choice looks at: the spec, the number of queries, whether they are on CUDA
    and receive gradients, the attention dropout and the model's settings."""

    spec: AttnSpec
    n_q: int
    cuda: bool
    grad: bool
    dropout: float
    settings: AttentionSettings


@dataclass(frozen=True)
class Route:
    """One row of the kernel table: ``attention_<kernel>`` computes a call ``applies`` accepts."""

    kernel: str
    device: str
    when: str
    applies: Callable[[Call], bool]


def _flex(c: Call) -> bool:
    parts = c.spec.parts
    return (c.cuda and c.settings.flex and c.dropout == 0.0 and c.spec.bias is None and c.n_q > 1
            and any(p.prefers_flex for p in parts) and all(p.flex_ready for p in parts))


def _grouped(c: Call) -> bool:
    parts = c.spec.parts
    return (sum(isinstance(p, Groups) for p in parts) == 1 and c.spec.bias is None and c.n_q > 1
            and all(isinstance(p, (Groups, Causal)) or (isinstance(p, Mask) and p.key_level) for p in parts))


KERNEL_TABLE: tuple[Route, ...] = (
    Route("reference", "any", "at most 16 queries, no dropout, no gradient to the queries (decoding steps)",
          lambda c: c.n_q <= 16 and c.dropout == 0.0 and not c.grad),
    Route("flex", "cuda", "a part that prefers it (group tags, a visible mask), every part has a mask_mod, "
          "no bias, no dropout, more than 1 query, the model's flex on", _flex),
    Route("grouped", "any", "one group-tag part, every other part a key-level mask or causal, no bias, "
          "more than 1 query", _grouped),
    Route("relative", "any", "a RelativeLogits bias, no group tags, no dropout",
          lambda c: isinstance(c.spec.bias, RelativeLogits) and c.dropout == 0.0
          and not any(isinstance(p, Groups) for p in c.spec.parts)),
    Route("masked", "any", "everything else: SDPA with every part as one dense mask (or as is_causal)",
          lambda c: True),
)


def choose_kernel(spec: AttnSpec, q: Tensor, dropout: float = 0.0, settings: AttentionSettings = DEFAULT_SETTINGS
                  ) -> str:
    """The kernel of the first :data:`KERNEL_TABLE` row that applies to this call."""
    call = Call(spec, q.size(-2), q.is_cuda, torch.is_grad_enabled() and q.requires_grad, dropout, settings)
    return next(route.kernel for route in KERNEL_TABLE if route.applies(call))


def attention_sdpa(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec, dropout: float = 0.0,
                   settings: AttentionSettings = DEFAULT_SETTINGS) -> Tensor:
    """Attention on (B, h, n, d_h) tensors by the kernel :func:`choose_kernel` picks (the module
    doc's table); every kernel equals :func:`attention_reference`. Kernels are looked up in this
    module when called, so a benchmark may replace one (dense masks instead of block masks)."""
    kernel = choose_kernel(spec, q, dropout, settings)
    if kernel != "reference" and q.device.type == "cpu" and q.dtype == torch.bfloat16 and torch.is_grad_enabled():
        with torch.autocast("cpu", enabled=False):   # CPU's bf16 SDPA backward is ~3x slower
            return attention_sdpa(q.float(), k.float(), v.float(), spec, dropout, settings).to(q.dtype)
    if not q.is_cuda:
        return _run(kernel, q, k, v, spec, dropout)
    from torch.nn.attention import sdpa_kernel
    with sdpa_kernel(settings.sdpa_backends()):
        return _run(kernel, q, k, v, spec, dropout)


def _run(kernel: str, q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec, dropout: float) -> Tensor:
    if kernel == "reference":
        return attention_reference(q, k, v, spec)
    if kernel == "flex":
        return attention_flex(q, k, v, spec)
    if kernel == "grouped":
        return attention_grouped(q, k, v, spec, dropout)
    if kernel == "relative":
        return attention_relative(q if spec.scale is None else q * spec.scale, k, v, spec)
    return attention_masked(q, k, v, spec, dropout)


# --------------------------------------------------------------------------------------------
# Multi-head attention
# --------------------------------------------------------------------------------------------

class MultiheadAttention(nn.Module):
    """Multi-head attention with an optional :class:`DecoderCache` for incremental decoding.

    The query, key and value projections are one (3d × d) matrix, so self-attention without
    query/key additions projects in a single matrix multiplication (and cross-attention keys and
    values in one); with additions each part is projected from its own input.
    The cache is shared by the whole decoder; this module keeps its keys and values under its own
    ``name``. With ``static_kv`` (cross-attention) they are computed once per sentence.
    ``settings`` are the model's :class:`AttentionSettings` (``Transformer.attention_settings``).
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, name: str = ""):
        super().__init__()
        self.heads, self.d_head, self.dropout, self.name = heads, d_model // heads, dropout, name
        self.d_model = d_model
        self.settings = DEFAULT_SETTINGS
        self.in_proj = Linear(d_model, 3 * d_model)
        self.out_proj = Linear(d_model, d_model)

    def project(self, x: Tensor, part: slice) -> Tensor:
        """Project ``x`` with rows ``part`` of the stacked [W_Q; W_K; W_V] (in units of d)."""
        d = self.d_model
        rows = slice(part.start * d, part.stop * d)
        if hasattr(self.in_proj, "project"):       # an int8 copy's (docnmt.engines.int8.Int8Linear)
            return self.in_proj.project(x, rows)
        return linear(x, self.in_proj.weight[rows], self.in_proj.bias[rows])

    def _split(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, -1, self.d_head).transpose(1, 2)

    def forward(self, x: Tensor, kv: Tensor, spec: AttnSpec, cache: DecoderCache | None = None,
                static_kv: bool = False) -> Tensor:
        reuse = cache is not None and static_kv and cache.has_static(self.name)
        q, k, v = self._qkv(x, kv, spec, reuse)
        if cache is not None:
            if not static_kv and spec.drops_keys():           # keys no query sees again: dropped
                spec = spec.keys_from(cache.forget(self.name, spec.first_key))
            k, v = self._cached(cache, q, k, v, spec, static_kv, reuse)
        if callable(spec.bias):
            spec = spec.replace(bias=spec.bias(q if spec.scale is None else q * spec.scale, self.name))
        if AttentionProbe.active is not None:
            AttentionProbe.active.record(self.name, q, k, spec)
        b, _, n, _ = q.shape
        return self.out_proj(self._attend(q, k, v, spec).transpose(1, 2).reshape(b, n, -1))

    def _qkv(self, x: Tensor, kv: Tensor, spec: AttnSpec, reuse: bool):
        """Queries, keys and values, (B, h, n, d_h); no keys and values when the cache has them."""
        if kv is x and spec.q_add is None and spec.k_add is None:
            return self._split(self.project(x, slice(0, 3))).chunk(3, dim=1)
        if kv is x and spec.q_add is spec.k_add:     # the same position term (P-Transformer): one Q/K matmul
            q, k = self._split(self.project(x + spec.q_add, slice(0, 2))).chunk(2, dim=1)
            return q, k, self._split(self.project(x, slice(2, 3)))
        q = self._split(self.project(x if spec.q_add is None else x + spec.q_add, slice(0, 1)))
        if reuse:
            return q, None, None
        if spec.k_add is None:
            return (q, *self._split(self.project(kv, slice(1, 3))).chunk(2, dim=1))
        return q, self._split(self.project(kv + spec.k_add, slice(1, 2))), self._split(self.project(kv, slice(2, 3)))

    def _cached(self, cache: DecoderCache, q: Tensor, k, v, spec: AttnSpec, static_kv: bool, reuse: bool):
        """This step's keys and values through the cache: all so far (self-attention), or the
        static ones, written once (kept per input when the beams can share them)."""
        if reuse:
            return cache.static(self.name)
        if not static_kv:
            return cache.append(self.name, k, v)
        per_input = k.size(0) != q.size(0) and _foldable(spec)
        if k.size(0) != q.size(0) and not per_input:      # per beam after all
            k, v = (t.repeat_interleave(q.size(0) // t.size(0), 0) for t in (k, v))
        k, v = k.contiguous(), v.contiguous()             # computed once, read every step: contiguous once
        cache.set_static(self.name, k, v, per_input)
        return k, v

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec) -> Tensor:
        """Attention of (B, h, n, d_h) queries; where beams share their input's keys (fewer key
        rows), the beams are folded into the query axis, or the keys repeated when the spec
        differs per query row."""
        dropout = self.dropout if self.training else 0.0
        b, _, n, _ = q.shape
        if k.size(0) == b:
            return attention_sdpa(q, k, v, spec, dropout, self.settings)
        beams = b // k.size(0)
        if spec.bias is not None or not all(p.foldable for p in spec.parts):
            k, v = (t.repeat_interleave(beams, 0) for t in (k, v))
            return attention_sdpa(q, k, v, spec, dropout, self.settings)

        def fold(t):
            return t.view(-1, beams, *t.shape[1:]).transpose(1, 2).flatten(2, 3)

        folded = AttnSpec(parts=[p.fold(beams) for p in spec.parts],
                          scale=None if spec.scale is None else fold(spec.scale.expand(b, -1, n, -1)))
        out = attention_sdpa(fold(q), k, v, folded, dropout, self.settings)
        return out.unflatten(2, (beams, n)).transpose(1, 2).reshape(b, -1, n, self.d_head)


def _foldable(spec: AttnSpec) -> bool:
    """Whether beams of one input can share its keys in this attention: nothing in the spec
    depends on the query row beyond a per-row logit scale, and every part restricts keys only
    or folds with the queries (G-Transformer's group tags in cross-attention)."""
    return (spec.bias is None and all(p.foldable for p in spec.parts)
            and (spec.scale is None or spec.scale.size(-2) == 1))


class AttentionProbe:
    """While active (``with AttentionProbe() as probe``), every attention call records the
    entropy in bits of its head-averaged weights for each query, (B, nq) under the module's name
    (docs/methods/discourse.md#attention-entropy), and every self-attention call (``*.N.self``)
    the mean distance in tokens between each query and the keys it attends to,
    sum_j w_ij |i − j| (how local it is; queries aligned to the last keys). Given ``sentences``,
    the instance sentence of every token of the inputs (``{"src": (B, n_src), "tgt_in": (B, n_tgt)}``,
    target sentences numbered as the source sentences they translate, -1 for a token in none),
    every encoder/decoder self- and cross-attention call also records ``context_share``: the
    weight each query puts on keys of other sentences than its own (NaN for a query in no
    sentence, and a key in none counts for no one: docs/methods/discourse.md#attention-entropy);
    a method whose context has its own
    route records the weight given to it (:meth:`record_context_weight`). It costs
    an explicit N×N product per call, so it is for evaluation passes."""

    active: "AttentionProbe | None" = None

    def __init__(self, sentences: dict[str, Tensor] | None = None):
        self.entropy: dict[str, list[Tensor]] = {}
        self.distance: dict[str, list[Tensor]] = {}
        self.context_share: dict[str, list[Tensor]] = {}
        self.sentences = sentences or {}

    def __enter__(self) -> "AttentionProbe":
        AttentionProbe.active = self
        return self

    def __exit__(self, *exc) -> None:
        AttentionProbe.active = None

    def record(self, name: str, q: Tensor, k: Tensor, spec: AttnSpec) -> None:
        with torch.no_grad():
            w = attention_weights(q, k, spec).mean(1)                          # head average
            self.entropy.setdefault(name, []).append(-(w * w.clamp_min(1e-30).log2()).sum(-1))
            if name.split(".")[2:3] == ["self"]:
                nq, nk = w.shape[-2:]
                pos = torch.arange(nk, device=w.device, dtype=w.dtype)
                gap = (pos[nk - nq:, None] - pos[None, :]).abs()
                self.distance.setdefault(name, []).append((w * gap).sum(-1))
            sides = self._sides(name)
            if sides:
                q_ids, k_ids = self.sentences[sides[0]], self.sentences[sides[1]]
                nq, nk = w.shape[-2:]
                if q_ids.shape == (w.size(0), nq) and k_ids.shape == (w.size(0), nk):
                    # a key in no sentence (G-Transformer's start token EOD) is nobody's context
                    other = (q_ids[:, :, None] != k_ids[:, None, :]) & k_ids[:, None, :].ge(0)
                    share = (w * other).sum(-1).masked_fill(q_ids < 0, float("nan"))   # in no sentence
                    self.context_share.setdefault(name, []).append(share)

    def record_context_weight(self, name: str, weight: Tensor) -> None:
        """A method whose context comes in through another route than attention over the same
        input (the context-encoder Transformer's gate) records the weight each query gives its
        context, (B, nq), as that module's ``context_share``."""
        self.context_share.setdefault(name, []).append(weight.detach().float())

    def _sides(self, name: str) -> tuple[str, str] | None:
        """(query input, key input) of an encoder or decoder self- or cross-attention call whose
        sentences are known: ``enc.N.self`` src/src, ``dec.N.self`` tgt_in/tgt_in, ``dec.N.cross``
        tgt_in/src (and their ``.local``/``.global`` variants)."""
        parts = name.split(".")
        if len(parts) < 3 or parts[0] not in ("enc", "dec") or parts[2] not in ("self", "cross"):
            return None
        q = "src" if parts[0] == "enc" else "tgt_in"
        k = q if parts[2] == "self" else "src"
        return (q, k) if q in self.sentences and k in self.sentences else None


def module_kind(name: str) -> str:
    """``enc.3.self`` -> ``enc_self``, ``dec.1.cross.global`` -> ``cross_global``,
    ``dec.0.context`` -> ``dec_context``, ``ctx.0.self`` -> ``ctx_self``, ``enc.fba`` -> ``enc_fba``."""
    parts = name.split(".")
    if len(parts) == 2:
        return "_".join(parts)
    kind = "cross" if parts[2] == "cross" else f"{parts[0]}_{parts[2]}"
    return kind + "".join(f"_{p}" for p in parts[3:])
