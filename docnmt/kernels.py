"""The attention kernels :func:`docnmt.attention.attention_sdpa` chooses among (its kernel table,
docs/attention.md): SDPA with one dense mask (:func:`attention_masked`), group attention block by
block (:func:`attention_grouped`), relative-position logits block by block
(:func:`attention_relative` with :class:`RelativeLogits`), and FlexAttention with a block mask
(:func:`attention_flex`, the CUDA path). Each computes what
:func:`~docnmt.attention_spec.attention_reference` computes for the specs its table row admits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention_spec import AttnSpec, Causal, dense_bias


def attention_masked(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec, dropout: float = 0.0) -> Tensor:
    """SDPA with the spec's parts and bias as one dense (…, nq, nk) mask or bias (the cost the
    block-by-block kernels avoid; also their reference in benchmarks); a spec that is only causal
    goes as SDPA's ``is_causal``."""
    if spec.scale is not None:
        q = q * spec.scale
    n_q, n_k = q.size(-2), k.size(-2)
    if spec.bias is None:
        only_causal = all(isinstance(p, Causal) for p in spec.parts)
        if only_causal and (not spec.parts or n_q == n_k or n_q == 1):
            # a branch, not is_causal=(... and n_q > 1): torch.compile's symbolic n_q would make
            # that a SymBool, which SDPA refuses (a graph break at every attention call)
            if spec.parts and n_q > 1:
                return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
        allowed = ~spec.blocked(n_q, n_k, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout)
    bias = dense_bias(spec.bias).to(q.dtype)
    blocked = spec.blocked(n_q, n_k, q.device)
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
    blocked = spec.blocked(q.size(-2), k.size(-2), q.device)
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



# --------------------------------------------------------------------------------------------
# Group attention, sentence block by sentence block
# --------------------------------------------------------------------------------------------


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
    if q_tags.eq(0).any():      # tag-0 queries (start token, pads): dense, but only for them
        flat, out = _open_queries(qf, k, v, spec, dropout)
        outs.append(out)
        rows.append(flat)
    out = q.new_zeros(B * nq, h, d).index_copy(0, torch.cat(rows), torch.cat(outs))
    return out.view(B, nq, h, d).transpose(1, 2)


def _open_queries(qf: Tensor, k: Tensor, v: Tensor, spec: AttnSpec, dropout: float) -> tuple[Tensor, Tensor]:
    """The tag-0 queries of group attention (start token, pads) over every key the spec allows,
    densely but for them only: their token-major indices and outputs (n, h, d)."""
    q_tags, (B, h, nk, d) = spec.groups[0], k.shape
    nq = q_tags.size(1)
    open_q = q_tags.eq(0)
    count = open_q.sum(1)
    n0 = int(count.max())
    pos = open_q.logical_not().to(torch.int8).argsort(dim=1, stable=True)[:, :n0]   # (B, n0)
    real = (torch.arange(n0, device=qf.device) < count[:, None]).reshape(-1).nonzero().squeeze(1)
    flat = (torch.arange(B, device=qf.device)[:, None] * nq + pos).reshape(-1)
    sel = qf.index_select(0, flat).view(B, n0, h, d).transpose(1, 2)
    blocked = torch.zeros(B, 1, n0, nk, dtype=torch.bool, device=qf.device)
    if spec.mask is not None:
        blocked = blocked | spec.mask.expand(B, 1, 1, nk)
    if spec.is_causal:
        blocked = blocked | (torch.arange(nk, device=qf.device) > pos[:, None, :, None] + (nk - nq))
    blocked = blocked & blocked.logical_not().any(-1, keepdim=True)          # padding rows: anything
    o = F.scaled_dot_product_attention(sel, k, v, attn_mask=~blocked, dropout_p=dropout)
    return flat[real], o.transpose(1, 2).reshape(B * n0, h, d).index_select(0, real)


_FLEX_FUNCTIONS: dict[str, tuple[Callable, Callable]] = {}


def compiled_flex_functions() -> tuple[Callable, Callable]:
    """``flex_attention`` and ``create_block_mask`` as the CUDA path runs them: compiled, the block
    masks for dynamic shapes from the start (lengths change with every batch)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    return torch.compile(flex_attention), torch.compile(create_block_mask, dynamic=True)


def attention_flex(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec) -> Tensor:
    """Attention through FlexAttention with a block mask, so tiles with no visible key are
    skipped (the CUDA path; compiled there, eager elsewhere). The mask is every part's
    ``mask_mod`` together (:meth:`AttnSpec.mask_mod`). No attention dropout, no bias."""
    device = q.device.type
    if device not in _FLEX_FUNCTIONS:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        _FLEX_FUNCTIONS[device] = compiled_flex_functions() if device == "cuda" else (flex_attention,
                                                                                      create_block_mask)
    flex, build_block_mask = _FLEX_FUNCTIONS[device]
    B, nq, nk = q.size(0), q.size(2), k.size(2)
    # one block mask per spec and shape, i.e. per attention kind and forward pass (every layer
    # shares the spec); compiled on CUDA, so it is built tile by tile, never as a dense B×nq×nk mask
    block_mask = spec.block_masks.get((B, nq, nk))
    if block_mask is None:
        visible = spec.mask_mod(B, nq, nk, q.device)
        if visible is None:
            raise ValueError(f"{spec} has a part without a FlexAttention mask_mod")
        block_mask = spec.block_masks[B, nq, nk] = build_block_mask(visible, B, None, nq, nk, device=q.device)
    if spec.scale is not None:
        q = q * spec.scale.to(q.dtype)
    return flex(q, k, v, block_mask=block_mask)
