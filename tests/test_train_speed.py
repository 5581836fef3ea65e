"""The training-speed settings of issue 64, tested on the CPU: vocabulary rows padded to a multiple of
64 (the same loss, never predicted, saved without the padding), the fused AdamW chosen by device,
no host syncs in the update loop (the same logged losses), and --compile's bucketed batch lengths."""
import pytest
import torch

from _tiny import history, random_pair, tiny_config
from docnmt.checkpoint import load_weights, save_weights
from docnmt.model import Transformer
from docnmt.padded_vocab import vocab_matrices
from docnmt.search import SearchConfig, beam_search
from docnmt.training import Trainer, build_optimizer
from test_train import synthetic_data


def models(vocab: int = 45, **model):
    """An unpadded model and the same weights in a model padded to 64 rows (eval mode)."""
    cfg = tiny_config().model
    cfg.vocab_size, cfg.pad_id = vocab, 0
    for k, v in model.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    plain = Transformer(cfg).eval()
    padded = Transformer(type(cfg)(**{**vars(cfg), "pad_vocab_to": 64})).eval()
    padded.load_state_dict(plain.state_dict())
    return plain, padded


@pytest.mark.parametrize("model", [{}, {"tie_output": False, "output_bias": True}, {"output_tokens": 40}])
def test_a_padded_vocabulary_gives_the_unpadded_loss_and_gradients(model):
    plain, padded = models(**model)
    table = padded.decoder.embed.table.weight
    assert table.shape[0] == 64 and plain.decoder.embed.table.weight.shape[0] == 45
    assert not table[45:].any()                                       # the padding rows are zero
    src, tgt = random_pair(vocab=40)
    labels = torch.cat([tgt[:, 1:], tgt.new_full((2, 1), 3)], 1)
    labels[1, -3:] = 0
    out = []
    for m in (plain, padded):
        m.zero_grad()
        loss, nll, n = m(src, tgt, labels, 0.1)
        loss.backward()
        out.append((loss, nll, n, {k: p.grad for k, p in m.named_parameters()}))
    (l1, n1, t1, g1), (l2, n2, t2, g2) = out
    assert t1 == t2 == int(labels.ne(0).sum())
    torch.testing.assert_close(l2, l1, rtol=1e-6, atol=0)
    torch.testing.assert_close(n2, n1, rtol=1e-6, atol=0)
    for k, g in g1.items():
        torch.testing.assert_close(g2[k][: g.shape[0]], g, rtol=1e-5, atol=1e-7)
        assert not g2[k][g.shape[0]:].any()                          # no gradient reaches a padding row
    with torch.no_grad():
        torch.testing.assert_close(padded(src, tgt), plain(src, tgt))  # logits: the vocabulary's width


def test_a_padded_model_never_predicts_a_padding_row():
    """Padding rows that would win every step if they were scored change nothing: the same beams."""
    plain, padded = models()
    with torch.no_grad():
        for w in vocab_matrices(padded):
            w[45:] = 50.0 * plain.decoder.embed.table.weight[5:24]       # huge logits, were they computed
    src, _ = random_pair(vocab=40)
    search = SearchConfig(beam=4, max_len_b=12, nbest=4)
    want = beam_search(plain, src, search, bos=2, eos=3)
    got = beam_search(padded, src, search, bos=2, eos=3)
    assert [[h.tokens for h in row] for row in got] == [[h.tokens for h in row] for row in want]
    assert max(t for row in got for h in row for t in h.tokens) < 45


def test_weights_are_saved_without_padding_and_load_into_either_model(tmp_path):
    plain, padded = models()
    with torch.no_grad():
        padded.decoder.embed.table.weight[:45] += 0.01                   # padded weights of its own
    save_weights(padded, tmp_path / "padded.safetensors")
    from safetensors.torch import load_file
    saved = load_file(str(tmp_path / "padded.safetensors"))
    assert saved["encoder.embed.table.weight"].shape == (45, 32)        # the vocabulary's shape on disk
    load_weights(plain, tmp_path / "padded.safetensors")                # into an unpadded model
    torch.testing.assert_close(plain.decoder.embed.table.weight, padded.decoder.embed.table.weight[:45])
    save_weights(plain, tmp_path / "plain.safetensors")                 # an old, unpadded checkpoint
    fresh = models()[1]
    load_weights(fresh, tmp_path / "plain.safetensors")                 # into a padded model
    src, _ = random_pair(vocab=40)
    search = SearchConfig(beam=4, max_len_b=12)
    assert [h.tokens for row in beam_search(fresh, src, search, bos=2, eos=3) for h in row] == \
        [h.tokens for row in beam_search(plain, src, search, bos=2, eos=3) for h in row]


def test_adamw_is_fused_on_one_device_and_not_across_devices(monkeypatch):
    from types import SimpleNamespace

    from docnmt.training import optim
    on = lambda *devices: [SimpleNamespace(device=torch.device(d)) for d in devices]  # noqa: E731
    assert optim.fused_adam(on("cuda:0", "cuda:0")) and optim.fused_adam(on("cpu", "cpu"))
    assert not optim.fused_adam(on("cuda:0", "cuda:1")) and not optim.fused_adam(on("cuda:0", "cpu"))
    assert not optim.fused_adam(on("meta"))
    model, tc = torch.nn.Linear(4, 4), tiny_config().train
    seen = []
    monkeypatch.setattr(optim, "fused_adam", lambda params: seen.append(len(params)) or False)
    opt, _ = build_optimizer(model, tc, [])
    assert seen == [2] and isinstance(opt, torch.optim.AdamW) and not opt.defaults["fused"]
    monkeypatch.setattr(optim, "fused_adam", lambda params: True)
    assert build_optimizer(model, tc, [])[0].defaults["fused"]


# ---- no host syncs in the update loop ---------------------------------------------------------

def in_memory_trainer(tmp_path, **train):
    from docnmt.methods import build_model
    from docnmt.training import RunDir
    cfg = tiny_config(max_tokens=200, **train)
    data = synthetic_data(cfg)
    torch.manual_seed(cfg.train.seed)
    (tmp_path / "run").mkdir(parents=True)
    return Trainer(cfg, build_model(cfg, data.vocab), data, RunDir(tmp_path / "run"), progress_bar=False)


READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")


@pytest.fixture
def host_reads(monkeypatch):
    """Counts the calls that bring a tensor's value to the host (``.item()``, ``.tolist()``,
    ``bool``/``float``/``int`` of a tensor) while ``counting["on"]``."""
    counts = {"on": False, "reads": 0}
    for name in READS:
        real = getattr(torch.Tensor, name)

        def counted(self, *a, _real=real, **k):
            counts["reads"] += counts["on"]
            return _real(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


def test_an_update_reads_nothing_from_the_device_and_a_log_line_once(tmp_path, host_reads):
    trainer = in_memory_trainer(tmp_path, max_update=20, log_interval=4, update_freq=2)
    batches = trainer.epoch_batches(1)[:4]
    assert len(batches) == 4
    host_reads["on"] = True
    for i in range(0, 4, 2):
        trainer.update([trainer.collate(b, 1, i + j) for j, b in enumerate(batches[i: i + 2])])
    assert host_reads["reads"] == 0
    window = trainer.losses.read(trainer.save_dir)
    assert host_reads["reads"] == 1 and window["tokens"] > 0          # one read for both updates


def test_the_training_loop_reads_the_device_once_per_log_interval(tmp_path, host_reads, monkeypatch):
    trainer = in_memory_trainer(tmp_path, max_update=12, log_interval=4)
    for name in ("validate", "save"):           # validation and checkpoints read what they need
        real = getattr(trainer, name)

        def paused(*a, _real=real, **k):
            host_reads["on"] = False
            try:
                return _real(*a, **k)
            finally:
                host_reads["on"] = True
        monkeypatch.setattr(trainer, name, paused)
    host_reads["on"] = True
    trainer.train()
    logged = [r["updates"] for r in history(tmp_path / "run") if "loss" in r]
    assert logged == [4, 5, 8, 10, 12]                  # every 4 updates, and where an epoch ends
    assert 0 < host_reads["reads"] <= len(logged)       # one read per log line, not one per update


def old_update(trainer, batches):
    """The update as it was before issue 64: the loss read per update, the real labels found on
    the device (``int(select.sum())`` in the model), a non-finite loss checked before the step."""
    import math
    t = trainer
    t.model.train()
    t.optimizer.zero_grad(set_to_none=True)
    loss_sum = nll_sum = 0.0
    ntokens = 0
    for batch in batches:
        loss, nll, n = t.model(batch["src"], batch["tgt_in"], batch["labels"], t.cfg.train.label_smoothing)
        loss.backward()
        loss_sum, nll_sum, ntokens = loss_sum + float(loss.detach()), nll_sum + float(nll), ntokens + n
    assert math.isfinite(loss_sum)
    torch._foreach_mul_([p.grad for p in t.model.parameters() if p.grad is not None], 1 / max(ntokens, 1.0))
    t.optimizer.step()
    t.scheduler.step()
    t.progress.updates += 1
    t.losses.window.update(loss=t.losses.window["loss"] + loss_sum, nll=t.losses.window["nll"] + nll_sum,
                           tokens=t.losses.window["tokens"] + ntokens)


def test_the_logged_losses_are_those_of_the_old_update_exactly(tmp_path):
    logs = {}
    for name in ("old", "new"):
        trainer = in_memory_trainer(tmp_path / name, max_update=12, log_interval=3, update_freq=2)
        if name == "old":
            trainer.update = lambda batches, t=trainer: old_update(t, batches)
        trainer.train()
        logs[name] = [(r["updates"], r["loss"], r["nll_loss"]) for r in history(tmp_path / name / "run")
                      if "loss" in r]
    assert len(logs["new"]) == 4 and logs["new"] == logs["old"]


# ---- --compile on bucketed batch lengths --------------------------------------------------------

def test_bucket_lengths_are_multiples_of_64_then_four_per_doubling():
    from docnmt.training.data import bucket_length
    assert [bucket_length(n) for n in (1, 64, 65, 500, 512, 513, 700, 1025, 16000)] == \
        [64, 64, 128, 512, 512, 640, 768, 1280, 16384]
    assert len({bucket_length(n) for n in range(1, 513)}) == 8


@pytest.mark.slow
def test_compiled_training_on_bucketed_lengths_compiles_at_most_once_per_bucket(tmp_path, strict_recompiles):
    """--compile pads every batch to a bucket length (the loss stays the eager one) and compiles at
    most once per bucket: strict_recompiles raises at a compile beyond that."""
    from docnmt.training.data import bucket_length
    logs, seen = {}, []
    for name in ("eager", "compiled"):
        trainer = in_memory_trainer(tmp_path / name, max_update=8, log_interval=1, compile=name == "compiled")
        trainer.cfg.model.dropout = 0.0
        for m in trainer.model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        if name == "compiled":
            lengths = {(trainer.train_set.collate(b)["src"].size(1), trainer.train_set.collate(b)["tgt_in"].size(1))
                       for b in trainer.epoch_batches(1)[:8]}
            buckets = {tuple(bucket_length(n) for n in pair) for pair in lengths}
            assert len(lengths) > len(buckets)                  # the batches have more shapes than buckets
            strict_recompiles(len(buckets))
            model = trainer.train_model
            trainer.train_model = lambda *a, **k: seen.append((a[0].size(1), a[1].size(1))) or model(*a, **k)
        trainer.train()
        logs[name] = {r["updates"]: r["loss"] for r in history(tmp_path / name / "run") if "loss" in r}
    assert seen and all(pair in buckets for pair in seen)       # the compiled forward saw bucket lengths only
    assert logs["compiled"] == pytest.approx(logs["eager"], rel=1e-5)
