"""The static decoder cache (``decode.static_cache``: keys and values preallocated, written and
reordered in place) gives exactly the dynamic cache's beams for every registered method, with
forced prefixes, n-best lists and inputs that finish early; its misuse raises; the compiled
output layer (``decode.compile_step``) compiles once per row bucket, not once per batch."""
from __future__ import annotations

import pytest
import torch

from docnmt import methods
from docnmt.data import model_inputs
from docnmt.decoder_state import CacheError, StaticDecoderCache, StaticKV, bucket
from docnmt.search import SearchConfig, beam_search
from docnmt.translate import Translator
from test_conformance import format_batch, method_config, translations


@pytest.fixture(scope="module")
def vocab():
    from _tiny import chat_documents
    from docnmt.vocab import Vocab
    return Vocab.train([s for d in chat_documents("valid")[:20] for s in d.src + d.tgt], size=300)


@pytest.fixture(scope="module")
def docs():
    from _tiny import chat_documents
    out = chat_documents("valid")[:3]
    for d in out:
        d.src, d.tgt = d.src[:4], d.tgt[:4]
    return out


def hypotheses(out):
    return [[(h.tokens, h.score) for h in nbest] for nbest in out]


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_static_cache_gives_the_dynamic_caches_beams(name, vocab, docs):
    cfg = method_config(name)
    torch.manual_seed(0)
    tr = Translator(methods.build_model(cfg, vocab), vocab, cfg, device="cpu")
    batch = format_batch(tr, docs)
    src, tgt = batch["src"], batch["tgt_in"]
    inputs = model_inputs(batch)
    n = src.size(0)
    # forced prefixes of different lengths (one empty), cut from the reference targets (their format)
    prefix = [tgt[i, 1: 1 + p].tolist() for i, p in zip(range(n), (3, 0, 5))]
    max_len = torch.tensor([2, 12, 6])[:n]                # the first input ends long before the others
    runs = []
    for static in (False, True):
        search = SearchConfig(beam=3, nbest=3, static_cache=static)
        runs.append(beam_search(tr.model, src, search, tgt[:, 0], tr.joiner.end, banned=tr.banned_ids(False),
                                prefix=prefix, inputs=inputs, max_len=max_len))
    assert hypotheses(runs[1]) == hypotheses(runs[0])
    assert all(len(nbest) == 3 for nbest in runs[0])
    assert max(len(h.tokens) for h in runs[0][0]) <= 2 < max(len(h.tokens) for h in runs[0][1])


def test_translate_with_the_static_cache_gives_the_same_translations(vocab, docs):
    cfg = method_config("transformer")
    torch.manual_seed(0)
    tr = Translator(methods.build_model(cfg, vocab), vocab, cfg, device="cpu")
    assert translations(tr, docs[:2], static_cache=True) == translations(tr, docs[:2])


# --------------------------------------------------------------------------------------------
# The storage and its misuse
# --------------------------------------------------------------------------------------------

def rows_of(values, n=1):
    t = torch.tensor(values, dtype=torch.float)[:, None, None, None].expand(len(values), 2, n, 4).contiguous()
    return t, t.clone()


def test_steps_and_reorders_stay_in_the_preallocated_storage():
    kv = StaticKV(capacity=4, positions=3)
    k, _ = kv.append(*rows_of([0, 1, 2, 3]))
    storage = kv.k.data_ptr(), kv.v.data_ptr()
    assert kv.k.shape == (4, 2, 3, 4) and k.shape == (4, 2, 1, 4)
    kv.index_select(torch.tensor([3, 3, 0, 1]))
    k, v = kv.append(*rows_of([7, 7, 7, 7]))
    assert k[:, 0, 0, 0].tolist() == [3, 3, 0, 1] and k[:, 0, 1, 0].tolist() == [7] * 4
    assert torch.equal(k, v)
    kv.index_select(torch.tensor([2, 0]))                 # inputs dropped: fewer rows, same storage
    k, _ = kv.append(*rows_of([8, 9]))
    assert k[:, 0, :, 0].tolist() == [[0, 7, 8], [3, 7, 9]]
    assert (kv.k.data_ptr(), kv.v.data_ptr()) == storage


def test_writing_past_the_preallocated_positions_raises():
    cache = StaticDecoderCache(rows=2, positions=3)
    cache.start(2)
    cache.append("dec.0.self", *rows_of([0, 1], n=2))
    cache.advance(2)
    cache.start(3)
    cache.append("dec.0.self", *rows_of([0, 1]))
    cache.advance(3)
    cache.start(4)
    with pytest.raises(CacheError, match="past the 3 preallocated"):
        cache.append("dec.0.self", *rows_of([0, 1]))


def test_more_rows_than_the_static_cache_holds_raise():
    cache = StaticDecoderCache(rows=2, positions=8)
    with pytest.raises(CacheError, match="3 rows do not fit the static cache's 2"):
        cache.append("dec.0.self", *rows_of([0, 1, 2]))
    cache.append("dec.0.self", *rows_of([0, 1]))
    with pytest.raises(CacheError, match="do not fit"):
        cache.expand(torch.tensor([0, 0, 1]))
    with pytest.raises(CacheError, match="a step of 1 rows on a cache of 2"):
        cache.append("dec.0.self", *rows_of([0]))


def test_buckets_are_powers_of_two():
    assert [bucket(n) for n in (1, 2, 3, 5, 15, 16, 17)] == [1, 2, 4, 8, 16, 16, 32]
    assert bucket(3, smallest=32) == 32 and bucket(33, smallest=32) == 64


def test_a_long_output_fits_the_bucketed_cache(vocab):
    """The positions a model adds before the tokens (a target language code) fit the slack."""
    cfg = method_config("transformer").override({"model.tgt_lang_token": 5})
    torch.manual_seed(0)
    model = methods.build_model(cfg, vocab).eval()
    src = torch.randint(10, 100, (2, 7))
    runs = [beam_search(model, src, SearchConfig(beam=2, nbest=2, min_len=31, max_len_a=0.0, max_len_b=31,
                                                 static_cache=static), 2, 3) for static in (False, True)]
    assert hypotheses(runs[1]) == hypotheses(runs[0]) and len(runs[0][0][0].tokens) == 31


# --------------------------------------------------------------------------------------------
# The compiled output layer
# --------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_compiled_step_compiles_once_per_row_bucket(vocab, strict_recompiles):
    """Five batches of 1 to 7 inputs (beam 3: 3 to 21 rows, fewer as inputs finish) use the
    buckets 8, 16 and 32: three compiles, the fourth would raise."""
    cfg = method_config("transformer")
    torch.manual_seed(0)
    model = methods.build_model(cfg, vocab).eval()
    strict_recompiles(3)
    for n in (3, 5, 2, 7, 1):
        src = torch.randint(10, 100, (n, 4 + n), generator=torch.Generator().manual_seed(n))
        got, want = (beam_search(model, src, SearchConfig(beam=3, nbest=2, max_len_b=6, static_cache=True,
                                                          compile_step=mode), 2, 3) for mode in ("default", ""))
        assert [[h.tokens for h in nbest] for nbest in got] == [[h.tokens for h in nbest] for nbest in want]
        assert [h.score for nbest in got for h in nbest] == pytest.approx([h.score for nbest in want for h in nbest],
                                                                          abs=1e-5)
