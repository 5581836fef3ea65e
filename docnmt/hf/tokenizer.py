"""The tokenizer adapter: a Hugging Face tokenizer read and turned into the metadata and files of
a :class:`~docnmt.vocab.PretrainedVocab` that keeps the model's own ids."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import DocnmtError
from ..vocab import default_symbols
from .common import load_transformers
from .languages import language_tokens, set_languages


def _special_ids(tok, rows: int) -> set[int]:
    """Ids of the tokenizer's special and added tokens, its language tokens, and the rows it has
    no token for."""
    ids = set(tok.all_special_ids) | set(getattr(tok, "added_tokens_decoder", {}))
    ids |= set(getattr(tok, "lang_token_to_id", {}).values())
    return ids | set(range(len(tok), rows))


def load_tokenizer(directory: Path, src_lang: str | None, tgt_lang: str | None):
    """The tokenizer of a Hugging Face directory, its languages set (multilingual models)."""
    T = load_transformers()
    try:
        tok = T.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as e:     # a missing or broken tokenizer file: transformers' own message
        raise DocnmtError(f"{directory}: cannot read the tokenizer ({type(e).__name__}: {e})") from None
    if getattr(tok, "separate_vocabs", False):
        raise DocnmtError(f"{directory}: Marian models with separate source and target vocabularies "
                          "(target_vocab.json) are not supported")
    set_languages(tok, directory, src_lang, tgt_lang)
    return tok


def vocab_layout(tok, rows: int, tgt_lang: str | None) -> dict:
    """The :class:`PretrainedVocab` metadata of a Hugging Face tokenizer whose model has ``rows``
    embedding rows, and the language tokens the model needs (``src_lang_token`` …)."""
    special = _special_ids(tok, rows)
    ordinary = [i for i in range(rows) if i not in special]
    n_pieces = ordinary[-1] + 1
    first = next((i for i in range(n_pieces, 0, -1) if i - 1 in special), 0)   # the block of pieces before n_pieces
    below = [tok.convert_ids_to_tokens(i) for i in ordinary if i < first]
    if any(not (t.startswith("<") and t.endswith(">")) for t in below):
        raise DocnmtError("the tokenizer's ordinary tokens do not have consecutive ids (special tokens among "
                          f"them, e.g. id {first - 1}); docnmt cannot keep them")
    # control pieces among the specials (a docnmt export's "<s>", its decoder start): kept as specials
    names = [tok.convert_ids_to_tokens(i) for i in range(n_pieces, rows)]
    hf_extra = [n if n else f"<unused{n_pieces + k}>" for k, n in enumerate(names)]
    extra = hf_extra + ["<start>"] + [s for s in default_symbols() if s not in hf_extra]
    meta = {"pad": tok.pad_token_id, "unk": tok.unk_token_id, "eos": tok.eos_token_id, "first_piece": first,
            "n_pieces": n_pieces, "extra_symbols": extra,
            "clean_up_spaces": bool(getattr(tok, "clean_up_tokenization_spaces", False))}
    return {"meta": meta, "langs": language_tokens(tok, tgt_lang)}


def tokenizer_files(tok, directory: Path, meta: dict) -> tuple[dict, dict[str, bytes]]:
    """The :class:`PretrainedVocab` metadata and files of a Hugging Face tokenizer."""
    meta = dict(meta)
    if hasattr(tok, "backend_tokenizer"):
        meta["tokenizer"] = "tokenizers"
        return meta, {"tokenizer.json": tok.backend_tokenizer.to_str().encode("utf-8")}
    meta["tokenizer"] = "sentencepiece"
    if hasattr(tok, "spm_source"):             # Marian: source and target SentencePiece models
        files = {"source.spm": Path(tok.spm_files[0]).read_bytes(), "target.spm": Path(tok.spm_files[1]).read_bytes()}
        meta["detok"] = "marian"
    elif hasattr(tok, "sp_model"):             # M2M-100: one SentencePiece model
        blob = tok.sp_model.serialized_model_proto()
        files = {"source.spm": blob, "target.spm": blob}
        meta["detok"] = "sentencepiece"
    else:
        raise DocnmtError(f"{directory}: tokenizer {type(tok).__name__} is not supported")
    rows = meta["n_pieces"] + len(meta["extra_symbols"])
    pieces = [tok.convert_ids_to_tokens(i) for i in range(meta["n_pieces"])] + meta["extra_symbols"]
    files["pieces.json"] = json.dumps(pieces[:rows], ensure_ascii=False).encode("utf-8")
    return meta, files

