"""What the Hugging Face modules share: the model families docnmt reads and writes, the file names
of an import, and ``transformers`` itself, imported only here, offline."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import DocnmtError

# the Hugging Face classes docnmt reads and writes, by ``model_type`` of config.json
FAMILIES = {"marian": "MarianMTModel", "mbart": "MBartForConditionalGeneration",
            "m2m_100": "M2M100ForConditionalGeneration"}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_fast": "gelu_tanh", "swish": "silu", "silu": "silu"}
RECORD = "pretrained.json"       # what import-hf copied and added (a record for people; nothing reads it)
TOKENIZER_DIR = "hf_tokenizer"    # the original tokenizer and config files, part of the vocabulary, for export-hf
NOISE = 0.01                      # new rows: std of their noise, as a share of the pretrained rows' std
MAX_DIFF = 1e-3                   # import-hf refuses a model whose logits differ more from transformers'


def load_transformers():
    """``transformers``, in offline mode (nothing is ever downloaded)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import transformers
    except ModuleNotFoundError:
        raise DocnmtError("importing and exporting Hugging Face models needs transformers: "
                          "pip install docnmt[hf]") from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return transformers


def read_hf_config(directory: Path) -> dict:
    """config.json of a Hugging Face directory, checked to be a model family docnmt reads."""
    path = Path(directory) / "config.json"
    if not path.exists():
        raise DocnmtError(f"{directory}: not a Hugging Face model directory (no config.json)")
    config = json.loads(path.read_text(encoding="utf-8"))
    kind = config.get("model_type")
    if kind not in FAMILIES:
        raise DocnmtError(f"{directory}: model_type {kind!r} is not supported; docnmt imports "
                          f"{', '.join(FAMILIES.values())}")
    return config
