"""The command line's flag tables and the argparse pieces every verb shares.

``TRAIN_FLAGS`` and ``DECODE_FLAGS`` map a flag to the configuration value it sets; ``add_flags``
turns a table into argparse options (their help saying the base configuration's default),
``collect_overrides`` and ``flag_labels`` turn the parsed options back into config overrides and
the names the user typed. The verbs read the tables through ``train_flags()`` and
``decode_flags()``, which join the core's flags here and the flags the methods and switches
declare beside their settings (:class:`docnmt.methods.Setting`).
"""
from __future__ import annotations

import argparse

from .. import methods
from ..errors import DocnmtError
from ..readers import FORMATS

FORMAT_HELP = " | ".join(FORMATS)

# flag -> (config key, type, help, help group). ``bool`` flags are switches with a --no- form
# (``--dls`` / ``--no-dls``); a flag not given leaves the preset's or model's value.
TRAIN_FLAGS = {
    "--mode": ("data.mode", str, "sent2sent | doc2sent | doc2doc | mr | pseudodoc", "data"),
    "--context": ("data.context", int, "doc2sent / pseudodoc: number of previous sentences", "data"),
    "--max-instance-tokens": ("data.max_instance_tokens", int, "doc2doc/mr: instance budget in tokens, see "
                              "docs/methods/baselines.md#splitting-documents-into-instances-of-at-most-512-tokens",
                              "data"),
    "--separator": ("data.separator", str, "index (<sepI>) | uniform (<sep>) | group (<s> x </s>, G-Transformer) "
                    "| global_index (<sepJ> x </s>, DocFlat)", "data"),
    "--mix-sentences": ("data.mix_sentences", bool, "add every sentence pair as an instance of its own "
                        "(doc+sent / ctx+sent)", "data"),
    "--context-input": ("data.context_input", int, "sent2sent: previous source sentences as a context input",
                        "data"),
    "--context-self": ("data.context_self", bool, "pairs of sentence-level corpora get their own source as context "
                       "(the context encoder's step-2 mixing)", "data"),
    "--max-tokens": ("train.max_tokens", int, "batch budget in tokens (padded, the longer of source and target)",
                     "batching"),
    "--update-freq": ("train.update_freq", int, "batches per optimizer update", "batching"),
    "--batch-order": ("data.batch_order", str, "sorted (length buckets) | ordered (consecutive instances, "
                      "whole batches shuffled; DocFlat) | strict (ordered, never shuffled)", "batching"),
    "--dropout": ("model.dropout", float, "dropout", "model"),
    "--lr": ("train.lr", float, "peak learning rate", "optimisation"),
    "--warmup-updates": ("train.warmup_updates", int, "linear warm-up of the inverse-sqrt schedule",
                         "optimisation"),
    "--label-smoothing": ("train.label_smoothing", float, "label smoothing epsilon", "optimisation"),
    "--clip-norm": ("train.clip_norm", float, "gradient clipping (0 = off)", "optimisation"),
    "--seed": ("train.seed", int, "random seed", "optimisation"),
    "--max-update": ("train.max_update", int, "stop after this many updates (0 = no limit)", "stopping"),
    "--max-epoch": ("train.max_epoch", int, "stop after this many epochs (0 = no limit)", "stopping"),
    "--max-minutes": ("train.max_minutes", float, "stop after this much training time (0 = no limit)",
                      "stopping"),
    "--patience": ("train.patience", int, "stop after this many validations without improvement (0 = off)",
                   "stopping"),
    "--pretrained-lr-scale": ("train.pretrained_lr_scale", float,
                              "lr of the parameters copied by --init-from, as a share of --lr (G-Transformer: 0.2)",
                              "methods"),
    "--freeze-pretrained": ("train.freeze_pretrained", bool,
                            "train only the parameters --init-from did not set (two-step training)", "methods"),
    "--precision": ("train.precision", str, "auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 | fp16 (autocast)",
                    "device"),
    "--threads": ("train.threads", int, "CPU threads (0 = torch's default; at most 4 per CPU)", "device"),
    "--compile": ("train.compile", bool, "torch.compile the training forward pass (dynamic shapes: new batch "
                  "shapes do not compile again; for GPUs)", "device"),
    "--fsdp": ("train.fsdp", bool, "shard weights, gradients and Adam states over the torchrun processes "
               "(FSDP2) instead of replicating them (DDP); needs torchrun with 2+ processes", "device"),
    "--validate-interval-updates": ("train.validate_interval_updates", int,
                                    "validate (and save) every N updates (0 = at the end of each epoch)",
                                    "checkpoints"),
    "--save-interval-updates": ("train.save_interval_updates", int,
                                "checkpoint every N updates (0 = at the end of each epoch)", "checkpoints"),
    "--keep-last": ("train.keep_last", int, "checkpoints kept (for averaging)", "checkpoints"),
    "--best-metric": ("train.best_metric", str, "loss | nll_loss | bleu (needs --valid-bleu)", "checkpoints"),
    "--valid-bleu": ("train.valid_bleu", bool, "also translate the validation set and report its BLEU",
                     "checkpoints"),
    "--log-interval": ("train.log_interval", int, "log every N updates", "logging"),
    "--tensorboard-logdir": ("train.tensorboard_dir", str, "also log to TensorBoard here", "logging"),
}
TRAIN_GROUPS = {
    "configuration": "a preset or YAML file, then flags and --set on top",
    "data": "how documents become training instances",
    "batching": None,
    "model": None,
    "optimisation": None,
    "stopping": "training ends at the first limit reached",
    "checkpoints": "checkpoints and validation",
    "methods": "settings of particular methods",
    "device": None,
    "logging": None,
}
DECODE_FLAGS = {
    "--beam": ("decode.beam", int, "beam size (1 = greedy)", "search"),
    "--lenpen": ("decode.lenpen", float, "length penalty: score / length**lenpen", "search"),
    "--lenpen-style": ("decode.lenpen_style", str, "fairseq (length**lenpen) | gnmt (((5+length)/6)**lenpen)",
                       "search"),
    "--max-len-a": ("decode.max_len_a", float, "max output length = a * source length + b per output sentence",
                    "search"),
    "--max-len-b": ("decode.max_len_b", int, "max output length = a * source length + b per output sentence",
                    "search"),
    "--min-len": ("decode.min_len", int, "minimum output length", "search"),
    "--nbest": ("decode.nbest", int, "hypotheses written per input (plain output: Moses n-best lines)", "search"),
    "--no-repeat-ngram-size": ("decode.no_repeat_ngram_size", int,
                               "never repeat an n-gram of word pieces in a hypothesis "
                               "(0 = off; separators do not count)", "search"),
    "--max-tokens": ("decode.max_tokens", int, "batch budget: source tokens per decoding batch", "batching"),
    "--batch-size": ("decode.max_sentences", int, "instances per decoding batch", "batching"),
    "--precision": ("decode.precision", str, "auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 (autocast) | "
                    "int8 (dynamic int8 linear layers, CPU)", "batching"),
    "--engine": ("decode.engine", str, "docnmt | ctranslate2 (the search over each batch run by CTranslate2: "
                 "plain Transformers; pip install docnmt[ct2])", "batching"),
    "--static-cache": ("decode.static_cache", bool, "preallocate the decoder's keys/values for the longest output "
                       "and write them in place (the same beams; for GPUs)", "batching"),
    "--compile-step": ("decode.compile_step", str, "torch.compile the step's output layer for row buckets: "
                       "default | reduce-overhead (CUDA graphs) | max-autotune (empty = eager; for GPUs)",
                       "batching"),
    "--max-instance-tokens": ("data.max_instance_tokens", int,
                              "Doc2Doc: split documents into instances of fewer tokens (0 = whole documents)",
                              "methods"),
    "--fallback": ("decode.fallback", str, "sentences an output lost (empty, or merged into a neighbour) translated "
                   "again, each alone: auto (on for models whose outputs hold several sentences: Doc2Doc, MR, "
                   "P-Transformer, G-Transformer, DocFlat; off for sentence models, Doc2Sent and the context "
                   "encoder) | sentence | none", "search"),
    "--fallback-model": ("decode.fallback_model", str, "a sentence model's directory: it translates the lost "
                         "sentences instead of this model in its sentence mode", "search"),
}
# old names kept working, not shown in --help
DECODE_ALIASES = {"--batch-tokens": "--max-tokens"}


class Alias(argparse.Action):
    """An old name of a flag (``add_argument(OLD, dest=..., action=Alias)``): stores the value as
    the flag does and remembers the name typed, so that an error names the flag the user typed
    (:func:`typed_name`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.aliases_typed = {**(getattr(namespace, "aliases_typed", None) or {}), self.dest: option_string}


def typed_name(args, flag: str, dest: str | None = None) -> str:
    """``flag`` (storing into ``dest``, by default the flag's own), or the old name of it the
    command line used."""
    return (getattr(args, "aliases_typed", None) or {}).get(dest or flag[2:].replace("-", "_"), flag)


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default after its help text, unless the text already says it or there is
    none (a flag absent from the command line)."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=32, width=min(110, max(60, _terminal_width())))

    def _get_help_string(self, action):
        text = action.help or ""
        shows = action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)
        if "%(default)" in text or "default" in text.lower() or action.default is None or action.default is False \
                or action.default == argparse.SUPPRESS or not shows:
            return text
        return text + " (default: %(default)s)"


def _terminal_width() -> int:
    import shutil
    return shutil.get_terminal_size((100, 24)).columns


def base_default(key: str):
    """The base configuration's value of ``section.key`` (what applies when neither a preset nor a
    flag sets it)."""
    import dataclasses

    from ..config import Config
    section, name = key.split(".", 1)
    for f in dataclasses.fields(Config.sections()[section]):
        if f.name == name:
            return f.default
    raise KeyError(key)


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value == "" else str(value)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_flags(p: argparse.ArgumentParser, flags: dict, groups: dict | None = None) -> None:
    """Add ``flags`` (a table as above) to ``p``, each in its help group from ``groups`` (title ->
    argument group; missing titles are added), its help saying the base default."""
    for flag, (key, typ, help_, group) in flags.items():
        target = p
        if groups is not None:
            if group not in groups:
                groups[group] = p.add_argument_group(group)
            target = groups[group]
        shown = f" (default: {_shown(base_default(key))})" if key and "default" not in help_ else ""
        if typ is bool:
            target.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_ + shown)
        else:
            target.add_argument(flag, type=typ, help=help_ + shown,
                                metavar={int: "N", float: "NUM"}.get(typ))


def collect_overrides(args, flags: dict) -> dict:
    out = {}
    for flag, (key, *_) in flags.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if key and value is not None:
            out[key] = value
    for item in getattr(args, "set", None) or []:
        if "=" not in item:
            raise DocnmtError(f"--set expects section.key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def flag_labels(args, flags: dict) -> dict:
    """Config key -> the flag the user typed for it (``decode.max_sentences`` -> ``--batch-size``,
    ``--set train.lr``), so that a bad value is reported under that name."""
    labels = {key: typed_name(args, flag) for flag, (key, *_) in flags.items()
              if key and getattr(args, flag[2:].replace("-", "_"), None) is not None}
    for item in getattr(args, "set", None) or []:
        key = item.split("=", 1)[0]
        labels[key] = f"--set {key}"
    return labels


class Parser(argparse.ArgumentParser):
    """Usage errors as one line, like every other error of docnmt."""

    verb_hint = ""       # the verb of the command line being parsed (set by main)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)      # --be is not --beam: a typo is an error, not a guess
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        verb = self.prog.split()[-1] if self.prog != "docnmt" else self.verb_hint
        self.exit(2, f"docnmt: error: {message} (see docnmt {verb + ' ' if verb else ''}--help)\n")


def flag_table(*parts: dict) -> dict:
    """Flag tables joined in order (help lists each group's flags in this order); a flag that two
    parts declare is a bug, not a silent override."""
    out: dict = {}
    for part in parts:
        for flag, spec in part.items():
            if flag in out:
                raise ValueError(f"{flag} is declared twice")
            out[flag] = spec
    return out


def train_flags() -> dict:
    """The train verb's table: ``TRAIN_FLAGS``, then the model, data and train flags the methods
    and switches declare (:func:`docnmt.methods.cli_flags`)."""
    return flag_table(TRAIN_FLAGS, methods.cli_flags(decoding=False))


def decode_flags() -> dict:
    """The decoding table of translate (and of train's --valid-bleu): ``DECODE_FLAGS``, then the
    decoding flags the methods and switches declare."""
    return flag_table(DECODE_FLAGS, methods.cli_flags(decoding=True))


def add_verb(sub, name: str, help_: str, epilog: str | None = None) -> argparse.ArgumentParser:
    """A verb's parser on ``sub`` (the subparsers of ``docnmt``): its help line, the same as a
    sentence for its description, and the shared formatter."""
    return sub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".", epilog=epilog,
                          formatter_class=HelpFormatter)
