"""docnmt.decoder_state: the decoder cache's operations, and every misuse raising instead of giving
wrong beams (the incremental-equals-full and beam tests are in test_model.py and tests/methods)."""
import pytest
import torch

from docnmt.decoder_state import CacheError, DecoderCache
from docnmt.model import ModelConfig, Transformer

CFG = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)


def kv(rows: int, n: int = 1, fill: float | None = None):
    t = torch.randn(rows, 2, n, 4) if fill is None else torch.full((rows, 2, n, 4), fill)
    return t, t.clone()


def test_a_step_grows_the_entries_and_the_length():
    cache = DecoderCache()
    assert cache.start(2) == 0
    k, v = cache.append("dec.0.self", *kv(3, 2))
    cache.set_static("dec.0.cross", *kv(1, 5), per_input=True)
    cache.advance(2)
    assert cache.length == 2 and k.shape == (3, 2, 2, 4) and cache.rows() == 3
    assert cache.start(3) == 2
    k, _ = cache.append("dec.0.self", *kv(3))
    cache.advance(3)
    assert k.size(2) == 3 and cache.static("dec.0.cross")[0].shape == (1, 2, 5, 4)


def test_reorder_and_expand_move_the_rows():
    cache = DecoderCache()
    cache.start(1)
    rows = torch.arange(4.0)[:, None, None, None].expand(4, 2, 1, 4)
    cache.append("self", rows, rows)
    cache.set_static("cross", *kv(2, 3), per_input=True)          # 2 inputs, 2 beams each
    cache.set_static("ctx", rows.clone(), rows.clone())           # one row per beam
    cache.advance(1)
    cache.reorder(torch.tensor([1, 0, 3, 2]))                     # within the inputs: static ones stay
    assert cache.append("self", *kv(4, 1, 9.0))[0][:, 0, 0, 0].tolist() == [1, 0, 3, 2]
    cache.advance(2)
    kept = torch.tensor([2, 3])                                   # input 0 finished
    cache.reorder(kept, static_index=kept, beams=2)
    assert cache.static("cross")[0].size(0) == 1 and cache.static("ctx")[0][:, 0, 0, 0].tolist() == [2, 3]
    cache.expand(torch.tensor([0, 0, 1, 1]))
    assert cache.rows() == 4 and not cache.has_static("cross") and not cache.has_static("ctx")


def test_reading_a_static_entry_never_written_raises():
    cache = DecoderCache()
    with pytest.raises(CacheError, match="no static entry 'dec.0.cross'"):
        cache.static("dec.0.cross")


def test_writing_a_static_entry_again_with_another_shape_raises():
    cache = DecoderCache()
    cache.set_static("dec.0.cross", *kv(2, 5))
    cache.set_static("dec.0.cross", *kv(2, 5))                    # the same shape: allowed
    with pytest.raises(CacheError, match="written again"):
        cache.set_static("dec.0.cross", *kv(2, 6))
    with pytest.raises(CacheError, match="written again"):
        cache.set_static("dec.0.cross", *kv(2, 5), per_input=True)


def test_one_name_for_both_kinds_of_entry_raises():
    cache = DecoderCache()
    cache.append("a", *kv(2))
    cache.set_static("b", *kv(2))
    with pytest.raises(CacheError, match="self-attention entry"):
        cache.set_static("a", *kv(2))
    with pytest.raises(CacheError, match="static entry"):
        cache.append("b", *kv(2))


def test_a_step_with_other_rows_than_the_cache_raises():
    cache = DecoderCache()
    cache.append("a", *kv(4))
    with pytest.raises(CacheError, match="a step of 1 rows on a cache of 4"):
        cache.append("a", *kv(1))          # would broadcast into every row


def test_a_reorder_index_of_the_wrong_size_raises():
    cache = DecoderCache()
    cache.append("a", *kv(4))
    with pytest.raises(CacheError, match="keeps the 4 rows"):
        cache.reorder(torch.tensor([0, 1]))                        # dropping rows needs static_index
    with pytest.raises(CacheError, match="differ"):
        cache.reorder(torch.tensor([2, 3]), static_index=torch.tensor([2, 3, 3]))
    with pytest.raises(CacheError, match="groups of 2 beams"):
        cache.reorder(torch.tensor([1, 2, 3]), static_index=torch.tensor([1, 2, 3]), beams=2)
    with pytest.raises(CacheError, match="keeps the 4 rows"):
        cache.reorder(torch.tensor([[0, 1], [2, 3]]))
    with pytest.raises(CacheError, match="1-D"):
        cache.expand(torch.tensor([[0, 1]]))


def test_a_length_that_does_not_match_the_fed_tokens_raises():
    cache = DecoderCache()
    cache.start(2)
    cache.append("a", *kv(2, 2))
    with pytest.raises(CacheError, match="entries hold"):
        cache.advance(3)                                           # the entry holds 2 positions
    cache.advance(2)
    with pytest.raises(CacheError, match="must feed new positions"):
        cache.start(2)                                             # the same prefix again


def test_the_model_decodes_only_with_a_decoder_cache_and_new_tokens():
    torch.manual_seed(0)
    model = Transformer(CFG).eval()
    src, tgt = torch.randint(4, 50, (2, 6)), torch.randint(4, 50, (2, 4))
    with torch.no_grad():
        enc = model.encode(src)
        with pytest.raises(TypeError, match="DecoderCache, not dict"):
            model.decode(tgt, enc, {})
        cache = DecoderCache()
        model.decode(tgt[:, :2], enc, cache)
        assert cache.length == 2 and cache.has_static("dec.0.cross") and not cache.has_static("dec.0.self")
        with pytest.raises(CacheError, match="must feed new positions"):
            model.decode(tgt[:, :2], enc, cache)
        with pytest.raises(CacheError, match="a step of 1 rows on a cache of 2"):
            model.decode(tgt[:1, :3], enc.select(torch.tensor([0])), cache)


# ---- forgetting positions no later query sees (AttnSpec.first_key) ----------------------------

def test_forget_reorder_and_append_compose_and_the_cache_holds_only_the_kept_positions():
    """Against a reference that keeps every position (concatenating, gathering rows): after any
    mix of steps, forgets, reorders within the rows and dropped rows, a read is the reference's
    kept positions, a reorder copies only those, and the buffer stays near the kept length
    (moved to its front in place, no larger buffer) while the fed length runs far past it."""
    from docnmt.decoder_state import KVCache
    g = torch.Generator().manual_seed(0)
    cache, ref, rows, first = KVCache(), None, 6, 0
    moved = 0
    for step in range(200):
        k = torch.randn(rows, 2, 1, 4, generator=g)
        ref = k if ref is None else torch.cat([ref, k], 2)
        if step % 9 == 4:                                        # a new sentence starts somewhere
            first = step - int(torch.randint(0, 3, (1,), generator=g))
            assert cache.forget(first) == first
        base, buffer = cache.base, cache.bufs[0] and cache.bufs[0][0].data_ptr()
        got, _ = cache.append(k, -k)
        moved += cache.base > base and cache.bufs[0][0].data_ptr() == buffer     # (a new buffer: the old one lives on)
        assert cache.n == step + 1 and torch.equal(got, ref[:, :, first:]) and torch.equal(cache._view()[1], -got)
        index = torch.randint(0, rows, (rows - (step in (60, 120)),), generator=g)   # twice an input drops a row
        if step % 3 == 0:
            index = torch.arange(rows)
            index[int(torch.randint(0, rows, (1,), generator=g))] = 0              # one row changes: copied in place
        cache.index_select(index)
        ref, rows = ref.index_select(0, index), index.numel()
        assert torch.equal(cache._view()[0], ref[:, :, first:])
    assert cache.forget(3) == first and cache.forget(10 ** 6) == cache.n    # never back, never past the end
    assert moved > 3 and cache.bufs[0][0].size(2) <= 64 < cache.n


def test_forget_names_a_self_attention_entry_and_a_static_cache_keeps_every_position():
    from docnmt.decoder_state import StaticDecoderCache
    cache = DecoderCache()
    with pytest.raises(CacheError, match="no self-attention entry 'a'"):
        cache.forget("a", 1)
    static = StaticDecoderCache(4, 8)
    static.append("a", *kv(4, 3))
    assert static.forget("a", 2) == 0 and static.append("a", *kv(4))[0].size(2) == 4
    # only a search's cache forgets: a teacher-forced pass may feed pads, whose group queries see every key
    plain = DecoderCache()
    plain.append("a", *kv(4, 3))
    assert plain.forget("a", 2) == 0 and plain.append("a", *kv(4))[0].size(2) == 4
    search = DecoderCache(forgets=True)
    search.append("a", *kv(4, 3))
    assert search.forget("a", 2) == 2 and search.append("a", *kv(4))[0].size(2) == 2
