"""What one attention call does beyond plain scaled dot-product attention: :class:`AttnSpec`, made
of **mask parts** a method owns, and the explicit softmax every kernel is tested against.

A mask part (:class:`MaskPart`) is one restriction of which keys a query sees. It says how to
express itself for each kernel: as a dense boolean mask (``dense``: the reference, SDPA), as a
FlexAttention ``mask_mod`` (``mask_mod``: tiles with no visible key skipped on CUDA), and what a
kernel may assume of it (``key_level``: the same keys hidden from every query, so beams may share
keys and the group kernel may take it). The core's parts:

* :class:`Mask`: a boolean tensor, True = blocked, broadcastable to (B, heads, queries, keys)
  (padding, DocFlat's flattened masks), optionally with the same mask as a ``visible`` mask_mod;
* :class:`Causal`: the usual causal mask (queries aligned to the last keys);
* :class:`Groups`: (query tags, key tags): a query with tag g > 0 sees only keys tagged g -- a
  group mask in sparse form, which the group kernel computes sentence block by sentence block
  (G-Transformer, docs/methods/gtransformer.md).

A method with another restriction writes a :class:`MaskPart` subclass in its own module and adds
it (``AttnSpec(parts=[...])`` or :meth:`AttnSpec.add`): every kernel that can express it takes it,
the others are never chosen (docs/attention.md). Beside its parts a spec holds what is not a mask:

* ``q_add`` / ``k_add``: tensors added to the *inputs* of the query / key projections only,
  never the values (position-aware attention, docs/methods/ptransformer.md);
* ``bias``: an additive logit term, a tensor or a callable ``bias(q, name)`` of the projected,
  per-head (and scaled) queries and the attention module's name, called before attending
  (per-layer tables); it may return a :class:`~docnmt.kernels.RelativeLogits` (relative positions);
* ``scale``: a per-query multiplier of the logits (length-aware attention,
  docs/methods/length_bias.md);
* ``first_key``: in incremental decoding, the first key position (absolute) that no query of
  this step or a later one sees anything before (the G-Transformer's current sentences): a
  self-attention cache may drop the earlier keys (:meth:`DecoderCache.forget
  <docnmt.decoder_state.DecoderCache.forget>`), and :meth:`AttnSpec.keys_from` cuts the parts'
  key side to the keys kept. None: every key may be seen again.

The keywords ``mask``, ``is_causal``, ``groups`` and ``visible`` of :class:`AttnSpec` build the
core's parts, and the properties of the same names read them back.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


class MaskPart:
    """One restriction of which keys each query sees (see the module doc)."""

    key_level = False       # hides the same keys from every query (shape (B, 1, 1, keys))
    prefers_flex = False    # worth FlexAttention on CUDA, which skips fully blocked tiles
    flex_ready = False      # mask_mod gives a mask_mod

    def dense(self, n_q: int, n_k: int, device) -> Tensor | None:
        """Boolean (…, n_q, n_k), True = blocked, broadcastable to (B, heads, n_q, n_k); None: nothing blocked.
        Every part defines it (the base class is abstract here)."""
        raise NotImplementedError(f"{type(self).__name__} must define dense()")

    def mask_mod(self, B: int, n_q: int, n_k: int, device) -> MaskMod | None:
        """FlexAttention's ``mask_mod(b, h, i, j) -> allowed``, or None where the part has none.
        Close over tensors only: ``torch.compile`` specialises on the Python constants a closure
        holds (one compile per length difference would use up its recompile limit)."""
        return None

    @property
    def foldable(self) -> bool:
        """Whether :meth:`fold` applies: the beams of one input may share its keys, their queries
        folded into one row (a key-level part; or a part that folds its per-query state along)."""
        return self.key_level

    @property
    def cuts_keys(self) -> bool:
        """Whether :meth:`keys_from` applies (a part that cannot cut its key side keeps every key)."""
        return type(self).keys_from is not MaskPart.keys_from

    def keys_from(self, first: int) -> "MaskPart":
        """The part for the keys from index ``first`` on (a cache that forgot the earlier ones:
        ``AttnSpec.first_key``); a part that cannot say raises."""
        raise NotImplementedError(f"{type(self).__name__} cannot drop keys (AttnSpec.first_key)")

    def fold(self, beams: int) -> "MaskPart":
        """The part for one row per input when ``beams`` consecutive rows share their keys, their
        queries folded into one row, beam by beam (only asked of ``foldable`` parts)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be folded over beams")


class Mask(MaskPart):
    """A dense boolean mask, True = blocked; ``visible``: the same mask as a mask_mod (DocFlat)."""

    def __init__(self, blocked: Tensor, visible: MaskMod | None = None):
        self.blocked, self.visible = blocked, visible
        self.key_level = blocked.dim() == 4 and blocked.size(1) == 1 and blocked.size(2) == 1
        self.prefers_flex = visible is not None
        self.flex_ready = visible is not None or self.key_level

    def dense(self, n_q, n_k, device):
        return self.blocked

    def mask_mod(self, B, n_q, n_k, device):
        if self.visible is not None:
            return self.visible
        if not self.key_level:
            return None
        key_ok = ~self.blocked.expand(B, 1, 1, n_k)[:, 0, 0]
        return lambda b, h, i, j: key_ok[b, j]

    def fold(self, beams):
        return Mask(self.blocked[::beams])

    @property
    def cuts_keys(self) -> bool:
        return self.visible is None

    def keys_from(self, first):
        if self.visible is not None:
            raise NotImplementedError("a visible mask_mod cannot drop keys (AttnSpec.first_key)")
        return self if self.blocked.size(-1) == 1 else Mask(self.blocked[..., first:])


class Causal(MaskPart):
    """Query i sees keys up to its own position, queries aligned to the last keys (a single,
    newest query sees every cached key)."""

    flex_ready = True

    def dense(self, n_q, n_k, device):
        if n_q <= 1:
            return None
        return torch.ones(n_q, n_k, dtype=torch.bool, device=device).triu(n_k - n_q + 1)

    def mask_mod(self, B, n_q, n_k, device):
        bound = torch.tensor(n_k - n_q, device=device)
        return lambda b, h, i, j: j <= i + bound

    def keys_from(self, first):
        return self         # queries align to the last keys: dropping the first ones changes nothing


class Groups(MaskPart):
    """Sentence groups: a query tagged g > 0 sees only keys tagged g; tag-0 queries are
    unrestricted, so no row is ever fully blocked by it."""

    prefers_flex = flex_ready = True

    def __init__(self, q_tags: Tensor, k_tags: Tensor):
        self.q_tags, self.k_tags = q_tags, k_tags

    foldable = True     # the query tags fold with the queries: beams share the source's tags

    def dense(self, n_q, n_k, device):
        return group_mask(self.q_tags, self.k_tags)

    def keys_from(self, first):
        return Groups(self.q_tags, self.k_tags[:, first:])

    def fold(self, beams):
        return Groups(self.q_tags.reshape(-1, beams * self.q_tags.size(1)), self.k_tags[::beams])

    def mask_mod(self, B, n_q, n_k, device):
        q_tags, k_tags = self.q_tags, self.k_tags
        return lambda b, h, i, j: (q_tags[b, i] == k_tags[b, j]) | (q_tags[b, i] == 0)


def group_mask(q_tags: Tensor, k_tags: Tensor) -> Tensor:
    """(B, 1, nq, nk), True = blocked: a tagged query sees only keys of its own group; tag-0
    queries are unrestricted, so no row is ever fully blocked by it."""
    q = q_tags[:, None, :, None]
    return (q != k_tags[:, None, None, :]) & (q != 0)


class AttnSpec:
    """What one attention call does beyond plain scaled dot-product attention (see module doc)."""

    def __init__(self, mask: Tensor | None = None, is_causal: bool = False, q_add: Tensor | None = None,
                 k_add: Tensor | None = None, bias=None, scale: Tensor | None = None,
                 groups: tuple[Tensor, Tensor] | None = None, visible: MaskMod | None = None,
                 parts: tuple[MaskPart, ...] | list[MaskPart] = (), first_key: int | None = None):
        if visible is not None and mask is None:
            raise ValueError("visible is the mask as a mask_mod: give the dense mask too (the other kernels read it)")
        self.parts: list[MaskPart] = [*([Mask(mask, visible)] if mask is not None else []),
                                      *([Groups(*groups)] if groups is not None else []),
                                      *([Causal()] if is_causal else []), *parts]
        self.q_add, self.k_add, self.bias, self.scale = q_add, k_add, bias, scale
        self.first_key = first_key
        self.block_masks: dict = {}       # FlexAttention's block masks of this spec, by shape

    def __repr__(self) -> str:
        return f"AttnSpec(parts={[type(p).__name__ for p in self.parts]}, bias={self.bias is not None})"

    def add(self, part: MaskPart) -> "AttnSpec":
        """Add a method's mask part (in place; returns self)."""
        self.parts.append(part)
        return self

    def replace(self, **fields) -> "AttnSpec":
        """A copy with ``q_add``, ``k_add``, ``bias`` or ``scale`` replaced (the same parts)."""
        out = AttnSpec(q_add=self.q_add, k_add=self.k_add, bias=self.bias, scale=self.scale, parts=self.parts,
                       first_key=self.first_key)
        for name, value in fields.items():
            if name not in ("q_add", "k_add", "bias", "scale"):
                raise TypeError(f"AttnSpec.replace: {name!r} is not a replaceable field")
            setattr(out, name, value)
        return out

    def drops_keys(self) -> bool:
        """Whether the cache may forget the keys before ``first_key``: it is set, no bias reads
        key positions (ALiBi, relative positions: they keep every key), and every part can cut its
        key side. Forgetting is only a saving, so a spec that cannot cut keeps them all."""
        return self.first_key is not None and self.bias is None and all(p.cuts_keys for p in self.parts)

    def keys_from(self, first: int) -> "AttnSpec":
        """The spec for the keys from absolute position ``first`` on, the earlier ones dropped
        from the cache: every part's key side cut to match (queries stay aligned to the last keys)."""
        if first == 0:
            return self
        if self.bias is not None:
            raise NotImplementedError("a bias cannot drop keys (AttnSpec.first_key)")
        out = self.replace()
        out.parts = [p.keys_from(first) for p in self.parts]
        return out

    def _of(self, kind: type) -> list:
        return [p for p in self.parts if type(p) is kind]

    @property
    def mask(self) -> Tensor | None:
        """The dense :class:`Mask` parts together (None without one)."""
        masks = [p.blocked for p in self._of(Mask)]
        return None if not masks else masks[0] if len(masks) == 1 else _any(masks)

    @property
    def visible(self) -> MaskMod | None:
        mods = [p.visible for p in self._of(Mask) if p.visible is not None]
        return mods[0] if mods else None

    @property
    def is_causal(self) -> bool:
        return bool(self._of(Causal))

    @property
    def groups(self) -> tuple[Tensor, Tensor] | None:
        found = self._of(Groups)
        return (found[0].q_tags, found[0].k_tags) if found else None

    def blocked(self, n_q: int, n_k: int, device) -> Tensor | None:
        """Every part as one dense boolean mask, True = blocked (None: nothing blocked)."""
        return _any([m for m in (p.dense(n_q, n_k, device) for p in self.parts) if m is not None])

    def mask_mod(self, B: int, n_q: int, n_k: int, device) -> MaskMod | None:
        """Every part as one FlexAttention mask_mod, or None when a part has none.

        The core's key padding, causality and group tags always enter in one fixed form (tags,
        key mask and causal bound as tensors, neutral where the spec has no such part), other
        parts through their own mask_mod: ``torch.compile`` compiles the block mask once per form,
        and a form per combination of parts (group, causal group, cross) used up its recompile
        limit (``test_compiled_flex_attention_compiles_once_for_every_kind_and_length``)."""
        key_ok = torch.ones(B, n_k, dtype=torch.bool, device=device)
        bound = torch.tensor(n_k, device=device)               # no causal part: every key
        q_tags = torch.zeros(B, n_q, dtype=torch.long, device=device)   # tag 0: every key
        k_tags = torch.zeros(B, n_k, dtype=torch.long, device=device)
        others, grouped = [], False
        for p in self.parts:
            if type(p) is Mask and p.visible is None and p.key_level:
                key_ok = key_ok & ~p.blocked.expand(B, 1, 1, n_k)[:, 0, 0]
            elif type(p) is Causal:
                bound = torch.tensor(n_k - n_q, device=device)
            elif type(p) is Groups and not grouped:
                q_tags, k_tags, grouped = p.q_tags, p.k_tags, True
            else:
                others.append(p.mask_mod(B, n_q, n_k, device))
        if any(m is None for m in others):
            return None

        def allowed(b, h, i, j):
            out = ((q_tags[b, i] == k_tags[b, j]) | (q_tags[b, i] == 0)) & key_ok[b, j] & (j <= i + bound)
            for m in others:
                out = out & m(b, h, i, j)
            return out
        return allowed


def _any(masks: list[Tensor]) -> Tensor | None:
    out = None
    for m in masks:
        out = m if out is None else out | m
    return out


def _blocked(spec: AttnSpec, n_q: int, n_k: int, device) -> Tensor | None:
    """The boolean blocked-mask of a spec, every part included (queries aligned to the last keys)."""
    return spec.blocked(n_q, n_k, device)


def dense_bias(bias) -> Tensor:
    """A spec's bias as a tensor (a structured term such as ``RelativeLogits`` via its ``dense()``)."""
    return bias.dense() if hasattr(bias, "dense") else bias


def attention_weights(q: Tensor, k: Tensor, spec: AttnSpec, blocked: Tensor | None = None) -> Tensor:
    """Explicit softmax attention weights (B, h, nq, nk), in fp32 (``blocked``: the spec's
    blocked-mask when the caller has it already)."""
    if spec.scale is not None:
        q = q * spec.scale
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    if spec.bias is not None:
        logits = logits + dense_bias(spec.bias)
    if blocked is None:
        blocked = spec.blocked(q.size(-2), k.size(-2), q.device)
    if blocked is not None:
        logits = logits.masked_fill(blocked, torch.finfo(logits.dtype).min)
    return torch.softmax(logits.float(), dim=-1)


def attention_reference(q: Tensor, k: Tensor, v: Tensor, spec: AttnSpec, dropout: float = 0.0,
                        settings=None) -> Tensor:
    """Explicit softmax attention on (B, h, n, d_h) tensors; the reference every kernel is tested
    against. It takes ``attention_sdpa``'s arguments, so it can stand in for it (``settings``, the
    model's kernel choices, mean nothing here). On the CPU, keys that no query sees at either
    end (a group mask's earlier sentences, padding) are left out first: a blocked key's weight
    is exactly zero, so a decoding step's group attention over a long document costs what the
    visible span costs."""
    blocked = spec.blocked(q.size(-2), k.size(-2), q.device)
    if blocked is not None and spec.bias is None and not q.is_cuda and blocked.size(-1) == k.size(-2):
        k, v, blocked = _visible_span(k, v, blocked)
    weights = attention_weights(q, k, spec, blocked).to(v.dtype)
    weights = F.dropout(weights, dropout, training=dropout > 0)
    return weights @ v


def _visible_span(k: Tensor, v: Tensor, blocked: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Keys, values and mask cut to the span between the first and the last key any query sees
    (one host read: for the CPU, where it is cheap)."""
    seen = (~blocked.reshape(-1, blocked.size(-1))).any(0).nonzero()
    if seen.numel() == 0:
        return k, v, blocked
    lo, hi = int(seen[0]), int(seen[-1]) + 1
    if hi - lo == k.size(-2):
        return k, v, blocked
    return k[..., lo:hi, :], v[..., lo:hi, :], blocked[..., lo:hi]
