"""A trainer from directories (:func:`from_dirs`, also ``Trainer.from_dirs``): the process set
up, the prepared data read, the model built (after checking it can fit), the save directory
claimed and the run in it resumed or started (:func:`open_run`)."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import torch
import yaml

from ..attention import AttentionSettings
from ..config import PRESET_DIR, Config, preset_description
from ..errors import ConfigError
from ..limits import memory_bytes
from ..methods import build_model
from ..vocab import BaseVocab
from .data import TrainingData
from .distributed import Distributed
from .optim import check_settings
from .run_dir import RunDir
from .trainer import Trainer

log = logging.getLogger("docnmt.training")


def from_dirs(cfg: Config, data_dir: str | Path, save_dir: str | Path, force: bool = False,
              init_from: str | Path | None = None, progress_bar: bool = True, device: str | None = None) -> Trainer:
    """A trainer of ``cfg`` on the prepared data in ``data_dir``, saving into ``save_dir``: the
    run there resumed from its newest checkpoint that loads, or started (``force``: started over;
    ``init_from``: a model directory or .safetensors file whose weights a new run starts from).
    ``device``: cpu, cuda or cuda:N (default: CUDA when there is a GPU); under torchrun each
    process takes the GPU of its local rank unless an index is given."""
    from ..translate import check_device
    tc = cfg.train
    check_settings(tc)
    asked = check_device(device)
    dist = Distributed(cuda=asked.type == "cuda")
    if tc.threads > 0:
        torch.set_num_threads(tc.threads)
    device = torch.device("cuda", dist.local_rank) if asked.type == "cuda" and asked.index is None else asked
    data = TrainingData.load(cfg, data_dir)
    torch.manual_seed(tc.seed)
    model = build_trainable_model(cfg, data.vocab, device)
    model.attention_settings = AttentionSettings.of(tc)      # this model's own, not the process's
    trainer = Trainer(cfg, model, data, RunDir(save_dir), dist, device, progress_bar)
    check_positions(trainer)
    try:
        open_run(trainer, force, init_from)
    except Exception:
        trainer.close()
        trainer.run.remove_if_made_empty()
        raise
    except BaseException:
        trainer.close()
        raise
    if tc.tensorboard_dir and dist.main:
        trainer.run.tensorboard(tc.tensorboard_dir)
    return trainer


def check_positions(trainer: Trainer) -> None:
    """Refuse a model none of whose training instances fits its positions (translation refuses
    inputs that long, so the saved model could translate nothing it learned); warn with the share
    of the instances longer than them."""
    lens = trainer.train_set.src_lens, trainer.train_set.tgt_lens
    limit, total = trainer.cfg.model.max_positions, len(lens[0])
    longer = np.maximum(*lens)                  # an instance's longer side
    over = int((longer > limit).sum())
    if total and over == total:
        raise ConfigError(f"model.max_positions {limit}: none of the {total:,} training instances fits in "
                          f"{limit} positions (the shortest needs {int(longer.min())}); raise model.max_positions")
    if over and trainer.dist.main:
        text = (f"warning: {over:,} of the {total:,} training instances ({100 * over / total:.1f}%) are longer "
                f"than the model's {limit} positions (model.max_positions); translation refuses inputs that long")
        print(text, file=sys.stderr)


def open_run(trainer: Trainer, force: bool, init_from: str | Path | None) -> None:
    """Claim the trainer's save directory, then resume the run it holds or start one. Rank 0
    checks and cleans up; the other ranks then only read the checkpoints."""
    run, dist, cfg = trainer.run, trainer.dist, trainer.cfg
    if dist.main:
        run.claim(force)
    dist.barrier()   # every rank looks after rank 0 has checked and cleaned up, before it writes
    found = run.checkpoints()
    message = ""
    if found and not force:
        changed = run.check_config(cfg)
        run.resume_newest(found, trainer.resume, say=dist.main)
        if dist.main:
            message = run.resumed_with(cfg, changed)
    elif dist.main:                         # with --force or after a start killed early: anew
        run.clear()
    if force or not found:
        if init_from:
            message = trainer.init_from(init_from)
        elif starts_from_another_model(cfg.preset):
            message = (f"warning: preset {cfg.preset} starts from another model (see `docnmt presets`), but no "
                       "--init-from was given: every weight starts random")
        if dist.main:
            run.start(cfg, trainer.vocab)
    dist.barrier()
    if dist.main:
        run.open_log()
        if message:          # made before train.log was open: on the console and in the log
            log.info(message)
            print(message, file=sys.stderr)


def build_trainable_model(cfg: Config, vocab: BaseVocab, device: torch.device) -> torch.nn.Module:
    """The model on its device, after checking that training it can fit in memory at all
    (from a lower bound of its size: the embeddings and the attention and feed-forward
    weights of the plain Transformer; methods add more)."""
    m = cfg.model
    d, f = m.d_model, m.ffn_dim
    n = len(vocab) * d + m.encoder_layers * (4 * d * d + 2 * d * f) + m.decoder_layers * (8 * d * d + 2 * d * f)
    need = 16 * n          # fp32 weights, gradients and Adam's two moments
    have = memory_bytes(device)
    if have and need > have:
        raise ConfigError(f"the model has over {n:,} parameters: training needs at least {need / 2**30:.1f} GiB "
                          f"for its weights, gradients and Adam moments, more than the {have / 2**30:.1f} GiB "
                          f"of this {device.type} (model.d_model {d}, model.ffn_dim {f}, {len(vocab)} symbols)")
    try:
        return build_model(cfg, vocab).to(device)
    except (MemoryError, RuntimeError) as e:       # CPU: "can't allocate memory"; CUDA: OutOfMemoryError
        if not isinstance(e, MemoryError) and "allocate memory" not in str(e) and "out of memory" not in str(e):
            raise
        raise ConfigError(f"the model (over {n:,} parameters) does not fit in memory: "
                          f"{str(e).splitlines()[0]}") from None


def starts_from_another_model(name: str) -> bool:
    """Whether preset ``name`` (or a preset it is built on) is meant to start from another model:
    its description says ``--init-from``."""
    seen = set()
    while name and name not in seen and (PRESET_DIR / f"{name}.yaml").exists():
        if "--init-from" in preset_description(name):
            return True
        seen.add(name)
        name = (yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text()) or {}).get("preset")
    return False
