"""Training, by responsibility:

- :mod:`.trainer`: :class:`Trainer`, the training loop, which takes built objects;
  ``Trainer.from_dirs`` (:mod:`.setup`) builds them from a prepared data directory and a save
  directory, resuming the run it holds;
- :mod:`.data`: the vocabulary, corpora and instances of a run (:class:`TrainingData`, :func:`load_corpus`);
- :mod:`.run_dir`: the save directory: lock, crash recovery, config check, resuming, metrics and logs;
- :mod:`.validation`, :mod:`.optim` (Adam, inverse-sqrt, autocast dtype), :mod:`.distributed`
  (torchrun ranks, random states), :mod:`.progress` (where a run stands and ends), :mod:`.plots`,
  :mod:`.signals` (Ctrl-C and SIGTERM: save a checkpoint and stop).
"""
from .data import TrainingData, forward_loss, load_corpus
from .distributed import Distributed, device_rng_state, set_device_rng_state
from .optim import amp_dtype, build_optimizer, inverse_sqrt
from .plots import FEW_POINTS, learning_curve, run_kind
from .progress import Progress, run_end
from .run_dir import RUN_FILES, RunDir
from .setup import build_trainable_model, from_dirs
from .signals import TrainingStopped
from .trainer import Trainer

__all__ = ["FEW_POINTS", "RUN_FILES", "Distributed", "Progress", "RunDir", "Trainer", "TrainingData", "TrainingStopped",
           "amp_dtype", "build_optimizer", "build_trainable_model", "device_rng_state", "forward_loss", "from_dirs",
           "inverse_sqrt", "learning_curve", "load_corpus", "run_end", "run_kind", "set_device_rng_state"]
