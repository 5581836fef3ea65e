"""The methods and switches, and the one place that knows them: a small explicit registry.

Each method (a model: :class:`~.base.Method`) and each switch any model can use
(:class:`~.base.Extension`: dynamic length sampling, length-aware attention, sliding decoding,
two-pass decoding, word dropout, ...) is one module of this package ending with its record;
``METHODS`` and ``EXTENSIONS`` below list them, one line each. The functions of this module
compose the records' settings and hooks (see :mod:`.base`); the core (config, model, data,
trainer, beam search, translator, CLI, service) calls them and never names a method or switch.

Adding a method or a switch: see README.md, "Extending" (a module with its record, one line here).
"""
from __future__ import annotations

from ..data import Corpus, Joiner, ModeConfig, build_instances
from ..errors import ConfigError
from ..model import AttentionPolicy, Transformer
from ..vocab import Vocab
from . import (
    alibi,
    context_margin,
    context_transformer,
    coword_dropout,
    docflat,
    docflat_map,
    gtransformer,
    length_bias,
    ptransformer,
    sentence_positions,
    split_pairs,
    two_pass,
    word_dropout,
)
from .base import Extension, Hooks, Method, NoOptions, Setting, Walk

TRANSFORMER = Method("transformer", lambda cfg, opts, vocab: Transformer(cfg, AttentionPolicy(cfg)))

METHODS: dict[str, Method] = {m.name: m for m in (
    TRANSFORMER,
    gtransformer.METHOD,
    ptransformer.METHOD,
    docflat.METHOD,
    context_transformer.METHOD,
)}

# switches, in the order their hooks are asked (the first walk or start token that applies wins)
EXTENSIONS: dict[str, Extension] = {e.name: e for e in (
    *length_bias.EXTENSIONS,
    alibi.EXTENSION,
    sentence_positions.EXTENSION,
    two_pass.EXTENSION,
    word_dropout.EXTENSION,
    coword_dropout.EXTENSION,
    split_pairs.EXTENSION,
    context_margin.EXTENSION,
)}

__all__ = ["EXTENSIONS", "METHODS", "Extension", "Method", "NoOptions", "Setting", "Walk", "build_model", "check",
           "cli_flags", "data_joiner", "decode_walk", "formats", "get", "joiner_class", "make_joiner",
           "options_class", "search_args", "settings", "start_token", "train_batch", "train_loss",
           "training_data", "training_plots", "training_rows"]


def get(name: str) -> Method:
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}")
    return METHODS[name]


def options_class(name: str) -> type:
    """The dataclass of method ``name``'s ``method:`` section."""
    return get(name).options


def _hooks(method_name: str) -> list[Hooks]:
    """The extensions whose hooks apply to a model of method ``method_name``: its method, then
    every switch."""
    return [get(method_name), *EXTENSIONS.values()]


# --------------------------------------------------------------------------------------------
# Settings: config sections and command-line flags
# --------------------------------------------------------------------------------------------

def settings() -> tuple[Setting, ...]:
    """Every setting the registered methods and switches declare (a key may appear once)."""
    out: dict[str, Setting] = {}
    for ext in [*METHODS.values(), *EXTENSIONS.values()]:
        for s in ext.settings:
            if s.key in out:
                raise ConfigError(f"setting {s.key} declared twice ({ext.name} and another extension)")
            out[s.key] = s
    for s in out.values():
        if s.needs and s.needs not in out:
            raise ConfigError(f"setting {s.key} needs {s.needs}, which no extension declares")
    return tuple(out.values())


def cli_flags(decoding: bool) -> dict:
    """The extensions' flags in the CLI's table form ``flag -> (key, type, help, group)``: the
    decode settings' (``decoding``) or the model, data and train settings' (``docnmt train``); a
    setting's allowed values (its ``limit``) end its help."""
    return {s.flag: (s.key, s.type, s.help + (f"; {s.limit[1]}" if s.limit else ""), s.group) for s in settings()
            if s.flag and (s.section == "decode") == decoding}


def formats() -> dict[str, type[Joiner]]:
    """Data formats (``data.separator``): the baselines' own, then those the extensions bring."""
    out = {"index": Joiner, "uniform": Joiner}
    for ext in [*METHODS.values(), *EXTENSIONS.values()]:
        out.update(ext.formats)
    return out


# --------------------------------------------------------------------------------------------
# Model and data
# --------------------------------------------------------------------------------------------

def check(cfg) -> None:
    """Settings that only the registry can check: the data format exists, and the method's and
    switches' own requirements."""
    joiner_class(cfg.data.separator)
    if cfg.data.context_input > 0 and not get(cfg.method_name).context_input:
        readers = [m.name for m in METHODS.values() if m.context_input]
        raise ConfigError(f"data.context_input {cfg.data.context_input} (--context-input): method {cfg.method_name} "
                          f"does not read a context input (methods that do: {', '.join(readers)})")
    for ext in _hooks(cfg.method_name):
        if ext.check is not None:
            ext.check(cfg)


def build_model(cfg, vocab: Vocab) -> Transformer:
    """The model a config describes: the method's network, then the switches' pieces."""
    cfg.model.vocab_size, cfg.model.pad_id = len(vocab), vocab.pad
    check(cfg)
    model = get(cfg.method_name).build(cfg.model, cfg.method, vocab)
    for ext in _hooks(cfg.method_name):
        if ext.model_pieces is not None:
            ext.model_pieces(model, cfg, vocab)
    return model


def joiner_class(separator: str) -> type[Joiner]:
    known = formats()
    if separator not in known:
        raise ConfigError(f"unknown separator {separator!r}; choose one of {', '.join(known)}")
    return known[separator]


def make_joiner(vocab: Vocab, separator: str, context_input: int = 0, context_self: bool = False) -> Joiner:
    """The format named ``separator``; ``context_input`` > 0 adds a context input of that many
    previous source sentences to every batch (``ctx``); with ``context_self`` a pair from a
    sentence-level corpus gets its own source sentence as context."""
    joiner = joiner_class(separator)(vocab, separator)
    joiner.context_sents, joiner.context_self = context_input, context_self
    return joiner


def data_joiner(vocab: Vocab, data: ModeConfig) -> Joiner:
    """The joiner of a config's ``data:`` section."""
    return make_joiner(vocab, data.separator, data.context_input, data.context_self)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------

def training_rows(corpus: Corpus, data: ModeConfig, epoch: int, seed: int = 1):
    """The training instances of an epoch: a switch's (dynamic length sampling), else the mode's."""
    for ext in EXTENSIONS.values():
        rows = ext.training_rows(corpus, data, epoch, seed) if ext.training_rows is not None else None
        if rows is not None:
            return rows
    return build_instances(corpus, data, training=True, epoch=epoch, seed=seed)


def training_data(cfg, corpus: Corpus, rows, vocab: Vocab, epoch: int) -> tuple:
    """An epoch's training corpus and instances after every extension's ``training_data`` hook
    (split-pair training adds its documents)."""
    for ext in _hooks(cfg.method_name):
        out = ext.training_data(corpus, rows, cfg, vocab, epoch, cfg.train.seed) if ext.training_data else None
        if out is not None:
            corpus, rows = out
    return corpus, rows


def train_loss(cfg, model, batch: dict, outputs, instances):
    """The extensions' terms added to a training batch's summed loss (the context margin), or None."""
    total = None
    for ext in _hooks(cfg.method_name):
        term = ext.train_loss(model, batch, outputs, cfg, instances) if ext.train_loss is not None else None
        if term is not None:
            total = term if total is None else total + term
    return total


def train_batch(cfg, batch: dict, vocab: Vocab, epoch: int, seed: tuple) -> dict:
    """A training batch after every extension's ``train_batch`` hook (word dropout)."""
    for ext in _hooks(cfg.method_name):
        if ext.train_batch is not None:
            batch = ext.train_batch(batch, cfg, vocab, epoch, seed)
    return batch


def training_plots(cfg, corpus: Corpus, save_dir, epoch: int) -> None:
    """Plots the extensions add to a model directory at the end of training."""
    for ext in _hooks(cfg.method_name):
        if ext.plots is not None:
            ext.plots(cfg, corpus, save_dir, epoch)


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------

def decode_walk(cfg, search) -> Walk:
    """How a translator walks documents: the first extension's walk that applies, else one round
    of the mode's instances."""
    for ext in _hooks(cfg.method_name):
        walk = ext.walk(cfg, search) if ext.walk is not None else None
        if walk is not None:
            return walk
    return Walk()


def walk_flag(cfg, search) -> str | None:
    """The flag of the extension whose walk decodes ``cfg``'s documents with ``search``
    (``--sliding``; its name where it has no flag), or None for the default round of instances."""
    for ext in _hooks(cfg.method_name):
        if ext.walk is not None and ext.walk(cfg, search) is not None:
            flags = [s.flag for s in getattr(ext, "settings", ()) if s.flag and s.section == "decode"]
            return flags[0] if flags else ext.name
    return None


def start_token(translator, search, first: int) -> int | None:
    """The decoder's start token an extension asks for, or None (the format's)."""
    for ext in _hooks(translator.cfg.method_name):
        token = ext.start_token(translator, search, first) if ext.start_token is not None else None
        if token is not None:
            return token
    return None


def search_args(translator, search, rows, src) -> dict:
    """The extensions' extra beam-search arguments for a batch: their ``processors`` joined,
    other arguments (a length limit) from the first that gives one."""
    out: dict = {}
    for ext in _hooks(translator.cfg.method_name):
        args = ext.search_args(translator, search, rows, src) if ext.search_args is not None else None
        for key, value in (args or {}).items():
            if key == "processors":
                out["processors"] = [*out.get("processors", []), *value]
            else:
                out.setdefault(key, value)
    return out


def sentence_attention_map(translator, doc, start: int, batch: int, path) -> tuple:
    """``docnmt fba-map``: the encoder flat-batch attention (DocFlat's) of one decoding batch of
    ``doc`` (sentences ``start`` (0-based) onwards, ``batch`` of them) per sentence pair, plotted to
    ``path``; returns the map and its 1-based sentence numbers. A model without such attention: a
    ConfigError."""
    weights, sents = docflat_map.sentence_attention_map(translator, doc, start, batch)
    docflat_map.plot_attention_map(weights, sents, path,
                               f"document {doc.docid}: encoder FBA, sentences {sents[0]}-{sents[-1]}")
    return weights, sents
