"""CoWord dropout (docs/methods/coword_dropout.md): only the words of the current (last) source
sentence are masked, the context never; seeded; off by default; applied to training batches
through the registry like every switch; one update of every document method with it on."""
from __future__ import annotations

import pytest
import torch

from _tiny import DOC_METHODS, aid_trainer
from docnmt import methods
from docnmt.config import Config
from docnmt.methods.coword_dropout import coword_dropout, current_sentence

TINY = {"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64}


def batch_of(vocab, joiner, docs: list[list[str]]) -> dict:
    """A padded source batch: each row the joined sentences of one instance, in ``joiner``'s format."""
    rows = [joiner.source([vocab.encode(s, "src") for s in sents]) for sents in docs]
    src = torch.full((len(rows), max(len(r) for r in rows)), vocab.pad)
    for i, r in enumerate(rows):
        src[i, : len(r)] = torch.as_tensor(r)
    return {"src": src}


def test_only_the_current_sentence_loses_words(tiny_vocab):
    v = tiny_vocab
    for preset in ("doc2sent_small", "g_transformer_small", "docflat_small"):
        cfg = Config.load(preset).override(TINY)
        joiner = methods.data_joiner(v, cfg.data)
        batch = batch_of(v, joiner, [["Hello there.", "How are you?", "I am fine."], ["Yes.", "No, thanks."]])
        current = current_sentence(batch["src"], joiner)
        mask = v.id("<mask>")
        out = coword_dropout(batch, 0.999, v, joiner, (1, 1, 0, 0))["src"]
        words = v.word_mask(batch["src"])
        assert (out[current & words] == mask).float().mean() > 0.9, preset     # the current sentence: masked
        assert torch.equal(out[~current], batch["src"][~current]), preset         # the context: never
        # the current sentence is the last one: its words re-encode the last sentence alone
        last = batch["src"][1][current[1] & words[1]].tolist()
        assert last == [t for t in v.encode("No, thanks.", "src") if v.word_mask(torch.tensor([t])).item()], preset


def test_the_draws_are_seeded_and_the_rate_holds(tiny_vocab):
    v = tiny_vocab
    cfg = Config.load("doc2sent_small").override(TINY)
    joiner = methods.data_joiner(v, cfg.data)
    batch = batch_of(v, joiner, [["Hello there.", "How are you doing today, my friend?"]] * 40)
    a = coword_dropout(batch, 0.3, v, joiner, (1, 2, 0, 7))["src"]
    assert torch.equal(a, coword_dropout(batch, 0.3, v, joiner, (1, 2, 0, 7))["src"])
    assert not torch.equal(a, coword_dropout(batch, 0.3, v, joiner, (1, 3, 0, 7))["src"])
    target = current_sentence(batch["src"], joiner) & v.word_mask(batch["src"])
    share = (a[target] == v.id("<mask>")).float().mean().item()
    assert 0.2 < share < 0.4


def test_the_registry_applies_it_to_training_batches_only_when_asked(tiny_vocab):
    v = tiny_vocab
    cfg = Config.load("doc2sent_small").override(TINY)
    assert cfg.train.coword_dropout == 0.0                                    # off by default
    batch = batch_of(v, methods.data_joiner(v, cfg.data), [["Hello there.", "How are you?"]] * 8)
    assert torch.equal(methods.train_batch(cfg, batch, v, 1, (1, 1, 0, 0))["src"], batch["src"])
    on = cfg.override({"train.coword_dropout": 0.5})
    assert (methods.train_batch(on, batch, v, 1, (1, 1, 0, 0))["src"] == v.id("<mask>")).any()


@pytest.mark.slow
@pytest.mark.parametrize("name", DOC_METHODS)
def test_one_update_with_every_document_method(name, tiny_dir, tmp_path):
    """The same training batch with the aid off and on: masks only in the current sentence (a context
    encoder's separate context input untouched), then one update."""
    off = aid_trainer(name, tiny_dir / "data", tmp_path / "off", {"train.coword_dropout": 0.0})
    tr = aid_trainer(name, tiny_dir / "data", tmp_path / "m", {"train.coword_dropout": 0.5})
    plain, batch = off.collate(off.epoch_batches(1)[0], 1, 0), tr.collate(tr.epoch_batches(1)[0], 1, 0)
    mask = tr.vocab.id("<mask>")
    changed = batch["src"] != plain["src"]
    assert changed.any() and (batch["src"][changed] == mask).all()
    assert not (changed & ~current_sentence(plain["src"], methods.data_joiner(tr.vocab, tr.cfg.data))).any()
    if "ctx" in plain:
        assert torch.equal(batch["ctx"], plain["ctx"])
    tr.train()
    assert tr.progress.updates == 1
