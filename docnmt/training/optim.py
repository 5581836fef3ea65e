"""The optimiser of a run: AdamW under fairseq's inverse-sqrt schedule (:func:`build_optimizer`),
the autocast dtype (:func:`amp_dtype`), and the checks of the training settings they read."""
from __future__ import annotations

import logging
import math
import os

import torch

from ..config import TRAIN_PRECISIONS, TrainConfig
from ..errors import DocnmtError

log = logging.getLogger("docnmt.training")
THREADS_PER_CPU = 4      # --threads allows at most this many per CPU of the machine (more only slows down)


def check_settings(tc: TrainConfig) -> None:
    """Refuse training settings that cannot work together, before anything is read or built."""
    if tc.best_metric not in ("loss", "nll_loss", "bleu"):
        raise DocnmtError(f"unknown best_metric {tc.best_metric!r}: use loss, nll_loss or bleu")
    if tc.best_metric == "bleu" and not tc.valid_bleu:
        raise DocnmtError("best_metric bleu needs valid BLEU: add --valid-bleu")
    cpus = os.cpu_count() or 1
    if tc.threads > THREADS_PER_CPU * cpus:     # OpenMP would die allocating them ("Out of memory")
        raise DocnmtError(f"--threads {tc.threads} is more than {THREADS_PER_CPU} per CPU of this machine "
                          f"({cpus} CPUs: at most {THREADS_PER_CPU * cpus}); 0 takes torch's default")


def inverse_sqrt(peak: float, warmup: int):
    """fairseq ``inverse_sqrt`` as a factor of the peak: u/W during warm-up, sqrt(W/u) after."""
    warmup = max(1, warmup)
    return lambda u: (max(u, 1) / warmup) if u < warmup else math.sqrt(warmup / max(u, 1))


def fused_adam(params: list[torch.Tensor]) -> bool:
    """Whether the optimizer step can be one fused kernel per parameter group: every parameter on
    one CUDA device (the GPU step then launches a handful of kernels instead of several per
    parameter), or all on the CPU, which has a fused AdamW kernel too (docs/performance.md); not
    for parameters spread over devices or on another kind of device."""
    kinds = {p.device.type for p in params}
    return len(kinds) == 1 and kinds <= {"cuda", "cpu"} and len({p.device for p in params}) == 1


def build_optimizer(model: torch.nn.Module, tc: TrainConfig, pretrained: list[str]):
    """AdamW (weight decay decoupled from the gradient, as fairseq's ``adam`` does; the same
    step as Adam at the default ``weight_decay`` 0), fused where :func:`fused_adam` allows,
    under one inverse-sqrt schedule, as ``(optimizer, scheduler)``; parameters
    initialised from another model (``pretrained``, their names) form their own group at
    ``lr × pretrained_lr_scale`` (docs/methods/gtransformer.md#fine-tuning-from-a-sentence-model),
    or are frozen with ``freeze_pretrained`` (docs/methods/context_transformer.md#two-step-training)."""
    named, copied = dict(model.named_parameters()), set(pretrained)
    old = [named[n] for n in pretrained if n in named]
    new = [p for n, p in named.items() if n not in copied]
    groups = [{"params": new, "lr": tc.lr}]
    if old and tc.freeze_pretrained:          # two-step training: only the new parameters learn
        for p in old:
            p.requires_grad_(False)
    elif old:
        groups.append({"params": old, "lr": tc.lr * tc.pretrained_lr_scale})
    optimizer = torch.optim.AdamW(groups, lr=tc.lr, betas=tuple(tc.adam_betas), eps=tc.adam_eps,
                                  weight_decay=tc.weight_decay, fused=fused_adam(list(named.values())))
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, inverse_sqrt(tc.lr, tc.warmup_updates))


def amp_dtype(precision: str, device: torch.device):
    """The autocast dtype: bf16 (fp16 where bf16 is missing) on CUDA by default, fp32 on CPU.
    ``bf16`` on CPU is honoured (CPU autocast; slow, but the same code path as on GPU)."""
    if precision not in TRAIN_PRECISIONS:
        raise DocnmtError(f"unknown precision {precision!r}: use one of {', '.join(TRAIN_PRECISIONS)}")
    if device.type != "cuda":
        if precision == "fp16":
            log.warning("fp16 autocast needs CUDA; training in fp32 on CPU")
        return torch.bfloat16 if precision == "bf16" else None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
