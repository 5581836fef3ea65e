"""Attention: what one attention call may do (:class:`AttnSpec`), the kernels that compute it,
multi-head attention with its key/value cache, and the attention probe.

An :class:`AttnSpec` is a small record of *what to change* for one attention call:

* ``mask``: boolean, True = blocked, broadcastable to (B, heads, queries, keys)
  (e.g. group masks built from sentence tags);
* ``is_causal``: the usual causal mask (decoder self-attention in training);
* ``groups``: (query tags, key tags): a query with tag g > 0 sees only keys tagged g -- a group
  mask in sparse form, which :func:`attention_grouped` computes sentence block by sentence block
  without ever building the N×N scores (G-Transformer, docs/methods/gtransformer.md);
* ``q_add`` / ``k_add``: tensors added to the *inputs* of the query / key projections only,
  never the values (position-aware attention, docs/methods/ptransformer.md);
* ``bias``: an additive logit term, a tensor or a callable ``bias(q, name)`` of the projected,
  per-head (and scaled) queries and the attention module's name, which the module calls before
  attending (per-layer tables); it may return :class:`RelativeLogits`, a term that depends on
  the query and the key's distance from it, which attention then computes block by block of
  queries without a dense N×N bias (relative positions);
* ``scale``: a per-query multiplier of the logits (length-aware attention,
  docs/methods/length_bias.md);
* ``visible``: ``mask`` again as a FlexAttention ``mask_mod(b, h, i, j) -> allowed``, so that on
  CUDA the attention skips every fully blocked tile instead of reading a dense mask (DocFlat's
  masked flat-batch attention).

:func:`attention_sdpa` picks the kernel for a spec: PyTorch's SDPA, the block-by-block group or
relative kernels, or FlexAttention on CUDA; :func:`attention_reference` is the explicit softmax
every kernel is tested against.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .ops import Linear, linear

# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------

@dataclass
class AttnSpec:
    """What one attention call does beyond plain scaled dot-product attention (see module doc)."""

    mask: Tensor | None = None
    is_causal: bool = False
    q_add: Tensor | None = None
    k_add: Tensor | None = None
    bias: "Tensor | RelativeLogits | Callable[[Tensor, str], Tensor | RelativeLogits] | None" = None
    scale: Tensor | None = None
    groups: tuple[Tensor, Tensor] | None = None
    visible: Callable | None = None


def group_mask(q_tags: Tensor, k_tags: Tensor) -> Tensor:
    """(B, 1, nq, nk), True = blocked: a tagged query sees only keys of its own group; tag-0
    queries are unrestricted, so no row is ever fully blocked by it."""
    q = q_tags[:, None, :, None]
    return (q != k_tags[:, None, None, :]) & (q != 0)


def attention_weights(q: Tensor, k: Tensor, spec: AttnSpec) -> Tensor:
    """Explicit softmax attention weights (B, h, nq, nk), in fp32."""
    if spec.scale is not None:
        q = q * spec.scale
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    if spec.bias is not None:
        logits = logits + _dense(spec.bias)
    blocked = _blocked(spec, q.size(-2), k.size(-2), q.device)
    if blocked is not None:
        logits = logits.masked_fill(blocked, torch.finfo(logits.dtype).min)
    return torch.softmax(logits.float(), dim=-1)


def attention_reference(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec, dropout: float = 0.0) -> Tensor:
    """Explicit softmax attention on (B, h, n, d_h) tensors; the reference SDPA is tested against."""
    weights = attention_weights(q, k, spec).to(v.dtype)
    weights = F.dropout(weights, dropout, training=dropout > 0)
    return weights @ v


def _blocked(spec: AttnSpec, n_q: int, n_k: int, device) -> Tensor | None:
    """The boolean blocked-mask of a spec, causal and group parts included (queries aligned to
    the last keys)."""
    blocked = spec.mask
    if spec.groups is not None:
        groups = group_mask(*spec.groups)
        blocked = groups if blocked is None else blocked | groups
    if spec.is_causal and n_q > 1:  # a single (newest) query sees every cached key
        causal = torch.ones(n_q, n_k, dtype=torch.bool, device=device).triu(n_k - n_q + 1)
        blocked = causal if blocked is None else blocked | causal
    return blocked


def use_cudnn_attention(enabled: bool) -> None:
    """Whether SDPA may choose cuDNN's fused attention on CUDA (process-wide; no effect on CPU).
    cuDNN builds an execution plan for every new shape of its inputs, which costs tenths of a
    second (on an H200, document training ran 11x slower with it on): token batches change shape
    at almost every update, so docnmt turns it off and SDPA takes its flash or memory-efficient
    kernels (``train.cudnn_attention`` turns it back on).
    Process-wide: the last trainer or translator built decides for every model in the process,
    and a graph already compiled (``--compile``) keeps the choice it was compiled with."""
    torch.backends.cuda.enable_cudnn_sdp(enabled)


_FLEX = {"enabled": True}


def use_flex_attention(enabled: bool) -> None:
    """Whether CUDA attention with a group or visibility mask may go through FlexAttention
    (process-wide). FlexAttention is compiled in every new process (about 65-110 s on an H200 for
    the first batch), which pays off on long instances (half the memory of a dense mask at 16K
    tokens) but not in short runs of short instances: there the SDPA paths the CPU takes (group
    attention block by block, other masks dense) do the same computation. ``train.flex_attention:
    false`` turns it off; set by trainers and translators like :func:`use_cudnn_attention`."""
    _FLEX["enabled"] = bool(enabled)


def flex_wanted(q: Tensor, dropout: float) -> bool:
    """Whether :func:`attention_sdpa` takes FlexAttention for ``q``: CUDA, no attention dropout,
    not switched off."""
    return q.is_cuda and dropout == 0.0 and _FLEX["enabled"]


def attention_sdpa(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec, dropout: float = 0.0) -> Tensor:
    """The same computation through ``torch.nn.functional.scaled_dot_product_attention``.

    A few queries per row without gradients (incremental decoding, beams folded over one input)
    go through the explicit form, which is several times faster than the fused kernels for that
    shape on CPU."""
    if q.size(-2) <= 16 and dropout == 0.0 and not (torch.is_grad_enabled() and q.requires_grad):
        return attention_reference(q, k, v, spec)
    if q.device.type == "cpu" and q.dtype == torch.bfloat16 and torch.is_grad_enabled():
        with torch.autocast("cpu", enabled=False):   # CPU's bf16 SDPA backward is ~3x slower
            return attention_sdpa(q.float(), k.float(), v.float(), spec, dropout).to(q.dtype)
    if spec.groups is not None and spec.bias is None and q.size(-2) > 1 and _key_level(spec.mask):
        if flex_wanted(q, dropout):
            return attention_flex(q, k, v, spec)
        return attention_grouped(q, k, v, spec, dropout)
    if spec.visible is not None and spec.bias is None and flex_wanted(q, dropout):
        return attention_flex(q, k, v, spec)
    if isinstance(spec.bias, RelativeLogits) and dropout == 0.0 and spec.groups is None:
        return attention_relative(q if spec.scale is None else q * spec.scale, k, v, spec)
    return attention_masked(q, k, v, spec, dropout)


def attention_masked(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec, dropout: float = 0.0) -> Tensor:
    """SDPA with the spec's mask, causality, group mask and bias as one dense (…, nq, nk) mask or
    bias (the cost the block-by-block kernels avoid; also their reference in benchmarks)."""
    if spec.scale is not None:
        q = q * spec.scale
    if spec.bias is None:
        n_q, n_k = q.size(-2), k.size(-2)
        if spec.mask is None and (not spec.is_causal or n_q == n_k or n_q == 1):
            # a branch, not is_causal=(... and n_q > 1): torch.compile's symbolic n_q would make
            # that a SymBool, which SDPA refuses (a graph break at every attention call)
            if spec.is_causal and n_q > 1:
                return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
        allowed = ~_blocked(spec, q.size(-2), k.size(-2), q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout)
    bias = _dense(spec.bias).to(q.dtype)
    blocked = _blocked(spec, q.size(-2), k.size(-2), q.device)
    if blocked is not None:
        bias = bias.masked_fill(blocked, torch.finfo(q.dtype).min)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)


# --------------------------------------------------------------------------------------------
# Relative logits: a bias that depends on the query and the key's distance from it
# --------------------------------------------------------------------------------------------

@dataclass
class RelativeLogits:
    """The logit term ``scale · q_i · table[clamp(center + j − i, 0, R − 1)]`` for queries
    i = 0 … nq−1 of ``q`` (B, h, nq, d_h) and keys j = 0 … n_keys−1, R = len(table):
    ``center`` is the table row of distance 0 for the first query (relative positions,
    Shaw et al. / Music Transformer, docs/methods/ptransformer.md#relative-position-term).

    A block of queries needs only the table rows of its distances (block + keys − 1 of them):
    their products with the queries, shifted by one column per query (a strided "skew" view), are
    the block's term. :func:`attention_relative` computes attention this way block by block;
    :meth:`dense` is the whole (B, h, nq, n_keys) tensor, with gradients."""

    q: Tensor
    table: Tensor
    center: int
    n_keys: int
    scale: float

    def dense(self) -> Tensor:
        nq = self.q.size(-2)
        idx = _relative_rows(self.center, 0, nq, self.n_keys, self.table)
        return _skew((self.q @ self.table[idx].to(self.q.dtype).t()) * self.scale, nq, self.n_keys)


def _dense(bias: "Tensor | RelativeLogits") -> Tensor:
    return bias.dense() if isinstance(bias, RelativeLogits) else bias


def _relative_rows(center: int, i0: int, i1: int, n_keys: int, table: Tensor) -> Tensor:
    """Table rows of queries i0 … i1−1 against keys 0 … n_keys−1: distance row of (last query,
    key 0) first, one more per column (clamped: distances beyond the table share its ends)."""
    first = center - (i1 - 1)
    return torch.arange(first, first + n_keys + i1 - i0 - 1, device=table.device).clamp(0, table.size(0) - 1)


def _skew(a: Tensor, n_q: int, n_keys: int) -> Tensor:
    """(…, n_q, n_keys) view of ``a`` (…, n_q, n_keys + n_q − 1) whose row i starts at column
    n_q − 1 − i: element (i, j) is a[i, j − i + n_q − 1] (contiguous ``a``: no copy)."""
    a = a.contiguous()
    return a.as_strided((*a.shape[:-1], n_keys), (*a.stride()[:-2], a.size(-1) - 1, 1),
                        a.storage_offset() + n_q - 1)


RELATIVE_BLOCK = 64   # queries per block in attention_relative (best of 16–128 on CPU, bench/relative_attention.py)


def attention_relative(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec) -> Tensor:
    """Attention with a :class:`RelativeLogits` bias, equal to the dense form, computed
    ``RELATIVE_BLOCK`` queries at a time: only the table rows a block needs are multiplied,
    causal blocks stop at their last visible key, and the block's logits, softmax and
    gradients stay small (cache-resident on CPU) instead of passing N×N tensors between
    separate operations. No attention dropout."""
    rel = spec.bias
    blocked = _blocked(spec, q.size(-2), k.size(-2), q.device)
    # rel.q to q's dtype: the CPU bf16 path runs attention in fp32 (attention_sdpa)
    return _RelativeAttention.apply(q, k, v, rel.q.to(q.dtype), rel.table, blocked, spec.is_causal, rel.center,
                                    rel.scale)


class _RelativeAttention(torch.autograd.Function):
    """softmax(q kᵀ/√d + R) v with R a :class:`RelativeLogits` term, block by block of queries;
    each block's attention weights are kept for the backward pass (as SDPA's explicit path
    keeps the N×N weights)."""

    @staticmethod
    def forward(ctx, q, k, v, rq, table, blocked, causal, center, rel_scale):
        with torch.autocast(q.device.type, enabled=False):
            nq, nk, scale = q.size(-2), k.size(-2), q.size(-1) ** -0.5
            tab = table.to(q.dtype)
            out = q.new_empty(*q.shape[:-1], v.size(-1))
            blocks = []
            for i0 in range(0, nq, RELATIVE_BLOCK):
                i1 = min(nq, i0 + RELATIVE_BLOCK)
                kk = min(nk, i1 + nk - nq) if causal else nk          # keys the block can see
                idx = _relative_rows(center, i0, i1, kk, table)
                s = torch.matmul(q[..., i0:i1, :], k[..., :kk, :].transpose(-1, -2)).mul_(scale)
                s += _skew(torch.matmul(rq[..., i0:i1, :], tab[idx].t()).mul_(rel_scale), i1 - i0, kk)
                if blocked is not None:       # (…, nq or 1, nk): this block's queries, its keys
                    s.masked_fill_(blocked[..., i0:i1, :kk] if blocked.size(-2) > 1 else blocked[..., :kk],
                                   torch.finfo(s.dtype).min)
                p = torch.softmax(s.float(), dim=-1).to(q.dtype)
                out[..., i0:i1, :] = p @ v[..., :kk, :]
                blocks.append((i0, i1, kk, idx, p))
        ctx.save_for_backward(q, k, v, rq, table, out)
        ctx.blocks, ctx.rel_scale = blocks, rel_scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, rq, table, out = ctx.saved_tensors
        with torch.autocast(q.device.type, enabled=False):
            dout = dout.to(q.dtype)
            scale, tab = q.size(-1) ** -0.5, table.to(q.dtype)
            dq, drq = torch.empty_like(q), torch.empty_like(rq)
            dk, dv = torch.zeros_like(k), torch.zeros_like(v)
            dtable = torch.zeros_like(table, dtype=torch.float32)
            delta = (dout * out).sum(-1, keepdim=True)
            for i0, i1, kk, idx, p in ctx.blocks:
                do, qb, rqb = dout[..., i0:i1, :], q[..., i0:i1, :], rq[..., i0:i1, :]
                dv[..., :kk, :] += p.transpose(-1, -2) @ do
                ds = (do @ v[..., :kk, :].transpose(-1, -2)).sub_(delta[..., i0:i1, :]).mul_(p)   # d logits
                dq[..., i0:i1, :] = (ds @ k[..., :kk, :]).mul_(scale)
                dk[..., :kk, :] += (ds.transpose(-1, -2) @ qb).mul_(scale)
                da = ds.new_zeros(*ds.shape[:-1], idx.numel())       # d of the unskewed products
                _skew(da, i1 - i0, kk).copy_(ds)
                da.mul_(ctx.rel_scale)
                drq[..., i0:i1, :] = da @ tab[idx]
                dtable.index_add_(0, idx, (da.flatten(0, -2).t() @ rqb.flatten(0, -2)).float())
        return dq, dk, dv, drq, dtable.to(table.dtype), None, None, None, None


def _key_level(mask: Tensor | None) -> bool:
    return mask is None or (mask.dim() == 4 and mask.size(1) == 1 and mask.size(2) == 1)


def _group_spans(tags: Tensor, n_groups: int) -> tuple[Tensor, Tensor]:
    """First position and size of each group 1..n_groups in each row (B, n_groups). Tagged
    tokens of one group are contiguous: tags count ``<s>`` tokens left to right."""
    B, n = tags.shape
    pos = torch.arange(n, device=tags.device).expand(B, n)
    size = torch.zeros(B, n_groups + 1, dtype=torch.long, device=tags.device).scatter_add_(
        1, tags, torch.ones_like(tags))
    start = torch.full((B, n_groups + 1), n, dtype=torch.long, device=tags.device)
    start = start.scatter_reduce(1, tags, pos, "amin")
    return start[:, 1:], size[:, 1:]


GROUP_BUCKETS = 4   # size buckets of sentence blocks in attention_grouped


def _block_plan(spec: AttnSpec, key_ok: Tensor | None, nq: int, nk: int, b_idx: Tensor, q_start: Tensor,
                q_size: Tensor, k_start: Tensor, k_size: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One bucket of (row, group) blocks, padded to its longest sentence: the token indices of
    its queries (G, lq) and keys (G, lk) in the token-major (B·n) layout, which query slots are
    real (G, lq), and the allowed-mask (G, 1, lq, lk). ``key_ok`` (B·nk,): keys the mask allows."""
    dev = q_start.device
    lq, lk = int(q_size.max()), max(int(k_size.max()), 1)
    q_pos = q_start[:, None] + torch.arange(lq, device=dev)
    k_pos = k_start[:, None] + torch.arange(lk, device=dev)
    q_real = torch.arange(lq, device=dev) < q_size[:, None]
    q_flat = b_idx[:, None] * nq + q_pos.clamp(max=nq - 1)
    k_flat = b_idx[:, None] * nk + k_pos.clamp(max=nk - 1)
    allowed = torch.arange(lk, device=dev) < k_size[:, None]
    if key_ok is not None:
        allowed = allowed & key_ok[k_flat]
    allowed = allowed[:, None, None, :].expand(-1, 1, lq, lk)
    if spec.is_causal:      # within a block, key j is visible to query i iff its position is not later
        allowed = allowed & (k_pos[:, None, None, :] <= q_pos[:, None, :, None] + (nk - nq))
    allowed = allowed | ~allowed.any(-1, keepdim=True)            # padding rows of a block: anything
    return q_flat, k_flat, q_real, allowed


def attention_grouped(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec, dropout: float = 0.0) -> Tensor:
    """Group attention computed block by block (docs/methods/gtransformer.md#attention-masks), equal
    to the dense masked form.

    Each (row, group) pair becomes one block holding that sentence's queries and keys; blocks
    are sorted by size into a few buckets, each padded to its longest sentence, so time and
    memory grow with Σ sentence² rather than document²; tag-0
    queries (the decoder's start token, pads) attend over everything the spec allows, computed
    densely for those few queries only. ``spec.mask`` may only restrict keys (padding).
    Queries, keys and values are gathered for all buckets at once in a token-major layout and
    the outputs put back with one copy: per-bucket gathers and their zero-filled gradients
    cost more than the blocks' attention itself."""
    (q_tags, k_tags), B, h, nq, d = spec.groups, *q.shape
    nk = k.size(2)
    n_groups = int(max(q_tags.max(), k_tags.max()))
    qf = q.transpose(1, 2).reshape(B * nq, h, d)                   # token-major (B·nq, h, d)
    if spec.scale is not None:
        qf = (qf * spec.scale.expand(B, -1, nq, 1).transpose(1, 2).reshape(B * nq, -1, 1)).to(q.dtype)
    rows, outs = [], []                                             # query tokens and their outputs
    q_start, q_size = _group_spans(q_tags, n_groups)
    b_idx, g_idx = (q_size > 0).nonzero(as_tuple=True)                        # the blocks
    if len(b_idx):
        k_start, k_size = _group_spans(k_tags, n_groups)
        blocks = (b_idx, q_start[b_idx, g_idx], q_size[b_idx, g_idx], k_start[b_idx, g_idx], k_size[b_idx, g_idx])
        # blocks of similar size together: each bucket is padded only to its own longest sentence
        order = torch.maximum(blocks[2], blocks[4]).argsort()
        key_ok = None if spec.mask is None else ~spec.mask.expand(B, 1, 1, nk).reshape(B * nk)
        plans = [_block_plan(spec, key_ok, nq, nk, *(x[part] for x in blocks))
                 for part in order.tensor_split(min(GROUP_BUCKETS, len(order)))]
        qi = torch.cat([p[0].reshape(-1) for p in plans])
        ki = torch.cat([p[1].reshape(-1) for p in plans])
        kf, vf = k.transpose(1, 2).reshape(B * nk, h, d), v.transpose(1, 2).reshape(B * nk, h, d)
        parts = zip(plans, qf.index_select(0, qi).split([p[0].numel() for p in plans]),
                    kf.index_select(0, ki).split([p[1].numel() for p in plans]),
                    vf.index_select(0, ki).split([p[1].numel() for p in plans]))
        for (q_flat, k_flat, q_real, allowed), qb, kb, vb in parts:
            (G, lq), lk = q_flat.shape, k_flat.size(1)
            blocks_of = lambda x, n: x.view(G, n, h, d).transpose(1, 2)  # noqa: E731
            ob = F.scaled_dot_product_attention(blocks_of(qb, lq), blocks_of(kb, lk), blocks_of(vb, lk),
                                                attn_mask=allowed, dropout_p=dropout)
            real = q_real.reshape(-1).nonzero().squeeze(1)
            outs.append(ob.transpose(1, 2).reshape(G * lq, h, d).index_select(0, real))
            rows.append(q_flat.reshape(-1)[real])
    open_q = q_tags.eq(0)
    if open_q.any():            # tag-0 queries (start token, pads): dense, but only for them
        count = open_q.sum(1)
        n0 = int(count.max())
        pos = open_q.logical_not().to(torch.int8).argsort(dim=1, stable=True)[:, :n0]   # (B, n0)
        real = (torch.arange(n0, device=q.device) < count[:, None]).reshape(-1).nonzero().squeeze(1)
        flat = (torch.arange(B, device=q.device)[:, None] * nq + pos).reshape(-1)
        sel = qf.index_select(0, flat).view(B, n0, h, d).transpose(1, 2)
        blocked = torch.zeros(B, 1, n0, nk, dtype=torch.bool, device=q.device)
        if spec.mask is not None:
            blocked = blocked | spec.mask.expand(B, 1, 1, nk)
        if spec.is_causal:
            blocked = blocked | (torch.arange(nk, device=q.device) > pos[:, None, :, None] + (nk - nq))
        blocked = blocked & blocked.logical_not().any(-1, keepdim=True)          # padding rows: anything
        o = F.scaled_dot_product_attention(sel, k, v, attn_mask=~blocked, dropout_p=dropout)
        outs.append(o.transpose(1, 2).reshape(B * n0, h, d).index_select(0, real))
        rows.append(flat[real])
    out = q.new_zeros(B * nq, h, d).index_copy(0, torch.cat(rows), torch.cat(outs))
    return out.view(B, nq, h, d).transpose(1, 2)


_FLEX_FUNCTIONS: dict[str, tuple[Callable, Callable]] = {}


def compiled_flex_functions() -> tuple[Callable, Callable]:
    """``flex_attention`` and ``create_block_mask`` as the CUDA path runs them: compiled, the block
    masks for dynamic shapes from the start (lengths change with every batch)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    return torch.compile(flex_attention), torch.compile(create_block_mask, dynamic=True)


def attention_flex(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec) -> Tensor:
    """Attention through FlexAttention with a block mask, so tiles with no visible key are
    skipped (the CUDA path; compiled there, eager elsewhere). The mask is ``spec.visible``, or for
    group attention one built from the tags, key padding and causality (the semantics of
    :func:`attention_grouped`). No attention dropout, no bias."""
    device = q.device.type
    if device not in _FLEX_FUNCTIONS:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        _FLEX_FUNCTIONS[device] = compiled_flex_functions() if device == "cuda" else (flex_attention,
                                                                                      create_block_mask)
    flex, build_block_mask = _FLEX_FUNCTIONS[device]
    B, nq, nk = q.size(0), q.size(2), k.size(2)
    # one block mask per spec and shape, i.e. per attention kind and forward pass (every layer
    # shares the spec); compiled on CUDA, so it is built tile by tile, never as a dense B×nq×nk mask
    masks = spec.__dict__.setdefault("_block_masks", {})
    block_mask = masks.get((B, nq, nk))
    if block_mask is None:
        visible = spec.visible or _group_visible(spec, B, nq, nk)
        block_mask = masks[B, nq, nk] = build_block_mask(visible, B, None, nq, nk, device=q.device)
    if spec.scale is not None:
        q = q * spec.scale.to(q.dtype)
    return flex(q, k, v, block_mask=block_mask)


def _group_visible(spec: AttnSpec, B: int, nq: int, nk: int) -> Callable:
    """The mask_mod of group attention: own group (or an untagged query), real keys, causal.

    Everything it closes over is a tensor: ``torch.compile`` specialises on the Python constants a
    closure holds, and one compile per attention kind and length difference used up its recompile
    limit within a few batches (then FlexAttention falls back to materialising every score)."""
    q_tags, k_tags = spec.groups
    key_ok = (torch.ones(B, nk, dtype=torch.bool, device=q_tags.device) if spec.mask is None
              else ~spec.mask.expand(B, 1, 1, nk)[:, 0, 0])
    # causal: key j is visible to query i up to i + (nk - nq); otherwise the bound nk lets every key through
    bound = torch.tensor(nk - nq if spec.is_causal else nk, device=q_tags.device)

    def visible(b, h, i, j):
        return ((q_tags[b, i] == k_tags[b, j]) | (q_tags[b, i] == 0)) & key_ok[b, j] & (j <= i + bound)
    return visible


class MultiheadAttention(nn.Module):
    """Multi-head attention with an optional key/value cache for incremental decoding.

    The query, key and value projections are one (3d × d) matrix, so self-attention without
    query/key additions projects in a single matrix multiplication (and cross-attention keys and
    values in one); with additions each part is projected from its own input.
    ``cache`` is a dict shared by the whole decoder; this module stores its keys and values under
    its own ``name``. With ``static_kv`` (cross-attention) they are computed once per sentence.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, name: str = ""):
        super().__init__()
        self.heads, self.d_head, self.dropout, self.name = heads, d_model // heads, dropout, name
        self.d_model = d_model
        self.in_proj = Linear(d_model, 3 * d_model)
        self.out_proj = Linear(d_model, d_model)

    def project(self, x: Tensor, part: slice) -> Tensor:
        """Project ``x`` with rows ``part`` of the stacked [W_Q; W_K; W_V] (in units of d)."""
        d = self.d_model
        rows = slice(part.start * d, part.stop * d)
        return linear(x, self.in_proj.weight[rows], self.in_proj.bias[rows])

    def _split(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, -1, self.d_head).transpose(1, 2)

    def forward(self, x: Tensor, kv: Tensor, spec: AttnSpec, cache: dict | None = None,
                static_kv: bool = False) -> Tensor:
        reuse = cache is not None and static_kv and self.name in cache
        if kv is x and spec.q_add is None and spec.k_add is None:
            q, k, v = self._split(self.project(x, slice(0, 3))).chunk(3, dim=1)
        elif kv is x and spec.q_add is spec.k_add:     # the same position term (P-Transformer): one Q/K matmul
            q, k = self._split(self.project(x + spec.q_add, slice(0, 2))).chunk(2, dim=1)
            v = self._split(self.project(x, slice(2, 3)))
        else:
            q = self._split(self.project(x if spec.q_add is None else x + spec.q_add, slice(0, 1)))
            if reuse:
                k = v = None
            elif spec.k_add is None:
                k, v = self._split(self.project(kv, slice(1, 3))).chunk(2, dim=1)
            else:
                k = self._split(self.project(kv + spec.k_add, slice(1, 2)))
                v = self._split(self.project(kv, slice(2, 3)))
        if reuse:
            k, v = cache[self.name]
        elif cache is not None and not static_kv:
            k, v = cache.setdefault(self.name, KVCache()).append(k, v)
        elif cache is not None:
            if static_kv:         # computed once, read every step: make them contiguous once
                if k.size(0) != q.size(0) and not _foldable(spec):    # per beam after all
                    k, v = (t.repeat_interleave(q.size(0) // t.size(0), 0) for t in (k, v))
                elif k.size(0) != q.size(0):
                    cache.setdefault("_per_input", set()).add(self.name)
                k, v = k.contiguous(), v.contiguous()
            cache[self.name] = (k, v)
            if static_kv:
                cache.setdefault("_static", set()).add(self.name)
        if callable(spec.bias):
            spec = replace(spec, bias=spec.bias(q if spec.scale is None else q * spec.scale, self.name))
        if AttentionProbe.active is not None:
            AttentionProbe.active.record(self.name, q, k, spec)
        b, _, n, _ = q.shape
        if k.size(0) != b:        # beams sharing one input's keys: fold them into the query axis
            beams = b // k.size(0)

            def fold(t):
                return t.view(-1, beams, *t.shape[1:]).transpose(1, 2).flatten(2, 3)

            spec = AttnSpec(mask=None if spec.mask is None else spec.mask[::beams],
                            scale=None if spec.scale is None else fold(spec.scale.expand(b, -1, n, -1)))
            out = attention_sdpa(fold(q), k, v, spec, self.dropout if self.training else 0.0)
            out = out.unflatten(2, (beams, n)).transpose(1, 2).reshape(b, -1, n, self.d_head)
        else:
            out = attention_sdpa(q, k, v, spec, self.dropout if self.training else 0.0)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, -1))


class KVCache:
    """The keys and values of one self-attention over the decoded prefix, (rows, heads, length,
    d_head), kept in buffers with room to grow: a step writes its keys in place, and reordering
    rows (beam search) copies the rows that changed in place, or, when most did, the filled part
    into a second buffer that is then swapped in, so decoding steps neither concatenate nor
    allocate."""

    def __init__(self):
        self.bufs: list[tuple[Tensor, Tensor] | None] = [None, None]
        self.rows = self.n = 0

    def _view(self, i: int = 0) -> tuple[Tensor, Tensor]:
        k, v = self.bufs[i]
        return k[: self.rows, :, : self.n], v[: self.rows, :, : self.n]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        m = k.size(2)
        if self.bufs[0] is None or self.n + m > self.bufs[0][0].size(2):
            old = self._view() if self.bufs[0] is not None else None
            self.rows, (rows, h, _, d) = k.size(0), k.shape
            shape = (rows, h, max(32, 2 * (self.n + m)), d)
            self.bufs = [(k.new_empty(shape), v.new_empty(shape)), None]
            if old is not None:
                for dst, src in zip(self.bufs[0], old):
                    dst[:, :, : self.n] = src
        kb, vb = self.bufs[0]
        kb[: self.rows, :, self.n: self.n + m] = k
        vb[: self.rows, :, self.n: self.n + m] = v
        self.n += m
        return self._view()

    def index_select(self, index: Tensor) -> "KVCache":
        """Keep rows ``index`` (in place; returns self). When few rows change (beam search
        often keeps a hypothesis where it was), only those are copied."""
        kb = self.bufs[0][0]
        if index.numel() == self.rows and index.device.type == "cpu":     # (no host sync on GPU)
            changed = (index != torch.arange(self.rows, device=index.device)).nonzero().squeeze(1)
            if 2 * changed.numel() <= self.rows:
                for t in self._view():
                    t[changed] = t[index[changed]]          # gathered first, then written
                return self
        spare = self.bufs[1]
        if spare is None or spare[0].size(0) < index.numel():
            spare = tuple(t.new_empty(index.numel(), *t.shape[1:]) for t in self.bufs[0])
        for src, dst in zip(self._view(), spare):
            torch.index_select(src, 0, index, out=dst[: index.numel(), :, : self.n])
        self.bufs = [spare, self.bufs[0] if kb.size(0) >= index.numel() else None]
        self.rows = index.numel()
        return self


def _foldable(spec: AttnSpec) -> bool:
    """Whether beams of one input can share its keys in this attention: nothing in the spec
    depends on the query row beyond a per-row logit scale, and the mask restricts keys only."""
    return (spec.bias is None and spec.groups is None and not spec.is_causal
            and (spec.mask is None or spec.mask.size(-2) == 1)
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
