"""docnmt.data, docnmt.vocab and docnmt.prepare: instance building, separator recovery,
the memory-mapped corpus store and token batching (docs/methods/baselines.md#data and
docs/methods/baselines.md#recovering-sentences-from-document-outputs).

Hand-made costs and id lists pin the rules down exactly; the fixtures of ``conftest.py``
(3 real TED documents, a 600-piece vocabulary) check the same rules on real data.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from _tiny import DATA
from docnmt.data import (
    Corpus,
    InstanceSet,
    Joiner,
    ModeConfig,
    build_instances,
    doc2doc_instances,
    doc2sent_instances,
    greedy_split,
    mr_instances,
    sent_instances,
    sentence_costs,
    token_batches,
)
from docnmt.errors import ConfigError, DataError, DocnmtError
from docnmt.methods import make_joiner
from docnmt.methods.gtransformer import GroupJoiner
from docnmt.prepare import prepare
from docnmt.vocab import DEFAULT_MAX_SEP, Vocab

SMALL_BUDGET = 64  # forces the 12-turn chats into many instances


# ---------------------------------------------------------------------------------- helpers

def doc_of(corpus: Corpus, rows: np.ndarray) -> np.ndarray:
    """Document index of each row's first sentence."""
    return np.searchsorted(corpus.doc_offsets, rows[:, 0], side="right") - 1


def assert_within_documents(corpus: Corpus, rows: np.ndarray) -> None:
    d = doc_of(corpus, rows)
    assert (rows[:, 0] < rows[:, 1]).all(), "empty instance"
    assert (rows[:, 0] >= corpus.doc_offsets[d]).all()
    assert (rows[:, 1] <= corpus.doc_offsets[d + 1]).all(), "an instance crosses a document boundary"
    assert ((rows[:, 2] >= rows[:, 0]) & (rows[:, 2] < rows[:, 1])).all()


def spans(rows: np.ndarray) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b, _ in rows}


# --------- greedy split (docs/methods/baselines.md#splitting-documents-into-instances-of-at-most-512-tokens)

@pytest.mark.parametrize("costs, budget, max_sents, expected", [
    # C + c_k < budget is strict: 10 + 20 + 30 = 60 does not fit a budget of 60 ...
    ([10, 20, 30], 60, 1000, [(0, 2), (2, 3)]),
    # ... but fits 61
    ([10, 20, 30], 61, 1000, [(0, 3)]),
    # at most max_sents sentences per part
    ([1, 1, 1, 1, 1], 100, 2, [(0, 2), (2, 4), (4, 5)]),
    # sentence mode (max_sents=1): every sentence alone
    ([5, 5, 5], 100, 1, [(0, 1), (1, 2), (2, 3)]),
    # an over-long sentence in the middle stands alone, the split resumes after it
    ([10, 100, 10, 10], 50, 1000, [(0, 1), (1, 2), (2, 4)]),
    # an over-long first sentence, and one exactly at the budget, stand alone too
    ([50, 5, 5], 50, 1000, [(0, 1), (1, 3)]),
    # left to right: small sentences after a closed part never go back into it
    ([30, 40, 1, 1], 62, 1000, [(0, 1), (1, 4)]),
])
def test_greedy_split_follows_spec_rule(costs, budget, max_sents, expected):
    assert greedy_split(np.asarray(costs), 0, len(costs), budget, max_sents) == expected


def test_greedy_split_stays_inside_the_given_range():
    costs = np.asarray([100, 1, 2, 3, 100])
    assert greedy_split(costs, 1, 4, 5) == [(1, 3), (3, 4)]
    assert greedy_split(costs, 2, 2, 5) == []


def test_sentence_costs_are_max_side_length_plus_two(tiny_corpus):
    expected = np.maximum(tiny_corpus.src.lengths, tiny_corpus.tgt.lengths) + 2
    np.testing.assert_array_equal(sentence_costs(tiny_corpus), expected)


def test_doc2doc_instances_partition_each_document_greedily(tiny_corpus):
    costs = sentence_costs(tiny_corpus)
    rows = doc2doc_instances(tiny_corpus, max_tokens=SMALL_BUDGET)
    assert_within_documents(tiny_corpus, rows)
    assert (rows[:, 2] == rows[:, 0]).all()                     # Doc2Doc: target = source span
    covered = np.concatenate([np.arange(a, b) for a, b, _ in rows])
    np.testing.assert_array_equal(np.sort(covered), np.arange(tiny_corpus.n_sents))  # each once

    sizes = np.asarray([costs[a:b].sum() for a, b, _ in rows])
    multi = rows[:, 1] - rows[:, 0] > 1
    assert multi.any() and (~multi & (sizes >= SMALL_BUDGET)).any(), "budget does not exercise both cases"
    assert (sizes[multi] < SMALL_BUDGET).all()
    # greedy: the next instance of the same document starts only because its sentence did not fit
    same_doc = doc_of(tiny_corpus, rows[1:]) == doc_of(tiny_corpus, rows[:-1])
    for (a, b, _), nxt, same in zip(rows[:-1], rows[1:], same_doc):
        if same:
            assert costs[a:b].sum() + costs[nxt[0]] >= SMALL_BUDGET


def test_doc2doc_max_sents_one_equals_sentence_instances(tiny_corpus):
    np.testing.assert_array_equal(doc2doc_instances(tiny_corpus, 10**6, max_sents=1),
                                  sent_instances(tiny_corpus))


# ------------------------------------------------------------- sentence and context instances

def test_sent_instances_are_single_sentences(tiny_corpus):
    rows = sent_instances(tiny_corpus)
    i = np.arange(tiny_corpus.n_sents)
    np.testing.assert_array_equal(rows, np.stack([i, i + 1, i], axis=1))


@pytest.mark.parametrize("context", [0, 1, 3, 20])
def test_doc2sent_context_is_clipped_at_document_start(tiny_corpus, context):
    rows = doc2sent_instances(tiny_corpus, context)
    assert len(rows) == tiny_corpus.n_sents
    assert_within_documents(tiny_corpus, rows)
    i = np.arange(tiny_corpus.n_sents)
    np.testing.assert_array_equal(rows[:, 2], i)             # target: the current sentence
    np.testing.assert_array_equal(rows[:, 1], i + 1)         # tgt_start == end - 1
    doc_start = tiny_corpus.doc_offsets[doc_of(tiny_corpus, rows)]
    np.testing.assert_array_equal(rows[:, 0], np.maximum(doc_start, i - context))
    # spelled out on the second document (sentences 12..23)
    second = rows[12:24, 0]
    assert second[0] == 12 and second[min(context, 11)] == 12
    if context < 11:
        assert second[11] == 23 - context


# --------------------------- multi-resolution (docs/methods/baselines.md#multi-resolution-mr)

def test_mr_instances_union_of_resolutions(tiny_corpus):
    budget = 512
    costs = sentence_costs(tiny_corpus)
    rows = mr_instances(tiny_corpus, budget)
    got = spans(rows)
    assert len(got) == len(rows), "duplicate instances"
    assert (rows[:, 2] == rows[:, 0]).all()
    assert_within_documents(tiny_corpus, rows)
    for d in range(tiny_corpus.n_docs):
        a, b = int(tiny_corpus.doc_offsets[d]), int(tiny_corpus.doc_offsets[d + 1])
        assert b - a == 12  # so halves (6+6) and quarters (3x4) are unambiguous
        whole = set(greedy_split(costs, a, b, budget))
        assert whole <= got, "k=1 (whole document after the 512-token re-split) missing"
        for k in (2, 4):
            part = (b - a) // k
            for p in range(a, b, part):
                assert set(greedy_split(costs, p, p + part, budget)) <= got, f"k={k} part missing"
        assert {(i, i + 1) for i in range(a, b)} <= got, "single sentences missing"
    sizes = np.asarray([costs[a:b].sum() for a, b, _ in rows])
    assert (sizes[rows[:, 1] - rows[:, 0] > 1] < budget).all()


def test_mr_instances_resplit_with_small_budget(tiny_corpus):
    rows = mr_instances(tiny_corpus, SMALL_BUDGET)
    assert len(spans(rows)) == len(rows)
    assert_within_documents(tiny_corpus, rows)
    assert spans(doc2doc_instances(tiny_corpus, SMALL_BUDGET)) <= spans(rows)


# ------------------------------------------------------------------------- build_instances

@pytest.mark.parametrize("mode", ModeConfig.MODES)
def test_mix_sentences_adds_every_sentence_pair(tiny_corpus, mode):
    base = build_instances(tiny_corpus, ModeConfig(mode, max_instance_tokens=SMALL_BUDGET))
    mixed = build_instances(tiny_corpus, ModeConfig(mode, max_instance_tokens=SMALL_BUDGET,
                                                    mix_sentences=True))
    if mode == "sent2sent":
        np.testing.assert_array_equal(mixed, base)
    else:
        np.testing.assert_array_equal(mixed, np.concatenate([base, sent_instances(tiny_corpus)]))
    # validation / test data never gets the training mixture
    at_test = build_instances(tiny_corpus, ModeConfig(mode, max_instance_tokens=SMALL_BUDGET,
                                                      mix_sentences=True), training=False)
    assert len(at_test) <= len(base)


@pytest.mark.parametrize("mode", ["sent2sent", "doc2doc", "mr"])
def test_training_document_filters_drop_whole_documents_in_training_only(tiny_corpus, mode):
    n_sents = np.diff(tiny_corpus.doc_offsets)
    longest = np.maximum.reduceat(np.maximum(tiny_corpus.src.lengths, tiny_corpus.tgt.lengths),
                                  tiny_corpus.doc_offsets[:-1])
    min_sents, max_tokens = int(np.median(n_sents)), int(np.median(longest))
    expected = (n_sents >= min_sents) & (longest <= max_tokens)
    assert 0 < expected.sum() < len(expected)                # the fixture exercises both filters
    base = ModeConfig(mode, max_instance_tokens=SMALL_BUDGET, mix_sentences=True)
    cfg = replace(base, min_train_doc_sents=min_sents, max_train_sent_tokens=max_tokens)
    everything = build_instances(tiny_corpus, base)
    kept = build_instances(tiny_corpus, cfg)
    np.testing.assert_array_equal(kept, everything[expected[doc_of(tiny_corpus, everything)]])
    np.testing.assert_array_equal(build_instances(tiny_corpus, cfg, training=False),
                                  build_instances(tiny_corpus, base, training=False))


def test_mr_is_plain_doc2doc_outside_training(tiny_corpus):
    cfg = ModeConfig("mr", max_instance_tokens=SMALL_BUDGET)
    np.testing.assert_array_equal(build_instances(tiny_corpus, cfg, training=False),
                                  doc2doc_instances(tiny_corpus, SMALL_BUDGET))


@pytest.mark.parametrize("kwargs, word", [({"mode": "doc2dog"}, "doc2dog"),
                                          ({"separator": "comma"}, "comma")])
def test_mode_config_rejects_unknown_values(kwargs, word):
    """Unknown modes and data formats (formats are registered by docnmt.methods) are config errors."""
    from docnmt.config import Config
    with pytest.raises(ConfigError, match=word):
        Config.from_dict({"data": kwargs})


# ---------------------------------------- Joiner (docs/methods/baselines.md#instance-formats)

@pytest.fixture(scope="module")
def words(tiny_vocab) -> dict[str, int]:
    """Four ordinary piece ids (A, B, C, D) and the separator / boundary symbols by name."""
    v = tiny_vocab
    named = {"A": 100, "B": 101, "C": 102, "D": 103, "<s>": v.bos, "</s>": v.eos}
    named.update({s: v.id(s) for s in ("<sep>", "<sep1>", "<sep2>", "<sep3>", "<sep7>")})
    return named


def ids_of(words: dict[str, int], text: str) -> list[int]:
    return [words[w] for w in text.split()]


def sents_of(words: dict[str, int], texts: list[str]) -> list[list[int]]:
    return [ids_of(words, t) for t in texts]


@pytest.mark.parametrize("separator, seps", [("index", ["<sep1>", "<sep2>"]), ("uniform", ["<sep>", "<sep>"])])
def test_join_places_separators_in_order(tiny_vocab, tiny_corpus, separator, seps):
    joiner = Joiner(tiny_vocab, separator)
    sents = [tiny_corpus.src[i] for i in range(3)]
    joined = joiner.join(sents)
    expected = np.concatenate([sents[0], [tiny_vocab.id(seps[0])], sents[1], [tiny_vocab.id(seps[1])], sents[2]])
    np.testing.assert_array_equal(joined, expected)
    source = joiner.source(sents)
    assert source[-1] == tiny_vocab.eos
    np.testing.assert_array_equal(source[:-1], expected)
    np.testing.assert_array_equal(joiner.join(sents[:1]), sents[0])   # one sentence: no separator


@pytest.mark.parametrize("separator", ["index", "uniform"])
@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_split_round_trips_join(tiny_vocab, tiny_corpus, separator, n):
    joiner = Joiner(tiny_vocab, separator)
    sents = [tiny_corpus.tgt[i] for i in range(n)]
    out, ok = joiner.split(list(joiner.join(sents)) + [tiny_vocab.eos], n)
    assert ok
    assert out == [s.tolist() for s in sents]


@pytest.mark.parametrize("generated, n, expected, ok", [
    ("<s> A B <sep1> C </s>", 2, ["A B", "C"], True),               # text before <sep1> is sentence 1
    ("A B", 2, ["A B", ""], False),                                 # missing separator: last one empty
    ("A <sep1> B <sep1> C", 3, ["A", "B C", ""], False),            # duplicate index: concatenated
    ("A <sep1> B <sep1> C <sep2> D", 3, ["A", "B C", "D"], False),  # ... even if all are covered
    ("A <sep2> B <sep1> C <sep2> D", 3, ["A", "C", "B D"], False),  # out of order: index decides
    ("A <sep1> B <sep2> C <sep3> D", 3, ["A", "B", "C D"], False),  # index beyond n: to the last
    ("A <sep1> B <sep7> C", 3, ["A", "B", "C"], False),             # far beyond n: to the last
    ("A <sep2> C", 3, ["A", "", "C"], False),                       # skipped index: that one empty
    ("<sep1> A", 2, ["", "A"], False),                              # nothing before <sep1>
])
def test_split_recovery_rules_index(tiny_vocab, words, generated, n, expected, ok):
    out, good = Joiner(tiny_vocab, "index").split(ids_of(words, generated), n)
    assert out == sents_of(words, expected)
    assert good is ok


@pytest.mark.parametrize("generated, n, expected, ok", [
    ("A <sep> B <sep> C", 3, ["A", "B", "C"], True),
    ("A <sep> B", 3, ["A", "B", ""], False),
    ("A <sep> B <sep> C <sep> D", 3, ["A", "B", "C D"], False),
])
def test_split_recovery_rules_uniform(tiny_vocab, words, generated, n, expected, ok):
    out, good = Joiner(tiny_vocab, "uniform").split(ids_of(words, generated), n)
    assert out == sents_of(words, expected)
    assert good is ok


@pytest.mark.parametrize("separator", ["index", "uniform", "group", "global_index"])
def test_sentence_ids_number_each_formats_sentences(tiny_vocab, separator):
    """Every token of a source and a decoder input is given the 0-based instance sentence it
    belongs to (a separator opens the next sentence); a token of the whole instance is in none (-1):
    G-Transformer's leading EOD, the separator formats' decoder start <s> and source end </s>."""
    joiner = make_joiner(tiny_vocab, separator)
    sents = [np.array([10, 11]), np.array([12]), np.array([13, 14, 15])]
    separated = separator in ("index", "uniform")
    for side, tokens in (("src", joiner.source(sents, 3)), ("tgt_in", joiner.decoder_io(sents, 3)[0])):
        ids = joiner.sentence_ids(torch.as_tensor(tokens[None].astype(np.int64)))[0].tolist()
        words = {w: ids[i] for i, w in enumerate(tokens.tolist()) if w >= 10 and w <= 15}
        assert words == {10: 0, 11: 0, 12: 1, 13: 2, 14: 2, 15: 2}, (separator, tokens, ids)
        edge = len(ids) - 1 if side == "src" else 0          # the source's end, the decoder's start
        in_none = [i for i, v in enumerate(ids) if v < 0]
        assert in_none == ([edge] if separated else [0] if separator == "group" and side == "tgt_in" else [])
        inner = [v for v in ids if v >= 0]
        assert inner == sorted(inner) and inner[0] == 0 and inner[-1] == 2


def test_group_format_is_g_transformers(tiny_vocab):
    """G-Transformer format (docs/methods/gtransformer.md#data-format): source <s> x1 </s> <s> x2 </s>;
    decoder input EOD <s> y1 </s> <s> y2 </s>; labels <s> y1 </s> <s> y2 </s> EOD."""
    v, j = tiny_vocab, GroupJoiner(tiny_vocab)
    eod, s, e = v.id("<eod>"), v.bos, v.eos
    x = [np.array([10, 11]), np.array([12])]
    assert j.source(x).tolist() == [s, 10, 11, e, s, 12, e]
    tgt_in, labels = j.decoder_io(x)
    assert tgt_in.tolist() == [eod, s, 10, 11, e, s, 12, e]
    assert labels.tolist() == [s, 10, 11, e, s, 12, e, eod]
    assert j.start == j.end == eod and not j.sep_ids
    assert j.split(labels.tolist(), 2) == ([[10, 11], [12]], True)
    assert j.split([s, 10, e], 2) == ([[10], []], False)                    # a missing sentence: empty
    assert j.split([s, 10, e, s, 11, e, s, 12, e], 2) == ([[10], [11, 12]], False)   # extra: appended


# ------------------------------------------------------------------------------ InstanceSet

@pytest.mark.parametrize("separator", ["index", "group"])
@pytest.mark.parametrize("mode", ["sent2sent", "doc2sent", "doc2doc", "mr"])
def test_instance_lengths_are_real_lengths(tiny_corpus, tiny_vocab, mode, separator):
    rows = build_instances(tiny_corpus, ModeConfig(mode, context=3, max_instance_tokens=SMALL_BUDGET))
    iset = InstanceSet(tiny_corpus, rows, make_joiner(tiny_vocab, separator))
    assert len(iset) == len(rows)
    for k in range(len(iset)):
        a, b, t = rows[k]
        source, (tgt_in, labels) = iset.source(k), iset.target(k)
        assert iset.src_lens[k] == len(source)
        assert iset.tgt_lens[k] == len(tgt_in) == len(labels)
        np.testing.assert_array_equal(tgt_in[1:], labels[:-1])      # teacher forcing: shifted by one
        # the tokens are those of the sentences, separated (sentence by sentence)
        back, ok = iset.joiner.split(list(labels), b - t)
        assert ok and back == [tiny_corpus.tgt[i].tolist() for i in range(t, b)]
        back, ok = iset.joiner.split(list(source), b - a)
        assert ok and back == [tiny_corpus.src[i].tolist() for i in range(a, b)]


def test_collate_teacher_forcing_layout(tiny_corpus, tiny_vocab):
    rows = doc2doc_instances(tiny_corpus, SMALL_BUDGET)
    iset = InstanceSet(tiny_corpus, rows, Joiner(tiny_vocab))
    indices = np.argsort(-(rows[:, 1] - rows[:, 0]))[:6]  # the longest instances first: padding
    batch = iset.collate(indices)
    v = tiny_vocab
    assert batch["ids"].tolist() == indices.tolist()
    assert batch["src"].shape == (6, int(iset.src_lens[indices].max()))
    assert batch["tgt_in"].shape == batch["labels"].shape == (6, int(iset.tgt_lens[indices].max()))
    assert batch["ntokens"] == int(iset.tgt_lens[indices].sum())
    for row, k in enumerate(indices):
        ls, lt = int(iset.src_lens[k]), int(iset.tgt_lens[k])
        src, tgt_in, labels = (batch[x][row].numpy() for x in ("src", "tgt_in", "labels"))
        np.testing.assert_array_equal(src[:ls], iset.source(k))
        assert tgt_in[0] == v.bos and labels[lt - 1] == v.eos
        np.testing.assert_array_equal(tgt_in[1:lt], labels[:lt - 1])
        np.testing.assert_array_equal(labels[:lt], iset.target(k)[1])
        for padded, length in ((src, ls), (tgt_in, lt), (labels, lt)):
            assert (padded[length:] == v.pad).all()
        assert (tgt_in[:lt] != v.pad).all()


# ---------------------------------------------------------------------- Corpus persistence

def test_corpus_save_load_round_trip_memory_mapped(tiny_corpus, tmp_path):
    tiny_corpus.save(tmp_path, "train")
    loaded = Corpus.load(tmp_path, "train")
    for side, orig in ((loaded.src, tiny_corpus.src), (loaded.tgt, tiny_corpus.tgt)):
        assert isinstance(side.tokens, np.memmap)
        np.testing.assert_array_equal(side.lengths, orig.lengths)
        for i in range(tiny_corpus.n_sents):
            np.testing.assert_array_equal(side[i], orig[i])
    np.testing.assert_array_equal(loaded.doc_offsets, tiny_corpus.doc_offsets)
    assert loaded.docids == tiny_corpus.docids
    assert (loaded.n_docs, loaded.n_sents) == (3, 36)
    np.testing.assert_array_equal(doc2doc_instances(loaded, SMALL_BUDGET),
                                  doc2doc_instances(tiny_corpus, SMALL_BUDGET))


def test_source_only_corpus_round_trip(chat_docs, tiny_vocab, tmp_path):
    corpus = Corpus.encode([replace(d, tgt=None) for d in chat_docs], tiny_vocab)
    corpus.save(tmp_path, "test")
    loaded = Corpus.load(tmp_path, "test")
    assert loaded.tgt is None
    np.testing.assert_array_equal(np.asarray(loaded.src.tokens), corpus.src.tokens)


def test_corpus_load_missing_split_is_a_data_error(tiny_corpus, tmp_path):
    tiny_corpus.save(tmp_path, "train")
    with pytest.raises(DataError, match="valid"):
        Corpus.load(tmp_path, "valid")


def test_encode_rejects_overlong_sentence(chat_docs, tiny_vocab):
    with pytest.raises(DataError, match="sentence"):
        Corpus.encode(chat_docs, tiny_vocab, max_sentence_tokens=5)


# ---------------------------------------------------------------------------- token batches

MAX_TOKENS = 256


@pytest.fixture(scope="module")
def lengths() -> tuple[np.ndarray, np.ndarray]:
    """500 random instance lengths plus 3 longer than MAX_TOKENS."""
    rng = np.random.default_rng(0)
    src = np.concatenate([rng.integers(1, 120, 500), [300, 257, 1000]])
    tgt = np.concatenate([rng.integers(1, 120, 500), [10, 400, 1]])
    return src, tgt


def batches_of(lengths, **kw) -> list[np.ndarray]:
    with pytest.warns(UserWarning, match="3 instances are longer"):
        return token_batches(*lengths, MAX_TOKENS, **kw)


def test_token_batches_cover_every_index_once_within_budget(lengths):
    size = np.maximum(*lengths)
    batches = batches_of(lengths, seed=3, epoch=1)
    np.testing.assert_array_equal(np.sort(np.concatenate(batches)), np.arange(len(size)))
    for b in batches:
        padded = len(b) * size[b].max()
        assert padded <= MAX_TOKENS or len(b) == 1, f"batch of {len(b)} pads to {padded}"
    oversize = [b for b in batches if size[b].max() > MAX_TOKENS]
    assert len(oversize) == 3 and all(len(b) == 1 for b in oversize)
    with pytest.warns(UserWarning):
        alone = token_batches(np.asarray([400, 300]), np.asarray([1, 1]), MAX_TOKENS, shuffle=False)
    assert [b.tolist() for b in alone] == [[1], [0]]


def test_token_batches_respect_max_sentences(lengths):
    batches = batches_of(lengths, max_sentences=4)
    assert max(len(b) for b in batches) == 4


def test_token_batches_deterministic_per_seed_and_epoch(lengths):
    def order(**kw):
        return np.concatenate(batches_of(lengths, **kw)).tolist()
    assert order(seed=1, epoch=2) == order(seed=1, epoch=2)
    assert order(seed=1, epoch=2) != order(seed=1, epoch=3)
    assert order(seed=1, epoch=2) != order(seed=2, epoch=2)
    # whole batches are shuffled too, not only instances of equal length
    size = np.maximum(*lengths)
    maxima = [size[b].max() for b in batches_of(lengths, seed=1, epoch=2)]
    assert maxima != sorted(maxima)


def test_token_batches_without_shuffle_are_sorted_and_fixed(lengths):
    size = np.maximum(*lengths)
    first = batches_of(lengths, shuffle=False, seed=1, epoch=1)
    second = batches_of(lengths, shuffle=False, seed=7, epoch=5)
    assert [b.tolist() for b in first] == [b.tolist() for b in second]
    flat = np.concatenate(first)
    assert (np.diff(size[flat]) >= 0).all()


# -------------------------------------------------------------------------------------- Vocab

def test_vocab_save_load_round_trip(tiny_vocab, chat_docs, tmp_path):
    tiny_vocab.save(tmp_path)
    loaded = Vocab.load(tmp_path)
    assert len(loaded) == len(tiny_vocab) and loaded.extra == tiny_vocab.extra
    texts = chat_docs[0].src + chat_docs[0].tgt
    assert loaded.encode_batch(texts) == tiny_vocab.encode_batch(texts)
    assert loaded.id("<sep3>") == tiny_vocab.id("<sep3>")


def test_vocab_layout_and_decode_drops_specials(tiny_vocab, chat_docs):
    v = tiny_vocab
    assert (v.pad, v.unk, v.bos, v.eos) == (0, 1, 2, 3)
    assert v.id("<mask>") == v.n_pieces and len(v) == v.n_pieces + 3 + DEFAULT_MAX_SEP
    ids = v.encode(chat_docs[0].tgt[0])
    assert all(4 <= i < v.n_pieces for i in ids)
    noisy = [v.bos, *ids[:2], v.id("<sep1>"), v.id("<mask>"), *ids[2:], v.id("<eod>"), v.eos, v.pad]
    assert v.decode(noisy) == v.decode(ids)
    # special symbols typed in text are ordinary characters, never docnmt's symbols
    assert all(i < v.n_pieces for i in v.encode("<sep1> <mask> <eod>"))


def test_vocab_separators(tiny_vocab):
    v = tiny_vocab
    assert v.max_sep == DEFAULT_MAX_SEP
    assert v.sep(1) == v.id("<sep1>") and v.sep(2) == v.sep(1) + 1
    assert v.sep(600) == v.id(f"<sep{DEFAULT_MAX_SEP}>")
    assert v.sep(None) == v.id("<sep>")
    assert v.piece(v.sep(7)) == "<sep7>"


def test_vocab_unknown_symbol_is_a_config_error(tiny_vocab):
    with pytest.raises(ConfigError, match="<sep9999>"):
        tiny_vocab.id("<sep9999>")


# ------------------------------------------------------------------------------------ prepare

EXPECTED_FILES = {"spm.model", "vocab.json", "prepare.json"} | {
    f"{split}.{name}" for split in ("train", "valid")
    for name in ("src.tokens.npy", "src.offsets.npy", "tgt.tokens.npy", "tgt.offsets.npy",
                 "docs.npy", "docids.json")}


def run_prepare(destdir, prefix, valid: bool = True, vocab_size: int = 600, **kw) -> dict:
    """``prefix`` as the train (and, with ``valid``, the validation) corpus, quietly."""
    return prepare(destdir, "en", "de", [str(prefix)], [str(prefix)] if valid else None,
                   vocab_size=vocab_size, log=lambda message: None, **kw)


def test_prepare_on_real_data(chat_valid_prefix, tmp_path):
    dest = tmp_path / "data-bin"
    stats = run_prepare(dest, chat_valid_prefix)
    assert {p.name for p in dest.iterdir()} == EXPECTED_FILES
    saved = json.loads((dest / "prepare.json").read_text())
    assert saved == stats
    assert (saved["source_lang"], saved["target_lang"]) == ("en", "de")
    for split in ("train", "valid"):
        s = saved["splits"][split]
        assert (s["documents"], s["sentences"]) == (78, 1902)
        assert s["instances"]["sent2sent"] == s["instances"]["doc2sent"] == 1902
        assert 78 <= s["instances"]["doc2doc"] < s["instances"]["mr"]
    vocab = Vocab.load(dest)
    assert len(vocab) == saved["vocab"]
    corpus = Corpus.load(dest, "valid")
    assert corpus.docids == Path(f"{chat_valid_prefix}.docids").read_text().split()
    assert int(corpus.tgt.lengths.sum()) == saved["splits"]["valid"]["tgt_tokens"]

    with pytest.raises(DocnmtError, match="not empty"):
        run_prepare(dest, chat_valid_prefix)
    assert run_prepare(dest, chat_valid_prefix, force=True)["splits"] == stats["splits"]


def test_prepare_force_leaves_no_stale_split(chat_valid_prefix, tmp_path):
    dest = tmp_path / "data-bin"
    run_prepare(dest, chat_valid_prefix)
    stats = run_prepare(dest, chat_valid_prefix, valid=False, vocab_size=400, force=True)
    assert set(stats["splits"]) == {"train"}
    assert not (dest / "valid.docs.npy").exists(), "stale valid split from the previous run"


def test_word_dropout_masks_only_ordinary_words_and_is_seeded(tiny_corpus, tiny_vocab):
    from docnmt.methods.word_dropout import word_dropout
    iset = InstanceSet(tiny_corpus, doc2doc_instances(tiny_corpus, SMALL_BUDGET), make_joiner(tiny_vocab, "index"))
    batch = iset.collate(np.arange(8))          # 8 instances of chat turns: about 250 ordinary pieces
    mask = tiny_vocab.id("<mask>")
    out = word_dropout(batch, 0.3, tiny_vocab, (1, 2, 0, 7))
    assert torch.equal(out["labels"], batch["labels"])                       # labels untouched
    for key in ("src", "tgt_in"):
        changed = out[key] != batch[key]
        assert (out[key][changed] == mask).all()
        ordinary = (batch[key] >= 4) & (batch[key] < tiny_vocab.n_pieces)
        assert not (changed & ~ordinary).any()                                # specials never dropped
        assert abs(changed.sum().item() / ordinary.sum().item() - 0.3) < 0.05
    again = word_dropout(batch, 0.3, tiny_vocab, (1, 2, 0, 7))
    other = word_dropout(batch, 0.3, tiny_vocab, (1, 3, 0, 7))
    assert torch.equal(again["src"], out["src"]) and not torch.equal(other["src"], out["src"])


def test_word_dropout_follows_the_vocabularys_own_piece_range():
    """A pretrained (e.g. Marian) vocabulary has ordinary pieces from id 2 and its pad among the
    pieces: word dropout reaches ids 2 and 3 and never drops the pad, wherever it sits."""
    from docnmt.methods.word_dropout import word_dropout
    from docnmt.vocab import BaseVocab

    class Marian(BaseVocab):
        word_ids = (2, 50)
        pad, unk, bos, eos = 49, 1, 51, 0

        def id(self, symbol):
            return 52

    x = torch.tensor([[2, 3, 2, 3, 49, 49, 0, 1, 51, 10] * 20])
    out = word_dropout({"src": x}, 0.5, Marian(50, []), (1, 1, 0, 0))["src"]
    dropped = out == 52
    assert dropped[x == 2].any() and dropped[x == 3].any() and dropped[x == 10].any()
    assert not dropped[(x == 49) | (x == 0) | (x == 1) | (x == 51)].any()


def test_prepare_splits_sentence_level_corpora_into_single_sentence_documents(chat_valid_prefix, tmp_path):
    """A plain sentence-per-line corpus (ende/sent/*) must not become one giant document whose
    unrelated sentences Doc2Doc would join into instances."""
    from docnmt.prepare import read_split
    sent = DATA / "ende/sent/tatoeba"
    docs = read_split([str(chat_valid_prefix), str(sent)], "en", "de")
    tatoeba = [d for d in docs if d.docid.startswith("tatoeba/")]
    n_lines = len(Path(f"{sent}.en").read_text(encoding="utf-8").splitlines())
    assert len(tatoeba) == n_lines and all(len(d.src) == len(d.tgt) == 1 for d in tatoeba)
    assert tatoeba[0].docid.endswith(":1") and tatoeba[0].meta["sentence_level"]
    assert sum(1 for d in docs if not d.docid.startswith("tatoeba/")) == 78          # the chats: real documents


def test_prepare_tells_apart_corpora_with_the_same_name(chat_valid_prefix, tmp_path):
    from docnmt.prepare import read_split
    for d in ("a", "b"):   # two corpora named "chat", without .docids: both have ids chat.en:0, …
        (tmp_path / d).mkdir()
        for lang in ("en", "de"):
            (tmp_path / d / f"chat.{lang}").write_bytes(Path(f"{chat_valid_prefix}.{lang}").read_bytes())
    docs = read_split([str(tmp_path / "a" / "chat"), str(tmp_path / "b" / "chat")], "en", "de")
    assert len({d.docid for d in docs}) == len(docs) == 2 * 78
