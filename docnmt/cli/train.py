"""``docnmt train``: a preset or YAML file, then the flags of ``TRAIN_FLAGS`` (and train's
decoding flags for --valid-bleu) and ``--set`` on top."""
from __future__ import annotations

import argparse
import sys

from ..errors import DocnmtError
from .flags import TRAIN_GROUPS, add_flags, add_verb, collect_overrides, decode_flags, flag_labels, train_flags

VALID_BLEU_FLAGS = ("--beam", "--lenpen")     # decoding flags train takes, for --valid-bleu


def add_train(sub) -> None:
    p = add_verb(sub, "train", "train a model",
                 epilog="Defaults are the base configuration's; a preset (--arch, see `docnmt presets`) or a --config "
                        "file sets its own values, and flags and --set override both. A run's settings are kept in "
                        "SAVE_DIR/config.yaml.")
    groups = {title: p.add_argument_group(title, about) for title, about in TRAIN_GROUPS.items()}
    p.add_argument("data", help="directory written by `docnmt prepare`")
    g = groups["configuration"]
    g.add_argument("--arch", help="named preset: architecture and method (see `docnmt presets`; "
                                  "default: transformer_small)")
    g.add_argument("--config", "-c", help="YAML config file (or preset name); instead of --arch")
    g.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="any config value, e.g. --set model.ffn_dim=1024 (repeatable)")
    groups["model"].add_argument("--init-from", metavar="MODEL",
                                 help="initialise the weights from this model directory (docnmt or imported) "
                                      "or .safetensors file")
    g = groups["checkpoints"]
    g.add_argument("--save-dir", required=True, help="model directory (resumed if it holds a run)")
    g.add_argument("--force", action="store_true",
                   help="start over in a --save-dir holding a docnmt model (never in a folder with other files)")
    groups["device"].add_argument("--device", help="cpu | cuda | cuda:N (default: cuda when there is a GPU; "
                                                   "under torchrun each process takes its local rank's GPU)")
    groups["logging"].add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                                   help="progress bar on stderr: updates towards the run's nearest end "
                                        "(--max-update, --max-epoch or --max-minutes) with an ETA, and validation")
    add_flags(p, train_flags(), groups)
    add_flags(p, {k: (key, typ, h + " (--valid-bleu)", "checkpoints")
                  for k, (key, typ, h, _) in decode_flags().items() if k in VALID_BLEU_FLAGS}, groups)


def cmd_train(args) -> int:
    from ..config import Config
    from ..training import Trainer
    from ..training.signals import TrainingStopped
    flags = {**decode_flags(), **train_flags()}
    overrides = collect_overrides(args, flags)
    if args.config and args.arch:
        raise DocnmtError("give either --config or --arch, not both")
    if args.init_from:           # a model with a pretrained tokenizer brings its architecture
        from ..hf import init_from_overrides
        overrides = {**init_from_overrides(args.init_from, args.data), **overrides}
    cfg = Config.load(args.config or args.arch or "transformer_small").override(overrides, flag_labels(args, flags))
    trainer = Trainer.from_dirs(cfg, args.data, args.save_dir, force=args.force, init_from=args.init_from,
                                progress_bar=args.progress, device=args.device)
    if trainer.dist.main:
        print(f"training {trainer.describe()}", file=sys.stderr)
    try:
        out = trainer.train()
    except TrainingStopped as e:        # Ctrl-C or SIGTERM: a checkpoint was saved, and the trainer said so
        return e.status
    p, metric = trainer.progress, trainer.cfg.train.best_metric
    best = "" if p.best is None else (f", best validation {metric} "
                                      f"{-p.best if metric == 'bleu' else p.best:.4f}")
    print(f"model saved in {out} ({p.updates:,} updates{best}; every figure in {out / 'metrics.jsonl'})",
          file=sys.stderr)
    return 0
