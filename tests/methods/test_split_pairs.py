"""Split-pair training (docs/methods/split_pairs.md): the cut rules (the source's middle word
boundary; the target's proportional one, or the one the fewest anchor links cross), the halves
added as two-sentence documents of their own only when asked and drawn anew each epoch, refused
without context, and one update of every document method with it on. Each test fails with the aid
switched off."""
from __future__ import annotations

import re

import numpy as np
import pytest

from _tiny import DOC_METHODS, aid_trainer
from docnmt import methods
from docnmt.config import Config
from docnmt.data import build_instances
from docnmt.errors import ConfigError
from docnmt.methods.split_pairs import anchor_pieces, split_pair, word_starts

TINY = {"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64}
OPENS = np.arange(10) < 5              # ids 0-4 open a word, 5-9 continue one
RUNS_ON = np.zeros(10, dtype=bool)


def test_the_source_is_cut_at_its_middle_word_boundary_the_target_at_the_proportional_one():
    src = np.array([0, 5, 1, 2, 6, 6, 3, 4])       # words start at 2, 3, 6, 7; the middle is 4
    tgt = np.array([0, 1, 5, 2, 3, 4])             # words start at 1, 3, 4, 5; 6 · 3/8 = 2.25
    assert split_pair(src, tgt, OPENS, RUNS_ON) == (3, 3)
    late = np.array([0, 5, 5, 5, 5, 1, 2, 6])      # words start at 5, 6 only: cut at 5 of 8
    assert split_pair(late, np.array([0, 1, 2, 3, 4] * 2), OPENS, RUNS_ON) == (5, 6)       # 10 · 5/8 = 6.25
    assert split_pair(np.array([0, 5, 6]), tgt, OPENS, RUNS_ON) == (0, 0)         # one source word: no cut
    assert split_pair(src, np.array([1, 5]), OPENS, RUNS_ON) == (0, 0)            # one target word
    # Moses BPE: every piece opens a word unless the one before runs on into it ("@@")
    runs_on = np.arange(10) >= 5
    assert split_pair(np.array([5, 1, 2, 6, 3, 4]), np.array([1, 2, 3, 4]), np.ones(10, bool), runs_on) == (3, 2)


def test_the_anchored_rule_cuts_the_target_where_the_fewest_anchor_links_cross():
    """Ids 0-4 open a word; anchors: 0 (found once on each side) and 1 (twice in the target: not a
    link). The source is cut at 4 of 8, so the anchor 0 at source position 1 is before the cut."""
    anchors = np.zeros(10, dtype=bool)
    anchors[[0, 1]] = True
    src = np.array([2, 0, 3, 5, 4, 2, 3, 4])            # words start at 1, 2, 4, 5, 6, 7: cut at 4
    tgt = np.array([2, 3, 4, 2, 3, 0, 2, 3, 4, 1])      # 10 · 4/8 = 5, but 0 sits at 5 of the target
    assert split_pair(src, tgt, OPENS, RUNS_ON) == (4, 5)                   # middle: the proportional one
    assert split_pair(src, tgt, OPENS, RUNS_ON, anchors) == (4, 6)          # anchored: 0 on the first side
    # no links (the anchor once in the source only; 1 twice in the target): the proportional cut
    assert split_pair(src, np.array([2, 3, 4, 2, 3, 1, 2, 3, 4, 1]), OPENS, RUNS_ON, anchors) == (4, 5)
    # links in swapped order (0 before the source cut, 1 after it; in the target 1 at 4, 0 at 5): every
    # cut crosses one, cuts 1-4 and 6-9 only one (5 crosses both); of those, 4 and 6 are nearest 5
    src2 = np.array([0, 2, 3, 4, 2, 3, 1, 4])
    tgt2 = np.array([2, 3, 4, 2, 1, 0, 2, 3, 4, 3])
    assert split_pair(src2, tgt2, OPENS, RUNS_ON, anchors) == (4, 4)        # the earlier of two as near
    assert split_pair(src2, tgt2, OPENS, RUNS_ON) == (4, 5)
    assert split_pair(src, np.array([1, 5]), OPENS, RUNS_ON, anchors) == (0, 0)   # one target word


def test_anchored_cuts_cross_no_more_links_than_proportional_ones_and_the_rule_is_checked(tiny_corpus, tiny_vocab):
    from docnmt.methods.split_pairs import split_corpus
    v, corpus = tiny_vocab, tiny_corpus
    anchors = anchor_pieces(v)

    def crossed(s, t, j, k):
        once = [x for x in set(s.tolist()) & set(t.tolist()) if anchors[x] and (s == x).sum() == 1 == (t == x).sum()]
        return sum((np.flatnonzero(s == x)[0] < j) != (np.flatnonzero(t == x)[0] < k) for x in once)
    opens, joins = word_starts(v)
    moved = 0
    for i in range(corpus.n_sents):
        s, t = corpus.src[i], corpus.tgt[i]
        j, k = split_pair(s, t, opens, joins)
        ja, ka = split_pair(s, t, opens, joins, anchors)
        assert ja == j and crossed(s, t, ja, ka) <= crossed(s, t, j, k)
        moved += ka != k
    assert moved > 0                      # the rule changes some cuts of the tiny corpus
    halves = split_corpus(corpus, np.arange(corpus.n_sents), v, "anchored")
    assert halves.n_docs > 0.5 * corpus.n_sents
    with pytest.raises(ConfigError, match="split_rule"):
        Config.load("doc2sent_small").override({"train.split_rule": "commas"})


def test_anchor_pieces_are_numbers_names_and_punctuation(tiny_vocab):
    v = tiny_vocab
    anchors = anchor_pieces(v)
    ids = {v.piece(i): i for i in range(len(v))}
    assert all(anchors[i] for p, i in ids.items() if any(c.isdigit() or c.isupper() for c in p))
    assert not any(anchors[i] for p, i in ids.items() if p.strip("▁").isalpha() and p.strip("▁").islower())
    assert any(anchors[i] for p, i in ids.items() if p.strip("▁") in (",", ".", "?"))


def test_a_real_vocabulary_is_cut_between_words(tiny_vocab):
    v = tiny_vocab
    opens, joins = word_starts(v)
    src = np.array(v.encode("Could you please check the status of my order?", "src"))
    tgt = np.array(v.encode("Könnten Sie bitte den Status meiner Bestellung prüfen?", "tgt"))
    j, k = split_pair(src, tgt, opens, joins)
    assert 0 < j < len(src) and 0 < k < len(tgt)
    assert v.piece(int(src[j])).startswith("▁") and v.piece(int(tgt[k])).startswith("▁")
    assert v.decode(src[:j].tolist(), "src") + " " + v.decode(src[j:].tolist(), "src") == v.decode(src.tolist(), "src")
    assert abs(j - len(src) / 2) <= max(np.diff(np.flatnonzero(opens[src])))    # near the middle


@pytest.mark.parametrize("rule", ["middle", "anchored"])
def test_the_halves_join_the_training_instances_only_when_asked(rule, tiny_corpus, tiny_vocab):
    v, corpus = tiny_vocab, tiny_corpus
    cfg = Config.load("doc2sent_small").override({**TINY, "data.context": 1, "train.split_rule": rule})
    rows = build_instances(corpus, cfg.data)
    assert cfg.train.split_pairs == 0.0                                      # off by default
    same, same_rows = methods.training_data(cfg, corpus, rows, v, 1)
    assert same is corpus and same_rows is rows
    on = cfg.override({"train.split_pairs": 0.5})
    out, out_rows = methods.training_data(on, corpus, rows, v, 1)
    assert np.array_equal(out_rows[: len(rows)], rows) and out.n_sents > corpus.n_sents
    pairs = {(tuple(corpus.src[i]), tuple(corpus.tgt[i])) for i in range(corpus.n_sents)}
    added = range(corpus.n_docs, out.n_docs)
    assert 0.2 * corpus.n_sents < len(added) < 0.8 * corpus.n_sents
    for d in added:                 # a document of two halves that join into a training pair
        a, b = out.doc_range(d).start, out.doc_range(d).stop
        assert b - a == 2 and out.docids[d].startswith("split-pair")
        assert (tuple(np.concatenate([out.src[a], out.src[a + 1]])),
                tuple(np.concatenate([out.tgt[a], out.tgt[a + 1]]))) in pairs
        # Doc2Sent: the second half is translated with the first as its context
        assert any(np.array_equal(r, [a, a + 2, a + 1]) for r in out_rows[len(rows):])
    again, _ = methods.training_data(on, corpus, rows, v, 1)
    other, _ = methods.training_data(on, corpus, rows, v, 2)
    assert np.array_equal(again.src.tokens, out.src.tokens)              # seeded by (seed, epoch)
    assert not np.array_equal(other.src.tokens, out.src.tokens)          # drawn anew each epoch


@pytest.mark.parametrize("flag,value", [("--split-pairs", "0.3"), ("--context-margin", "0.5"),
                                        ("--coword-dropout", "0.1")])
def test_every_aid_refuses_a_sentence_level_model_in_one_line(flag, value, tiny_dir, tmp_path, cli_error):
    """(The context margin's and CoWord dropout's refusals too: docs/methods/context_margin.md,
    coword_dropout.md.)"""
    key = f"train.{flag[2:].replace('-', '_')}"
    said = f"{key} ({flag}) needs a document method"          # set by the flag, --set or a YAML file
    line = cli_error("train", tiny_dir / "data", "--save-dir", tmp_path / "m", "--arch", "transformer_tiny",
                     flag, value)
    assert said in line
    assert said in cli_error("train", tiny_dir / "data", "--save-dir", tmp_path / "m", "--arch", "transformer_tiny",
                             "--set", f"{key}={value}")
    with pytest.raises(ConfigError, match=re.escape(said)):
        methods.check(Config.load("transformer_small").override({key: 0.3}))
    assert not (tmp_path / "m").exists()
    for preset in ("doc2sent_small", "docflat_small"):       # a document mode with no context sentence
        with pytest.raises(ConfigError, match=re.escape(said)):
            methods.check(Config.load(preset).override({key: 0.3, "data.context": 0}))
        methods.check(Config.load(preset).override({key: 0.3, "data.context": 1}))
    methods.check(Config.load("doc2doc_small").override({key: 0.3, "data.context": 0}))    # whole documents


@pytest.mark.slow
@pytest.mark.parametrize("name", DOC_METHODS)
def test_one_update_with_every_document_method(name, tiny_dir, tmp_path):
    tr = aid_trainer(name, tiny_dir / "data", tmp_path / "m", {"train.split_pairs": 0.5})
    base = tr.data.train_corpus
    assert tr.train_set.corpus.n_docs > base.n_docs and tr.train_set.rows[:, 0].max() >= base.n_sents
    tr.train()
    assert tr.progress.updates == 1


def test_a_split_rule_without_split_pairs_is_refused_in_one_line():
    """``--split-rule anchored`` alone would train as if it were not there."""
    cfg = Config.load("doc2doc_small").override({"train.split_rule": "anchored"})
    with pytest.raises(ConfigError, match=r"^train.split_rule \(--split-rule\) anchored cuts split pairs, and there "
                                          r"are none: add --split-pairs"):
        methods.check(cfg)
    methods.check(cfg.override({"train.split_pairs": 0.3}))
    methods.check(cfg.override({"train.split_rule": "middle"}))          # the default, saying nothing


def test_the_first_line_names_a_qualifying_setting_only_with_the_one_it_qualifies():
    """The paper's G-Transformer presets set word dropout's epochs; with ``--word-dropout 0`` that
    setting does nothing and the run's first line leaves it out (``Setting.needs``)."""
    from docnmt.training.trainer import aids_on
    tc = Config.load("g_transformer_finetune_small").override({"train.word_dropout": 0.0}).train
    assert tc.word_dropout_epochs > 0 and "word_dropout_epochs" not in aids_on(tc)
    on = Config.load("g_transformer_finetune_small").override({"train.word_dropout": 0.1}).train
    assert aids_on(on).endswith(f"train.word_dropout 0.1, train.word_dropout_epochs {on.word_dropout_epochs}")
    both_off = Config.load("doc2doc_small").override({"train.context_margin_prob": 0.0}).train
    assert aids_on(both_off) == ""
    assert aids_on(Config.load("doc2doc_small").override({"train.split_pairs": 0.3}).train) == ", train.split_pairs 0.3"
