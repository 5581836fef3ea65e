"""``--precision int8``: dynamic int8 quantization of a model's linear layers for decoding and
scoring on a CPU (docs/performance.md#int8).

Weights are quantized once, per output channel, to int8; activations are quantized per batch
at run time (``torch.ops.quantized.linear_dynamic``, fbgemm/x86 kernels), so every method runs
as it is: the model is a copy whose linear layers, attention projections (``in_proj``, read by row
blocks) and output layer are :class:`Int8Linear`. Embeddings, LayerNorms and attention itself
stay fp32. Outputs are close to fp32's, not identical.
"""
from __future__ import annotations

import copy
import warnings

import torch
from torch import Tensor, nn

from ..errors import DocnmtError


def _pack(weight: Tensor, bias: Tensor | None):
    """fbgemm's packed int8 weight (per-output-channel scales) and fp32 bias."""
    w = weight.detach().float().contiguous()
    scale = (w.abs().amax(1) / 127.0).clamp(min=1e-8).double()
    with warnings.catch_warnings():       # the quantized tensor API is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        q = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach().float().contiguous())


class Int8Linear(nn.Module):
    """A linear layer with int8 weights and dynamically quantized fp32 inputs. :meth:`project`
    computes a block of its output rows (an attention's ``in_proj``: q, k, v) with its own packed
    block, made on first use."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None):
        super().__init__()
        self.weight_fp32, self.bias_fp32 = weight.detach(), None if bias is None else bias.detach()
        self.packed = {None: _pack(weight, bias)}

    def forward(self, x: Tensor) -> Tensor:
        return self._run(x, self.packed[None])

    def project(self, x: Tensor, rows: slice) -> Tensor:
        key = (rows.start, rows.stop)
        if key not in self.packed:
            bias = None if self.bias_fp32 is None else self.bias_fp32[rows]
            self.packed[key] = _pack(self.weight_fp32[rows], bias)
        return self._run(x, self.packed[key])

    @staticmethod
    def _run(x: Tensor, packed) -> Tensor:
        shape = x.shape
        out = torch.ops.quantized.linear_dynamic(x.float().reshape(-1, shape[-1]).contiguous(), packed, True)
        return out.view(*shape[:-1], out.size(-1))


def quantize(model: nn.Module) -> nn.Module:
    """An int8 copy of ``model`` for inference (``model`` itself is unchanged)."""
    if "fbgemm" not in torch.backends.quantized.supported_engines and "x86" not in \
            torch.backends.quantized.supported_engines:
        raise DocnmtError("--precision int8 needs PyTorch's x86 (fbgemm) int8 kernels, which this build lacks")
    out = copy.deepcopy(model).eval()
    for name, mod in list(out.named_modules()):
        for child_name, child in list(mod.named_children()):
            if isinstance(child, nn.Linear):
                setattr(mod, child_name, Int8Linear(child.weight, child.bias))
    if hasattr(out, "output_weight"):
        bias = out.output_bias()
        out.int8_output = Int8Linear(out.output_weight(), bias)
    return out


def model_for(translator, search) -> nn.Module:
    """The model to decode with: ``translator.model``, or its int8 copy (made once) for
    ``--precision int8``."""
    if getattr(search, "precision", "") != "int8":
        return translator.model
    if translator.device.type != "cpu":
        raise DocnmtError("--precision int8 runs on the CPU only (use --device cpu, or bf16 on a GPU)")
    cached = translator.__dict__.get("_int8")
    if cached is None or cached[0] is not translator.model:
        cached = translator.__dict__["_int8"] = (translator.model, quantize(translator.model))
    return cached[1]
