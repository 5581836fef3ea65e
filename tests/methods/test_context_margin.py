"""The context margin loss (docs/methods/context_margin.md): the wrong-context instance keeps the
current sentence and swaps its context in every document method's layout; the hinge is a
differentiable term with a non-zero gradient while the log-likelihood gap is below the margin and
none above it; off by default, refused without context; one update of every document method with
it on. Each test fails with the aid switched off or the swap broken."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from _tiny import DOC_METHODS, aid_trainer, history, tiny_config
from docnmt import methods
from docnmt.config import Config
from docnmt.data import InstanceSet, build_instances
from docnmt.errors import ConfigError
from docnmt.methods.context_margin import current_labels, margin_loss, swapped, with_context


def instances_of(name: str, corpus, vocab) -> tuple[Config, InstanceSet]:
    mode, over = DOC_METHODS[name]
    cfg = tiny_config(mode).override(over)
    return cfg, InstanceSet(corpus, build_instances(corpus, cfg.data), methods.data_joiner(vocab, cfg.data))


def with_context_in(inst: InstanceSet, doc: int, which: int) -> int:
    """Instance ``which`` of those of document ``doc`` that have a context."""
    ks = np.flatnonzero((inst.corpus.doc_of(inst.rows[:, 0]) == doc) & with_context(inst, np.arange(len(inst))))
    return int(ks[which])


@pytest.mark.parametrize("name", DOC_METHODS)
def test_the_wrong_context_keeps_the_current_sentence(name, tiny_corpus, tiny_vocab):
    _, inst = instances_of(name, tiny_corpus, tiny_vocab)
    k, donor = with_context_in(inst, 0, -1), with_context_in(inst, 1, 0)      # at other places in their documents
    src, tgt_in, labels, ctx = swapped(inst, k, donor)
    tail = current_labels(inst, k)
    own_labels = inst.target(k)[1]
    assert 0 < tail <= len(own_labels)
    assert np.array_equal(labels[-tail:], own_labels[-tail:])             # the same current sentence scored
    a, b, _ = inst.rows[k]
    current = tiny_corpus.src[b - 1]
    if inst.joiner.context_sents > 0:                                      # the context encoder: its ctx input
        assert np.array_equal(src, inst.source(k)) and np.array_equal(ctx, inst.context(donor))
        assert not np.array_equal(ctx, inst.context(k))
        return
    assert ctx is None and not np.array_equal(src, inst.source(k))
    da, db, _ = inst.rows[donor]
    words = src.tolist()
    for sent in [*(tiny_corpus.src[i] for i in range(da, db - 1)), current]:       # the donor's context, then ours
        n = len(sent)
        assert any(words[i: i + n] == sent.tolist() for i in range(len(words) - n + 1))
    translated = len(labels) > tail
    assert translated == (name != "doc2sent")      # every concatenation method but Doc2Sent reads a target context
    if translated:            # a translated context: the donor's, not the instance's own
        out = labels.tolist()

        def holds(sent) -> bool:
            return any(out[j: j + len(sent)] == sent.tolist() for j in range(len(out) - len(sent) + 1))
        theirs = [tiny_corpus.tgt[i] for i in range(da, db - 1)]
        assert all(holds(x) for x in theirs)
        own = [tiny_corpus.tgt[i] for i in range(a, b - 1)]
        assert not any(holds(x) for x in own if len(x) > 2 and not any(np.array_equal(x, y) for y in theirs))
        if name == "gtransformer":
            assert (src == tiny_vocab.bos).sum() == (labels == tiny_vocab.bos).sum()


def tiny_model(cfg, vocab):
    torch.manual_seed(0)
    return methods.build_model(cfg, vocab)


@pytest.mark.parametrize("name", ["doc2sent", "context"])
def test_the_hinge_has_a_gradient_below_the_margin_and_none_above(name, tiny_corpus, tiny_vocab):
    cfg, inst = instances_of(name, tiny_corpus, tiny_vocab)
    model = tiny_model(cfg, tiny_vocab).eval()          # no dropout: the gap is the contexts' alone
    ids = np.arange(len(inst))
    below = margin_loss(model, inst, ids, 1e3, 1.0, (1, 1, 0, 0))
    below.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert below.item() > 0 and any(g.abs().sum() > 0 for g in grads)
    # the gap itself is not zero: the wrong context changes the score (a swap that swaps nothing: 1e3 · rows)
    rows = int(with_context(inst, ids).sum())
    assert below.item() != pytest.approx(1e3 * rows, abs=1e-3)
    model.zero_grad()
    above = margin_loss(model, inst, ids, -1e3, 1.0, (1, 1, 0, 0))       # every gap above the margin
    above.backward()
    assert above.item() == 0
    assert all(p.grad is None or not p.grad.abs().sum() for p in model.parameters())


def test_the_draws_are_seeded_and_only_instances_with_context_count(tiny_corpus, tiny_vocab):
    cfg, inst = instances_of("doc2sent", tiny_corpus, tiny_vocab)
    model = tiny_model(cfg, tiny_vocab).eval()
    ids = np.arange(len(inst))
    a = margin_loss(model, inst, ids, 1e3, 0.5, (1, 1, 0, 0))
    assert a.item() == margin_loss(model, inst, ids, 1e3, 0.5, (1, 1, 0, 0)).item()
    assert a.item() != margin_loss(model, inst, ids, 1e3, 0.5, (1, 2, 0, 0)).item()
    starts = ids[~with_context(inst, ids)]                                   # the documents' first sentences
    assert len(starts) and margin_loss(model, inst, starts, 1e3, 1.0, (1, 1, 0, 0)) is None
    assert margin_loss(model, inst, ids, 1e3, 0.0, (1, 1, 0, 0)) is None


def test_the_registry_adds_it_only_when_asked(tiny_corpus, tiny_vocab):
    cfg, inst = instances_of("doc2sent", tiny_corpus, tiny_vocab)
    model = tiny_model(cfg, tiny_vocab)
    batch = {"ids": torch.arange(len(inst)), "seed": (1, 1, 0, 0)}
    assert cfg.train.context_margin == 0.0 and cfg.train.context_margin_prob == 0.5
    assert methods.train_loss(cfg, model, batch, None, inst) is None
    term = methods.train_loss(cfg.override({"train.context_margin": 0.5}), model, batch, None, inst)
    assert term is not None and term.requires_grad


@pytest.mark.slow
@pytest.mark.parametrize("name", DOC_METHODS)
def test_one_update_with_every_document_method(name, tiny_dir, tmp_path):
    tr = aid_trainer(name, tiny_dir / "data", tmp_path / "m",
                     {"train.context_margin": 0.5, "train.context_margin_prob": 1.0})
    batch = tr.collate(tr.epoch_batches(1)[0], 1, 0)
    term = methods.train_loss(tr.cfg, tr.model, batch, None, tr.train_set)
    assert term is not None and term.requires_grad and term.item() >= 0
    tr.train()
    assert tr.progress.updates == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["doc2doc", "gtransformer"])
def test_the_three_aids_train_together(name, tiny_dir, tmp_path):
    """The pairs of aids Tier M-fr runs (experiments/tier_mfr/tier_mfr.sh): CoWord dropout, split pairs
    and the margin in one update, the margin scoring batches that hold split halves."""
    tr = aid_trainer(name, tiny_dir / "data", tmp_path / "m",
                     {"train.coword_dropout": 0.3, "train.split_pairs": 0.5, "train.context_margin": 0.5,
                      "train.context_margin_prob": 1.0})
    assert tr.train_set.corpus.n_docs > tr.data.train_corpus.n_docs        # the halves are there
    assert tr.describe().endswith("1 updates, train.coword_dropout 0.3, train.split_pairs 0.5, "
                                  "train.context_margin 0.5, train.context_margin_prob 1.0")   # the aids on, said
    batch = tr.collate(tr.epoch_batches(1)[0], 1, 0)
    term = methods.train_loss(tr.cfg, tr.model, batch, None, tr.train_set)
    assert term is not None and term.requires_grad
    tr.train()
    assert tr.progress.updates == 1
    losses = [r["loss"] for r in history(tmp_path / "m") if "loss" in r]
    assert losses and all(np.isfinite(x) for x in losses)


@pytest.mark.slow
def test_the_trainer_adds_the_margin_to_the_loss_it_steps_on_and_logs_not_to_the_nll(tiny_dir, tmp_path):
    """The same first update with and without the margin: the same NLL (the margin's forward comes
    after the loss's), a loss larger by the term (logged as ``loss``; ``nll_loss`` without it),
    and other weights after the step."""
    runs = {}
    for name, aid in (("off", {}), ("on", {"train.context_margin": 0.5, "train.context_margin_prob": 1.0})):
        tr = aid_trainer("doc2doc", tiny_dir / "data", tmp_path / name, {"train.log_interval": 1, **aid})
        tr.train()
        row = next(r for r in history(tmp_path / name) if "loss" in r and r.get("updates") == 1)
        runs[name] = row, [p.detach().clone() for p in tr.model.parameters()]
    (off, w_off), (on, w_on) = runs["off"], runs["on"]
    assert on["nll_loss"] == pytest.approx(off["nll_loss"], rel=1e-6)
    assert on["loss"] > off["loss"] + 1e-4
    assert any(not torch.equal(a, b) for a, b in zip(w_off, w_on))


def test_a_margin_no_instance_gets_is_refused_in_one_line():
    cfg = Config.load("doc2doc_small").override({"train.context_margin": 0.5, "train.context_margin_prob": 0.0})
    with pytest.raises(ConfigError, match=r"^train.context_margin_prob \(--context-margin-prob\) 0 gives no "):
        methods.check(cfg)
    methods.check(cfg.override({"train.context_margin_prob": 0.1}))
    methods.check(cfg.override({"train.context_margin": 0.0}))          # both off: nothing to say


def test_split_pair_instances_get_split_pair_donors_and_the_data_keeps_its_draws(tiny_corpus, tiny_vocab):
    """With split pairs on, a split pair's donor is another split pair (a long document's context
    would make the wrong rows many times longer than the batch: 18 GB at Tier M-fr), a document's
    a document; without them, the draws are those of all instances, as before there were kinds."""
    from docnmt.methods.context_margin import TRIES, draw_donors
    cfg, inst = instances_of("gtransformer", tiny_corpus, tiny_vocab)
    ks = np.flatnonzero(with_context(inst, np.arange(len(inst))))
    donors, found = draw_donors(inst, ks, np.random.default_rng(3))
    cand = np.random.default_rng(3).integers(0, len(inst), (len(ks), TRIES))
    assert found.all() and all(d in row for d, row in zip(donors, cand))       # the old draws
    corpus, rows = methods.training_data(cfg.override({"train.split_pairs": 0.5}), tiny_corpus, inst.rows,
                                         tiny_vocab, 1)
    both = InstanceSet(corpus, rows, inst.joiner)
    made = corpus.generated[corpus.doc_of(both.rows[:, 0])]
    assert made.any() and not made.all()
    ks = np.flatnonzero(with_context(both, np.arange(len(both))))
    donors, found = draw_donors(both, ks, np.random.default_rng(3))
    assert found[made[ks]].all() and found[~made[ks]].mean() > 0.9
    assert np.array_equal(made[donors[found]], made[ks[found]])
