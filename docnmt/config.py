"""Experiment configuration: one YAML per experiment, named presets, strict keys.

A config has five sections -- ``model`` (:class:`docnmt.model.ModelConfig`), ``data``
(:class:`docnmt.data.ModeConfig`), ``method`` (``name:`` and the settings of that method, a
dataclass of the method's module, see :mod:`docnmt.methods`), ``train`` (:class:`TrainConfig`)
and ``decode`` (:class:`DecodeConfig`: :class:`docnmt.search.SearchConfig` plus batching) -- and
may start from a named preset (``preset: transformer_small``) whose values it overrides. A run's ``config.yaml`` holds
the ``method`` settings of its own method only. The settings of the switches any model can use
(``decode.sliding``, ``data.dls``, ``train.word_dropout``, ...) are declared by the switches
themselves (:class:`docnmt.methods.Setting`) and joined to their section's class here
(:meth:`Config.sections`), so each section holds the core's fields and the extensions'. Presets live in
``docnmt/presets/*.yaml`` and may themselves name a parent preset. Unknown keys are errors,
with a suggestion when a known key is close.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import methods, ranges
from .data import ModeConfig
from .errors import ConfigError
from .methods import NoOptions
from .model import ModelConfig
from .search import COMPILE_LIMIT, FALLBACK_LIMIT, LENPEN_STYLES, SearchConfig

PRESET_DIR = Path(__file__).parent / "presets"


@dataclass
class TrainConfig:
    max_tokens: int = 4096
    update_freq: int = 1
    lr: float = 5e-4
    warmup_updates: int = 4000
    adam_betas: tuple = (0.9, 0.98)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 0.0
    pretrained_lr_scale: float = 1.0   # lr of parameters initialised by --init-from, as a share of lr
    freeze_pretrained: bool = False    # train only the parameters --init-from did not set (two-step training)
    max_update: int = 0          # 0 = no limit
    max_epoch: int = 0           # 0 = no limit
    max_minutes: float = 0.0     # stop (and save) after this much training time; 0 = no limit
    patience: int = 10           # validations without improvement before stopping; <= 0 = off
    best_metric: str = "loss"    # loss | nll_loss | bleu
    validate_interval_updates: int = 0   # 0 = validate at the end of every epoch only
    save_interval_updates: int = 0       # 0 = save at the end of every epoch only
    keep_last: int = 5                   # checkpoints kept for averaging
    valid_bleu: bool = False
    attention_entropy: bool = True   # log validation attention entropy and self-attention distance per module kind
                                     # (docs/methods/discourse.md#attention-entropy)
    log_interval: int = 50
    seed: int = 1
    precision: str = "auto"      # auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 | fp16
    tensorboard_dir: str = ""
    threads: int = 0             # torch intra-op threads on CPU; 0 = torch's default
    compile: bool = False        # torch.compile the training forward pass (dynamic shapes: new batch shapes do not
                                 # compile again); meant for GPUs, where an eager step launches many small kernels
    fsdp: bool = False           # shard weights, gradients and Adam states over the torchrun processes (FSDP2)
    cudnn_attention: bool = False  # let SDPA use cuDNN's fused attention on CUDA: it plans every new batch shape
                                   # anew (tenths of a second each), so with varied token batches it is off;
                                   # process-wide: the last trainer or translator built sets it
    flex_attention: bool = True    # FlexAttention for masked attention on CUDA (compiled in each process, about a
                                   # minute or more); false: the CPU's SDPA paths, the same computation; process-wide


@dataclass
class DecodeConfig(SearchConfig):
    max_tokens: int = 8000       # source tokens per decoding batch
    max_sentences: int = 64      # instances per decoding batch
    precision: str = "auto"      # auto (bf16 autocast on CUDA, fp32 on CPU) | fp32 | bf16 | int8 (CPU)
    engine: str = "docnmt"       # docnmt | ctranslate2 (the search run by CTranslate2; docs/performance.md#ctranslate2)


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: ModeConfig = field(default_factory=ModeConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    method: Any = field(default_factory=NoOptions)    # the settings of method ``method_name``
    method_name: str = "transformer"
    preset: str = ""      # the preset it started from (recorded in config.yaml as ``from_preset``, not loaded)

    CORE = {"model": ModelConfig, "data": ModeConfig, "method": None, "train": TrainConfig, "decode": DecodeConfig}

    def __post_init__(self):
        """Sections built from the core classes alone (``Config(decode=DecodeConfig(beam=2))``) get
        the extensions' settings at their defaults."""
        for name, klass in self.sections().items():
            value = getattr(self, name)
            if klass is not None and type(value) is not klass:
                setattr(self, name, klass(**dataclasses.asdict(value)))

    @classmethod
    def sections(cls) -> dict[str, type | None]:
        """Each section's class: the core's fields plus the registered extensions' settings
        (``method`` is None: its class depends on the method named)."""
        return _sections(methods.settings())

    def to_dict(self) -> dict:
        out = {"from_preset": self.preset} if self.preset else {}
        for name in self.CORE:
            d = dataclasses.asdict(getattr(self, name))
            d = {"name": self.method_name, **d} if name == "method" else d
            out[name] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
        return out

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def from_dict(cls, raw: dict, origin: str = "config", labels: dict[str, str] | None = None) -> "Config":
        """``labels`` name settings as the user gave them (``{"decode.max_sentences": "--batch-size"}``):
        an invalid value is reported under that name instead of ``origin: section.key``."""
        raw = dict(raw or {})
        base = {}
        preset = str(raw.pop("from_preset", "") or "")       # informational: the values are all there
        if "preset" in raw:
            preset = raw.pop("preset")
            try:
                base = load_preset_dict(preset)
            except ConfigError as e:        # naming the config file, unless the preset name is all the user gave
                raise ConfigError(str(e) if origin == str(preset) else f"{origin}: {e}") from None
        merged = merge_config(_migrate(base), _migrate(raw))
        _check_keys(merged, cls.CORE, origin)
        method = dict(merged.get("method") or {})
        name = str(method.pop("name", "transformer"))
        try:
            klasses = {**cls.sections(), "method": methods.options_class(name)}
        except ConfigError as e:
            raise ConfigError(f"{origin}: method: {e}") from None
        merged["method"] = method
        sections = {}
        for section, klass in klasses.items():
            values = merged.get(section) or {}
            _check_keys(values, _fields(klass), f"{origin}: {section}" + (f" ({name})" if section == "method" else ""))
            coerced = {}
            for k, v in values.items():
                try:
                    coerced[k] = _coerce(klass, k, v)
                except (TypeError, ValueError) as e:
                    label = (labels or {}).get(f"{section}.{k}")
                    raise ConfigError(f"{label} {e}" if label else f"{origin}: {section}: {k} {e}") from None
            try:
                sections[section] = klass(**coerced)
            except (TypeError, ValueError, ConfigError) as e:
                raise ConfigError(f"{origin}: {section}: {e}") from None
        _check_limits(sections, origin, labels or {})
        cfg = cls(**sections, method_name=name, preset=preset)
        try:
            methods.joiner_class(cfg.data.separator)
        except ConfigError as e:
            raise ConfigError(f"{origin}: data: {e}") from None
        return cfg

    @classmethod
    def load(cls, path_or_preset: str | Path) -> "Config":
        path = Path(path_or_preset)
        if not path.exists():
            return cls.from_dict({"preset": str(path_or_preset)}, str(path_or_preset))
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: cannot read config: {e}") from None
        if raw is None:
            raise ConfigError(f"{path}: empty config file (a config names a preset or sets at least one section)")
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: a config must be a mapping of sections")
        return cls.from_dict(raw, str(path))

    def override(self, dotted: dict[str, Any], labels: dict[str, str] | None = None) -> "Config":
        """A copy with ``{"train.lr": 1e-3, ...}`` applied (CLI flags and ``--set``). Naming
        another method (``method.name``) starts its ``method:`` section from that method's
        defaults. ``labels``: the flags the values came from, for error messages (see
        :meth:`from_dict`)."""
        d = self.to_dict()
        new_name = dotted.get("method.name", dotted.get("model.method"))
        if new_name is not None and str(new_name) != self.method_name:
            d["method"] = {"name": str(new_name)}
        for key, value in dotted.items():
            section, _, name = key.partition(".")
            d.setdefault(section, {})[name] = value
        return Config.from_dict(d, "command line", labels)


@functools.lru_cache(maxsize=8)
def _sections(settings: tuple) -> dict[str, type | None]:
    """The section classes for a registry's ``settings`` (cached: one class per registry state)."""
    out: dict[str, type | None] = {}
    for name, core in Config.CORE.items():
        extra = [(s.name, s.type, field(default=s.default)) for s in settings if s.section == name]
        out[name] = core if core is None or not extra else \
            dataclasses.make_dataclass(core.__name__, extra, bases=(core,))
        if out[name] is not core:
            out[name].__module__, out[name].__qualname__ = core.__module__, core.__qualname__
    return out


def section_class(name: str) -> type:
    """The class of config section ``name`` (``"decode"``): core fields plus extension settings."""
    return Config.sections()[name]


def _fields(klass) -> dict:
    return {f.name: None for f in dataclasses.fields(klass)}


def _migrate(raw: dict) -> dict:
    """Configs written before methods had a section of their own kept the method's name as
    ``model.method`` and every method's settings in ``model``: move the named method's settings
    to ``method:`` and drop the others' (they never applied)."""
    model = raw.get("model")
    if not isinstance(model, dict):
        return raw
    # (a model setting of the same name as a method's, e.g. sentence_positions, stays a model setting:
    # it came after the method sections did)
    other = {k for m in methods.METHODS.values() for k in _fields(m.options)} - _fields(section_class("model")).keys()
    if "method" not in model and not (other & model.keys()):
        return raw
    model, method = dict(model), dict(raw.get("method") or {})
    name = str(model.pop("method", method.get("name", "transformer")))
    try:
        own = _fields(methods.options_class(name))
    except ConfigError:
        own = {}
    if name != method.get("name", "transformer"):     # another method named the old way: its settings only
        method = {k: v for k, v in method.items() if k in own}
    method["name"] = name
    for key in other & model.keys():
        value = model.pop(key)
        if key in own:
            method.setdefault(key, value)
    return {**raw, "model": model, "method": method}


TRAIN_PRECISIONS = ("auto", "fp32", "bf16", "fp16")   # auto: bf16 (fp16 without it) on CUDA, fp32 on CPU
DECODE_PRECISIONS, ENGINES = ("auto", "fp32", "bf16", "int8"), ("docnmt", "ctranslate2")

_one_of = ranges.one_of
_AT_LEAST_0, _AT_LEAST_1, _PROBABILITY = ranges.AT_LEAST_0, ranges.AT_LEAST_1, ranges.PROBABILITY
_FINITE, _FINITE_AT_LEAST_0, _FINITE_ABOVE_0 = ranges.FINITE, ranges.FINITE_AT_LEAST_0, ranges.FINITE_ABOVE_0
MAX_SEED = 2**63 - 1
# values outside these ranges are ConfigErrors (instead of a crash, a run that trains to NaN weights
# or a silently empty result)
LIMITS = {
    "model": {"dropout": _PROBABILITY, "attention_dropout": _PROBABILITY, "activation_dropout": _PROBABILITY,
              "d_model": _AT_LEAST_1, "heads": _AT_LEAST_1, "ffn_dim": _AT_LEAST_1, "max_positions": _AT_LEAST_1,
              "encoder_layers": _AT_LEAST_0, "decoder_layers": _AT_LEAST_1},
    "data": {"context": _AT_LEAST_0, "min_train_doc_sents": _AT_LEAST_0, "max_train_sent_tokens": _AT_LEAST_0,
             "max_instance_tokens": _AT_LEAST_0},
    "train": {"max_tokens": _AT_LEAST_1, "update_freq": _AT_LEAST_1, "lr": _FINITE_ABOVE_0,
              "warmup_updates": _AT_LEAST_0, "adam_eps": _FINITE_ABOVE_0, "weight_decay": _FINITE_AT_LEAST_0,
              "label_smoothing": _PROBABILITY, "clip_norm": _FINITE_AT_LEAST_0,
              "max_update": _AT_LEAST_0, "max_epoch": _AT_LEAST_0,
              "max_minutes": _FINITE_AT_LEAST_0, "validate_interval_updates": _AT_LEAST_0,
              "save_interval_updates": _AT_LEAST_0, "keep_last": _AT_LEAST_1, "log_interval": _AT_LEAST_1,
              "pretrained_lr_scale": _FINITE_AT_LEAST_0, "threads": _AT_LEAST_0,
              "seed": (lambda v: 0 <= v <= MAX_SEED, f"in [0, {MAX_SEED}]"),
              "adam_betas": (lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "two numbers in [0, 1)"),
              "precision": _one_of(TRAIN_PRECISIONS)},
    "decode": {"beam": _AT_LEAST_1, "nbest": _AT_LEAST_1, "max_tokens": _AT_LEAST_1, "max_sentences": _AT_LEAST_1,
               "lenpen": _FINITE, "max_len_a": _FINITE_AT_LEAST_0, "max_len_b": _AT_LEAST_0, "min_len": _AT_LEAST_0,
               "no_repeat_ngram_size": _AT_LEAST_0, "lenpen_style": _one_of(LENPEN_STYLES),
               "precision": _one_of(DECODE_PRECISIONS), "engine": _one_of(ENGINES), "compile_step": COMPILE_LIMIT,
               "fallback": FALLBACK_LIMIT}}


def _limits() -> dict[str, dict]:
    """:data:`LIMITS` and the ranges the extensions' settings declare."""
    out = {section: dict(limits) for section, limits in LIMITS.items()}
    for s in methods.settings():
        if s.limit is not None:
            out.setdefault(s.section, {})[s.name] = s.limit
    return out


def _check_limits(sections: dict, origin: str, labels: dict[str, str] | None = None) -> None:
    """Every value of :data:`LIMITS` in range, and the settings that depend on each other
    consistent. An error names the setting by its label (the flag typed) where ``labels`` has one."""
    labels = labels or {}

    def name(key: str) -> str:
        return labels.get(key, key)

    def fail(key: str, text: str) -> None:
        raise ConfigError(f"{labels[key]} {text}" if key in labels else f"{origin}: {key} {text}")

    for section, limits in _limits().items():
        for key, (ok, allowed) in limits.items():
            value = getattr(sections[section], key)
            if not ok(value):
                shown = list(value) if isinstance(value, tuple) else value
                fail(f"{section}.{key}", f"must be {allowed}, not {shown!r}")
    decode, model = sections["decode"], sections["model"]
    if decode.nbest > decode.beam:
        fail("decode.nbest", f"({decode.nbest}) cannot exceed {name('decode.beam')} ({decode.beam})")
    if model.d_model % model.heads:
        fail("model.heads", f"({model.heads}) must divide {name('model.d_model')} ({model.d_model})")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_description(name: str) -> str:
    """The comment block a preset file starts with, as one paragraph."""
    lines = []
    for line in (PRESET_DIR / f"{name}.yaml").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(w for w in lines if w)


def load_preset_dict(name: str, _seen: tuple = ()) -> dict:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"preset must be the name of a preset, not {name!r}")
    path = PRESET_DIR / f"{name}.yaml"
    if not path.exists():
        hint = difflib.get_close_matches(name, preset_names(), n=1)
        raise ConfigError(f"unknown preset or config file {name!r}" +
                          (f"; did you mean {hint[0]!r}?" if hint else f"; presets: {', '.join(preset_names())}"))
    if name in _seen:
        raise ConfigError(f"preset cycle through {name!r}")
    raw = yaml.safe_load(path.read_text()) or {}
    parent = raw.pop("preset", None)
    return merge_config(_migrate(load_preset_dict(parent, _seen + (name,))), _migrate(raw)) if parent else raw


def merge_config(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``; a ``method:`` section naming another method replaces the
    base's instead of adding to it."""
    b_method, o_method = base.get("method"), over.get("method")
    if isinstance(b_method, dict) and isinstance(o_method, dict) and \
            o_method.get("name", b_method.get("name")) != b_method.get("name"):
        base = {k: v for k, v in base.items() if k != "method"}
    return merge(base, over)


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _check_keys(values: dict, known, where: str) -> None:
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(values).__name__}")
    for key in values:
        if key not in known:
            hint = difflib.get_close_matches(str(key), list(known), n=1)
            raise ConfigError(f"{where}: unknown key {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else
                              f"; known keys: {', '.join(known)}"))


def _coerce(klass, key: str, value):
    """YAML and the command line give strings and lists; make them the field's type. A
    ValueError's text follows the key's name (``lr`` + ``must be a number, not 'x'``)."""
    default = next(f for f in dataclasses.fields(klass) if f.name == key).default
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"must be true or false, not {value!r}")
            return value.lower() in ("true", "1", "yes")
        return bool(value)
    if isinstance(default, tuple):
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise ValueError(f"must be a list of numbers, not {value!r}")
        try:
            return tuple(float(x) for x in items)
        except (TypeError, ValueError):
            raise ValueError(f"must be a list of numbers, not {value!r}") from None
    if isinstance(default, str):
        return "" if value is None else str(value)
    if isinstance(default, (int, float)) and (isinstance(value, bool) or not isinstance(value, type(default))):
        if isinstance(value, bool):
            raise ValueError(f"must be a number, not {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"must be a number, not {value!r}") from None
        if isinstance(default, int):
            if not number.is_integer():
                raise ValueError(f"must be a whole number, not {value!r}")
            return int(number)
        return number
    return value
