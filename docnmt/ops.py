"""Fast CPU building blocks: oneDNN linear layers, a cheaper dropout, and the output
projection fused with the label-smoothed loss. Same results as the plain torch functions up to
float rounding; on GPU they fall through to torch's own kernels."""
from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# --------------------------------------------------------------------------------------------
# Linear maps
# --------------------------------------------------------------------------------------------

def _find_onednn_linear():
    try:
        return torch.ops.mkldnn._linear_pointwise if torch.backends.mkldnn.is_available() else None
    except (AttributeError, RuntimeError):
        return None


_ONEDNN_LINEAR = _find_onednn_linear()
USE_ONEDNN = os.environ.get("DOCNMT_ONEDNN", "1") != "0"   # DOCNMT_ONEDNN=0: plain F.linear everywhere
# Below this many multiply-adds (rows × in × out) BLAS is faster (lower call overhead); above it
# oneDNN is 1.2-2.3x faster on this project's AMD CPU, down to the 10-64-row products of beam
# search (bench/README.md, "Decoding").
ONEDNN_MIN_MACS = 2**21


def _onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """oneDNN's x Wᵀ + b with the rows padded to a multiple of 64 (16 below 256 rows): oneDNN
    builds a kernel per shape (≈7 ms each), so bucketing the row count lets the varying shapes
    of training batches and shrinking beams reuse kernels."""
    x2 = x.reshape(-1, x.size(-1))
    rows = x2.size(0)
    pad = (-rows) % (64 if rows >= 256 else 16)
    if pad:
        x2 = F.pad(x2, (0, 0, 0, pad))
    y = _ONEDNN_LINEAR(x2, weight, bias, "none", [], "")
    return (y[:rows] if pad else y).view(*x.shape[:-1], weight.size(0))


class _OneDNNLinear(torch.autograd.Function):
    """y = x Wᵀ + b and its input gradient through oneDNN; the weight gradient through BLAS."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _onednn_linear(grad, weight.t(), None)
        g2 = grad.reshape(-1, grad.size(-1))
        if ctx.needs_input_grad[1]:
            gw = g2.t() @ x.reshape(-1, x.size(-1))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g2.sum(0)
        return gx, gw, gb


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear``, except that large fp32 products on CPU go through oneDNN.

    On AMD CPUs MKL's sgemm does not use AVX-512 and oneDNN's kernels are 1.3-1.4x faster for
    the shapes of training and up to 3x for the vocabulary projection of decoding (see
    bench/README.md). Small products stay with BLAS, whose call overhead is lower. Same results
    up to float rounding; ``DOCNMT_ONEDNN=0`` turns it off, and torch.compile's graphs leave it
    out (Inductor lowers linear layers itself, and cannot lower this call on dynamic shapes).
    """
    if (USE_ONEDNN and _ONEDNN_LINEAR is not None and x.device.type == "cpu" and not torch.compiler.is_compiling()
            and x.dtype == weight.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
            and (weight.size(0) >= 4096 or x.numel() * weight.size(0) >= ONEDNN_MIN_MACS)):
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            return _OneDNNLinear.apply(x, weight, bias)
        return _onednn_linear(x, weight, bias)
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state dict) computed by :func:`linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


class _CPUDropout(torch.autograd.Function):
    """Dropout as x·s with s = 1[u ≥ p]/(1−p), u ~ U(0,1): on CPU about twice as fast as
    ``F.dropout`` (whose Bernoulli sampler is slow there) at the cost of keeping s in x's dtype."""

    @staticmethod
    def forward(ctx, x, p):
        scale = torch.rand(x.shape, device=x.device).ge_(p).div_(1.0 - p).to(x.dtype)
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        scale, = ctx.saved_tensors
        return grad * scale, None


class Dropout(nn.Dropout):
    """``nn.Dropout`` with the faster sampler of :class:`_CPUDropout` on CPU."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type == "cpu" and x.requires_grad:
            return _CPUDropout.apply(x, self.p)
        return F.dropout(x, self.p, True)


# --------------------------------------------------------------------------------------------
# Output projection fused with the label-smoothed loss
# --------------------------------------------------------------------------------------------

class _ProjectedLabelSmoothedCE(torch.autograd.Function):
    """loss = Σ_i (1−ε)·NLL_i + ε·mean_v(−log p_iv) with logits = H Wᵀ, computed in row chunks;
    only the first ``classes`` rows of W are classes (the others pad W to an aligned width: their
    logits are -inf, they get no probability and no gradient).

    Each chunk's gradient (softmax − smoothed one-hot) is turned into the gradients of H and W
    right away, so the N×V logits never exist at once: less memory traffic (the output layer is
    memory-bound on CPU) and far less memory on GPU. The second output (summed NLL) is for
    logging and carries no gradient.
    """

    @staticmethod
    def forward(ctx, hidden, weight, target, eps, chunk, classes):
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        V = classes
        padded = classes < weight.size(0)
        loss = hidden.new_zeros((), dtype=torch.float32)
        nll = hidden.new_zeros((), dtype=torch.float32)
        grad_h = torch.empty_like(hidden) if need_grad else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_grad else None
        for s in range(0, hidden.size(0), chunk):
            h, t = hidden[s: s + chunk], target[s: s + chunk]
            logits = linear(h, weight)
            if padded:
                logits[:, V:] = float("-inf")
            lprobs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
            logits = None
            nll_c = -lprobs.gather(1, t[:, None]).squeeze(1)
            loss += ((1.0 - eps) * nll_c - eps * (lprobs[:, :V] if padded else lprobs).mean(-1)).sum()
            nll += nll_c.sum()
            if need_grad:
                g = lprobs.exp_().sub_(eps / V)
                if padded:
                    g[:, V:] = 0.0
                g.scatter_add_(1, t[:, None], torch.full((t.numel(), 1), eps - 1.0, device=g.device))
                g = g.to(h.dtype) if h.dtype == weight.dtype else g
                grad_h[s: s + chunk] = g @ weight.to(g.dtype)
                grad_w += (g.t() @ h.to(g.dtype)).float()
            lprobs = g = None       # freed before the next chunk's logits exist (one chunk at a time)
        ctx.save_for_backward(grad_h, grad_w)
        ctx.w_dtype = weight.dtype
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        grad_h, grad_w = ctx.saved_tensors
        gh = None if grad_h is None else grad_h * grad_loss.to(grad_h.dtype)
        gw = None if grad_w is None else (grad_w * grad_loss).to(ctx.w_dtype)
        return gh, gw, None, None, None, None


def loss_chunk_rows(device: torch.device, vocab: int, rows: int = 0) -> int:
    """Rows of logits the fused loss computes at once. On CPU 512, whose logits stay in cache (the
    output layer is memory-bound there). On a GPU at most as many as make about 256 MiB of fp32
    logits (7,881 rows for an 8.5K vocabulary; a batch is then cut into equal chunks, e.g. 3 for
    16K target tokens, and the loss holds one chunk's logits at a time, about 3 × that size at
    its peak): each chunk launches some 25 kernels, and an eager GPU update waits on its launches
    (512-row chunks were, by count, about a third of them)."""
    if device.type == "cpu":
        return 512
    most = max(512, (1 << 26) // max(vocab, 1))
    if rows <= most:
        return most
    pieces = -(-rows // most)                  # the batch's ``rows`` cut into equal chunks, none larger
    return -(-rows // pieces)


@torch._disable_dynamo      # torch.compiler.disable, but torch._dynamo is imported at the first call, not here
def projected_label_smoothed_ce(hidden: Tensor, weight: Tensor, target: Tensor, eps: float,
                                chunk: int | None = None, classes: int | None = None) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy of ``hidden @ weight.T`` (see the class above), ``chunk``
    rows at a time (default :func:`loss_chunk_rows`), over the first ``classes`` rows of ``weight``
    (default all; the rest are padding). Never compiled (``--compile``): a Python loop
    over chunks that computes gradients in its forward pass, which torch.compile would trace chunk
    by chunk (and CPU Inductor fails to lower)."""
    if not torch.is_grad_enabled():   # validation: skip the gradient products
        hidden, weight = hidden.detach(), weight.detach()
    if chunk is None:
        chunk = loss_chunk_rows(hidden.device, weight.size(0), hidden.size(0))
    classes = weight.size(0) if classes is None else classes
    loss, nll = _ProjectedLabelSmoothedCE.apply(hidden, weight, target, eps, chunk, classes)
    return loss, nll.detach()


def decoding_mode(fn):
    """``torch.inference_mode`` around ``fn(model, src, ...)``, except under autocast, where it is
    ``torch.no_grad``: autocast keeps each weight's low-precision copy for the whole region only
    outside inference mode, so in it every decoding step would cast every weight again
    (docs/performance.md: 4-6% of a bf16 decode on a CPU)."""
    @functools.wraps(fn)
    def run(model, src: Tensor, *args, **kwargs):
        mode = torch.no_grad if torch.is_autocast_enabled(src.device.type) else torch.inference_mode
        with mode():
            return fn(model, src, *args, **kwargs)
    return run
