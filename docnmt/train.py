"""The trainer: token batches, Adam + inverse-sqrt, label smoothing, validation, early stopping,
exact resumption, bf16/fp16 autocast on CUDA and DDP through ``torchrun`` -- the same code on a
laptop CPU and on GPUs.

Exact resumption: the batches of epoch *e* are a function of (seed, e) only, checkpoints store the
position inside the epoch, the optimizer and scheduler states and the torch RNG state, so a run
killed after update *u* and resumed from its checkpoint at *u* continues with the same batches,
dropout masks and losses as the run that was never interrupted (on CPU).

Crash safety: one training command at a time holds a save directory (:class:`DirectoryLock`);
a run killed at any instant is resumed by the same command from its newest checkpoint that
loads (:mod:`docnmt.checkpoint`), or started afresh when it had none yet. A non-finite loss
stops training with an error before the optimizer step, so the checkpoints and
``model.safetensors`` on disk keep the last good weights.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from . import methods
from .attention import AttentionProbe, use_cudnn_attention, use_flex_attention
from .checkpoint import (
    WEIGHTS,
    DirectoryLock,
    atomic_write,
    crash_point,
    last_checkpoint,
    list_checkpoints,
    load_state,
    load_weights,
    recover,
    save_checkpoint,
    save_weights,
)
from .config import TRAIN_PRECISIONS, Config, TrainConfig
from .data import Corpus, InstanceSet, build_instances, model_inputs, word_dropout
from .errors import ConfigError, DataError, DocnmtError
from .limits import memory_bytes
from .methods import build_model
from .scoring import EntropyMeter
from .vocab import Vocab

log = logging.getLogger("docnmt.train")


# --------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------

def device_rng_state(device: torch.device) -> torch.Tensor | None:
    """The random state of a CUDA device (None on the CPU, whose state torch.get_rng_state has)."""
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def set_device_rng_state(device: torch.device, state: torch.Tensor | None) -> None:
    """Put back what :func:`device_rng_state` returned (nothing to do for None: a CPU run, or a
    checkpoint written before accelerator states were kept)."""
    if state is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state, device)


def inverse_sqrt(peak: float, warmup: int):
    """fairseq ``inverse_sqrt`` as a factor of the peak: u/W during warm-up, sqrt(W/u) after."""
    warmup = max(1, warmup)
    return lambda u: (max(u, 1) / warmup) if u < warmup else math.sqrt(warmup / max(u, 1))


def run_end(tc: TrainConfig, updates: int, epoch: int, left_in_epoch: int, per_epoch: int, elapsed: float,
            rate: float) -> tuple[int | None, str]:
    """Where a run will stop, for its progress bar: ``(update, why)``, the nearest of its limits.
    ``train.max_update``; the end of epoch ``train.max_epoch`` (``left_in_epoch`` updates left in
    epoch ``epoch``, then ``per_epoch`` updates per later epoch: this epoch's count, as dynamic
    length sampling changes it a little from epoch to epoch); ``train.max_minutes``, as the update
    reached at the mean ``rate`` (updates per second) when the ``elapsed`` seconds reach it (the
    bar's end then moves with the speed). ``None`` when no limit is known yet (only a time cap
    before the first update, or only early stopping)."""
    ends = []
    if tc.max_update > 0:
        ends.append((tc.max_update, f"max-update {tc.max_update}"))
    if tc.max_epoch > 0:
        ends.append((updates + left_in_epoch + max(0, tc.max_epoch - epoch) * per_epoch,
                     f"end of epoch {tc.max_epoch}"))
    total, why = min(ends) if ends else (None, "early stopping" if tc.patience > 0 else "no limit")
    if tc.max_minutes > 0:
        left = max(0.0, 60 * tc.max_minutes - elapsed)
        at_cap = updates + int(rate * left) if rate > 0 else None
        if total is None or (at_cap is not None and at_cap < total):
            total, why = at_cap, "time cap in " + (f"{left:.0f} s" if left < 90 else f"{left / 60:.0f} min")
    return (None if total is None else max(total, updates)), why


def forward_loss(model, batch: dict, eps: float) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Loss of one batch (through the model's forward; a DDP wrapper forwards it to the model)."""
    return model(batch["src"], batch["tgt_in"], batch["labels"], eps, **model_inputs(batch))


# what a training run writes into its save directory (a directory holding only these and no
# checkpoint is a run killed before its first checkpoint, started again by the same command)
RUN_FILES = {"config.yaml", "spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json", "train.log", "metrics.jsonl",
             "checkpoints"}


def _record_through(line: bytes, updates: int, validated: bool) -> bool:
    """Whether a metrics.jsonl line is a whole record of an update up to ``updates`` (a
    validation of ``updates`` itself only when the checkpoint has it: else it is redone)."""
    try:
        rec = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    if not line.endswith(b"\n") or not isinstance(rec, dict) or not isinstance(rec.get("updates", 0), int):
        return False
    u = rec.get("updates", 0)
    return u < updates or (u == updates and (validated or not any(k.startswith("valid_") for k in rec)))


def load_corpus(directory: Path, split: str, vocab_size: int) -> Corpus:
    """A prepared split, checked: every file readable and consistent with the others and with
    the vocabulary, else a DataError naming the file (a truncated copy, a disk error)."""
    from .data.corpus import Side
    files = sorted(Path(directory).glob(f"{split}.*"))
    for f in files:
        try:
            if f.suffix == ".npy":
                np.load(f, mmap_mode="r")
            elif f.suffix == ".json":
                json.loads(f.read_text(encoding="utf-8"))
        except Exception as e:             # numpy and json raise many kinds (ValueError, EOFError, OSError, ...)
            raise DataError(f"not a readable prepared data file ({type(e).__name__}: {e}); run `docnmt prepare` "
                            "again", f) from None
    corpus = Corpus.load(directory, split)

    def bad(name: str, what: str):
        return DataError(f"{what}; the prepared data is damaged: run `docnmt prepare` again",
                         Path(directory) / f"{split}.{name}")
    sides = [(n, side) for n, side in (("src", corpus.src), ("tgt", corpus.tgt)) if isinstance(side, Side)]
    if not sides:
        raise bad("src.tokens.npy", "missing")
    for name, side in sides:
        off, tok = side.offsets, side.tokens
        if off.ndim != 1 or not len(off) or off[0] != 0 or off[-1] != len(tok) or (np.diff(off) < 0).any():
            raise bad(f"{name}.offsets.npy", f"sentence offsets do not fit the {len(tok)} tokens")
        if tok.ndim != 1 or tok.dtype.kind not in "iu" or (len(tok) and (tok.min() < 0 or tok.max() >= vocab_size)):
            raise bad(f"{name}.tokens.npy", f"token ids outside the vocabulary's {vocab_size}")
        if len(off) != len(corpus.src.offsets):
            raise bad(f"{name}.offsets.npy", "source and target sentence counts differ")
    docs = corpus.doc_offsets
    if docs.ndim != 1 or not len(docs) or docs[0] != 0 or docs[-1] != corpus.n_sents or (np.diff(docs) < 0).any():
        raise bad("docs.npy", f"document offsets do not fit the {corpus.n_sents} sentences")
    if not isinstance(corpus.docids, list) or len(corpus.docids) != corpus.n_docs:
        raise bad("docids.json", f"not {corpus.n_docs} document ids")
    return corpus


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    epoch: int = 1
    batch_in_epoch: int = 0      # batches of this epoch already consumed (micro-batches)
    updates: int = 0
    best: float | None = None
    bad_validations: int = 0
    history: list = field(default_factory=list)   # dicts of logged metrics

    def to_dict(self) -> dict:
        return dict(epoch=self.epoch, batch_in_epoch=self.batch_in_epoch, updates=self.updates,
                    best=self.best, bad_validations=self.bad_validations, history=json.dumps(self.history))

    @classmethod
    def from_dict(cls, d: dict) -> "Progress":
        d = dict(d)
        d["history"] = json.loads(d["history"])
        return cls(**d)


class Distributed:
    """Rank and world size from ``torchrun``'s environment; a single process otherwise."""

    def __init__(self, cuda: bool | None = None):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.cuda = torch.cuda.is_available() if cuda is None else cuda
        if self.world > 1 and self.cuda:
            torch.cuda.set_device(self.local_rank)
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.cuda else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_sum(self, values: list[float]) -> list[float]:
        if self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        if self.cuda:
            t = t.cuda()
        dist.all_reduce(t)
        return t.tolist()

    def barrier(self):
        if self.world > 1:
            dist.barrier()


# --------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------

class Trainer:
    def __init__(self, cfg: Config, data_dir: str | Path, save_dir: str | Path, force: bool = False,
                 init_from: str | Path | None = None, progress_bar: bool = True, device: str | None = None):
        """``device``: cpu, cuda or cuda:N (default: CUDA when there is a GPU); under torchrun each
        process takes the GPU of its local rank unless an index is given."""
        from .translate import check_device
        self.cfg, self.data_dir, self.save_dir = cfg, Path(data_dir), Path(save_dir)
        asked = check_device(device)
        self.dist = Distributed(cuda=asked.type == "cuda")
        tc = cfg.train
        if tc.best_metric not in ("loss", "nll_loss", "bleu"):
            raise DocnmtError(f"unknown best_metric {tc.best_metric!r}: use loss, nll_loss or bleu")
        if tc.best_metric == "bleu" and not tc.valid_bleu:
            raise DocnmtError("best_metric bleu needs valid BLEU: add --valid-bleu")
        if tc.threads > 0:
            torch.set_num_threads(tc.threads)
        use_cudnn_attention(tc.cudnn_attention)
        use_flex_attention(tc.flex_attention)
        self.device = torch.device("cuda", self.dist.local_rank) if asked.type == "cuda" and asked.index is None \
            else asked
        self.progress_bar = progress_bar and self.dist.main
        self.vocab = Vocab.load(self.data_dir)
        self.joiner = methods.data_joiner(self.vocab, cfg.data)
        self.train_corpus = load_corpus(self.data_dir, "train", len(self.vocab))
        self.valid = None
        if (self.data_dir / "valid.docs.npy").exists():
            vc = load_corpus(self.data_dir, "valid", len(self.vocab))
            self.valid = InstanceSet(vc, build_instances(vc, cfg.data, training=False), self.joiner)
        self.train_set = self.make_train_set(1)

        torch.manual_seed(tc.seed)
        self.model = self._build_model()
        self._begin_epoch()
        self.amp_dtype = self._amp_dtype(tc.precision)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.pretrained: list[str] = []   # parameters initialised from --init-from
        self._build_optimizer()
        self.progress = Progress()
        self._validated_at = -1
        self._lock: DirectoryLock | None = None
        self._log_handler: logging.Handler | None = None
        self._console_handler: logging.Handler | None = None     # warnings also on stderr, not only in train.log
        self._init_message = ""             # what --init-from copied (_init_from), logged once the log is open
        self._made_dir = False
        try:
            self._prepare_save_dir(force, init_from)
        except Exception:
            self.close()
            if self._made_dir and not [p for p in self.save_dir.iterdir() if p.name != ".lock"]:
                shutil.rmtree(self.save_dir)       # a failed start leaves no directory it made
            raise
        except BaseException:
            self.close()
            raise
        self.ddp = self.model
        if self.dist.world > 1:
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        # the update's forward pass, compiled for dynamic shapes so that token batches of every
        # shape share one compiled graph (validation and decoding stay eager)
        self.train_model = torch.compile(self.ddp, dynamic=True) if tc.compile else self.ddp
        self.tb = self._tensorboard()

    # ---- set-up ------------------------------------------------------------------------------
    def _build_model(self):
        """The model on its device, after checking that training it can fit in memory at all
        (from a lower bound of its size: the embeddings and the attention and feed-forward
        weights of the plain Transformer; methods add more)."""
        m = self.cfg.model
        d, f = m.d_model, m.ffn_dim
        n = len(self.vocab) * d + m.encoder_layers * (4 * d * d + 2 * d * f) + \
            m.decoder_layers * (8 * d * d + 2 * d * f)
        need = 16 * n          # fp32 weights, gradients and Adam's two moments
        have = memory_bytes(self.device)
        if have and need > have:
            raise ConfigError(f"the model has over {n:,} parameters: training needs at least {need / 2**30:.1f} GiB "
                              f"for its weights, gradients and Adam moments, more than the {have / 2**30:.1f} GiB "
                              f"of this {self.device.type} (model.d_model {d}, model.ffn_dim {f}, "
                              f"{len(self.vocab)} symbols)")
        try:
            return build_model(self.cfg, self.vocab).to(self.device)
        except (MemoryError, RuntimeError) as e:       # CPU: "can't allocate memory"; CUDA: OutOfMemoryError
            if not isinstance(e, MemoryError) and "allocate memory" not in str(e) and "out of memory" not in str(e):
                raise
            raise ConfigError(f"the model (over {n:,} parameters) does not fit in memory: "
                              f"{str(e).splitlines()[0]}") from None

    def describe(self) -> str:
        """One line saying what this run is about to do: method and mode, device, threads,
        precision, model size, data sizes, updates."""
        tc = self.cfg.train
        params = sum(p.numel() for p in self.model.parameters())
        precision = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.amp_dtype]
        valid = f", {len(self.valid.rows):,} validation instances" if self.valid is not None else ""
        ranks = f" x {self.dist.world} processes" if self.dist.world > 1 else ""
        return (f"{self.cfg.method_name} ({self.cfg.data.mode}) on {self.device}{ranks} "
                f"({torch.get_num_threads()} threads), {precision}, {params / 1e6:.2f}M parameters, "
                f"{len(self.train_set.rows):,} training instances{valid}, "
                + (f"{tc.max_update:,} updates" if tc.max_update > 0 else f"{tc.max_epoch} epochs"))

    def close(self) -> None:
        """Release the save directory and its log (also done when training ends or fails)."""
        for h in (self._log_handler, self._console_handler):
            if h is not None:
                log.removeHandler(h)
                h.close()
        self._log_handler = self._console_handler = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def make_train_set(self, epoch: int) -> InstanceSet:
        """The training instances of an epoch (dynamic length sampling draws them anew)."""
        rows = methods.training_rows(self.train_corpus, self.cfg.data, epoch, self.cfg.train.seed)
        if not len(rows):
            raise ConfigError("no training instances: data.min_train_doc_sents "
                              f"({self.cfg.data.min_train_doc_sents}) or data.max_train_sent_tokens "
                              f"({self.cfg.data.max_train_sent_tokens}) drops every training document")
        return InstanceSet(self.train_corpus, rows, self.joiner)

    def _begin_epoch(self) -> None:
        """Per-epoch model state: the mean training instance lengths (length-aware attention uses
        them; set when an epoch's training starts, so the checkpoint after it holds that epoch's
        values)."""
        self.model.set_training_lengths(float(self.train_set.src_lens.mean()), float(self.train_set.tgt_lens.mean()))

    def _build_optimizer(self) -> None:
        """Adam under one inverse-sqrt schedule; parameters initialised from another model
        (``self.pretrained``) form their own group at ``lr × pretrained_lr_scale``
        (docs/methods/gtransformer.md#fine-tuning-from-a-sentence-model), or are frozen with
        ``freeze_pretrained`` (docs/methods/context_transformer.md#two-step-training)."""
        tc = self.cfg.train
        named, copied = dict(self.model.named_parameters()), set(self.pretrained)
        old = [named[n] for n in self.pretrained if n in named]
        new = [p for n, p in named.items() if n not in copied]
        groups = [{"params": new, "lr": tc.lr}]
        if old and tc.freeze_pretrained:          # two-step training: only the new parameters learn
            for p in old:
                p.requires_grad_(False)
        elif old:
            groups.append({"params": old, "lr": tc.lr * tc.pretrained_lr_scale})
        self.optimizer = torch.optim.Adam(groups, lr=tc.lr, betas=tuple(tc.adam_betas), eps=tc.adam_eps,
                                          weight_decay=tc.weight_decay, fused=True)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, inverse_sqrt(tc.lr, tc.warmup_updates))

    def _init_from(self, source: str | Path) -> None:
        """Copy the weights of a model directory or .safetensors file into the parameters of
        the same name (a sentence model into a document model: its attention becomes the local
        attention); the others keep their fresh initialisation. Logs what was copied."""
        path = Path(source)
        path = path / WEIGHTS if path.is_dir() else path
        self.pretrained = load_weights(self.model, path, strict=False)
        copied = set(self.pretrained)
        fresh = [n for n, _ in self.model.named_parameters() if n not in copied]
        self._init_message = (f"initialised {len(self.pretrained)} parameters from {path}; {len(fresh)} fresh: "
                              + ", ".join(fresh[:6]) + (" …" if len(fresh) > 6 else ""))
        self._build_optimizer()

    def _amp_dtype(self, precision: str):
        """The autocast dtype: bf16 (fp16 where bf16 is missing) on CUDA by default, fp32 on CPU.
        ``bf16`` on CPU is honoured (CPU autocast; slow, but the same code path as on GPU)."""
        if precision not in TRAIN_PRECISIONS:
            raise DocnmtError(f"unknown precision {precision!r}: use one of {', '.join(TRAIN_PRECISIONS)}")
        if self.device.type != "cuda":
            if precision == "fp16":
                log.warning("fp16 autocast needs CUDA; training in fp32 on CPU")
            return torch.bfloat16 if precision == "bf16" else None
        if precision == "auto":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]

    def _prepare_save_dir(self, force: bool, init_from) -> None:
        """Lock the save directory, then resume the run it holds, or start one (see the module
        docstring). A directory with files docnmt did not make is never touched. Rank 0 checks
        and cleans up; the other ranks then only read the checkpoints."""
        d = self.save_dir
        contents: list[Path] = []
        if self.dist.main:
            if d.exists() and not d.is_dir():
                raise DocnmtError(f"{d} is a file; --save-dir names a directory")
            if d.is_dir() and not (d / "config.yaml").exists() and any(p.name != ".lock" for p in d.iterdir()):
                raise DocnmtError(f"{d} exists and is not empty, and is not a docnmt model directory (no "
                                  "config.yaml): choose another --save-dir (--force only starts over a docnmt model "
                                  "directory)")
            self._made_dir = not d.exists()
            d.mkdir(parents=True, exist_ok=True)
            self._lock = DirectoryLock(d)          # before looking: another command may be working here
            for line in recover(d):
                print(f"{d}: {line}", file=sys.stderr)
            contents = [p for p in d.iterdir() if p.name != ".lock"]
            others = [p.name for p in contents if p.name not in RUN_FILES]
            if contents and not list_checkpoints(d) and not force and others:   # no others: killed before
                raise DocnmtError(f"{d} holds files of an earlier run ({others[0]}) but no checkpoint to resume "
                                  "from; choose another --save-dir or pass --force to start over")
        self.dist.barrier()   # every rank looks after rank 0 has checked and cleaned up, before it writes
        found = list_checkpoints(d)
        if found and not force:
            saved = Config.load(d / "config.yaml").to_dict()
            if saved["model"] != self.cfg.to_dict()["model"] or saved["data"] != self.cfg.to_dict()["data"]:
                raise DocnmtError(f"{d} holds a run with a different model or data config; "
                                  "use another --save-dir, or --force to start over")
            self._resume_newest(found)
        elif contents:                          # rank 0, with --force or after a start killed early: anew
            for child in contents:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        if force or not found:
            if init_from:
                self._init_from(init_from)
            if self.dist.main:
                atomic_write(d / "config.yaml", self.cfg.dump)
                self.vocab.save(d)
                crash_point("config")
        self.dist.barrier()
        if self.dist.main:
            self._log_handler = logging.FileHandler(d / "train.log")
            self._log_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            log.addHandler(self._log_handler)
            self._console_handler = logging.StreamHandler(sys.stderr)
            self._console_handler.setLevel(logging.WARNING)
            self._console_handler.setFormatter(logging.Formatter("docnmt: warning: %(message)s"))
            log.addHandler(self._console_handler)
            log.setLevel(logging.INFO)
            if self._init_message:          # made before train.log was open: on the console and in the log
                log.info(self._init_message)
                print(self._init_message, file=sys.stderr)

    def _resume_newest(self, found: list[Path]) -> None:
        """Resume from the newest checkpoint that loads (a crash or a full disk can leave the
        newest one damaged: say so and take the one before)."""
        damaged = []
        for path in reversed(found):
            try:
                self.resume(path)
            except Exception as e:          # a torn or empty state.pt, unreadable weights, missing keys
                damaged.append(f"{path.name} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
                continue
            if damaged and self.dist.main:
                print(f"{self.save_dir}: checkpoint {', '.join(damaged)} cannot be loaded; resumed from "
                      f"{path.name} instead", file=sys.stderr)
            return
        raise DocnmtError(f"{self.save_dir}: no checkpoint can be loaded ({'; '.join(damaged)}); "
                          "pass --force to start over")

    def resume(self, path: Path) -> None:
        state = load_state(path)
        load_weights(self.model, path / WEIGHTS)
        self.pretrained = list(state.get("pretrained", []))
        self._build_optimizer()
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        self.progress = Progress.from_dict(state["progress"])
        # a checkpoint saved between validations (or by a run killed while validating its last
        # update) gets the validation the uninterrupted run did there, when training ends on it
        self._validated_at = self.progress.updates if self._validated_here() else -1
        mine = self.dist.rank if self.dist.rank < len(state["rng"]) else 0
        torch.set_rng_state(state["rng"][mine])
        set_device_rng_state(self.device, state.get("device_rng", [None] * len(state["rng"]))[mine])
        if self.progress.epoch > 1:
            self.train_set = self.make_train_set(self.progress.epoch)
        log.info("resumed from %s at update %d (epoch %d)", path, self.progress.updates, self.progress.epoch)
        if self.dist.main:
            self._forget_metrics_after(self.progress.updates)
            if self._is_final_model(path):      # a kill may have come between the checkpoint and the model
                atomic_write(self.save_dir / WEIGHTS, lambda t: shutil.copyfile(path / WEIGHTS, t))
            print(f"resuming from {path} (update {self.progress.updates}, epoch {self.progress.epoch})",
                  file=sys.stderr)

    def _validated_here(self) -> bool:
        p = self.progress
        return any(r.get("updates") == p.updates and any(k.startswith("valid_") for k in r) for r in p.history)

    def _is_final_model(self, path: Path) -> bool:
        """Whether the checkpoint just resumed is the one ``model.safetensors`` must hold: the
        last (no validation set) or the best (validated there, no worse validation since)."""
        if self.valid is None:
            return True
        return self._validated_here() and self.progress.bad_validations == 0 and self.progress.best is not None

    def _forget_metrics_after(self, updates: int) -> None:
        """Drop the metrics a crashed run logged after its last checkpoint (they are redone), and
        any line the crash tore or garbled."""
        path = self.save_dir / "metrics.jsonl"
        if not path.exists():
            return
        lines = path.read_bytes().splitlines(keepends=True)
        validated = self._validated_here()
        kept = [ln for ln in lines if _record_through(ln, updates, validated)]
        if len(kept) != len(lines):
            atomic_write(path, lambda tmp: Path(tmp).write_bytes(b"".join(kept)))

    def _tensorboard(self):
        if not (self.cfg.train.tensorboard_dir and self.dist.main):
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            log.warning("TensorBoard is not installed (pip install docnmt[tensorboard]); not logging to it")
            return None
        return SummaryWriter(self.cfg.train.tensorboard_dir)

    # ---- the loop ----------------------------------------------------------------------------
    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        tc = self.cfg.train
        batches = self.train_set.batches(tc.max_tokens, seed=tc.seed, epoch=epoch, order=self.cfg.data.batch_order)
        usable = len(batches) - len(batches) % self.dist.world
        return batches[self.dist.rank: usable: self.dist.world]

    def collate(self, batch: np.ndarray, epoch: int, index: int) -> dict:
        """A training batch, with word dropout in the epochs that have it."""
        tc = self.cfg.train
        out = self.train_set.collate(batch)
        if tc.word_dropout > 0 and (tc.word_dropout_epochs <= 0 or epoch <= tc.word_dropout_epochs):
            out = word_dropout(out, tc.word_dropout, self.vocab, (tc.seed, epoch, self.dist.rank, index))
        return out

    def done(self) -> bool:
        tc, p = self.cfg.train, self.progress
        out_of_time = tc.max_minutes > 0 and time.time() - self.start_time > 60 * tc.max_minutes
        return bool((tc.max_update and p.updates >= tc.max_update) or (tc.max_epoch and p.epoch > tc.max_epoch)
                    or (tc.patience > 0 and p.bad_validations >= tc.patience) or out_of_time)

    def train(self) -> Path:
        try:
            return self._train()
        finally:
            self.close()

    def _train(self) -> Path:
        tc, p = self.cfg.train, self.progress
        self.start_time = start_time = time.time()
        if self.dist.main:
            log.info("training %s", self.describe())
        self._bar_postfix: dict[str, str] = {}
        # one bar for the whole run, in updates, towards the nearest end (see run_end); a resumed
        # run starts it at the resumed update, so its rate and ETA count from there
        with tqdm(initial=p.updates, desc=f"epoch {p.epoch}", unit="upd", disable=not self.progress_bar,
                  dynamic_ncols=True) as bar:
            started_at = p.updates
            while not self.done():
                self._begin_epoch()
                batches = self.epoch_batches(p.epoch)
                per_update = tc.update_freq
                bar.set_description(f"epoch {p.epoch}", refresh=False)
                self._show_end(bar, len(batches), started_at)      # this epoch's length known: a new end
                window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "time": time.time()}
                while p.batch_in_epoch < len(batches) and not self.done():
                    group = batches[p.batch_in_epoch: p.batch_in_epoch + per_update]
                    loss, nll, ntok = self.update([self.collate(b, p.epoch, p.batch_in_epoch + i)
                                                   for i, b in enumerate(group)])
                    p.batch_in_epoch += len(group)
                    crash_point("update")
                    window["loss"] += loss
                    window["nll"] += nll
                    window["tokens"] += ntok
                    self._show_end(bar, len(batches), started_at)
                    bar.update(1)
                    if (tc.log_interval > 0 and p.updates % tc.log_interval == 0) or \
                            p.batch_in_epoch >= len(batches) or self.done():
                        self._log_train(window, bar)
                    if tc.validate_interval_updates and p.updates % tc.validate_interval_updates == 0:
                        self.validate_and_save(f"u{p.updates:08d}")
                    elif tc.save_interval_updates and p.updates % tc.save_interval_updates == 0:
                        self.save(f"u{p.updates:08d}")
                if p.batch_in_epoch >= len(batches):
                    metrics = None
                    if not (tc.validate_interval_updates and p.updates % tc.validate_interval_updates == 0):
                        metrics = self.validate()
                    p.epoch += 1
                    p.batch_in_epoch = 0
                    self.train_set = self.make_train_set(p.epoch)
                    if metrics is not None:
                        self.validate_and_save(f"u{p.updates:08d}", metrics)
        if p.updates != self._validated_at:   # stopped inside an epoch (max_update, max_minutes)
            self.validate_and_save(f"u{p.updates:08d}")
        if self.dist.main:
            if not (self.save_dir / WEIGHTS).exists():
                save_weights(self.model, self.save_dir / WEIGHTS)
            self.plot()
            log.info("training finished after %d updates, %.0f s", p.updates, time.time() - start_time)
        self.dist.barrier()
        return self.save_dir

    def _show_end(self, bar, epoch_batches: int, started_at: int) -> None:
        """Point the bar at the run's nearest end (:func:`run_end`), after the update about to be
        counted: ``epoch_batches`` micro-batches in this epoch, ``started_at`` the update this
        command started (or resumed) at."""
        tc, p = self.cfg.train, self.progress
        elapsed = time.time() - self.start_time
        rate = (p.updates - started_at) / elapsed if elapsed > 0 else 0.0
        total, note = run_end(tc, p.updates, p.epoch, math.ceil((epoch_batches - p.batch_in_epoch) / tc.update_freq),
                              math.ceil(epoch_batches / tc.update_freq), elapsed, rate)
        bar.total = total
        self._bar_postfix.pop("stop", None)       # last, after the losses
        self._bar_postfix["stop"] = note
        bar.set_postfix(self._bar_postfix, refresh=False)

    def update(self, batches: list[dict]) -> tuple[float, float, int]:
        """One optimizer step over ``update_freq`` micro-batches; gradients are normalised by the
        number of target tokens of the whole update (across all processes), as fairseq does."""
        tc = self.cfg.train
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = []               # (loss, nll) per micro-batch, read back in one host sync after the loop
        ntokens = 0
        for i, batch in enumerate(batches):
            batch = {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in batch.items()}
            sync = i == len(batches) - 1
            ctx = self.ddp.no_sync() if (self.dist.world > 1 and not sync) else contextlib.nullcontext()
            with ctx, torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                                     enabled=self.amp_dtype is not None):
                loss, nll, n = forward_loss(self.train_model, batch, tc.label_smoothing)
                self.scaler.scale(loss).backward()
            sums.append(torch.stack([loss.detach(), nll.detach()]).double())
            ntokens += n
        total_loss = total_nll = 0.0
        for loss_i, nll_i in torch.stack(sums).tolist():      # summed as floats, in order, as before
            total_loss += loss_i
            total_nll += nll_i
        total_loss, total_nll, all_tokens = self.dist.all_sum([total_loss, total_nll, float(ntokens)])
        if not math.isfinite(total_loss):       # diverged: stop before the step spoils the weights
            last = last_checkpoint(self.save_dir)
            raise DocnmtError(f"training diverged: the loss of update {self.progress.updates + 1} is {total_loss} "
                              f"(learning rate {self.scheduler.get_last_lr()[0]:.3g}); "
                              + (f"the last good checkpoint is {last}, which the same command resumes from (with "
                                 "a --clip-norm if you add one); a lower --lr needs a fresh start (--force)" if last
                                 else "no checkpoint was saved yet: lower --lr or set --clip-norm"))
        self.scaler.unscale_(self.optimizer)
        scale = self.dist.world / max(all_tokens, 1.0)    # DDP averaged over ranks; make it per-token
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, scale)       # one call, not one per parameter
        if tc.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.progress.updates += 1
        return total_loss, total_nll, int(all_tokens)

    # ---- validation, checkpoints, logging -----------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict:
        if self.valid is None:
            return {}
        self.model.eval()
        loss = nll = 0.0
        ntok = 0
        entropy = EntropyMeter() if self.cfg.train.attention_entropy else None
        batches = self.valid.batches(self.cfg.train.max_tokens, shuffle=False, order=self.cfg.data.batch_order)
        for b in tqdm(batches, desc="valid", unit="batch", leave=False, disable=not self.progress_bar,
                      dynamic_ncols=True):
            batch = {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in self.valid.collate(b).items()}
            with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                                enabled=self.amp_dtype is not None), \
                    (AttentionProbe() if entropy else contextlib.nullcontext()) as probe:
                l_, n_, t_ = forward_loss(self.model, batch, self.cfg.train.label_smoothing)
            loss += float(l_)
            nll += float(n_)
            ntok += t_
            if entropy:
                entropy.add(probe, batch, self.vocab.pad)
        out = {"valid_loss": loss / ntok / math.log(2), "valid_nll_loss": nll / ntok / math.log(2),
               "valid_ppl": 2 ** (nll / ntok / math.log(2))}
        if entropy:
            out.update({f"valid_entropy_{k}": v for k, v in entropy.result().items()})
            out.update({f"valid_distance_{k}": v for k, v in entropy.result("distance").items()})
        if self.cfg.train.valid_bleu:
            out.update(self.valid_bleu())
        return out

    def valid_bleu(self) -> dict:
        from .document import Document
        from .metrics import evaluate_documents
        corpus = self.valid.corpus
        docs = [Document(corpus.docids[d], [self.vocab.decode(corpus.src[i], side="src")
                                            for i in corpus.doc_range(d)]) for d in range(corpus.n_docs)]
        refs = [[self.vocab.decode(corpus.tgt[i]) for i in corpus.doc_range(d)] for d in range(corpus.n_docs)]
        from .translate import Translator  # only for this optional metric
        translator = Translator(self.model, self.vocab, self.cfg, self.device)
        hyps, _ = translator.translate(docs, progress=self.progress_bar)
        result = evaluate_documents([h.tgt for h in hyps], refs, lowercase_too=False, metrics=("bleu",))
        self.model.train()
        return {"valid_bleu": result["d_bleu"]["score"], "valid_s_bleu": (result["s_bleu"] or {}).get("score")}

    def validate_and_save(self, name: str, metrics: dict | None = None) -> None:
        """Validate (unless ``metrics`` are given), update early stopping, save a checkpoint."""
        metrics = self.validate() if metrics is None else metrics
        p, tc = self.progress, self.cfg.train
        self._validated_at = p.updates
        improved = False
        if metrics:
            key = {"loss": "valid_loss", "nll_loss": "valid_nll_loss", "bleu": "valid_bleu"}[tc.best_metric]
            value = metrics[key] if tc.best_metric != "bleu" else -metrics[key]
            improved = p.best is None or value < p.best
            if improved:
                p.best, p.bad_validations = value, 0
            else:
                p.bad_validations += 1
            self._record({"updates": p.updates, "epoch": p.epoch - (p.batch_in_epoch == 0), **metrics})
            if self.progress_bar:
                tqdm.write(f"valid | update {p.updates} | " + " | ".join(
                    f"{k[6:]} {v:.3f}" for k, v in metrics.items() if v is not None) +
                    (" | best" if improved else f" | no improvement ({p.bad_validations}/{tc.patience})"),
                    file=sys.stderr)
        self.save(name, best=improved or not metrics)

    def save(self, name: str, best: bool = False) -> None:
        if self.dist.main:
            state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                     "scaler": self.scaler.state_dict(), "progress": self.progress.to_dict(),
                     "pretrained": self.pretrained}
            state["rng"], state["device_rng"] = self._gather_rng()
            save_checkpoint(self.save_dir, name, self.model, state, self.cfg.train.keep_last, best=best)
        else:
            self._gather_rng()
        self.dist.barrier()

    def _gather_rng(self) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """Every rank's CPU and accelerator random states (dropout on a GPU draws from the
        latter: without it a resumed run's dropout masks differ from the uninterrupted run's)."""
        mine = (torch.get_rng_state(), device_rng_state(self.device))
        if self.dist.world == 1:
            return [mine[0]], [mine[1]]
        out = [None] * self.dist.world
        dist.all_gather_object(out, mine)
        return [cpu for cpu, _ in out], [dev for _, dev in out]

    def _log_train(self, window: dict, bar) -> None:
        p = self.progress
        if window["tokens"] == 0:
            return
        elapsed = time.time() - window["time"]
        rec = {"updates": p.updates, "epoch": p.epoch, "loss": window["loss"] / window["tokens"] / math.log(2),
               "nll_loss": window["nll"] / window["tokens"] / math.log(2), "lr": self.scheduler.get_last_lr()[0],
               "tokens_per_s": window["tokens"] / max(elapsed, 1e-9)}
        self._bar_postfix.update(loss=f"{rec['loss']:.3f}", lr=f"{rec['lr']:.2e}", tok_s=f"{rec['tokens_per_s']:.0f}")
        bar.set_postfix(self._bar_postfix)
        self._record(rec)
        window.update(loss=0.0, nll=0.0, tokens=0, time=time.time())

    def _record(self, rec: dict) -> None:
        self.progress.history.append(rec)
        if not self.dist.main:
            return
        log.info(json.dumps(rec))
        with open(self.save_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        if self.tb is not None:
            for k, v in rec.items():
                if k not in ("updates", "epoch") and v is not None:
                    self.tb.add_scalar(k, v, rec["updates"])

    def plot(self) -> None:
        """learning_curve.png (:func:`learning_curve`), and the plots of the run's method."""
        try:
            fig = learning_curve(self.progress.history, f"{self.save_dir.name} — {run_kind(self.cfg)}")
        except ImportError:
            return
        fig.savefig(self.save_dir / "learning_curve.png", dpi=100)
        methods.training_plots(self.cfg, self.train_corpus, self.save_dir, self.progress.epoch)


def run_kind(cfg: Config) -> str:
    """What a run trains, for titles: the preset it started from, and its mode and method."""
    kind = cfg.data.mode + ("" if cfg.method_name == "transformer" else f", {cfg.method_name}")
    return f"{cfg.preset} ({kind})" if cfg.preset else kind


FEW_POINTS = 30     # a training curve with at most this many points marks each


def learning_curve(history: list[dict], title: str):
    """The figure of learning_curve.png: training and validation loss (bits per token) against
    updates, on integer update ticks; every validation point, and every training point of a
    short run, is marked, so a run with one point still shows it."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
    tr = [(r["updates"], r["loss"]) for r in history if "loss" in r]
    va = [(r["updates"], r["valid_loss"]) for r in history if "valid_loss" in r]
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    if tr:
        ax.plot(*zip(*tr), marker="o" if len(tr) <= FEW_POINTS else None, markersize=3, label="train loss")
    if va:
        ax.plot(*zip(*va), "o-", label="valid loss")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))    # one tick for a one-update run
    ax.set_xlabel("updates")
    ax.set_ylabel("label-smoothed loss (bits/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if tr or va:
        ax.legend()
    return fig
