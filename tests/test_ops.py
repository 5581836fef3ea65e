"""docnmt.ops: the CPU fast paths (oneDNN linear, dropout) and the fused output projection + loss give the
numbers of the plain torch operations."""

import pytest
import torch

from docnmt import ops as ops_module
from docnmt.ops import Dropout, linear


@pytest.mark.parametrize("chunk", [3, 5, 1024])     # 5: a partial last chunk
def test_fused_projection_loss_gradients(chunk):
    from docnmt.ops import projected_label_smoothed_ce
    torch.manual_seed(0)
    h = torch.randn(7, 16, requires_grad=True)
    w = torch.randn(30, 16, requires_grad=True)
    t = torch.randint(0, 30, (7,))
    loss, _ = projected_label_smoothed_ce(h, w, t, 0.1, chunk)
    (3.0 * loss).backward()
    h2, w2 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(h2 @ w2.t(), t, label_smoothing=0.1, reduction="sum")
    (3.0 * ref).backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(h.grad, h2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


def test_fused_loss_chunks_are_small_on_cpu_and_large_on_a_gpu(monkeypatch):
    """512 rows on CPU (cache-sized); on a GPU at most about 256 MiB of fp32 logits per chunk, so
    a 16K-token batch is three chunks, not 32 (each chunk is a couple of dozen kernel launches)."""
    from docnmt import ops
    assert ops.loss_chunk_rows(torch.device("cpu"), 8515) == 512
    assert ops.loss_chunk_rows(torch.device("cuda", 0), 8515) == 7881
    assert ops.loss_chunk_rows(torch.device("cuda", 0), 250_000) == 512       # huge vocabularies: no smaller
    assert ops.loss_chunk_rows(torch.device("cuda", 0), 8515, 16098) == 5366   # three equal chunks
    assert ops.loss_chunk_rows(torch.device("cuda", 0), 8515, 7000) == 7881
    assert ops.loss_chunk_rows(torch.device("cpu"), 8515, 16098) == 512
    seen = []
    monkeypatch.setattr(ops, "loss_chunk_rows", lambda dev, vocab, rows: seen.append((dev.type, vocab, rows)) or 4)
    h, w, t = torch.randn(9, 8), torch.randn(11, 8), torch.randint(0, 11, (9,))
    loss, _ = ops.projected_label_smoothed_ce(h, w, t, 0.1)
    assert seen == [("cpu", 11, 9)]
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(h @ w.t(), t, label_smoothing=0.1,
                                                                       reduction="sum"))


# ---- CPU speed paths: same numbers as the plain torch ops ------------------------------------------

@pytest.mark.parametrize("shape,out", [((3, 401, 24), 300), ((300, 24), 4100), ((5, 7, 24), 16)])
def test_linear_fast_path_matches_f_linear(shape, out, monkeypatch):
    """Large products go through oneDNN (rows padded to a bucket); values and gradients of x, W
    and b are those of F.linear. Small ones (the last case) go through F.linear itself."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, requires_grad=True)
    w = torch.randn(out, shape[-1], generator=g, requires_grad=True)
    b = torch.randn(out, generator=g, requires_grad=True)
    grad = torch.randn(*shape[:-1], out, generator=g)
    results = []
    for fast in (True, False):
        monkeypatch.setattr(ops_module, "USE_ONEDNN", fast)
        y = linear(x, w, b)
        onednn = "OneDNN" in type(y.grad_fn).__name__
        assert onednn == (fast and out > 16 and ops_module._ONEDNN_LINEAR is not None)
        y.backward(grad)
        results.append((y.detach(), x.grad, w.grad, b.grad))
        x.grad = w.grad = b.grad = None
    for fast, plain in zip(*results):
        torch.testing.assert_close(fast, plain, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        torch.testing.assert_close(linear(x, w, b), torch.nn.functional.linear(x, w, b), rtol=1e-4, atol=1e-4)


def test_cpu_dropout_is_unbiased_and_its_gradient_is_its_mask():
    torch.manual_seed(0)
    drop = Dropout(0.25).train()
    x = torch.ones(200, 500, requires_grad=True)
    y = drop(x)
    kept = y.detach() != 0
    assert abs(1 - kept.float().mean().item() - 0.25) < 0.01            # P(drop) = p
    assert torch.allclose(y.detach()[kept], torch.tensor(1 / 0.75))     # survivors scaled by 1/(1-p)
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())                              # d(x·s)/dx = s
    assert drop.eval()(x) is x
