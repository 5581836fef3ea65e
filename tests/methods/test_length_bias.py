"""Length-bias fixes (docs/methods/length_bias.md, its "Tests" section): dynamic length sampling,
length-aware attention."""
import math
from dataclasses import replace

import numpy as np
import pytest

from _tiny import assert_incremental_equals_full, random_pair, tiny_config, translate_checked
from docnmt.config import section_class
from docnmt.data import Corpus, ModeConfig, Side, build_instances
from docnmt.errors import ConfigError
from docnmt.methods import training_rows
from docnmt.methods.length_bias import dls_instances, dls_probabilities, dls_segments, dls_temperature, format_marks
from docnmt.readers import read_documents
from docnmt.training import Trainer
from docnmt.translate import Translator

DataConfig = section_class("data")     # the data section with the switches' settings (data.dls, ...)


def test_dls_distribution_follows_the_temperature_schedule():
    L = 512
    for T, mean in ((math.e ** 0, 0.6), (math.e ** 3, 20), (math.e ** 4, 54)):     # docs/methods/length_bias.md
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
    mode = DataConfig("doc2doc", max_instance_tokens=128, dls=True, dls_start_epoch=2)
    np.testing.assert_array_equal(training_rows(tiny_corpus, mode, epoch=5), rows(5))
    assert not np.array_equal(build_instances(tiny_corpus, mode, training=False), rows(5))  # validation: fixed
    # fine-tuning from a sentence model: epoch 1 continues the curriculum at epoch 1 + offset
    later = DataConfig("doc2doc", max_instance_tokens=128, dls=True, dls_start_epoch=2, dls_epoch_offset=6)
    np.testing.assert_array_equal(training_rows(tiny_corpus, later, epoch=1), rows(7))


def test_dls_segments_of_the_group_format_stay_under_the_budget(tiny_vocab):
    """G-Transformer's format adds <s> and </s> to every sentence: DLS counts both, so a
    segment of several sentences stays under the largest budget it can draw on both sides
    (short sentences, where one mark per sentence used to overshoot it)."""
    from docnmt.data import Corpus
    from docnmt.document import Document
    words = ["Yes.", "No.", "Thanks!", "Go on.", "Right.", "Okay."]
    docs = [Document(str(d), [words[(d + i) % 6] for i in range(80)], [words[(d + 2 * i) % 6] for i in range(80)])
            for d in range(3)]
    corpus = Corpus.encode(docs, tiny_vocab)
    src, tgt = corpus.src.lengths, corpus.tgt.lengths
    mode = DataConfig("doc2doc", max_instance_tokens=64, dls=True, dls_start_epoch=2, separator="group")
    multi = 0
    for epoch in (6, 7, 8, 9):
        for a, b, _ in training_rows(corpus, mode, epoch=epoch):
            if b - a > 1:
                multi += 1
                assert src[a:b].sum() + 2 * (b - a) < 64 and tgt[a:b].sum() + 2 * (b - a) < 64
    assert multi > 10


def test_dls_counts_the_format_marks_and_needs_a_budget(tmp_path):
    assert format_marks("index") == 1      # <sepI> or </s>
    assert format_marks("group") == 2      # <s> … </s>
    side = Side.from_lists([[5] * 7, [6] * 4, [7] * 3])
    corpus = Corpus(side, side, np.array([0, 3]), ["d"])
    with pytest.raises(ConfigError, match="max_instance_tokens"):    # not numpy's zero-size error
        training_rows(corpus, DataConfig(mode="doc2doc", dls=True, max_instance_tokens=0), epoch=1)
    assert len(build_instances(corpus, ModeConfig(mode="doc2doc", max_instance_tokens=0))) == 1


@pytest.mark.slow
def test_trainer_resamples_every_epoch_and_plots_the_lengths(tiny_dir, tmp_path):
    """Each epoch trains on the instances DLS draws for it: sentences in epoch 1, a new draw in
    every later epoch (the same one make_train_set gives for that epoch)."""
    data = tiny_dir / "data"
    cfg = tiny_config("doc2doc", max_epoch=3).override({"data.dls": True, "data.dls_start_epoch": -2,  # T=e^4, e^5
                                                       "data.max_instance_tokens": 200})
    tr = Trainer.from_dirs(cfg, data, tmp_path / "m", progress_bar=False)
    assert len(tr.make_train_set(1)) == tr.train_corpus.n_sents
    np.testing.assert_array_equal(tr.make_train_set(3).rows, tr.make_train_set(3).rows)
    trained, batches = {}, tr.epoch_batches

    def spy(epoch):                  # the instances each epoch's batches are drawn from
        trained[epoch] = tr.train_set.rows.copy()
        return batches(epoch)
    tr.epoch_batches = spy
    tr.train()
    assert sorted(trained) == [1, 2, 3]
    assert (trained[1][:, 1] - trained[1][:, 0] == 1).all()                  # epoch 1: sentences
    for epoch in (2, 3):
        np.testing.assert_array_equal(trained[epoch], tr.make_train_set(epoch).rows)
    assert not np.array_equal(trained[2], trained[3])                         # resampled
    assert (trained[3][:, 1] - trained[3][:, 0]).max() > 1                    # multi-sentence segments
    assert (tmp_path / "m" / "dls_lengths.png").stat().st_size > 0


# ---- length-aware attention (docs/methods/length_bias.md#length-aware-attention) --------------

import torch  # noqa: E402

from docnmt.attention import AttnSpec  # noqa: E402
from docnmt.methods.length_bias import LengthAwareScale  # noqa: E402
from docnmt.model import ModelConfig, Transformer  # noqa: E402

CFG = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                  dropout=0.0)     # length-aware attention is the piece the tests attach (model.length_scale)


def test_lambda_is_one_at_the_mean_length_and_uses_causal_length_in_the_decoder():
    laa = LengthAwareScale()
    laa.set_training_lengths(mean_src=8, mean_tgt=12)                    # n̄: 8 source, 12 / 2 = 6 decoder self
    src_pad = torch.zeros(2, 8, dtype=torch.bool)
    src_pad[1, 4:] = True                                        # second source: 4 tokens
    specs = {"enc_self": AttnSpec()}
    laa.encoder(specs, None, src_pad)
    assert specs["enc_self"].scale.flatten().tolist() == pytest.approx([1.0, math.log(4) / math.log(8)])
    tgt = torch.full((2, 10), 5)
    tgt[1, 7:] = 0                                               # second target: 7 tokens
    dec = {"dec_self": AttnSpec(is_causal=True), "cross": AttnSpec(scale=torch.tensor(2.0))}
    laa.decoder(dec, tgt, src_pad, 0, pad_id=0)
    lam = dec["dec_self"].scale[:, 0, :, 0]
    assert lam[0, 5].item() == pytest.approx(1.0)               # t = 6 = n̄
    assert lam[0, 0].item() == pytest.approx(0.1 / math.log(6))  # n = 1: max(log 1, 0.1)
    assert lam[1, 9].item() == pytest.approx(math.log(7) / math.log(6))   # min(t, T) = 7
    torch.testing.assert_close(dec["cross"].scale.flatten(), 2 * torch.tensor([1.0, math.log(4) / math.log(8)]))


def test_mean_lengths_are_saved_with_the_weights_and_incremental_equals_full():
    torch.manual_seed(0)
    model = Transformer(CFG).eval()
    model.add_piece("length_scale", LengthAwareScale())
    model.set_training_lengths(7, 9)
    assert {"length_scale.log_mean_src", "length_scale.log_mean_tgt"} <= set(model.state_dict())
    src, tgt = random_pair(src_len=7, tgt_len=9)
    assert_incremental_equals_full(model, src, tgt)
    with torch.no_grad():
        full = model.decode(tgt, model.encode(src))
        plain = Transformer(ModelConfig(**vars(CFG))).eval()
        plain.load_state_dict({k: v for k, v in model.state_dict().items() if "length_scale" not in k})
        assert not torch.allclose(plain.decode(tgt, plain.encode(src)), full)


@pytest.mark.slow
def test_trainer_refreshes_the_mean_lengths_every_epoch(tiny_dir, tmp_path):
    data = tiny_dir / "data"
    cfg = tiny_config("doc2doc", max_epoch=3).override({"data.dls": True, "data.dls_start_epoch": -3,  # T=e^5, e^6
                                                       "data.max_instance_tokens": 200, "model.length_aware": True})
    tr = Trainer.from_dirs(cfg, data, tmp_path / "m", progress_bar=False)
    first = float(tr.model.length_scale.log_mean_src)
    assert first == pytest.approx(math.log(tr.train_set.src_lens.mean()))
    tr.train()
    last = float(tr.model.length_scale.log_mean_src)
    assert last == pytest.approx(math.log(tr.make_train_set(3).src_lens.mean()))   # the last trained epoch's
    assert last > first                                          # DLS lengthened the segments
    from safetensors.torch import load_file

    from docnmt.checkpoint import last_checkpoint
    saved = load_file(str(last_checkpoint(tmp_path / "m") / "model.safetensors"))
    assert float(saved["length_scale.log_mean_src"]) == pytest.approx(last)


# ---- sliding decoding (docs/methods/length_bias.md#sliding-decoding) --------------------------

from docnmt.methods.length_bias import SentenceCount, sliding_windows  # noqa: E402


@pytest.mark.parametrize("seed", range(5))
def test_windows_fit_the_budget_and_cover_every_sentence_once(seed):
    rng = np.random.default_rng(seed)
    costs = rng.integers(3, 60, size=40)
    costs[7] = 150                                                # longer than the budget: alone
    budget = 120
    wins = sliding_windows(costs, budget)
    new_parts = []
    for i, (a, b) in enumerate(wins):
        assert costs[a:b].sum() <= budget or b - a == 1
        start_new = wins[i - 1][1] if i else a
        assert a <= start_new < b                                  # overlap = [a, previous end)
        new_parts.append(np.arange(start_new, b))
    np.testing.assert_array_equal(np.concatenate(new_parts), np.arange(len(costs)))
    assert any(b - a == 1 and a == 7 for a, b in wins)
    assert sliding_windows(np.array([10, 20, 30]), budget) == [(0, 3)]   # short documents: one window


def test_sentence_count_constraint_allows_the_next_separator_and_ends_at_n():
    sep = {1: 40, 2: 41, 3: 42}
    proc = SentenceCount(torch.tensor([3]), list(sep.values()), torch.tensor([40, 41, 42]), end=3)
    lprobs = torch.zeros(1, 50)
    far = torch.tensor([100])                                                   # length limit
    proc(2, torch.tensor([[2, 10, 40, 11]]), lprobs, torch.tensor([0]), far)    # one separator so far
    assert torch.isfinite(lprobs[0, 41]) and not torch.isfinite(lprobs[0, [40, 42, 3]]).any()
    assert torch.isfinite(lprobs[0, 12])                                          # words too
    lprobs = torch.zeros(1, 50)
    proc(4, torch.tensor([[2, 10, 40, 11, 41, 12]]), lprobs, torch.tensor([0]), far)   # N−1 = 2 separators
    assert torch.isfinite(lprobs[0, 3]) and not torch.isfinite(lprobs[0, [40, 41, 42]]).any()


def test_sentence_count_forces_the_next_separator_when_the_budget_runs_short():
    """A separator is forced when the steps left equal the marks missing (the
    separators still to come and the end token, which the length limit forces;
    docs/methods/length_bias.md#sliding-decoding)."""
    proc = SentenceCount(torch.tensor([3, 3]), [40, 41, 42], torch.tensor([40, 41, 42]), end=3)
    tokens = torch.tensor([[2, 10, 40, 11], [2, 10, 40, 11]])                  # one separator: 2 missing
    lprobs = torch.randn(2, 50)
    ref = lprobs.clone()
    proc(4, tokens, lprobs, torch.tensor([0, 1]), torch.tensor([5, 6]))          # steps 4..5 | 4..6 left
    assert (lprobs[0] == float("-inf")).sum() == 49 and lprobs[0, 41] == ref[0, 41]   # forced, its log-prob kept
    assert torch.isfinite(lprobs[1, 12]) and torch.isfinite(lprobs[1, 41])       # one step to spare: free


@pytest.mark.slow
@pytest.mark.parametrize("method", ["transformer", "gtransformer", "ptransformer"])
def test_sliding_decoding_translates_every_sentence_once(tiny_dir, tmp_path, monkeypatch, method):
    data = tiny_dir / "data"
    over = {"data.max_instance_tokens": 120}
    if method == "gtransformer":
        over.update({"method.name": "gtransformer", "data.separator": "group", "method.combined_enc_self": 1,
                     "method.combined_dec_self": 1, "method.combined_cross": 1})
    if method == "ptransformer":
        over.update({"method.name": "ptransformer"})
    Trainer.from_dirs(tiny_config("doc2doc", max_update=6).override(over), data, tmp_path / "m",
                      progress_bar=False).train()
    # spies: what each round adds to the outputs, and every forced prefix's sentences
    decode, prefix, seen = Translator._decode, None, {"forced": [], "outputs": None}

    def spy_decode(self, corpus, rows, new_from, outputs, *args, **kw):
        nonlocal prefix
        if prefix is None:
            prefix = self.joiner.prefix
            self.joiner.prefix = lambda sents, first: (seen["forced"].append([list(s) for s in sents])
                                                       or prefix(sents, first))
        before = [len(o) for o in outputs]
        decode(self, corpus, rows, new_from, outputs, *args, **kw)
        added = np.array([len(o) for o in outputs]) - before
        new = np.zeros(len(outputs), dtype=int)
        for (_, end, _), nf in zip(rows, new_from):
            new[nf:end] += 1
        np.testing.assert_array_equal(added, new)         # only the new sentences are generated
        seen["outputs"] = outputs

    monkeypatch.setattr(Translator, "_decode", spy_decode)
    tr = Translator.load(tmp_path / "m", device="cpu")
    docs = [d.src[:14] for d in read_documents(str(tiny_dir / "raw/chat.en"), fmt="marker")[:2]]
    # (no fallback: its sentence-alone repairs of what the walk lost are decodes of their own)
    out, report = tr.translate(docs, replace(tr.cfg.decode, beam=2, sliding=True, fallback="none"))
    assert report.instances > 2 * 2                                  # several windows per document
    outputs = seen["outputs"]
    assert all(len(o) == 1 for o in outputs)                         # each sentence translated exactly once
    assert [len(d.tgt) for d in out] == [len(d) for d in docs]
    forced = [f for f in seen["forced"] if f]
    assert forced                                                    # later windows force their overlap ...
    flat = [list(o[0]) for o in outputs]
    for sents in forced:                                             # ... as the earlier output of those sentences
        assert any(flat[i:i + len(sents)] == sents for i in range(len(flat)))
    monkeypatch.undo()
    translate_checked(tmp_path / "m", tiny_dir / "raw/chat.en", 14, sliding=True)   # batched = unbatched
    tr.cfg.data.max_instance_tokens = 0                              # --max-instance-tokens 0: no window
    with pytest.raises(ConfigError, match="sliding decoding needs a window"):
        tr.translate([["One.", "Two."]], replace(tr.cfg.decode, sliding=True))
