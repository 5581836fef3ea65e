"""What an extension is to the core: the hooks :mod:`docnmt.methods` collects in its registry.

Two kinds of extension share one protocol, :class:`Hooks`:

* a **method** (:class:`Method`) is a model: it builds the network and has a ``method:`` config
  section of its own; a config names exactly one (``method.name``);
* a **switch** (:class:`Extension`) is anything any model can use: dynamic length sampling,
  length-aware attention, sliding decoding, two-pass decoding, word dropout, ...; every
  registered switch is always present, and each of its hooks does nothing unless its own setting
  turns it on.

Each extension declares its settings (:class:`Setting`: the config key, default, help and
command-line flag side by side) and the hooks it needs; the registry composes the config
sections, the command-line flags and each hook over the model's method and every switch. The core
(config, model, data, trainer, beam search, translator, CLI, service) only ever calls the
registry, so it never names an extension.

A hook that does not apply returns ``None`` (or does nothing): the registry asks the model's
method first, then the switches in registry order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..data import build_instances

SECTIONS = ("model", "data", "train", "decode")      # the config sections a switch may add settings to


@dataclass
class NoOptions:
    """The settings of a method that has none of its own (an empty ``method:`` section)."""


@dataclass(frozen=True)
class Setting:
    """One setting an extension adds to a config section, with its command-line flag.

    ``key`` is ``section.name`` (``decode.sliding``): the setting lives in that section of the
    config and of ``config.yaml`` like the core's own. ``flag`` (``--sliding``) adds it to
    ``docnmt train`` (model, data and train settings) or to the decoding verbs (decode settings),
    with ``help`` beside it and, for training, in help group ``group``. ``limit`` is an
    ``(ok, allowed)`` pair: ``ok(value)`` false is a config error "must be {allowed}".
    ``service``: a decode setting is also a request option of ``docnmt serve`` (not for settings
    that name files on the server). ``needs``: the key of the setting this one qualifies
    (``train.split_rule`` needs ``train.split_pairs``); it acts only while that one is away from
    its default, and the run's first line leaves it out otherwise."""

    key: str
    default: Any
    help: str
    flag: str = ""
    group: str = "methods"
    limit: tuple | None = None
    service: bool = True
    needs: str = ""

    def __post_init__(self):
        section, _, name = self.key.partition(".")
        if section not in SECTIONS or not name.isidentifier():
            raise ValueError(f"a setting's key is one of {', '.join(SECTIONS)}, a dot and a name, not {self.key!r}")

    @property
    def section(self) -> str:
        return self.key.partition(".")[0]

    @property
    def name(self) -> str:
        return self.key.partition(".")[2]

    @property
    def type(self) -> type:
        return type(self.default)


@dataclass(frozen=True, kw_only=True)
class Hooks:
    """The extension points; every one is optional.

    * ``settings``: :class:`Setting` records (config keys and flags);
    * ``check(cfg)``: raise :class:`~docnmt.errors.ConfigError` for settings the extension cannot
      work with;
    * ``formats``: data formats it brings (``data.separator`` name -> Joiner class);
    * ``model_pieces(model, cfg, vocab)``: attach pieces to a built model (length-aware attention);
    * ``training_rows(corpus, data, epoch, seed) -> rows | None``: the training instances of an
      epoch, replacing the mode's (dynamic length sampling);
    * ``training_data(corpus, rows, cfg, vocab, epoch, seed) -> (corpus, rows) | None``: an epoch's
      training corpus and instances extended or changed, after ``training_rows`` (split-pair
      training adds documents of its own); every extension's applies, in registry order;
    * ``train_batch(batch, cfg, vocab, epoch, seed) -> batch``: a training batch as the model sees
      it (word dropout); ``seed`` is a tuple unique to the batch and process;
    * ``train_loss(model, batch, outputs, cfg, instances) -> Tensor | None``: a term added to a
      training batch's summed loss (the context margin), given the model, the collated batch (on the
      host, its ``seed`` included), the main forward's ``(loss, nll)`` and the epoch's
      :class:`~docnmt.data.InstanceSet` the batch came from; the update divides it by its target
      tokens like the rest of the loss;
    * ``plots(cfg, corpus, save_dir, epoch)``: figures added to a model directory after training;
    * ``walk(cfg, search) -> Walk | None``: how the translator walks documents (sliding windows,
      two passes);
    * ``start_token(translator, search, first) -> int | None``: the decoder's start token when it
      is not the format's;
    * ``search_args(translator, search, rows, src) -> dict``: extra beam-search arguments for a
      batch of instances ``rows`` (``processors`` are collected from every extension; G-Transformer's
      sentence frame, the sentence-count constraint).
    """

    settings: tuple[Setting, ...] = ()
    check: Callable | None = None
    formats: dict = field(default_factory=dict)
    model_pieces: Callable | None = None
    training_rows: Callable | None = None
    training_data: Callable | None = None
    train_batch: Callable | None = None
    train_loss: Callable | None = None
    plots: Callable | None = None
    walk: Callable | None = None
    start_token: Callable | None = None
    search_args: Callable | None = None


@dataclass(frozen=True)
class Method(Hooks):
    """A model: ``build(model_cfg, options, vocab) -> Transformer`` (``options`` is an instance of
    ``options``, the dataclass of the config's ``method:`` section). ``score_alone``: the model
    looks across its batch (DocFlat), so teacher-forced scoring (contrastive suites, CXMI) keeps
    every instance to itself (:func:`docnmt.model.rows_apart`) and the service never batches two
    requests together. ``context_input``: the network reads the context input
    (``data.context_input``, the context-encoder Transformer); another method's config with one is
    refused, as it would train on a context the network never sees."""

    name: str
    build: Callable
    options: type = NoOptions
    score_alone: bool = False
    context_input: bool = False


@dataclass(frozen=True)
class Extension(Hooks):
    """A switch any model can use (see the module docstring)."""

    name: str


class Walk:
    """How the translator walks the documents: the instances to decode, in rounds that may
    depend on earlier rounds' outputs. ``rounds`` returns ``(rows, new_from)`` pairs, where
    sentences [target start, ``new_from``) of a row are forced from earlier output; ``run`` decodes
    them with ``decode(rows, new_from, forced_from=None)``. This default is one round of the
    mode's instances; sliding decoding (:mod:`.sliding`) and two-pass decoding
    (:mod:`.docflat`) are the others. ``cuts_documents``: the walk cuts documents into
    instances that fit by its own rule (no whole-document instance to check). ``report``: entries
    the walk adds to the coverage report once it has run, and :meth:`summary` a few words of it
    for the report's summary line (two-pass decoding: what translated pass 1). ``documents_apart``:
    each document's translation depends on it alone, so an input may be translated in chunks of
    documents (:mod:`docnmt.journal`) with the translations it would get whole."""

    cuts_documents = False
    documents_apart = True

    def __init__(self):
        self.report: dict = {}

    def summary(self) -> str:
        return ""

    def rounds(self, translator, corpus, search) -> list[tuple[np.ndarray, np.ndarray]]:
        rows = build_instances(corpus, translator.cfg.data, training=False)
        return [(rows, rows[:, 2].copy())]

    def run(self, translator, docs, corpus, rounds, search, decode) -> None:
        for rows, new_from in rounds:
            decode(rows, new_from)


def has_context(data) -> bool:
    """Whether the instances of a ``data:`` section carry context: a context input, or a document
    mode whose instances hold more than one sentence (``doc2sent`` and ``pseudodoc`` with
    ``data.context`` above 0; ``doc2doc`` and ``mr`` always)."""
    if data.context_input > 0 or data.mode in ("doc2doc", "mr"):
        return True
    return data.mode in ("doc2sent", "pseudodoc") and data.context > 0


def require_context(on: bool, data, flag: str, why: str) -> None:
    """A training aid's one-line refusal of a model whose instances carry no context (the aids'
    ``check``): ``flag`` (its key and flag: it may come from --set or a YAML file) is on but the
    instances of ``data`` carry none; ``why`` ends the message."""
    from ..errors import ConfigError
    if on and not has_context(data):
        raise ConfigError(f"{flag} needs a document method (a document mode with context, or --context-input): {why}")
