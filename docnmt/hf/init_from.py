"""``train --init-from`` an imported model: the architecture settings a training run takes from it,
after checking that the data was prepared with its tokenizer."""
from __future__ import annotations

import json
from pathlib import Path

from ..config import Config
from ..errors import DocnmtError
from ..vocab import PretrainedVocab

# model settings a training run chooses itself; the others are the imported architecture
OWN_SETTINGS = ("dropout", "attention_dropout", "activation_dropout", "length_aware", "output_tokens", "vocab_size",
                "pad_id", "alibi", "sentence_positions", "pad_vocab_to")


def init_from_overrides(init_from: str | Path, data_dir: str | Path) -> dict:
    """Config overrides for ``train --init-from MODEL``: when MODEL has a pretrained tokenizer
    (imported with import-hf, or trained from such a model), its architecture (every
    ``model.*`` setting but dropouts, length-aware attention, sentence positions and ``output_tokens``), after
    checking that ``data_dir`` was prepared with its tokenizer. Nothing for other models."""
    path = Path(init_from)
    if path.is_dir() and (path / "config.json").exists() and not (path / "config.yaml").exists():
        raise DocnmtError(f"--init-from {path}: a Hugging Face directory; import it first: "
                          f"docnmt import-hf {path} --save-dir MODEL")
    if not (path.is_dir() and (path / "vocab.json").exists() and (path / "config.yaml").exists()):
        return {}
    meta = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
    if meta.get("backend") != PretrainedVocab.backend:
        return {}
    data = Path(data_dir)
    theirs = json.loads((data / "vocab.json").read_text(encoding="utf-8")) if (data / "vocab.json").exists() else {}
    same = theirs == meta and all((data / f).exists() and (data / f).read_bytes() == (path / f).read_bytes()
                                  for f in meta.get("files", []))
    if not same:
        raise DocnmtError(f"{data_dir} was not prepared with the tokenizer of {path}: prepare the data with "
                          f"docnmt prepare --spm-model {path} ...")
    model = Config.load(path / "config.yaml").model
    return {f"model.{k}": v for k, v in vars(model).items() if k not in OWN_SETTINGS}

