"""``docnmt export-ct2 MODEL OUT``: a docnmt Transformer written as a CTranslate2 model directory
(docs/pretrained.md#ctranslate2), with what a CTranslate2 user needs to decode as docnmt does: the
start token (the converted config's decoder start), the tokens never to generate
(``suppress_sequences``) and docnmt's SentencePiece model."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..checkpoint import swap_into_place, work_dir_beside
from ..errors import DocnmtError
from ..export_dir import check_replaceable
from .ct2_spec import convert, ct2_tokens, load_ctranslate2

RECORD = "docnmt_ct2.json"          # marks a directory export-ct2 wrote (--force replaces only those)
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "float16", "bfloat16", "float32")


def exportable(translator) -> str | None:
    """Why ``translator``'s model has no CTranslate2 equivalent (None: it has one)."""
    cfg, m = translator.cfg, translator.cfg.model
    if cfg.method_name != "transformer":
        return f"method {cfg.method_name}"
    if cfg.data.context_input:
        return "a context encoder"
    for flag, what in (("length_aware", "length-aware attention"), ("alibi", "ALiBi"),
                       ("sentence_positions", "sentence positions")):
        if getattr(m, flag, False):
            return what
    return None


def export_ct2(model_dir: str | Path, out_dir: str | Path, weights: str | Path | None = None,
               quantization: str | None = None, force: bool = False, log=print) -> dict:
    """Convert the docnmt model in ``model_dir`` into the CTranslate2 directory ``out_dir`` and
    return what ``out_dir/docnmt_ct2.json`` records."""
    from ..translate import Translator
    load_ctranslate2()
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if quantization and quantization not in QUANTIZATIONS:
        raise DocnmtError(f"--quantization {quantization}: use one of {', '.join(QUANTIZATIONS)}")
    if out_dir.resolve() == model_dir.resolve():
        raise DocnmtError(f"{out_dir}: the export would overwrite the model; write it to another directory")
    check_replaceable(out_dir, force, "export-ct2", RECORD)
    tr = Translator.load(model_dir, weights, "cpu")
    why = exportable(tr)
    if why:
        raise DocnmtError(f"export-ct2 writes plain Transformer models (sentence-level, Doc2Sent, Doc2Doc); "
                          f"this one has {why}, which CTranslate2 has no equivalent of")
    sentence_targets = not tr.cfg.data.is_document_level
    tokens, m = ct2_tokens(tr.vocab), tr.cfg.model
    info = {"docnmt_model": str(model_dir.resolve()), "mode": tr.cfg.data.mode, "quantization": quantization,
            "decoder_start_token": tokens[tr.start_token(tr.cfg.decode)], "end_token": tokens[tr.joiner.end],
            "suppress_sequences": [[tokens[i]] for i in tr.banned_ids(sentence_targets) if i != tr.joiner.end],
            "source_prefix": [tokens[m.src_lang_token]] if m.src_lang_token >= 0 and not m.src_lang_last else [],
            "source_suffix": [tokens[m.src_lang_token]] if m.src_lang_token >= 0 and m.src_lang_last else [],
            "target_prefix": [tokens[m.tgt_lang_token]] if m.tgt_lang_token >= 0 else [],
            "max_len_a": tr.cfg.decode.max_len_a, "max_len_b": tr.cfg.decode.max_len_b,
            "beam": tr.cfg.decode.beam, "lenpen": tr.cfg.decode.lenpen}
    work = work_dir_beside(out_dir)
    try:
        convert(tr.model, tr.vocab, tr.start_token(tr.cfg.decode), work / "model", quantization)
        for f in (work / "model").iterdir():
            f.rename(work / f.name)
        (work / "model").rmdir()
        if (model_dir / "spm.model").exists():
            shutil.copyfile(model_dir / "spm.model", work / "spm.model")
        (work / RECORD).write_text(json.dumps(info, indent=1))
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    swap_into_place(work, out_dir)
    log(f"wrote a CTranslate2 model ({len(tokens)} tokens{', ' + quantization if quantization else ''}) to {out_dir}")
    return info
