"""Training: loss falls, exact resumption, atomic checkpoints, averaging, DDP (gloo), safety."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from _tiny import history, tiny_config
from docnmt.checkpoint import (
    atomic_write,
    average_checkpoints,
    last_checkpoint,
    list_checkpoints,
    load_state,
    save_checkpoint,
)
from docnmt.config import Config
from docnmt.errors import ConfigError, DocnmtError
from docnmt.training import Trainer, inverse_sqrt


@pytest.fixture(scope="module")
def data(tiny_dir):
    return tiny_dir / "data"


def test_inverse_sqrt_schedule():
    f = inverse_sqrt(1.0, 100)
    assert f(50) == pytest.approx(0.5) and f(100) == pytest.approx(1.0) and f(400) == pytest.approx(0.5)


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL of logits: the reference the fused loss
    is tested against."""
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    nll = -lprobs.gather(1, target[:, None]).squeeze(1)
    return ((1.0 - eps) * nll - eps * lprobs.mean(-1)).sum(), nll.sum().detach()


def test_label_smoothed_loss_matches_torch():
    logits, target = torch.randn(6, 11, requires_grad=True), torch.randint(0, 11, (6,))
    ref_logits = logits.detach().clone().requires_grad_()
    loss, nll = label_smoothed_loss(logits, target, 0.1)
    ref = torch.nn.functional.cross_entropy(ref_logits, target, label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(nll, torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
    (2.5 * loss).backward()
    (2.5 * ref).backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sent2sent", "doc2sent", "doc2doc", "mr"])
def test_loss_falls_in_every_mode(data, tmp_path, mode):
    cfg = tiny_config(mode, max_update=30)
    Trainer.from_dirs(cfg, data, tmp_path / mode, progress_bar=False).train()
    losses = [r["loss"] for r in history(tmp_path / mode) if "loss" in r]
    assert losses[-1] < losses[0] - 1.0
    assert (tmp_path / mode / "model.safetensors").exists()
    assert (tmp_path / mode / "learning_curve.png").stat().st_size > 1000


RESUMED = {   # data order and randomness that must resume exactly: mode, overrides, --max-tokens
    "sent2sent": ("sent2sent", {}, 600),
    # DocFlat: ordered batches of consecutive pseudo-documents, shuffled per epoch, word dropout
    "docflat": ("pseudodoc", {"method.name": "docflat", "data.separator": "global_index",
                              "data.batch_order": "ordered", "data.context": 2, "train.word_dropout": 0.1}, 2400),
    # length bias: instances re-segmented every epoch (DLS; T = e^4 in epoch 2), mean lengths refreshed (LAA)
    "dls_laa": ("doc2doc", {"data.dls": True, "data.dls_start_epoch": -2, "data.max_instance_tokens": 200,
                            "model.length_aware": True}, 600),
}


def _logged_losses(save_dir, after: int) -> dict:
    """Losses of the log windows that start after update ``after`` (windows restart on resuming)."""
    rows = [r for r in history(save_dir) if "loss" in r]
    return {r["updates"]: r["loss"] for prev, r in zip(rows, rows[1:]) if prev["updates"] >= after}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(RESUMED))
def test_resume_reproduces_uninterrupted_run(data, tmp_path, kind):
    """Stop two updates into epoch 2, resume, and get the same losses and weights as a run that
    was never interrupted."""
    mode, over, max_tokens = RESUMED[kind]
    run = lambda updates: tiny_config(mode, max_update=updates, max_tokens=max_tokens,  # noqa: E731
                                      save_interval_updates=4).override(over)
    stop = len(Trainer.from_dirs(run(1), data, tmp_path / "n", progress_bar=False).epoch_batches(1)) + 2
    Trainer.from_dirs(run(stop + 8), data, tmp_path / "a", progress_bar=False).train()
    Trainer.from_dirs(run(stop), data, tmp_path / "b", progress_bar=False).train()
    state = load_state(last_checkpoint(tmp_path / "b"))["progress"]
    assert (state["updates"], state["epoch"], state["batch_in_epoch"]) == (stop, 2, 2)
    with open(tmp_path / "b" / "metrics.jsonl", "a") as f:              # logged after the checkpoint,
        f.write(f'{{"updates": {stop + 1}, "loss": 99.0}}\n')          # then the run crashed
    Trainer.from_dirs(run(stop + 8), data, tmp_path / "b", progress_bar=False).train()   # resumes at `stop`
    updates = [r["updates"] for r in history(tmp_path / "b") if "loss" in r]
    assert 99.0 not in [r["loss"] for r in history(tmp_path / "b") if "loss" in r]
    assert updates == sorted(updates)                                    # the learning curve has no loop
    la, lb = _logged_losses(tmp_path / "a", stop), _logged_losses(tmp_path / "b", stop)
    assert la and set(la) <= set(lb)
    assert {k: lb[k] for k in la} == pytest.approx(la, rel=1e-6)
    wa = load_file(str(last_checkpoint(tmp_path / "a") / "model.safetensors"))
    wb = load_file(str(last_checkpoint(tmp_path / "b") / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k])


def test_state_file_loads_with_weights_only(data, tmp_path):
    Trainer.from_dirs(tiny_config(max_update=3), data, tmp_path / "m", progress_bar=False).train()
    state = torch.load(last_checkpoint(tmp_path / "m") / "state.pt", weights_only=True)
    assert state["progress"]["updates"] == 3 and "optimizer" in state


def test_device_random_state_is_kept_in_checkpoints_and_put_back_on_resume(data, tmp_path, monkeypatch):
    """A GPU run's dropout draws from the device's generator: a checkpoint keeps its state and a
    resumed run puts it back (the CUDA calls themselves are faked here; tests/cuda runs them)."""
    from docnmt.training import distributed
    saved, restored = torch.arange(7, dtype=torch.uint8), []
    monkeypatch.setattr(distributed, "device_rng_state", lambda device: saved.clone())
    monkeypatch.setattr(distributed, "set_device_rng_state", lambda device, state: restored.append(state))
    Trainer.from_dirs(tiny_config(max_update=2), data, tmp_path / "m", progress_bar=False).train()
    state = load_state(last_checkpoint(tmp_path / "m"))
    assert torch.equal(state["device_rng"][0], saved)
    Trainer.from_dirs(tiny_config(max_update=3), data, tmp_path / "m", progress_bar=False).train()
    assert len(restored) == 1 and torch.equal(restored[0], saved)


def test_device_random_state_helpers_use_the_cuda_generator_of_a_cuda_device(monkeypatch):
    from docnmt.training import distributed
    calls = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: calls.append(("get", device)) or "state")
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: calls.append(("set", state, device)))
    gpu, cpu = torch.device("cuda", 1), torch.device("cpu")
    assert distributed.device_rng_state(cpu) is None and distributed.device_rng_state(gpu) == "state"
    distributed.set_device_rng_state(cpu, "x")
    distributed.set_device_rng_state(gpu, None)          # a checkpoint from before device states were kept
    distributed.set_device_rng_state(gpu, "state")
    assert calls == [("get", gpu), ("set", "state", gpu)]


def test_attention_settings_follow_each_models_config_not_the_process(data, tmp_path):
    """``train.flex_attention`` (off for short GPU runs, where compiling FlexAttention in every
    process costs more than it saves) and ``train.cudnn_attention`` (cuDNN's fused attention plans
    every new input shape anew, so it is off unless asked for) reach a trainer's model and a
    translator's model from the model directory's config, and stay that model's: two translators
    in one process (``docnmt serve a=… b=…``) keep their own, in every attention module."""
    from docnmt.attention import AttentionSettings, MultiheadAttention
    from docnmt.translate import load
    off = Trainer.from_dirs(tiny_config(max_update=1).override({"train.flex_attention": False,
                                                                 "train.cudnn_attention": True}),
                            data, tmp_path / "off", progress_bar=False)
    assert off.model.attention_settings == AttentionSettings(flex=False, cudnn=True)
    off.train()
    Trainer.from_dirs(tiny_config(max_update=1), data, tmp_path / "on", progress_bar=False).train()
    a, b = load(tmp_path / "off", device="cpu"), load(tmp_path / "on", device="cpu")
    assert a.model.attention_settings == AttentionSettings(flex=False, cudnn=True)
    assert b.model.attention_settings == AttentionSettings(flex=True, cudnn=False)
    for tr in (a, b):
        mods = [m for m in tr.model.modules() if isinstance(m, MultiheadAttention)]
        assert mods and all(m.settings == tr.model.attention_settings for m in mods)


@pytest.mark.slow
def test_compiled_training_matches_eager_and_does_not_recompile_for_every_batch_shape(
        data, tmp_path, strict_recompiles):
    """--compile: the update's forward pass through torch.compile with dynamic shapes gives the
    eager losses, and token batches of many shapes do not each compile again."""
    from torch._dynamo.utils import counters
    strict_recompiles(3)
    counters.clear()
    run = lambda **k: tiny_config(max_update=8, log_interval=1, **k).override(  # noqa: E731
        {"model.dropout": 0.0, "model.attention_dropout": 0.0, "model.activation_dropout": 0.0})
    eager = Trainer.from_dirs(run(), data, tmp_path / "eager", progress_bar=False)
    shapes = {tuple(eager.train_set.collate(b)["tgt_in"].shape) for b in eager.epoch_batches(1)[:8]}
    assert len(shapes) >= 6                              # the batches below have many shapes
    eager.train()
    compiled = Trainer.from_dirs(run(compile=True), data, tmp_path / "compiled", progress_bar=False)
    compiled.train()
    assert counters["frames"]["ok"] >= 1                 # torch.compile did capture the forward pass
    want, got = ({r["updates"]: r["loss"] for r in history(tmp_path / d) if "loss" in r} for d in ("eager", "compiled"))
    assert list(want) == list(range(1, 9)) and got.keys() == want.keys()
    assert got == pytest.approx(want, rel=1e-4)


def test_existing_directory_is_never_overwritten(data, tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "notes.txt").write_text("mine")
    with pytest.raises(DocnmtError, match="--force"):
        Trainer.from_dirs(tiny_config(max_update=2), data, tmp_path / "m", progress_bar=False)
    assert (tmp_path / "m" / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_resume_refuses_a_different_model(data, tmp_path):
    Trainer.from_dirs(tiny_config(max_update=2), data, tmp_path / "m", progress_bar=False).train()
    other = tiny_config(max_update=4).override({"model.d_model": 64})
    with pytest.raises(DocnmtError, match="different model"):
        Trainer.from_dirs(other, data, tmp_path / "m", progress_bar=False)


@pytest.mark.slow
def test_resume_with_other_training_settings_says_them_and_rewrites_the_config(data, tmp_path, capsys):
    """A later --max-update or another training aid may go on from a run (config.yaml then says what
    trained the later updates, train.log what changed); another instance format may not."""
    Trainer.from_dirs(tiny_config("doc2doc", max_update=2), data, tmp_path / "m", progress_bar=False).train()
    capsys.readouterr()
    more = tiny_config("doc2doc", max_update=3, coword_dropout=0.2)
    Trainer.from_dirs(more, data, tmp_path / "m", progress_bar=False).train()
    said = capsys.readouterr().err
    assert "train.coword_dropout 0.0 -> 0.2" in said and "train.max_update 2 -> 3" in said
    assert Config.load(tmp_path / "m" / "config.yaml").train.coword_dropout == 0.2
    assert "train.coword_dropout 0.0 -> 0.2" in (tmp_path / "m" / "train.log").read_text()
    Trainer.from_dirs(more, data, tmp_path / "m", progress_bar=False)          # the same again: nothing to say
    assert "resuming with settings changed" not in capsys.readouterr().err
    with pytest.raises(DocnmtError, match=r"different model or data config \(data.context 3, not 1\)"):
        Trainer.from_dirs(more.override({"data.context": 1}), data, tmp_path / "m", progress_bar=False)


@pytest.mark.slow
def test_average_checkpoints(data, tmp_path):
    Trainer.from_dirs(tiny_config(max_update=6, save_interval_updates=2), data, tmp_path / "m",
                      progress_bar=False).train()
    ckpts = list_checkpoints(tmp_path / "m")
    assert len(ckpts) >= 3
    average_checkpoints(ckpts[-3:], tmp_path / "avg.safetensors")
    avg = load_file(str(tmp_path / "avg.safetensors"))
    parts = [load_file(str(c / "model.safetensors")) for c in ckpts[-3:]]
    for k in avg:
        torch.testing.assert_close(avg[k], sum(p[k] for p in parts) / 3)


def test_interrupted_save_leaves_last_checkpoint_intact(data, tmp_path, monkeypatch):
    trainer = Trainer.from_dirs(tiny_config(max_update=2), data, tmp_path / "m", progress_bar=False)
    trainer.train()
    good = last_checkpoint(tmp_path / "m")

    def crash(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr("docnmt.checkpoint.torch.save", crash)
    with pytest.raises(OSError):
        trainer.save("u99999999")
    assert last_checkpoint(tmp_path / "m") == good
    assert not any(p.name.startswith(".") for p in (tmp_path / "m" / "checkpoints").iterdir())


def test_atomic_write_gives_the_modes_a_plain_write_would(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "new.txt", lambda t: Path(t).write_text("x"))
        kept = tmp_path / "kept.txt"
        kept.write_text("old")
        kept.chmod(0o640)
        atomic_write(kept, lambda t: Path(t).write_text("new"))
    finally:
        os.umask(old)
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644   # not mkstemp's 0600
    assert kept.stat().st_mode & 0o777 == 0o640 and kept.read_text() == "new"



def test_checkpoint_files_are_readable_by_the_group(tmp_path):
    """safetensors writes 0600; a checkpoint's weights get a plain write's mode like its other files."""
    old = os.umask(0o022)
    try:
        ckpt = save_checkpoint(tmp_path, "u00000001", torch.nn.Linear(2, 2), {"updates": 1}, keep_last=2)
    finally:
        os.umask(old)
    assert sorted(p.stat().st_mode & 0o777 for p in ckpt.iterdir()) == [0o644, 0o644]

DDP_SCRIPT = r"""
import sys, torch
sys.path.insert(0, {tests!r})
from _tiny import tiny_config
from docnmt.training import Trainer
t = Trainer.from_dirs(tiny_config(max_update=4, max_tokens=300), {data!r}, {out!r}, progress_bar=False)
t.train()
flat = torch.cat([p.detach().flatten() for p in t.model.parameters()])
torch.save(flat, {out!r} + f"/params{{t.dist.rank}}.pt")
"""


@pytest.mark.slow
def test_ddp_two_processes_gloo(data, tmp_path):
    script = tmp_path / "ddp.py"
    out = tmp_path / "ddp"
    script.write_text(DDP_SCRIPT.format(tests=str(Path(__file__).parent), data=str(data), out=str(out)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           "--master_port=29731", str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    p0, p1 = torch.load(out / "params0.pt"), torch.load(out / "params1.pt")
    torch.testing.assert_close(p0, p1)            # replicas stay identical
    assert load_state(last_checkpoint(out))["progress"]["updates"] == 4


def test_ddp_ranks_get_whole_ordered_batches(data, tmp_path):
    """DocFlat's ordered batches are dealt whole to the ranks: every rank's batch is a run of
    consecutive pseudo-documents, the ranks share none, and together they are the epoch."""
    mode, over, max_tokens = RESUMED["docflat"]
    trainer = Trainer.from_dirs(tiny_config(mode, max_tokens=max_tokens).override(over), data, tmp_path / "m",
                                progress_bar=False)
    for epoch in (1, 2):
        everything = trainer.epoch_batches(epoch)
        trainer.dist.world = 2
        ranks = []
        for rank in (0, 1):
            trainer.dist.rank = rank
            ranks.append(trainer.epoch_batches(epoch))
        trainer.dist.world, trainer.dist.rank = 1, 0
        assert len(ranks[0]) == len(ranks[1]) == len(everything) // 2
        dealt = [b.tolist() for pair in zip(*ranks) for b in pair]
        assert dealt == [b.tolist() for b in everything[: len(dealt)]]
        assert all(b == list(range(b[0], b[-1] + 1)) for b in dealt)


@pytest.mark.slow
def test_bf16_autocast_path_trains_on_cpu(data, tmp_path):
    """The autocast code path (used with bf16 on CUDA) runs on CPU autocast too."""
    trainer = Trainer.from_dirs(tiny_config(max_update=12, precision="bf16"), data, tmp_path / "m", progress_bar=False)
    assert trainer.amp_dtype == torch.bfloat16
    trainer.train()
    losses = [r["loss"] for r in history(tmp_path / "m") if "loss" in r]
    assert losses[-1] < losses[0]
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())   # fp32 master weights


@pytest.mark.slow
def test_valid_bleu_is_reported(data, tmp_path):
    Trainer.from_dirs(tiny_config(max_update=3, valid_bleu=True), data, tmp_path / "m", progress_bar=False).train()
    rec = [r for r in history(tmp_path / "m") if "valid_bleu" in r]
    assert rec and 0.0 <= rec[-1]["valid_bleu"] <= 100.0


@pytest.mark.slow
def test_final_update_is_validated_even_on_a_save_interval(data, tmp_path):
    Trainer.from_dirs(tiny_config(max_update=4, save_interval_updates=2), data, tmp_path / "m",
                      progress_bar=False).train()
    assert any(r.get("updates") == 4 and "valid_loss" in r for r in history(tmp_path / "m"))
    assert [c.name for c in list_checkpoints(tmp_path / "m")][-1] == "u00000004"


def test_warnings_after_setup_reach_the_console_not_only_train_log(data, tmp_path, capsys, monkeypatch):
    """A warning once train.log is open (here: TensorBoard asked for but not importable) is
    printed on stderr too; closing the trainer removes its handlers."""
    import builtins
    real_import = builtins.__import__

    def no_tensorboard(name, *a, **k):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError(name)
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    cfg = tiny_config(max_update=1).override({"train.tensorboard_dir": str(tmp_path / "tb")})
    t = Trainer.from_dirs(cfg, data, tmp_path / "m", progress_bar=False)
    t.close()
    err = capsys.readouterr().err
    assert "docnmt: warning: TensorBoard is not installed" in err
    assert "TensorBoard is not installed" in (tmp_path / "m" / "train.log").read_text()
    logging.getLogger("docnmt.training").warning("after close")
    assert "after close" not in capsys.readouterr().err


def test_the_train_command_says_what_it_runs_and_what_it_reached(data, tmp_path, run_cli):
    status, _, err = run_cli("train", data, "--save-dir", tmp_path / "m", "--arch", "transformer_tiny",
                             "--max-update", "2", "--no-progress")
    assert status == 0, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("training transformer (sent2sent) on cpu (") and "2 updates" in lines[0]
    best = min(r["valid_loss"] for r in history(tmp_path / "m") if "valid_loss" in r)
    assert lines[-1] == (f"model saved in {tmp_path / 'm'} (2 updates, best validation loss {best:.4f}; "
                         f"every figure in {tmp_path / 'm' / 'metrics.jsonl'})")


def test_bleu_as_best_metric_needs_valid_bleu(data, tmp_path):
    with pytest.raises(DocnmtError, match="--valid-bleu"):
        Trainer.from_dirs(tiny_config(max_update=2, best_metric="bleu"), data, tmp_path / "m", progress_bar=False)


def test_filters_that_drop_every_training_document_are_a_config_error(data, tmp_path):
    cfg = tiny_config().override({"data.max_train_sent_tokens": 1})
    with pytest.raises(ConfigError, match="drops every training document"):
        Trainer.from_dirs(cfg, data, tmp_path / "m", progress_bar=False)
    with pytest.raises(ConfigError, match="data.min_train_doc_sents must be at least 0"):
        tiny_config().override({"data.min_train_doc_sents": -1})


# ---- a trainer from objects in memory ----------------------------------------------------------

def synthetic_data(cfg, n_docs: int = 12):
    """A copy task (each target sentence is its source, upper-cased) on a made-up language, its
    vocabulary learnt and its documents encoded in memory: no prepared directory, no ../shared."""
    import random

    from docnmt.data import Corpus
    from docnmt.document import Document
    from docnmt.training import TrainingData
    from docnmt.vocab import Vocab
    rng = random.Random(0)
    words = ["ba", "ku", "di", "mo", "te", "sa", "ni", "lo"]
    docs = []
    for d in range(n_docs):
        src = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 7))) for _ in range(6)]
        docs.append(Document(f"doc{d}", src, [s.upper() for s in src]))
    vocab = Vocab.train([s for d in docs for s in d.src + d.tgt], size=40)
    return TrainingData(cfg, vocab, Corpus.encode(docs[2:], vocab), Corpus.encode(docs[:2], vocab))


def test_a_trainer_built_in_memory_trains_without_a_data_directory(tmp_path):
    """The point of the training package: the loop runs on built objects (a model, a corpus
    encoded in the test, a run directory), so its logic is testable without `docnmt prepare`."""
    from docnmt.methods import build_model
    from docnmt.training import RunDir
    cfg = tiny_config(max_update=40, log_interval=5, save_interval_updates=20, max_tokens=200)
    data = synthetic_data(cfg)
    torch.manual_seed(cfg.train.seed)
    (tmp_path / "run").mkdir()
    trainer = Trainer(cfg, build_model(cfg, data.vocab), data, RunDir(tmp_path / "run"), progress_bar=False)
    before = trainer.validate()["valid_loss"]
    trainer.train()
    losses = [r["loss"] for r in history(tmp_path / "run") if "loss" in r]
    assert len(losses) >= 8 and losses[-1] < losses[0] - 1.0                  # training loss falls
    assert trainer.progress.best < before - 1.0                              # and so does validation's
    assert last_checkpoint(tmp_path / "run").name == "u00000040" and (tmp_path / "run" / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]              # nothing written elsewhere
