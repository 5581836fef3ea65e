"""The decoder's incremental state: :class:`DecoderCache`, which owns every attention layer's cached
keys and values, which of them are static, the decoded length, and the beam operations.

Attention layers, the model and the search use only its methods (fairseq's incremental-state
helpers and Hugging Face's ``EncoderDecoderCache`` play the same part). Two kinds of entries:

* **self-attention** entries (:meth:`DecoderCache.append`): a :class:`KVCache` per layer that grows
  by the tokens of every step, one row per decoder row (hypothesis), and may drop the positions
  no later query sees (:meth:`DecoderCache.forget`: the G-Transformer's finished sentences);
* **static** entries (:meth:`DecoderCache.set_static`): keys and values computed once from the
  encoder output (cross-attention, a context attention) and read at every later step; *per input*
  when the beams of one input share one row (beams folded into the query axis), else one row per
  decoder row.

:class:`StaticDecoderCache` is the same cache with its self-attention storage allocated once, for
a number of rows and positions fixed before the search (``decode.static_cache``,
docs/performance.md#static-decoder-cache): a step writes in place, a reorder gathers into the
same storage, so its tensors keep their addresses and shapes for the whole search (what CUDA
graphs and ``torch.compile(mode="reduce-overhead")`` need). Attention reads the valid prefix
(a slice of the storage), so every method decodes exactly as with :class:`DecoderCache`.

Misuse raises :class:`CacheError` instead of giving wrong beams: reading a static entry that was
never written, writing one again with another shape, using one name for both kinds, a step whose
rows differ from the cache's, a reorder index of the wrong size, a step that feeds no new token,
a step after which an entry does not hold the decoded length, and (static storage) a write past
its positions or more rows than it holds.
"""
from __future__ import annotations

import torch
from torch import Tensor


class CacheError(RuntimeError):
    """A :class:`DecoderCache` used against its contract (a programming error, not a user's)."""


class KVCache:
    """The keys and values of one self-attention over the decoded prefix, (rows, heads, length,
    d_head), kept in buffers with room to grow: a step writes its keys in place, and reordering
    rows (beam search) copies the rows that changed in place, or, when most did, the filled part
    into a second buffer that is then swapped in, so decoding steps neither concatenate nor
    allocate.

    :meth:`forget` drops the positions before a given one (no later query sees them: the
    G-Transformer's earlier sentences): reads, reorders and copies then cover the kept positions
    ``[lo, n)`` only, and once the buffer is full and the dropped part is at least as long as the
    kept one, the kept part moves to the buffer's front (a copy that cannot overlap itself)
    instead of into a larger buffer. ``n`` still counts every position fed."""

    def __init__(self):
        self.bufs: list[tuple[Tensor, Tensor] | None] = [None, None]
        self.rows = self.n = 0
        self.lo = self.base = 0      # the first kept position; the position at index 0 of the buffers

    def _view(self, i: int = 0) -> tuple[Tensor, Tensor]:
        k, v = self.bufs[i]
        a, b = self.lo - self.base, self.n - self.base
        return k[: self.rows, :, a:b], v[: self.rows, :, a:b]

    def forget(self, first: int) -> int:
        """Drop the positions before ``first`` (never before those already dropped, never past
        ``n``); returns the first position kept."""
        self.lo = max(self.lo, min(first, self.n))
        return self.lo

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        m = k.size(2)
        if self.bufs[0] is not None and k.size(0) != self.rows:
            raise CacheError(f"a step of {k.size(0)} rows on a cache of {self.rows}: reorder the cache with the rows")
        if self.bufs[0] is None or self.n - self.base + m > self.bufs[0][0].size(2):
            self._make_room(k, v, m)
        kb, vb = self.bufs[0]
        at = self.n - self.base
        kb[: self.rows, :, at: at + m] = k
        vb[: self.rows, :, at: at + m] = v
        self.n += m
        return self._view()

    def _make_room(self, k: Tensor, v: Tensor, m: int) -> None:
        """Room for ``m`` more positions: the kept ones moved to the front of the same buffer
        when the dropped ones are at least as many (and that makes room), else a larger buffer."""
        kept, dropped = self.n - self.lo, self.lo - self.base
        old = self._view() if self.bufs[0] is not None else None
        if old is not None and kept <= dropped and kept + m <= self.bufs[0][0].size(2):
            for buf, src in zip(self.bufs[0], old):
                buf[: self.rows, :, :kept] = src           # disjoint: the source starts at or past kept
        else:
            self.rows, (rows, h, _, d) = k.size(0), k.shape
            shape = (rows, h, max(32, 2 * (kept + m)), d)
            self.bufs = [(k.new_empty(shape), v.new_empty(shape)), None]
            if old is not None:
                for dst, src in zip(self.bufs[0], old):
                    dst[:, :, :kept] = src
        self.base = self.lo

    def index_select(self, index: Tensor) -> "KVCache":
        """Keep rows ``index`` (in place; returns self). When few rows change (beam search
        often keeps a hypothesis where it was), only those are copied."""
        kb = self.bufs[0][0]
        if index.numel() == self.rows and index.device.type == "cpu":     # (no host sync on GPU)
            changed = (index != torch.arange(self.rows, device=index.device)).nonzero().squeeze(1)
            if 2 * changed.numel() <= self.rows:
                for t in self._view():
                    t.index_copy_(0, changed, t.index_select(0, index[changed]))     # gathered, then written
                return self
        spare = self.bufs[1]
        if spare is None or spare[0].size(0) < index.numel():
            spare = tuple(t.new_empty(index.numel(), *t.shape[1:]) for t in self.bufs[0])
        a, b = self.lo - self.base, self.n - self.base
        for src, dst in zip(self._view(), spare):
            torch.index_select(src, 0, index, out=dst[: index.numel(), :, a:b])
        self.bufs = [spare, self.bufs[0] if kb.size(0) >= index.numel() else None]
        self.rows = index.numel()
        return self


class StaticKV:
    """The keys and values of one self-attention in storage of ``capacity`` rows and ``positions``
    positions, allocated (zeroed) at the first write with its heads, head size and dtype and never
    again: a step writes its positions in place, a reorder gathers the kept rows and writes them
    back into the first rows of the same storage. Reads are the valid prefix, (rows, heads, n, d_head)."""

    def __init__(self, capacity: int, positions: int):
        self.capacity, self.positions = capacity, positions
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.rows = self.n = 0

    def _view(self) -> tuple[Tensor, Tensor]:
        return self.k[: self.rows, :, : self.n], self.v[: self.rows, :, : self.n]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        rows, heads, m, d = k.shape
        if self.k is None:
            self._check_rows(rows)
            self.k = k.new_zeros(self.capacity, heads, self.positions, d)
            self.v = v.new_zeros(self.capacity, heads, self.positions, v.size(3))
            self.rows = rows
        elif rows != self.rows:
            raise CacheError(f"a step of {rows} rows on a cache of {self.rows}: reorder the cache with the rows")
        if self.n + m > self.positions:
            raise CacheError(f"writing positions {self.n}..{self.n + m - 1} past the {self.positions} "
                             "preallocated: allocate the static cache for the longest output")
        self.k[:rows, :, self.n: self.n + m] = k
        self.v[:rows, :, self.n: self.n + m] = v
        self.n += m
        return self._view()

    def forget(self, first: int) -> int:
        """Keeps every position (returns 0): the storage and its reads keep fixed addresses for
        CUDA graphs, and on CUDA attention reads the keys whole anyway."""
        return 0

    def _check_rows(self, rows: int) -> None:
        if rows > self.capacity:
            raise CacheError(f"{rows} rows do not fit the static cache's {self.capacity}")

    def index_select(self, index: Tensor) -> "StaticKV":
        """Keep rows ``index`` in the first rows of the same storage (in place; returns self)."""
        self._check_rows(index.numel())
        if self.k is not None:
            for buf in (self.k, self.v):
                buf[: index.numel(), :, : self.n] = buf[: self.rows, :, : self.n].index_select(0, index)
        self.rows = index.numel()
        return self


class DecoderCache:
    """The incremental state of one decoding run (see the module doc). ``length`` is the number of
    decoder positions already fed; :meth:`start` and :meth:`advance` bracket every step."""

    def __init__(self, forgets: bool = False):
        self._kv: dict[str, KVCache] = {}
        self._static: dict[str, tuple[Tensor, Tensor]] = {}
        self._per_input: set[str] = set()
        self.length = 0
        # whether entries may drop what no later query sees (:meth:`forget`): only for a search whose
        # rows never feed a tag-0 token after the start (beam search: an ended hypothesis leaves its
        # row), since a group attention's tag-0 query (a pad of a teacher-forced batch) sees every key
        self.forgets = forgets

    def __repr__(self) -> str:
        return (f"DecoderCache(length={self.length}, self_attention={sorted(self._kv)}, "
                f"static={sorted(self._static)}, per_input={sorted(self._per_input)})")

    # ---- one step -------------------------------------------------------------------------------
    def start(self, total: int) -> int:
        """The first position a step with a prefix of ``total`` positions feeds (the cached
        length); raises when that prefix holds no new position."""
        if total <= self.length:
            raise CacheError(f"a step must feed new positions: the cache holds {self.length}, the prefix {total}")
        return self.length

    def advance(self, total: int) -> None:
        """End a step: the cache now holds ``total`` positions, and so must every self-attention entry."""
        wrong = {name: kv.n for name, kv in self._kv.items() if kv.n != total}
        if total <= self.length or wrong:
            raise CacheError(f"the step ends at {total} positions after {self.length}, but entries hold {wrong}")
        self.length = total

    # ---- entries --------------------------------------------------------------------------------
    def append(self, name: str, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add a step's keys and values to self-attention entry ``name``; all of them so far."""
        if name in self._static:
            raise CacheError(f"{name!r} is a static entry, not a self-attention one")
        if name not in self._kv:
            self._kv[name] = self._new_entry()
        return self._kv[name].append(k, v)

    def _new_entry(self) -> KVCache:
        return KVCache()

    def forget(self, name: str, first: int) -> int:
        """Self-attention entry ``name`` may drop its positions before ``first``: no query of
        this step or a later one sees them (``AttnSpec.first_key``). Returns the first position
        its reads hold from now on (0 where it keeps them all: a cache made without ``forgets``, a
        static cache)."""
        if name not in self._kv:
            raise CacheError(f"no self-attention entry {name!r} to forget positions of")
        return self._kv[name].forget(first) if self.forgets else 0

    def has_static(self, name: str) -> bool:
        return name in self._static

    def static(self, name: str) -> tuple[Tensor, Tensor]:
        """The keys and values of static entry ``name``."""
        if name not in self._static:
            raise CacheError(f"no static entry {name!r} was written (entries: {sorted(self._static)})")
        return self._static[name]

    def set_static(self, name: str, k: Tensor, v: Tensor, per_input: bool = False) -> None:
        """Write static entry ``name`` (keys computed once from the encoder output); ``per_input``:
        one row per input, shared by its beams. Writing it again with another shape raises."""
        if name in self._kv:
            raise CacheError(f"{name!r} is a self-attention entry, not a static one")
        old = self._static.get(name)
        if old is not None and (old[0].shape != k.shape or (name in self._per_input) != per_input):
            raise CacheError(f"static entry {name!r} written again as {tuple(k.shape)} "
                             f"(per input: {per_input}) over {tuple(old[0].shape)}")
        self._static[name] = (k, v)
        if per_input:
            self._per_input.add(name)

    def rows(self) -> int | None:
        """Decoder rows of the self-attention entries (None before the first step)."""
        rows = {kv.rows for kv in self._kv.values()}
        if len(rows) > 1:
            raise CacheError(f"self-attention entries disagree on their rows: {rows}")
        return rows.pop() if rows else None

    # ---- beams ----------------------------------------------------------------------------------
    def reorder(self, index: Tensor, static_index: Tensor | None = None, beams: int = 1) -> None:
        """Keep decoder rows ``index`` (beam search's surviving hypotheses). Static entries follow
        ``static_index`` when rows of whole inputs were dropped (without it the reorder stays
        within each input, whose beams share their static keys); per-input entries follow the
        inputs of ``static_index``'s beam groups of ``beams`` rows."""
        rows = self.rows()
        if index.dim() != 1 or (static_index is None and rows is not None and index.numel() != rows):
            raise CacheError(f"a reorder within the inputs keeps the {rows} rows; index has {tuple(index.shape)} "
                             "(pass static_index when inputs are dropped)")
        if static_index is not None and static_index.shape != index.shape:
            raise CacheError(f"static_index {tuple(static_index.shape)} and index {tuple(index.shape)} differ")
        if index.numel() % beams:
            raise CacheError(f"{index.numel()} rows are not whole groups of {beams} beams")
        for kv in self._kv.values():
            kv.index_select(index)
        if static_index is None:
            return
        for name, (k, v) in self._static.items():
            idx = static_index.view(-1, beams)[:, 0] // beams if name in self._per_input else static_index
            self._static[name] = (k.index_select(0, idx), v.index_select(0, idx))

    def expand(self, index: Tensor) -> None:
        """A cache filled with one row per input becomes one with rows ``index`` (each input
        repeated once per beam). Static entries are dropped: the next step computes them again
        from the encoder output, in the layout its beams need."""
        if index.dim() != 1:
            raise CacheError(f"expand takes a 1-D row index, not {tuple(index.shape)}")
        self._static.clear()
        self._per_input.clear()
        for kv in self._kv.values():
            kv.index_select(index)


class StaticDecoderCache(DecoderCache):
    """A :class:`DecoderCache` whose self-attention entries are :class:`StaticKV` storage of
    ``rows`` rows (decoder rows: inputs × beams) and ``positions`` positions, fixed for the whole
    search (:func:`docnmt.search.beam_search` rounds both up to buckets, :func:`bucket`, so a run
    allocates, and compiles, for a handful of shapes)."""

    def __init__(self, rows: int, positions: int):
        super().__init__(forgets=False)
        self.capacity, self.positions = rows, positions

    def __repr__(self) -> str:
        return f"Static{super().__repr__()[:-1]}, rows={self.capacity}, positions={self.positions})"

    def _new_entry(self) -> StaticKV:
        return StaticKV(self.capacity, self.positions)


def bucket(n: int, smallest: int = 1) -> int:
    """``n`` rounded up to a power of two of at least ``smallest``: the row and position counts
    a static cache is allocated for (a few sizes per run instead of one per batch)."""
    size = smallest
    while size < n:
        size *= 2
    return size
