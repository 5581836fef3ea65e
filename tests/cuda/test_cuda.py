"""The CUDA paths: bf16 training of every preset, FlexAttention against the reference attention,
incremental decoding, batched decoding and ``torchrun`` resumption on the GPU.

Every test here is marked ``cuda`` (tests/conftest.py). Run on a GPU by ``bench/gpu/run.sh`` (its
"correctness" stage); skipped without CUDA; ``DOCNMT_CUDA_TESTS_ON_CPU=1`` runs them on the CPU at
small sizes (the dry run), so their code keeps working while no GPU is around. (No conftest.py in
this folder: a second module named ``conftest`` would shadow tests/conftest.py for ``from conftest
import``.)
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from _tiny import assert_incremental_equals_full
from docnmt import attention
from docnmt.attention import AttentionSettings, AttnSpec, attention_flex, attention_reference
from docnmt.checkpoint import LOCK
from docnmt.config import Config, preset_names
from docnmt.model import ModelConfig

ON_GPU = torch.cuda.is_available() and not os.environ.get("DOCNMT_CUDA_TESTS_ON_CPU")
TOKENS = [1024, 4096, 16384] if ON_GPU else [64, 200]
# FlexAttention against the explicit softmax: fp32 differs by summation order only; bf16 inputs
# round q, k, v and the output to 8 mantissa bits (relative error ~ 2^-8 per element)
TOL = {torch.float32: dict(rtol=1e-3, atol=2e-4), torch.bfloat16: dict(rtol=4e-2, atol=2e-2)}


@pytest.fixture(scope="session")
def device() -> torch.device:
    """CUDA; the CPU under ``DOCNMT_CUDA_TESTS_ON_CPU=1`` (the dry run); else the test is skipped."""
    if os.environ.get("DOCNMT_CUDA_TESTS_ON_CPU"):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (DOCNMT_CUDA_TESTS_ON_CPU=1 runs these checks on the CPU at small sizes)")
    return torch.device("cuda")


# ---- FlexAttention equals the reference --------------------------------------------------------

def group_inputs(n_q: int, n_k: int, kind: str, dtype, device, heads=4, d_head=64, seed=0):
    """Queries, keys and values of one instance of ``n`` tokens in sentences of 30 tokens, the
    last 5% of the keys padding, and the attention spec of ``kind``: ``group`` (encoder
    self-attention), ``causal`` (decoder self-attention), ``cross`` (target sentences attending
    to their source sentence)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (torch.randn(1, heads, n, d_head, generator=g).to(device, dtype).requires_grad_()
               for n in (n_q, n_k, n_k))
    tags = lambda n, length: (torch.arange(n) // length + 1)[None].to(device)  # noqa: E731
    q_tags = tags(n_q, 30 if kind != "cross" else 27)      # targets a little shorter than sources
    k_tags = tags(n_k, 30)
    pad = torch.zeros(1, 1, 1, n_k, dtype=torch.bool, device=device)
    pad[..., int(n_k * 0.95):] = True
    k_tags = k_tags.masked_fill(pad[0, 0], 0)
    spec = AttnSpec(mask=pad, groups=(q_tags, k_tags), is_causal=kind == "causal")
    return q, k, v, spec


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n", TOKENS)
@pytest.mark.parametrize("kind", ["group", "causal", "cross"])
def test_flex_attention_equals_the_reference_forward_and_backward(kind, n, dtype, device):
    """Queries whose group has no real key (beyond the padded end) have no defined output: FlexAttention
    gives 0, the reference the mean of the values. A model never uses them (their loss is masked),
    so they are compared nowhere and their upstream gradient is 0, as in training; with a random
    one they add sum(grad)/n_k to every dv. (FlexAttention has no backward on the CPU: the dry
    run compares the forward pass only.)"""
    n_k = n if kind != "cross" else n + n // 8
    q, k, v, spec = group_inputs(n, n_k, kind, dtype, device)
    backward = device.type == "cuda"
    rows = spec.groups[0][0] <= spec.groups[1][0].max()          # queries with a real key group
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    grad[:, :, ~rows] = 0
    results = []
    for fn in (attention_flex, attention_reference):
        args = (q, k, v) if backward else (q.detach(), k.detach(), v.detach())
        out = fn(*args, AttnSpec(**{f: getattr(spec, f) for f in ("mask", "groups", "is_causal")}))
        if backward:
            out.backward(grad)
            results.append((out.detach().float(), *(t.grad.float() for t in (q, k, v))))
        else:
            results.append((out.float(),))
        for t in (q, k, v):
            t.grad = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for name, got, want in zip(("out", "dq", "dk", "dv"), *results):
        if name in ("out", "dq"):
            got, want = got[:, :, rows], want[:, :, rows]
        torch.testing.assert_close(got, want, **TOL[dtype], msg=lambda m: f"{kind} n={n} {name}: {m}")


def test_group_attention_takes_the_flex_path_on_cuda(device, monkeypatch):
    """The kernel choice: on CUDA group attention goes through FlexAttention, elsewhere block by block."""
    calls = []
    monkeypatch.setattr(attention, "attention_flex", lambda *a, **k: calls.append("flex") or a[0])
    monkeypatch.setattr(attention, "attention_grouped", lambda *a, **k: calls.append("grouped") or a[0])
    q, k, v, spec = group_inputs(64, 64, "group", torch.float32, device)
    attention.attention_sdpa(q, k, v, spec)
    assert calls == (["flex"] if device.type == "cuda" else ["grouped"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kind", ["group", "causal", "cross"])
def test_group_attention_without_flex_equals_the_reference_forward_and_backward(kind, dtype, device):
    """``train.flex_attention: false`` (Tier L's G-Transformer): group attention on the device goes
    block by block through SDPA, and equals the explicit softmax, values and gradients, at 1K
    tokens (64 on the CPU)."""
    n = TOKENS[0]
    n_k = n if kind != "cross" else n + n // 8
    q, k, v, spec = group_inputs(n, n_k, kind, dtype, device)
    rows = spec.groups[0][0] <= spec.groups[1][0].max()
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    grad[:, :, ~rows] = 0
    results = []
    for fn in (attention.attention_sdpa, attention_reference):
        out = fn(q, k, v, AttnSpec(**{f: getattr(spec, f) for f in ("mask", "groups", "is_causal")}),
                 settings=AttentionSettings(flex=False))
        out.backward(grad)
        results.append((out.detach().float(), *(t.grad.float() for t in (q, k, v))))
        for t in (q, k, v):
            t.grad = None
    for name, got, want in zip(("out", "dq", "dk", "dv"), *results):
        if name in ("out", "dq"):
            got, want = got[:, :, rows], want[:, :, rows]
        torch.testing.assert_close(got, want, **TOL[dtype], msg=lambda m: f"{kind} {name}: {m}")


# ---- incremental decoding equals the full pass, on the device ----------------------------------

CFG = ModelConfig(vocab_size=60, d_model=64, heads=4, ffn_dim=128, encoder_layers=2, decoder_layers=2, dropout=0.0)
PAD, BOS, EOS, EOD = 0, 2, 3, 59


def group_rows(sentences: int, length: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    row = []
    for _ in range(sentences):
        row += [BOS] + torch.randint(4, 50, (length,), generator=g).tolist() + [EOS]
    return row


def build_method(name: str):
    if name == "gtransformer":
        from docnmt.methods.gtransformer import GTransformerOptions, build
        return build(CFG, GTransformerOptions(combined_enc_self=1, combined_dec_self=1, combined_cross=1), BOS, EOD)
    if name == "ptransformer":
        from docnmt.methods.ptransformer import build
        return build(CFG)
    if name == "docflat":       # time-aligned: under the flattened mask a full pass sees more than a step does
        from docnmt.methods.docflat import DocFlatOptions, build
        return build(CFG, DocFlatOptions(flat_dec_mask="time_aligned"))
    from docnmt.methods.context_transformer import build
    return build(CFG)


@pytest.mark.parametrize("name", ["gtransformer", "ptransformer", "docflat", "context_transformer"])
def test_incremental_decoding_equals_the_full_pass(name, device):
    """Long enough (40 target tokens, 3 documents) that the full pass takes the device's fused
    kernels (FlexAttention for group attention on CUDA), while decoding steps take the cached path."""
    torch.manual_seed(0)
    model = build_method(name).to(device).eval()
    src = torch.tensor([group_rows(4, 10, s) for s in range(3)], device=device)
    tgt = torch.tensor([[EOD] + group_rows(4, 8, 10 + s)[:39] for s in range(3)], device=device)
    src[2, -12:] = PAD          # the last document has 3 sentences on both sides
    if name == "gtransformer":  # (a padded target's states are only defined where it is aligned by groups)
        tgt[2, -9:] = PAD
    if name == "context_transformer":
        ctx = torch.randint(4, 50, (3, 12), device=device)
        inner = model

        class WithContext(torch.nn.Module):
            def encode(self, s):
                return inner.encode(s, ctx=ctx)

            def decode(self, *a):
                return inner.decode(*a)
        model = WithContext()
    assert_incremental_equals_full(model, src, tgt)


# ---- batched equals unbatched decoding in fp32 -------------------------------------------------

@pytest.mark.parametrize("name", ["sent2sent", "doc2doc", "gtransformer"])
def test_batched_equals_unbatched_decoding_fp32(name, tiny_model, tiny_dir, device):
    from docnmt.readers import read_documents
    from docnmt.translate import Translator
    tr = Translator.load(tiny_model(name), device=str(device))
    docs = read_documents(str(tiny_dir / "raw/chat.en"), fmt="marker")[:3]
    for d in docs:
        d.src = d.src[:10]
    cfg = tr.cfg.decode.__class__(**{**vars(tr.cfg.decode), "beam": 4, "precision": "fp32", "max_sentences": 16})
    together, _ = tr.translate(docs, cfg)
    alone, _ = tr.translate(docs, tr.cfg.decode.__class__(**{**vars(cfg), "max_sentences": 1}))
    assert [d.tgt for d in together] == [d.tgt for d in alone]
    assert all(len(d.tgt) == 10 for d in together)


# ---- torchrun: killed and resumed, the same losses ---------------------------------------------

def _torchrun(data: Path, save: Path, log_file: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1", "--master_port", "29533",
           "-m", "docnmt.cli", "train", str(data), "--arch", "transformer_tiny", "--save-dir", str(save),
           "--max-update", "20", "--save-interval-updates", "5", "--no-progress",
           "--set", "train.log_interval=1", "--set", "train.max_tokens=600", "--set", "train.max_epoch=0",
           "--set", "train.patience=0", "--set", "train.precision=fp32"]
    return subprocess.Popen(cmd, stdout=log_file.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _wait_gone(pid: int, seconds: float = 60) -> None:
    """Until ``pid`` has exited (gone, or a zombie nobody reaps, as in containers without an init)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still alive {seconds} s after SIGKILL")


def _losses(save: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (save / "metrics.jsonl").read_text().splitlines()]
    return {r["updates"]: r["loss"] for r in rows if "loss" in r and "valid_loss" not in r}


@pytest.mark.slow
def test_torchrun_trains_is_killed_and_resumes_with_the_same_losses(tiny_dir, tmp_path):
    data = tiny_dir / "data"
    whole = _torchrun(data, tmp_path / "whole", tmp_path / "whole.log")
    assert whole.wait(timeout=600) == 0, (tmp_path / "whole.log").read_text()[-3000:]
    # the second run is killed (SIGKILL to its whole process group) once it has saved update 10
    run = _torchrun(data, tmp_path / "killed", tmp_path / "killed.log")
    deadline = time.time() + 600
    while not (tmp_path / "killed/checkpoints/u00000010").exists():
        assert run.poll() is None and time.time() < deadline, (tmp_path / "killed.log").read_text()[-3000:]
        time.sleep(0.05)
    # torchrun starts its worker in a session of its own: kill the agent's group and the worker's
    # (the worker's pid is in the save directory's lock file), and wait until the worker is gone
    worker = int((tmp_path / "killed" / LOCK).read_text().split()[0])
    os.killpg(run.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker, signal.SIGKILL)
    run.wait()
    _wait_gone(worker)
    killed_at = max(_losses(tmp_path / "killed"))
    assert killed_at < 20
    resumed = _torchrun(data, tmp_path / "killed", tmp_path / "resumed.log")
    assert resumed.wait(timeout=600) == 0, (tmp_path / "resumed.log").read_text()[-3000:]
    assert "resuming from" in (tmp_path / "resumed.log").read_text()
    want, got = _losses(tmp_path / "whole"), _losses(tmp_path / "killed")
    assert sorted(got) == sorted(want) == list(range(1, 21))
    tol = 1e-4 if ON_GPU else 0.0          # cuBLAS/atomics may reorder sums on the GPU; the CPU is exact
    for u in range(1, 21):
        assert got[u] == pytest.approx(want[u], rel=tol, abs=tol), (u, got[u], want[u])


# ---- every preset trains in bf16 (last, so a stage budget that runs out cuts these) ------------

@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_trains_ten_bf16_updates_with_finite_falling_loss(preset, device, tiny_dir, tmp_path):
    from docnmt.training import Trainer
    over = {"train.precision": "bf16", "train.warmup_updates": 1, "train.lr": 5e-4, "train.max_tokens": 1200,
            "train.freeze_pretrained": False, "train.word_dropout": 0.0}
    if not ON_GPU:          # the CPU dry run: the preset's structure at a tiny width
        over.update({"model.d_model": 32, "model.ffn_dim": 64, "model.heads": 2, "train.max_tokens": 400})
    cfg = Config.load(preset).override(over)
    trainer = Trainer.from_dirs(cfg, tiny_dir / "data", tmp_path / "m", progress_bar=False)
    assert trainer.device.type == device.type and trainer.amp_dtype == torch.bfloat16
    batch = trainer.collate(trainer.epoch_batches(1)[0], 1, 0)
    losses = [trainer.update([batch])[0] for _ in range(10)]
    assert all(map(torch.isfinite, torch.tensor(losses))), losses
    assert losses[-1] < losses[0], losses         # the same batch ten times: the loss must fall
