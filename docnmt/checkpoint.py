"""The model directory: layout, atomic checkpoints, loading and averaging.

::

    MODEL_DIR/
      config.yaml          resolved configuration (every value, presets expanded)
      spm.model vocab.json the subword model and docnmt's symbols (Moses+BPE: bpe.codes bpe.vocab.json)
      model.safetensors    the weights to translate with (best validation, else last)
      train.log metrics.jsonl learning_curve.png
      checkpoints/
        LAST               name of the newest complete checkpoint
        u00001200/         one checkpoint: model.safetensors + state.pt
                           (optimizer, scheduler, progress, RNG; loadable with weights_only=True)

Every file is written to a temporary name in the same directory and renamed into place, and a
checkpoint directory is complete before ``LAST`` names it, so a crash while saving never leaves a
broken checkpoint.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .errors import DocnmtError

WEIGHTS = "model.safetensors"
STATE = "state.pt"


def _new_file_mode(path: Path) -> int:
    """The mode ``open(path, "w")`` would give: the old file's, else 0666 less the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path: Path, write) -> None:
    """Call ``write(tmp_path)`` and rename the result over ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, _new_file_mode(path))   # mkstemp's 0600 would hide models from the group
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def state_dict_unique(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict without tied duplicates (safetensors refuses shared storage)."""
    out, seen = {}, set()
    for k, v in model.state_dict().items():
        key = (v.data_ptr(), v.shape)
        if key in seen:
            continue
        seen.add(key)
        out[k] = v.detach().contiguous().cpu()
    return out


def save_weights(model: torch.nn.Module, path: Path) -> None:
    tensors = state_dict_unique(model)
    atomic_write(path, lambda tmp: save_file(tensors, tmp))


def load_weights(model: torch.nn.Module, path: Path, strict: bool = True) -> list[str]:
    """Load safetensors weights; returns the names of the parameters that were loaded. With
    ``strict=False`` parameters missing from the file keep their values (fine-tuning a larger
    model from a smaller one); tensors the model does not have are an error either way."""
    if not Path(path).exists():
        raise DocnmtError(f"{path}: no such weights file")
    try:
        tensors = load_file(str(path))
    except Exception as e:         # safetensors' own error types (SafetensorError, OSError)
        raise DocnmtError(f"{path}: not a readable safetensors weights file ({e})") from None
    own = model.state_dict()
    wrong = [k for k, t in tensors.items() if k in own and own[k].shape != t.shape]
    if wrong:
        raise DocnmtError(f"{path}: weights do not fit this model ({wrong[0]}: {tuple(tensors[wrong[0]].shape)} vs "
                          f"{tuple(own[wrong[0]].shape)}; same vocabulary and dimensions needed)")
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {k for k in missing if _is_tied(model, k)}
    missing = [k for k in missing if k not in tied]
    if unexpected or (strict and missing):
        raise DocnmtError(f"{path}: weights do not fit this model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    loaded = set(tensors) | tied
    return [n for n, _ in model.named_parameters() if n in loaded]


def _is_tied(model: torch.nn.Module, key: str) -> bool:
    sd = model.state_dict()
    return any(k != key and sd[k].data_ptr() == sd[key].data_ptr() for k in sd)


def save_checkpoint(directory: Path, name: str, model: torch.nn.Module, state: dict, keep_last: int) -> Path:
    ckpts = Path(directory) / "checkpoints"
    ckpts.mkdir(parents=True, exist_ok=True)
    final = ckpts / name
    tmp = Path(tempfile.mkdtemp(dir=ckpts, prefix=f".{name}."))
    try:
        save_file(state_dict_unique(model), str(tmp / WEIGHTS))
        torch.save(state, tmp / STATE)
        aside = ckpts / f".{name}.old"
        if final.exists():              # re-saving the same update: keep the old one until replaced
            os.replace(final, aside)
        os.replace(tmp, final)
        shutil.rmtree(aside, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    atomic_write(ckpts / "LAST", lambda t: Path(t).write_text(name))
    older = [p for p in list_checkpoints(directory) if p != final]
    for old in older[: max(0, len(older) - (keep_last - 1))] if keep_last > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(directory: Path) -> list[Path]:
    ckpts = Path(directory) / "checkpoints"
    return sorted(p for p in ckpts.glob("u*") if (p / STATE).exists()) if ckpts.exists() else []


def last_checkpoint(directory: Path) -> Path | None:
    pointer = Path(directory) / "checkpoints" / "LAST"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if (path / STATE).exists() else None


def load_state(path: Path) -> dict:
    return torch.load(Path(path) / STATE, weights_only=True)


def average_checkpoints(paths: list[Path], output: Path) -> None:
    """Arithmetic mean of every floating-point tensor (fairseq's average_checkpoints)."""
    if not paths:
        raise DocnmtError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        weights = p / WEIGHTS if Path(p).is_dir() else Path(p)
        if not weights.exists():
            raise DocnmtError(f"{weights}: no such checkpoint")
        for k, v in load_file(str(weights)).items():
            if k in total and v.shape != total[k].shape:
                raise DocnmtError(f"{weights}: tensor {k} has shape {tuple(v.shape)}, other checkpoints "
                                  f"{tuple(total[k].shape)}")
            total[k] = total[k] + v.double() if k in total else v.double()
    out = {k: (v / len(paths)).to(torch.float32) for k, v in total.items()}
    atomic_write(Path(output), lambda tmp: save_file(out, tmp))
