"""The methods, and the one place that knows them: a small explicit registry.

Each method is one module of this package ending with a :class:`~.base.Method` record (its
settings, model builder, data formats and decoding hooks); ``METHODS`` below lists them, one line
each. The core (model, data, trainer, beam search, translator) calls the functions of this module
and never names a method. The length-bias fixes (:mod:`.length_bias`) are not a model of their
own but switches any model can use (``data.dls``, ``model.length_aware``, ``decode.sliding``);
their hooks are wired here too.

Adding a method: see README.md, "Extending" (a module with a ``METHOD`` record, one line here).
"""
from __future__ import annotations

from ..data import Corpus, Joiner, ModeConfig, build_instances
from ..errors import ConfigError
from ..model import AttentionPolicy, Transformer
from ..vocab import Vocab
from . import context_transformer, docflat, gtransformer, length_bias, ptransformer
from .base import Method, NoOptions, Walk
from .length_bias import count_constraint

TRANSFORMER = Method("transformer", lambda cfg, opts, vocab: Transformer(cfg, AttentionPolicy(cfg)))

METHODS: dict[str, Method] = {m.name: m for m in (
    TRANSFORMER,
    gtransformer.METHOD,
    ptransformer.METHOD,
    docflat.METHOD,
    context_transformer.METHOD,
)}

# data formats (data.separator): the baselines' own, then those the methods bring
FORMATS: dict[str, type[Joiner]] = {"index": Joiner, "uniform": Joiner,
                                    **{k: v for m in METHODS.values() for k, v in m.formats.items()}}

# decoding walks other than the default one round of instances, first match wins
WALKS = [(docflat.uses_two_pass, docflat.TwoPass), (length_bias.uses_sliding, length_bias.Sliding)]

__all__ = ["FORMATS", "METHODS", "Method", "NoOptions", "Walk", "build_model", "check", "count_constraint",
           "decode_walk", "format_marks", "get", "data_joiner", "joiner_class", "make_joiner", "options_class",
           "training_rows"]


def get(name: str) -> Method:
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}")
    return METHODS[name]


def options_class(name: str) -> type:
    """The dataclass of method ``name``'s ``method:`` section."""
    return get(name).options


def check(cfg) -> None:
    """Settings that only the registry can check: the data format exists, and the method's own
    requirements on data and decoding settings."""
    if cfg.data.separator not in FORMATS:
        raise ConfigError(f"unknown separator {cfg.data.separator!r}; choose one of {', '.join(FORMATS)}")
    if cfg.model.sentence_positions and cfg.data.separator == "uniform":
        raise ConfigError("sentence_positions needs numbered separators (data.separator: index): with one "
                          "<sep> for every sentence and positions restarting, the order of the sentences is lost")
    method = get(cfg.method_name)
    if method.check is not None:
        method.check(cfg)


def build_model(cfg, vocab: Vocab) -> Transformer:
    """The model a config describes, with length-aware attention when ``model.length_aware``."""
    cfg.model.vocab_size, cfg.model.pad_id = len(vocab), vocab.pad
    check(cfg)
    model = get(cfg.method_name).build(cfg.model, cfg.method, vocab)
    if cfg.model.sentence_positions:     # a sentence opens with <s> or a separator (<sep>, <sepI>)
        model.set_sentence_openers([vocab.bos, *vocab.sep_ids])
    if cfg.model.length_aware:
        model.length_scale = length_bias.LengthAwareScale()
    return model


def joiner_class(separator: str) -> type[Joiner]:
    if separator not in FORMATS:
        raise ConfigError(f"unknown separator {separator!r}; choose one of {', '.join(FORMATS)}")
    return FORMATS[separator]


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


def format_marks(separator: str) -> int:
    """Tokens a data format adds to each source sentence (a separator or end token; ``<s>`` and
    ``</s>`` in G-Transformer's), which dynamic length sampling counts."""
    return int(joiner_class(separator).overhead(1, "src"))


def training_rows(corpus: Corpus, data: ModeConfig, epoch: int, seed: int = 1):
    """The training instances of an epoch: the mode's, or dynamic length sampling's."""
    if length_bias.uses_dls(data):
        return length_bias.training_rows(corpus, data, epoch, seed, format_marks(data.separator))
    return build_instances(corpus, data, training=True, epoch=epoch, seed=seed)


def training_plots(cfg, corpus: Corpus, save_dir, epoch: int) -> None:
    """Plots a method adds to a model directory at the end of training."""
    if length_bias.uses_dls(cfg.data):
        length_bias.plot_dls_lengths(corpus, cfg.data, cfg.train.seed, epoch, save_dir / "dls_lengths.png",
                                     format_marks(cfg.data.separator))


def decode_walk(cfg, search) -> Walk:
    for applies, walk in WALKS:
        if applies(cfg, search):
            return walk()
    return Walk()
