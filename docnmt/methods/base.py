"""What a method is to the core: the hooks :mod:`docnmt.methods` collects in its registry.

A method is one module of this package that ends with a :class:`Method` record; the registry
lists it. The core (model, trainer, beam search, translator) only ever calls these hooks, so it
never names a method.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..data import build_instances


@dataclass
class NoOptions:
    """The settings of a method that has none of its own (an empty ``method:`` section)."""


@dataclass(frozen=True)
class Method:
    """A method's hooks; only ``name`` and ``build`` are required.

    * ``build(model_cfg, options, vocab) -> Transformer``: the model (``options`` is an instance
      of ``options``, the dataclass of the config's ``method:`` section);
    * ``check(cfg)``: raise :class:`~docnmt.errors.ConfigError` for data or decoding settings the
      method cannot work with (e.g. G-Transformer needs its own data format);
    * ``formats``: separator formats the method brings (``data.separator`` name -> Joiner class);
    * ``start_token(translator, search, first) -> int | None``: the decoder's start token when it
      is not the format's;
    * ``search_args(translator, src) -> dict``: extra beam-search arguments per batch
      (processors, length limits: G-Transformer's sentence frame);
    * ``score_alone``: the model looks across its batch (DocFlat), so teacher-forced scoring
      (contrastive suites, CXMI) keeps every instance to itself (:func:`docnmt.model.rows_apart`:
      the modules that look across the batch have a ``rows_apart`` switch) and the service never
      batches two requests together.
    """

    name: str
    build: Callable
    options: type = NoOptions
    check: Callable | None = None
    formats: dict = field(default_factory=dict)
    start_token: Callable | None = None
    search_args: Callable | None = None
    score_alone: bool = False


class Walk:
    """How the translator walks the documents: the instances to decode, in rounds that may
    depend on earlier rounds' outputs. ``rounds`` returns ``(rows, new_from)`` pairs, where
    sentences [target start, ``new_from``) of a row are forced from earlier output; ``run`` decodes
    them with ``decode(rows, new_from, forced_from=None)``. This default is one round of the
    mode's instances; sliding decoding (:mod:`.length_bias`) and two-pass decoding
    (:mod:`.docflat`) are the others."""

    def rounds(self, translator, corpus, search) -> list[tuple[np.ndarray, np.ndarray]]:
        rows = build_instances(corpus, translator.cfg.data, training=False)
        return [(rows, rows[:, 2].copy())]

    def run(self, translator, docs, corpus, rounds, search, decode) -> None:
        for rows, new_from in rounds:
            decode(rows, new_from)
