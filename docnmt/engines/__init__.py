"""What runs a search besides docnmt's own modules in fp32/bf16: an int8 copy of the model
(``--precision int8``, :mod:`.int8`) and CTranslate2 (``--engine ctranslate2``, :mod:`.ctranslate2`,
converted by :mod:`.ct2_spec`, also ``docnmt export-ct2``). docs/performance.md."""
from __future__ import annotations


def model_for(translator, search):
    """The model docnmt's search runs: the translator's, or its int8 copy (``--precision int8``)."""
    if getattr(search, "engine", "docnmt") != "docnmt":
        return translator.model
    from .int8 import model_for as int8_model
    return int8_model(translator, search)


def search_for(translator, search):
    """The search function that replaces :func:`docnmt.search.beam_search` (same arguments and
    result), or None for docnmt's own."""
    if getattr(search, "engine", "docnmt") == "docnmt":
        return None
    from .ctranslate2 import engine_for
    return engine_for(translator, search).search


def prepare(translator, overrides: dict | None) -> None:
    """Set ``translator``'s decoding ``overrides`` (``{"decode.engine": ..., "decode.precision": ...}``,
    ``docnmt serve``'s flags) and make what they need now (the CTranslate2 model, the int8 copy),
    so that a model the engine refuses is an error at start, not at the first request."""
    if overrides:
        translator.cfg = translator.cfg.override(overrides)
    model_for(translator, translator.cfg.decode)
    search_for(translator, translator.cfg.decode)
