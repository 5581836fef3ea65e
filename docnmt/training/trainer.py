"""The training loop (:class:`Trainer`): token batches, Adam + inverse-sqrt, label smoothing,
validation, early stopping, exact resumption, bf16/fp16 autocast on CUDA and DDP through
``torchrun``, or FSDP2 with ``--fsdp`` (:mod:`.sharding`) -- the same code on a laptop CPU and on GPUs.

A trainer takes built objects: a config, a model, its data (:class:`~.data.TrainingData`), a run
directory (:class:`~.run_dir.RunDir`) and the processes (:class:`~.distributed.Distributed`).
:meth:`Trainer.from_dirs` (:mod:`.setup`) builds them from a prepared data directory and a save
directory, resuming the run it holds.

Exact resumption: the batches of epoch *e* are a function of (seed, e) only, checkpoints store the
position inside the epoch, the optimizer and scheduler states and the torch RNG state, so a run
killed after update *u* and resumed from its checkpoint at *u* continues with the same batches,
dropout masks and losses as the run that was never interrupted (on CPU).

Crash safety: one training command at a time holds a save directory (:class:`DirectoryLock`);
a run killed at any instant is resumed by the same command from its newest checkpoint that
loads (:mod:`docnmt.checkpoint`), or started afresh when it had none yet. A non-finite loss
stops training with an error before the optimizer step, so the checkpoints and
``model.safetensors`` on disk keep the last good weights. Ctrl-C and SIGTERM save a checkpoint at
the current update and stop (:mod:`.signals`); a write that fails (a full disk) is one error line
(:func:`docnmt.checkpoint.writing`); under torchrun a process that dies or hangs makes the others
stop with one line (:meth:`.Distributed.contact`).
"""
from __future__ import annotations

import logging
import math
import sys
import time
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from .. import methods
from ..checkpoint import WEIGHTS, crash_point, last_checkpoint, load_state, save_checkpoint
from ..config import Config
from ..data import InstanceSet
from ..padded_vocab import label_positions
from ..progress_log import progress_bar
from .data import TrainingData, bucketed, forward_loss, to_device
from .distributed import Distributed, gather_rng, restore_rng
from .losses import LossLog, diverged, skip_on_device, train_record
from .optim import amp_dtype, build_optimizer, check_settings
from .plots import plot_run
from .progress import Progress, finished, run_end
from .run_dir import RunDir
from .sharding import sharding_for
from .signals import StopSignals, stop
from .validation import best_value, validate, validation_line

log = logging.getLogger("docnmt.training")



def aids_on(tc) -> str:
    """The extensions' training settings not at their defaults (the training aids on), as
    ``", train.split_pairs 0.3"`` for the run's first line; a setting that qualifies another
    (``Setting.needs``) only while that one is on."""
    found = {s.key: s for s in methods.settings() if s.key.startswith("train.")}
    on = {k: getattr(tc, k[6:]) != s.default for k, s in found.items()}
    return "".join(f", {k} {getattr(tc, k[6:])}" for k, s in found.items()
                   if on[k] and (not s.needs or on.get(s.needs, True)))

class Trainer:
    def __init__(self, cfg: Config, model: torch.nn.Module, data: TrainingData, run: RunDir,
                 dist: Distributed | None = None, device: torch.device | str = "cpu", progress_bar: bool = True):
        """Train ``model`` (``cfg``'s) on ``data``, writing into ``run``; nothing is read here
        (see :meth:`from_dirs`). The caller seeds torch before building the model."""
        check_settings(cfg.train)
        self.cfg, self.data, self.run, self.device = cfg, data, run, torch.device(device)
        self.dist = dist or Distributed(cuda=self.device.type == "cuda")
        self.progress_bar = progress_bar and self.dist.main
        self.vocab, self.valid, self.train_corpus, self.save_dir = data.vocab, data.valid, data.train_corpus, run.path
        self.train_set = self.make_train_set(1)
        self.amp_dtype = amp_dtype(cfg.train.precision, self.device)
        self.shards = sharding_for(cfg.train, self.dist, self.amp_dtype)       # replicated, or FSDP (--fsdp)
        self.model = self.shards.prepare(model.to(self.device), self.dist, self.device)
        self._begin_epoch()
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.pretrained: list[str] = []   # parameters initialised from --init-from
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg.train, self.pretrained)
        self.progress = Progress()
        self._validated_at = self._saved_at = -1
        self.losses = LossLog()          # the losses of the updates since the last log line
        self.signals = StopSignals()     # Ctrl-C and SIGTERM: save and stop between updates

    @classmethod
    def from_dirs(cls, cfg: Config, data_dir: str | Path, save_dir: str | Path, force: bool = False,
                  init_from: str | Path | None = None, progress_bar: bool = True,
                  device: str | None = None) -> "Trainer":
        """A trainer on a prepared data directory, resuming or starting the run in ``save_dir``
        (:func:`docnmt.training.setup.from_dirs`)."""
        from .setup import from_dirs
        return from_dirs(cfg, data_dir, save_dir, force, init_from, progress_bar, device)

    # ---- set-up ------------------------------------------------------------------------------
    @cached_property
    def ddp(self) -> torch.nn.Module:
        """The model, wrapped for DDP under torchrun (made at the first update, after any resume;
        a model sharded with ``--fsdp`` is its own wrapper)."""
        return self.shards.wrap(self.model, self.dist, self.device)

    @cached_property
    def train_model(self) -> torch.nn.Module:
        """The update's forward pass, compiled for dynamic shapes on batches padded to a few lengths
        (:func:`~.data.bucketed`): a handful of graphs, not one per shape (validation stays eager)."""
        return torch.compile(self.ddp, dynamic=True) if self.cfg.train.compile else self.ddp

    def describe(self) -> str:
        """One line saying what this run is about to do: method and mode, device, threads,
        precision, model size, data sizes, updates, and the training aids on (:func:`aids_on`)."""
        tc = self.cfg.train
        params = sum(p.numel() for p in self.model.parameters())
        precision = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.amp_dtype]
        valid = f", {len(self.valid.rows):,} validation instances" if self.valid is not None else ""
        ranks = f" x {self.dist.world} processes{' (FSDP)' * self.shards.sharded}" if self.dist.world > 1 else ""
        return (f"{self.cfg.method_name} ({self.cfg.data.mode}) on {self.device}{ranks} "
                f"({torch.get_num_threads()} threads), {precision}, {params / 1e6:.2f}M parameters, "
                f"{len(self.train_set.rows):,} training instances{valid}, "
                + (f"{tc.max_update:,} updates" if tc.max_update > 0 else f"{tc.max_epoch} epochs") + aids_on(tc))

    def close(self) -> None:
        """Release the save directory and its log (also done when training ends or fails)."""
        self.run.close()

    def make_train_set(self, epoch: int) -> InstanceSet:
        """The training instances of an epoch (dynamic length sampling draws them anew)."""
        return self.data.train_set(epoch)

    def _begin_epoch(self) -> None:
        """Per-epoch model state: the mean training instance lengths (length-aware attention uses
        them; set when an epoch's training starts, so the checkpoint after it holds that epoch's
        values)."""
        self.model.set_training_lengths(float(self.train_set.src_lens.mean()), float(self.train_set.tgt_lens.mean()))

    def init_from(self, source: str | Path) -> str:
        """Copy the weights of a model directory or .safetensors file into the parameters of
        the same name (a sentence model into a document model: its attention becomes the local
        attention); the others keep their fresh initialisation. Says what was copied."""
        path = Path(source) / WEIGHTS if Path(source).is_dir() else Path(source)
        self.pretrained = self.shards.load(self.model, path, strict=False)
        self.optimizer, self.scheduler = build_optimizer(self.model, self.cfg.train, self.pretrained)
        fresh = [n for n, _ in self.model.named_parameters() if n not in set(self.pretrained)]
        return (f"initialised {len(self.pretrained)} parameters from {path}; {len(fresh)} fresh: "
                + ", ".join(fresh[:6]) + (" …" if len(fresh) > 6 else ""))

    def resume(self, path: Path) -> None:
        """Continue from the checkpoint at ``path``: weights, optimizer, scheduler, progress and
        random states; the run directory forgets what was logged after it."""
        state = load_state(path)
        self.shards.load(self.model, path / WEIGHTS)
        self.pretrained = list(state.get("pretrained", []))
        self.optimizer, self.scheduler = build_optimizer(self.model, self.cfg.train, self.pretrained)
        self.shards.load_optimizer(self.model, self.optimizer, state)
        self.scheduler.load_state_dict(state["scheduler"])
        if "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        p = self.progress = Progress.from_dict(state["progress"])
        # a checkpoint saved between validations (or by a run killed while validating its last
        # update) gets the validation the uninterrupted run did there, when training ends on it
        self._validated_at = p.updates if p.validated_here() else -1
        self.losses.carried = dict(state.get("loss_window", {}))   # the same log lines as a run never stopped
        self._saved_at = p.updates
        restore_rng(state, self.dist.rank, self.device)
        if p.epoch > 1:
            self.train_set = self.make_train_set(p.epoch)
        log.info("resumed from %s at update %d (epoch %d)", path, p.updates, p.epoch)
        if self.dist.main:
            self.run.forget_metrics_after(p.updates, p.validated_here())
            if self.valid is None or p.best_here():       # the checkpoint model.safetensors must hold
                self.run.restore_model(path)
            print(f"resuming from {path} (update {p.updates}, epoch {p.epoch})", file=sys.stderr)

    # ---- the loop ----------------------------------------------------------------------------
    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        tc = self.cfg.train
        batches = self.train_set.batches(tc.max_tokens, seed=tc.seed, epoch=epoch, order=self.cfg.data.batch_order)
        usable = len(batches) - len(batches) % self.dist.world
        return batches[self.dist.rank: usable: self.dist.world]

    def collate(self, batch: np.ndarray, epoch: int, index: int) -> dict:
        """A training batch, after the extensions' batch hooks (word dropout in some epochs), with its ``seed``."""
        out = self.train_set.collate(batch)
        seed = (self.cfg.train.seed, epoch, self.dist.rank, index)
        return {**methods.train_batch(self.cfg, out, self.vocab, epoch, seed), "seed": seed}

    def done(self) -> bool:
        return finished(self.cfg.train, self.progress, time.time() - self.start_time)

    def train(self) -> Path:
        try:
            with self.signals, self.dist.contact(self.save_dir):
                return self._train()
        finally:
            self.close()

    def _train(self) -> Path:
        p = self.progress
        self.start_time = time.time()
        if self.dist.main:
            log.info("training %s", self.describe())
        self._bar_postfix: dict[str, str] = {}
        # one bar for the whole run, in updates, towards the nearest end (see run_end); a resumed
        # run starts it at the resumed update, so its rate and ETA count from there
        with progress_bar(initial=p.updates, desc=f"epoch {p.epoch}", unit="upd", disable=not self.progress_bar,
                  dynamic_ncols=True) as bar:
            started_at = p.updates
            while not self.done():
                self._train_epoch(bar, started_at)
        if p.updates != self._validated_at:   # stopped inside an epoch (max_update, max_minutes)
            self.validate_and_save(f"u{p.updates:08d}")
        self.shards.save_weights(self.model, self.save_dir / WEIGHTS, self.dist.main)     # when none was best
        if self.dist.main:
            plot_run(self.cfg, self.progress, self.save_dir, self.train_corpus)
            log.info("training finished after %d updates, %.0f s", p.updates, time.time() - self.start_time)
        self.dist.barrier()
        return self.save_dir

    def _train_epoch(self, bar, started_at: int) -> None:
        """The rest of the current epoch, or as much of it as the limits allow."""
        tc, p = self.cfg.train, self.progress
        self._begin_epoch()
        batches = self.epoch_batches(p.epoch)
        bar.set_description(f"epoch {p.epoch}", refresh=False)
        self._show_end(bar, len(batches), started_at)      # this epoch's length known: a new end
        self.losses.new_window()
        while p.batch_in_epoch < len(batches) and not self.done():
            if self.signals.stopping(self.dist.world):
                stop(self)
            group = batches[p.batch_in_epoch: p.batch_in_epoch + tc.update_freq]
            self.update([self.collate(b, p.epoch, p.batch_in_epoch + i) for i, b in enumerate(group)])
            p.batch_in_epoch += len(group)
            crash_point("update")
            self._show_end(bar, len(batches), started_at)
            bar.update(1)
            if (tc.log_interval > 0 and p.updates % tc.log_interval == 0) or \
                    p.batch_in_epoch >= len(batches) or self.done():
                self._log_train(bar)
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

    def update(self, batches: list[dict]) -> tuple[torch.Tensor, torch.Tensor, int | torch.Tensor]:
        """One optimizer step over ``update_freq`` micro-batches; gradients are normalised by the
        number of target tokens of the whole update (across all processes), as fairseq does.

        The host does not wait for the device: losses are read at the next log line, validation or
        checkpoint (:class:`~.losses.LossLog`; a non-finite one's step is skipped, :func:`skip_on_device`).
        Returns the summed loss and NLL (device tensors) and target tokens (an int; several processes: a tensor)."""
        tc = self.cfg.train
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums, ntokens = [], 0            # (loss, nll) per micro-batch, as float64 on the device
        for i, batch in enumerate(batches):
            batch = bucketed(batch, self.vocab.pad, self.cfg.model.max_positions - 2) if tc.compile else batch
            rows = label_positions(batch["labels"], self.vocab.pad)      # on the host: no device sync
            batch = to_device({**batch, "label_rows": rows}, self.device)
            ctx = self.shards.no_sync(self.ddp, sync=i == len(batches) - 1)     # gradients averaged at the last
            with ctx, torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                                     enabled=self.amp_dtype is not None):
                loss, nll, _ = forward_loss(self.train_model, batch, tc.label_smoothing)
                extra = methods.train_loss(self.cfg, self.model, batches[i], (loss, nll), self.train_set)
                loss = loss if extra is None else loss + extra          # an extension's term (context margin)
                self.scaler.scale(loss).backward()
            sums.append(torch.stack([loss.detach(), nll.detach()]).double())
            ntokens += rows.numel()
        stats, all_tokens = torch.stack(sums), ntokens
        if self.dist.world > 1:          # every process's loss, NLL, tokens and vote to stop, summed on the device
            summed = self.dist.all_sum_tensor(torch.cat([stats.sum(0), stats.new_full((1,), ntokens),
                                                         self.signals.vote(stats)]))
            self.signals.tally(summed[3:])              # the processes' votes to stop
            stats, all_tokens = summed[None, :3], summed[2]
        loss = stats[:, 0].sum()
        if not skip_on_device(self.optimizer, self.scaler, loss) and not math.isfinite(loss):
            self.losses.read(self.save_dir)
            raise diverged(self.progress.updates + 1, float(loss), self.scheduler.get_last_lr()[0],
                           last_checkpoint(self.save_dir))
        self.losses.add(self.progress.updates + 1, self.scheduler.get_last_lr()[0], stats, ntokens)
        self.scaler.unscale_(self.optimizer)
        scale = self.dist.world / (all_tokens.clamp(min=1.0) if torch.is_tensor(all_tokens) else max(all_tokens, 1))
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, scale)       # one call, not one per parameter
        if tc.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.progress.updates += 1
        return loss, stats[:, 1].sum(), all_tokens

    # ---- validation, checkpoints, logging -----------------------------------------------------
    def validate(self) -> dict:
        if self.valid is None:
            return {}
        return validate(self.model, self.valid, self.vocab, self.cfg, self.device, self.amp_dtype, self.progress_bar)

    def validate_and_save(self, name: str, metrics: dict | None = None) -> None:
        """Validate (unless ``metrics`` are given), update early stopping, save a checkpoint."""
        self.losses.read(self.save_dir)
        metrics = self.validate() if metrics is None else metrics
        p, tc = self.progress, self.cfg.train
        self._validated_at = p.updates
        improved = False
        if metrics:
            improved = p.judge(best_value(metrics, tc.best_metric))
            self._record({"updates": p.updates, "epoch": p.epoch - (p.batch_in_epoch == 0), **metrics})
            if self.progress_bar:
                tqdm.write(validation_line(p.updates, metrics, improved, p.bad_validations, tc.patience),
                           file=sys.stderr)
        self.save(name, best=improved or not metrics)

    def save(self, name: str, best: bool = False) -> None:
        self.losses.read(self.save_dir)                 # never a checkpoint after a non-finite loss
        rng, device_rng = gather_rng(self.dist, self.device)
        optimizer, weights = self.shards.optimizer_state(self.model, self.optimizer), self.shards.weights(self.model)
        if self.dist.main:          # (under --fsdp both gathered whole on rank 0: collectives of every rank)
            state = {"optimizer": optimizer, "scheduler": self.scheduler.state_dict(), "fsdp": self.shards.sharded,
                     "scaler": self.scaler.state_dict(), "progress": self.progress.to_dict(),
                     "pretrained": self.pretrained, "rng": rng, "device_rng": device_rng,
                     "loss_window": self.losses.unlogged()}
            save_checkpoint(self.save_dir, name, weights, state, self.cfg.train.keep_last, best=best)
        self.dist.barrier()
        self._saved_at = self.progress.updates

    def _log_train(self, bar) -> None:
        p, window = self.progress, self.losses.read(self.save_dir)
        if window["tokens"] == 0:
            return
        rec = train_record(window, p.updates, p.epoch, self.scheduler.get_last_lr()[0])
        self._bar_postfix.update(loss=f"{rec['loss']:.3f}", lr=f"{rec['lr']:.2e}", tok_s=f"{rec['tokens_per_s']:.0f}")
        bar.set_postfix(self._bar_postfix)
        self._record(rec)
        self.losses.new_window()

    def _record(self, rec: dict) -> None:
        self.progress.history.append(rec)
        if self.dist.main:
            self.run.record(rec)
