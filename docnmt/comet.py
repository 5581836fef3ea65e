"""COMET as an optional extra that never breaks the rest of an evaluation.

It runs only when the user points to a local COMET checkpoint (``--comet-model PATH``, e.g. a
downloaded ``wmt22-comet-da/checkpoints/model.ckpt``) and the ``unbabel-comet`` package is
installed; nothing is ever downloaded (the Hugging Face hub is switched to offline mode, so the
checkpoint's encoder must be in the local cache). Otherwise :func:`comet_score` returns a one-line
reason why COMET was skipped. Scores are per sentence pair (source, hypothesis, reference); the
system score is their mean.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence


def comet_score(model_path: str | Path | None, srcs: Sequence[str], hyps: Sequence[str], refs: Sequence[str],
                batch_size: int = 16, gpus: int | None = None) -> dict | str:
    """``{"score", "scores", "model"}``, or a string saying why COMET was skipped."""
    if not model_path:
        return "COMET skipped: no --comet-model checkpoint given (docnmt never downloads one)"
    path = Path(model_path)
    if not path.exists():
        return f"COMET skipped: {path} does not exist"
    if not (len(srcs) == len(hyps) == len(refs)) or not srcs:
        return "COMET skipped: no aligned sentence triples (source, hypothesis and reference must align)"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import comet
    except ImportError:
        return "COMET skipped: the unbabel-comet package is not installed (pip install unbabel-comet)"
    except Exception as e:  # noqa: BLE001 - a broken installation must not end the evaluation
        return f"COMET skipped: importing comet failed ({type(e).__name__}: {_first_line(e)})"
    try:
        model = comet.load_from_checkpoint(str(path))
        if gpus is None:
            import torch
            gpus = 1 if torch.cuda.is_available() else 0
        data = [{"src": s, "mt": h, "ref": r} for s, h, r in zip(srcs, hyps, refs)]
        out = model.predict(data, batch_size=batch_size, gpus=gpus, progress_bar=False)
        scores = [float(x) for x in (out.scores if hasattr(out, "scores") else out[0])]   # comet 2.x / 1.x
    except Exception as e:  # noqa: BLE001 - an optional metric must not end the evaluation
        return f"COMET skipped: {type(e).__name__}: {_first_line(e)}"
    return {"score": float(sum(scores) / len(scores)), "scores": scores, "model": str(path)}


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else ""


def aligned_sentences(src_docs, hyp_docs, ref_docs):
    """Flat (sources, hypotheses, references) of the documents whose three sentence counts
    agree, and how many documents that is."""
    keep = [i for i, (s, h, r) in enumerate(zip(src_docs, hyp_docs, ref_docs)) if len(s) == len(h) == len(r)]
    flat = lambda docs: [x for i in keep for x in docs[i]]  # noqa: E731
    return flat(src_docs), flat(hyp_docs), flat(ref_docs), len(keep)
