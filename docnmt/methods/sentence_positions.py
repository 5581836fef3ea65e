"""Sentence positions (docs/methods/baselines.md#sentence-positions), a switch for the models
whose instances hold several sentences (Doc2Doc, MR, DocFlat): ``model.sentence_positions: true``
restarts the positions in every sentence of an instance, each sentence counted as the plain
sentence format counts it, so a document model fine-tuned from a sentence model keeps the
position vectors that model was trained with. A sentence opens with ``<s>`` or a separator
(:meth:`docnmt.model.Transformer.set_sentence_openers`). (The G-Transformer has its own,
``method.sentence_positions``, which adds sentence-index vectors.)"""
from __future__ import annotations

from ..errors import ConfigError
from .base import Extension, Setting


def _check(cfg) -> None:
    if not cfg.model.sentence_positions:
        return
    if cfg.data.separator == "uniform":
        raise ConfigError("sentence_positions needs numbered separators (data.separator: index): with one "
                          "<sep> for every sentence and positions restarting, the order of the sentences is lost")
    if cfg.model.alibi or cfg.model.tgt_lang_token >= 0:
        raise ConfigError("sentence_positions restarts position vectors in every sentence: not with "
                          + ("ALiBi (model.alibi), which has none" if cfg.model.alibi else
                             "a target language token after the start token (mBART, NLLB)"))


def _openers(model, cfg, vocab) -> None:
    if cfg.model.sentence_positions:
        model.set_sentence_openers([vocab.bos, *vocab.sep_ids])


EXTENSION = Extension(name="sentence_positions", check=_check, model_pieces=_openers, settings=(
    Setting("model.sentence_positions", False, "positions restart in every sentence of an instance (Doc2Doc, DocFlat)",
            "--sentence-positions"),
))
