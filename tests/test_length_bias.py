"""Length-bias fixes (SPEC §2.5, §6; §13 items 6-8): dynamic length sampling, length-aware attention."""
import math

import numpy as np
import pytest

from _tiny import SHARED, tiny_config, tiny_data
from docnmt.data import (ModeConfig, build_instances, dls_instances, dls_probabilities, dls_segments,
                         dls_temperature)
from docnmt.train import Trainer


def test_dls_distribution_follows_the_temperature_schedule():
    L = 512
    for T, mean in ((math.e ** 0, 0.6), (math.e ** 3, 20), (math.e ** 4, 54)):     # SPEC §2.5 figures
        p = dls_probabilities(T, L)
        assert p.sum() == pytest.approx(1.0)
        assert p[5] / p[4] == pytest.approx(math.exp(-1 / T))                    # p ∝ exp(−l/T)
        assert (np.arange(L) * p).sum() == pytest.approx(mean, abs=1.0)
    assert dls_probabilities(0.0, L)[0] == 1.0                                   # T = 0: sentence level
    assert dls_temperature(1, 20) == 0.0 and dls_temperature(22, 20) == pytest.approx(math.e ** 2)


def test_dls_segments_reproduce_the_papers_example():
    """Sentences of 9, 15, 25, 8 tokens with draws 35, 1, 12 give segments of 24, 25, 8."""
    costs = np.array([9, 15, 25, 8])
    draws = iter([35, 1, 12])
    parts = dls_segments(costs, costs, 0, 4, draws.__next__)
    assert [int(costs[a:b].sum()) for a, b in parts] == [24, 25, 8]


def test_dls_instances_are_seeded_per_epoch_and_cover_each_sentence_once(tiny_corpus):
    def rows(epoch, seed=1):
        return dls_instances(tiny_corpus, epoch, seed, start_epoch=2, max_length=128)
    assert (rows(1)[:, 1] - rows(1)[:, 0] == 1).all()                          # epoch 1: sentences
    np.testing.assert_array_equal(rows(5), rows(5))                             # deterministic
    assert not np.array_equal(rows(5), rows(6)) and not np.array_equal(rows(5), rows(5, seed=2))
    for epoch in (1, 4, 7):
        r = rows(epoch)
        covered = np.concatenate([np.arange(a, b) for a, b, _ in r])
        np.testing.assert_array_equal(np.sort(covered), np.arange(tiny_corpus.n_sents))   # no overlap, no gap
    assert (rows(7)[:, 1] - rows(7)[:, 0]).mean() > 1                          # later epochs: longer
    mode = ModeConfig("doc2doc", max_instance_tokens=128, dls=True, dls_start_epoch=2)
    np.testing.assert_array_equal(build_instances(tiny_corpus, mode, epoch=5), rows(5))
    assert not np.array_equal(build_instances(tiny_corpus, mode, training=False), rows(5))  # validation: fixed


@pytest.mark.skipif(not SHARED.exists(), reason="needs ../shared/data")
def test_trainer_resamples_every_epoch_and_plots_the_lengths(tmp_path):
    data = tiny_data(tmp_path)
    cfg = tiny_config("doc2doc", max_epoch=3).override({"data.dls": True, "data.dls_start_epoch": 2,
                                                       "data.max_instance_tokens": 200})
    tr = Trainer(cfg, data, tmp_path / "m", progress_bar=False)
    assert len(tr.make_train_set(1)) == tr.train_corpus.n_sents
    np.testing.assert_array_equal(tr.make_train_set(3).rows, tr.make_train_set(3).rows)
    tr.train()
    assert (tmp_path / "m" / "dls_lengths.png").stat().st_size > 0
