"""Validation of a model during training: losses (and optionally attention entropies) on the
validation instances (:func:`validate`), and document BLEU of their translations (:func:`valid_bleu`)."""
from __future__ import annotations

import contextlib
import math

import torch

from .. import progress_log
from ..attention import AttentionProbe
from ..config import Config
from ..data import InstanceSet
from ..scoring import EntropyMeter
from ..vocab import BaseVocab
from .data import forward_loss

BEST_KEYS = {"loss": "valid_loss", "nll_loss": "valid_nll_loss", "bleu": "valid_bleu"}


def best_value(metrics: dict, best_metric: str) -> float:
    """The validation result early stopping compares, lower is better (BLEU negated)."""
    value = metrics[BEST_KEYS[best_metric]]
    return -value if best_metric == "bleu" else value


def validation_line(updates: int, metrics: dict, improved: bool, bad: int, patience: int) -> str:
    """What the console shows of a validation (``bad`` validations without improvement so far)."""
    return (f"valid | update {updates} | " + " | ".join(f"{k[6:]} {v:.3f}" for k, v in metrics.items() if v is not None)
            + (" | best" if improved else f" | no improvement ({bad}/{patience})"))


@torch.no_grad()
def validate(model, valid: InstanceSet, vocab: BaseVocab, cfg: Config, device: torch.device, amp_dtype,
             progress_bar: bool) -> dict:
    """Loss, NLL and perplexity (bits per token) of ``model`` on the validation instances, with
    the attention entropies (``train.attention_entropy``) and BLEU (``train.valid_bleu``)."""
    model.eval()
    loss = nll = 0.0
    ntok = 0
    entropy = EntropyMeter() if cfg.train.attention_entropy else None
    batches = valid.batches(cfg.train.max_tokens, shuffle=False, order=cfg.data.batch_order)
    for b in progress_log.progress_bar(batches, desc="valid", unit="batch", leave=False, disable=not progress_bar,
                                       dynamic_ncols=True):
        batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in valid.collate(b).items()}
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None), \
                (AttentionProbe() if entropy else contextlib.nullcontext()) as probe:
            l_, n_, t_ = forward_loss(model, batch, cfg.train.label_smoothing)
        loss += float(l_)
        nll += float(n_)
        ntok += t_
        if entropy:
            entropy.add(probe, batch, vocab.pad)
    out = {"valid_loss": loss / ntok / math.log(2), "valid_nll_loss": nll / ntok / math.log(2),
           "valid_ppl": 2 ** (nll / ntok / math.log(2))}
    if entropy:
        out.update({f"valid_entropy_{k}": v for k, v in entropy.result().items()})
        out.update({f"valid_distance_{k}": v for k, v in entropy.result("distance").items()})
    if cfg.train.valid_bleu:
        out.update(valid_bleu(model, valid, vocab, cfg, device, progress_bar))
    return out


def valid_bleu(model, valid: InstanceSet, vocab: BaseVocab, cfg: Config, device: torch.device,
               progress_bar: bool) -> dict:
    """Document and sentence BLEU of the model's translations of the validation documents."""
    from ..document import Document
    from ..metrics import evaluate_documents
    from ..translate import Translator  # only for this optional metric
    corpus = valid.corpus
    docs = [Document(corpus.docids[d], [vocab.decode(corpus.src[i], side="src") for i in corpus.doc_range(d)])
            for d in range(corpus.n_docs)]
    refs = [[vocab.decode(corpus.tgt[i]) for i in corpus.doc_range(d)] for d in range(corpus.n_docs)]
    translator = Translator(model, vocab, cfg, device)
    hyps, _ = translator.translate(docs, progress=progress_bar)
    result = evaluate_documents([h.tgt for h in hyps], refs, lowercase_too=False, metrics=("bleu",))
    model.train()
    return {"valid_bleu": result["d_bleu"]["score"], "valid_s_bleu": (result["s_bleu"] or {}).get("score")}
