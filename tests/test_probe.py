"""Position probing (docs/methods/discourse.md#position-probing): pair sampling, labels, and a probe
run through the CLI on real text."""
import json

import numpy as np
import pytest
import torch

from _tiny import tiny_config
from docnmt.methods import build_model
from docnmt.probe import ABS_CLASSES, REL_RANGE, States, encoder_states, sample_pairs, score, table, task_data
from docnmt.readers import read_documents
from docnmt.training import Trainer
from docnmt.translate import Translator
from docnmt.vocab import Vocab


def toy_states():
    lengths = [30, 5, 50]
    pos = torch.cat([torch.arange(n) for n in lengths])
    seq = torch.cat([torch.full((n,), s) for s, n in enumerate(lengths)])
    h = torch.randn(len(pos), 8)
    return States([h, h * 2], pos, seq)


def test_pairs_stay_in_their_sequence_within_the_range():
    st = toy_states()
    i, j = sample_pairs(st, np.random.default_rng(0))
    assert len(i) == len(st.position)                                  # one partner per token
    assert torch.equal(st.sequence[i], st.sequence[j])
    d = st.position[i] - st.position[j]
    assert (d != 0).all() and (d.abs() <= REL_RANGE).all()


def test_labels_of_the_three_tasks():
    st = toy_states()
    rng = np.random.default_rng(0)
    x, y, _ = task_data(st, "absolute", 1, rng, 10**6)
    assert torch.equal(y, st.position) and torch.equal(x, st.layers[1])
    x, y, d = task_data(st, "relative", 0, rng, 10**6)
    assert y.min() >= 0 and y.max() < 2 * REL_RANGE
    assert torch.equal(y[d == -1], torch.full_like(y[d == -1], REL_RANGE - 1))
    assert torch.equal(y[d == 1], torch.full_like(y[d == 1], REL_RANGE))
    i, j = st.pairs
    torch.testing.assert_close(x, st.layers[0][i] - st.layers[0][j])
    _, y, d = task_data(st, "word_order", 0, rng, 10**6)
    assert torch.equal(y, (d < 0).long())                              # i before j


def test_every_layer_is_probed_on_the_same_subsample():
    st = toy_states()
    first = task_data(st, "relative", 0, np.random.default_rng([1, 0]), 20)     # draws the pairs
    second = task_data(st, "relative", 1, np.random.default_rng([1, 0]), 20)
    torch.testing.assert_close(second[0], 2 * first[0])                 # layer 1 is layer 0 × 2
    assert torch.equal(first[1], second[1]) and torch.equal(first[2], second[2])


def fixed_probe(n_classes):
    """A probe whose prediction is the index of the largest input feature (identity weights)."""
    probe = torch.nn.Linear(n_classes, n_classes)
    with torch.no_grad():
        probe.weight.copy_(torch.eye(n_classes))
        probe.bias.zero_()
    return probe


def test_scores_exact_and_within_three_positions():
    """Absolute task: exact accuracy, and ±3 accuracy counting |prediction − position| <= 3 only."""
    y = torch.full((8,), 100)
    off = torch.tensor([0, 3, -3, 4, -4, 30, -30, 1])           # prediction − position
    pred = y + off
    x = torch.nn.functional.one_hot(pred, ABS_CLASSES).float()
    out = score(fixed_probe(ABS_CLASSES), (x, y, y), "absolute")
    assert out == {"accuracy": 1 / 8, "n": 8, "accuracy_pm3": 4 / 8}          # 0, 3, −3 and 1


def test_scores_pair_tasks_per_distance():
    classes = 2 * REL_RANGE
    y = torch.tensor([0, 1, 2, 3])
    pred = torch.tensor([0, 9, 2, 9])
    dist = torch.tensor([-2, -2, 5, 7])
    out = score(fixed_probe(classes), (torch.nn.functional.one_hot(pred, classes).float(), y, dist), "relative")
    assert out == {"accuracy": 0.5, "n": 4, "by_distance": {-2: 0.5, 5: 1.0, 7: 0.0}}


def test_table_lists_every_layer_of_every_model():
    res = {"absolute": [{"accuracy": 0.5, "accuracy_pm3": 0.9}, {"accuracy": 0.25, "accuracy_pm3": 0.75}],
           "relative": [{"accuracy": 0.1}, {"accuracy": 0.2}], "word_order": [{"accuracy": 0.6}, {"accuracy": 0.7}]}
    text = table({"a": res}, {"a": {64: 0.5, 128: 0.4}})
    assert "| a | 0.500 (0.900) / 0.250 (0.750) | 0.100 / 0.200 | 0.600 / 0.700 |" in text
    assert "| a | 0.500 | 0.400 |" in text and "≤128 tokens" in text


# models of every method whose inputs or encoder shapes differ from the vanilla Transformer's
METHODS = {
    "ptransformer": ("doc2doc", {"method.name": "ptransformer", "method.rel_max_distance": 8}),
    "gtransformer": ("doc2doc", {"method.name": "gtransformer", "data.separator": "group",
                                 "method.combined_enc_self": 1, "method.combined_dec_self": 1,
                                 "method.combined_cross": 1}),
    "context": ("sent2sent", {"method.name": "context_transformer", "data.context_input": 2}),
    "docflat": ("pseudodoc", {"method.name": "docflat", "data.separator": "global_index",
                              "data.batch_order": "ordered", "data.context": 2}),
    "mbe": ("pseudodoc", {"method.name": "docflat", "method.flat_block": "mbe", "data.separator": "global_index",
                          "data.batch_order": "ordered", "data.context": 2}),
}


def _untrained(method: str, tiny_dir):
    """A Translator over a freshly initialised model of ``METHODS[method]``, two TED documents, the config."""
    mode, over = METHODS[method]
    cfg, vocab = tiny_config(mode).override(over), Vocab.load(tiny_dir / "data")
    torch.manual_seed(0)
    return Translator(build_model(cfg, vocab), vocab, cfg), read_documents(str(tiny_dir / "raw" / "chat.en"))[:2], cfg


@pytest.mark.parametrize("method", list(METHODS))
def test_encoder_states_of_every_method(method, tiny_dir):
    """The probe reads every encoder layer of any method's model, with the model's own extra
    inputs (the context encoder's previous sentences) and without positions a method prepends
    (MBE's batch-mean embedding): one state per real source token and layer."""
    tr, docs, cfg = _untrained(method, tiny_dir)
    st = encoder_states(tr, docs)
    assert len(st.layers) == len(tr.model.encoder.layers) == cfg.model.encoder_layers
    assert all(h.shape == (len(st.position), cfg.model.d_model) for h in st.layers)
    for s in st.sequence.unique():                   # each input's real tokens at positions 0, 1, …
        pos = st.position[st.sequence == s]
        assert torch.equal(pos.sort().values, torch.arange(len(pos)))
    assert not torch.allclose(st.layers[0], st.layers[-1])


@pytest.mark.parametrize("method", ["docflat", "mbe"])
def test_encoder_states_do_not_depend_on_the_batch_a_docflat_input_shares(method, tiny_dir):
    """The probe batches inputs by length, whatever their documents: DocFlat's flat-batch
    attention must not let the rows of a batch see each other there (they would, by design, in
    its own ordered batches), so batched states equal those of each input alone."""
    tr, docs, _ = _untrained(method, tiny_dir)
    batched, alone = encoder_states(tr, docs), encoder_states(tr, docs, batch_tokens=1)
    assert batched.sequence.unique().numel() > 2          # several inputs shared batches
    for s in batched.sequence.unique():
        a, b = (st.sequence == s for st in (batched, alone))
        order_a, order_b = batched.position[a].argsort(), alone.position[b].argsort()
        for la, lb in zip(batched.layers, alone.layers):
            torch.testing.assert_close(la[a][order_a], lb[b][order_b], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_probe_cli_on_real_documents(tiny_dir, tmp_path, run_cli):
    Trainer.from_dirs(tiny_config("doc2doc", max_update=4), tiny_dir / "data", tmp_path / "m",
                      progress_bar=False).train()
    raw = tiny_dir / "raw" / "chat.en"
    status, out, _ = run_cli("probe", tmp_path / "m", "--train", raw, "--valid", raw, "--test", raw,
                             "--out", tmp_path / "probe", "--lengths", "32", "64", "--max-examples", "2000",
                             "--max-epochs", "3")
    assert status == 0, out
    result = json.loads((tmp_path / "probe" / "probe.json").read_text())
    layers = result["results"]["m"]["absolute"]
    assert [r["layer"] for r in layers] == [1, 2]
    assert all(0.0 <= r["accuracy"] <= r["accuracy_pm3"] <= 1.0 for r in layers)
    assert set(result["by_input_length"]["m"]) == {"32", "64"}
    for png in ("probe_layers.png", "probe_relative_distance.png", "probe_word_order_distance.png",
                "probe_input_length.png"):
        assert (tmp_path / "probe" / png).stat().st_size > 0
    assert "| m | " in (tmp_path / "probe" / "probe.md").read_text() and "| m | " in out
    status, _, err = run_cli("probe", tmp_path / "m", "--train", raw, "--valid", raw, "--test", raw,
                             "--out", tmp_path / "probe")
    assert status != 0 and "exists; pass --force" in err              # an earlier probe is never overwritten
