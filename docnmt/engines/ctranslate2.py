"""``--engine ctranslate2``: the search over a batch of instances run by CTranslate2 instead of
:func:`docnmt.search.beam_search`, with everything around it docnmt's own (instances, recovery,
coverage, formats: :meth:`docnmt.translate.Translator._decode` calls :meth:`CT2Engine.search` where
it would call ``beam_search``; docs/performance.md#ctranslate2).

The model is converted on first use into a cache directory beside its weights
(``MODEL/ctranslate2/<weights>``, made again when the weights change; a temporary directory when
the model directory is read-only), so nothing needs to be exported first.

The search is fairseq's, as docnmt's: CTranslate2 with ``patience`` 1 stops an input once ``beam``
hypotheses ended, normalises scores by length including ``</s>``, and never generates docnmt's
banned tokens. Inputs are grouped by their length limit (each group one CTranslate2 call), so every
input gets its own limit. Where the two differ: at the length limit docnmt forces ``</s>`` and
CTranslate2 stops without it, so outputs that reach the limit may differ.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ..errors import DocnmtError
from ..search import Hypothesis, output_limit
from .ct2_spec import convert, ct2_tokens, load_ctranslate2
from .export import exportable

CACHE = "ctranslate2"            # MODEL/ctranslate2/<weights stem>/: the converted model and its stamp
STAMP = "docnmt_ct2.json"        # what the cache was converted from (_stamp)
COMPUTE = {"int8": "int8", "bf16": "bfloat16"}      # --precision -> CTranslate2 compute type (else float32)


def refusal(translator) -> str | None:
    """Why ``translator``'s model cannot run on CTranslate2 (None: it can): only the plain
    Transformer (sentence-level, Doc2Sent, Doc2Doc) has a CTranslate2 equivalent."""
    why = exportable(translator)
    return f"{why} has no CTranslate2 equivalent" if why else None


def check_search(search) -> None:
    """A clear error for decoding settings CTranslate2 cannot reproduce."""
    if search.lenpen_style != "fairseq":
        raise DocnmtError("--engine ctranslate2 supports --lenpen-style fairseq only")
    if search.no_repeat_ngram_size:
        raise DocnmtError("--engine ctranslate2 does not support --no-repeat-ngram-size "
                          "(CTranslate2's counts separators and special tokens; docnmt's only word pieces)")


class CT2Engine:
    """A CTranslate2 translator of a docnmt model, searching as :func:`beam_search` does."""

    def __init__(self, translator, precision: str = "fp32", threads: int = 0):
        why = refusal(translator)
        if why:
            raise DocnmtError(f"--engine ctranslate2: {why}; use --engine docnmt")
        ct2 = load_ctranslate2()
        path = cached_model(translator)
        device = "cuda" if translator.device.type == "cuda" else "cpu"
        self.ct = ct2.Translator(str(path), device=device, compute_type=COMPUTE.get(precision, "float32"),
                                 intra_threads=threads or torch.get_num_threads(), inter_threads=1)
        self.tokens = ct2_tokens(translator.vocab)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.pad, self.model = translator.vocab.pad, translator.model
        lang = translator.cfg.model.tgt_lang_token           # a forced language code: CTranslate2's target prefix
        self.prefix = [self.tokens[lang]] if lang >= 0 else []

    def search(self, model, src, cfg, bos, eos: int, banned=(), prefix=None, processors=(), max_len=None,
               inputs=None, sentences=None) -> list[list[Hypothesis]]:
        """:func:`docnmt.search.beam_search`'s arguments and result (``model`` unused)."""
        if prefix or processors or inputs:
            raise DocnmtError("--engine ctranslate2 runs plain searches only (no forced prefix or constraints)")
        src = self.model.with_source_language(src)          # a language code, as the encoder reads it
        lengths = src.ne(self.pad).sum(1)
        if max_len is None:
            max_len = output_limit(lengths, cfg, sentences)
        limits = max_len.clamp(min=1).tolist()
        rows = [[self.tokens[i] for i in row[:n]] for row, n in zip(src.tolist(), lengths.tolist())]
        suppress = [[self.tokens[i]] for i in sorted(set(banned) - {eos})]
        end = self.tokens[eos]
        out: list[list[Hypothesis]] = [[] for _ in rows]
        # one call for the whole batch at its longest limit; an input whose search came near its own
        # limit (where docnmt ends every hypothesis) is decoded again with that limit, inputs of one
        # limit together: the others never reached it, so their search is the one docnmt's limit gives
        redo = self._translate(rows, list(range(len(rows))), max(limits), cfg, suppress, end, out, limits)
        for limit in sorted({limits[k] for k in redo}):
            self._translate(rows, [k for k in redo if limits[k] == limit], limit, cfg, suppress, end, out)
        return out

    def _translate(self, rows, group: list[int], limit: int, cfg, suppress, end, out, limits=None) -> list[int]:
        """Translate inputs ``group`` with output limit ``limit`` into ``out``; with ``limits`` (each
        input's own), return the inputs whose search reached within one token of their own limit
        (left out of ``out``)."""
        pre = len(self.prefix)
        results = self.ct.translate_batch(
            [rows[k] for k in group], [self.prefix] * len(group) if pre else None, beam_size=cfg.beam, patience=1,
            num_hypotheses=max(cfg.beam, cfg.nbest) if limits else cfg.nbest, length_penalty=cfg.lenpen,
            max_decoding_length=limit + pre, min_decoding_length=cfg.min_len + pre,
            suppress_sequences=suppress or None, end_token=end, return_scores=True, max_input_length=0)
        redo = []
        for k, res in zip(group, results):
            if limits is not None and max(len(h) - pre for h in res.hypotheses) + 1 >= limits[k]:
                redo.append(k)
                continue
            out[k] = [Hypothesis([self.ids[t] for t in hyp[pre:]], float(score))
                      for hyp, score in list(zip(res.hypotheses, res.scores))[: cfg.nbest]]
        return redo


def engine_for(translator, search):
    """The engine that decodes for ``translator`` with settings ``search``: None for docnmt's own
    search, else a :class:`CT2Engine`, made once per translator and precision."""
    if getattr(search, "engine", "docnmt") != "ctranslate2":
        return None
    check_search(search)
    from ..methods import walk_flag
    walk = walk_flag(translator.cfg, search)
    if walk:
        raise DocnmtError(f"--engine ctranslate2 decodes plain instances only, not with {walk} (it forces earlier "
                          "translations as a prefix): leave it out or use --engine docnmt")
    engines = translator.__dict__.setdefault("_engines", {})
    key = ("ctranslate2", search.precision)
    if key not in engines:
        engines[key] = CT2Engine(translator, search.precision)
    return engines[key]


def cached_model(translator) -> Path:
    """The converted model of ``translator``: the cache beside its weights when it is up to date,
    else converted anew (there, or in a temporary directory when the model directory is read-only)."""
    weights = Path(getattr(translator, "weights_path", "") or "")
    stamp = _stamp(translator, weights) if weights.is_file() else None
    if stamp is not None:
        cache = weights.parent / CACHE / weights.stem
        if _read_stamp(cache) == stamp:
            return cache
        try:
            return _convert_into(translator, cache, stamp)
        except OSError:
            pass
    return _convert_into(translator, Path(tempfile.mkdtemp(prefix="docnmt-ct2-")) / "model", None)


def _convert_into(translator, cache: Path, stamp: dict | None) -> Path:
    """Convert beside ``cache`` and rename into place (a cache holding anything but a conversion
    of ours is refused: nothing a user owns is replaced)."""
    if cache.exists():
        if not (cache / STAMP).exists():
            raise DocnmtError(f"{cache} exists and is not docnmt's CTranslate2 cache: remove or rename it")
        shutil.rmtree(cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".ct2-", dir=cache.parent)) / "model"
    try:
        convert(translator.model, translator.vocab, translator.start_token(translator.cfg.decode), work)
        (work / STAMP).write_text(json.dumps(stamp or {}))
        os.replace(work, cache)
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)
    return cache


def _stamp(translator, weights: Path) -> dict:
    """What a conversion depends on: the weights file (path, size, time), the architecture, the
    vocabulary's size and the start token."""
    st = weights.stat()
    return {"weights": str(weights.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "model": {k: v for k, v in vars(translator.cfg.model).items() if isinstance(v, (int, float, str, bool))},
            "tokens": len(translator.vocab), "start": translator.start_token(translator.cfg.decode)}


def _read_stamp(cache: Path) -> dict | None:
    try:
        return json.loads((cache / STAMP).read_text())
    except (OSError, ValueError):
        return None
