"""The tokenizer adapter, the one module that calls the Hugging Face tokenizer API (for import-hf and
export-hf): a tokenizer read and turned into the metadata and files of a
:class:`~docnmt.vocab.PretrainedVocab` that keeps the model's own ids, the language codes of
multilingual tokenizers (mBART, M2M-100, NLLB, multilingual Marian: checking ``--src-lang`` /
``--tgt-lang``, finding the language tokens a model reads and starts its output with), and the
tokenizer an export writes. Tested with the transformers versions pyproject.toml's ``hf`` extra
allows (``tests/test_hf.py``)."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import DocnmtError
from ..vocab import default_symbols
from .common import TOKENIZER_DIR, load_transformers


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
    if not ordinary:
        raise DocnmtError(f"the tokenizer has no ordinary pieces: its {len(tok)} tokens are all special or added "
                          "tokens, so it cannot split text; docnmt cannot import it")
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


def codes(tok) -> list[str]:
    """The language codes a tokenizer knows, for error messages."""
    found = getattr(tok, "lang_code_to_id", None) or getattr(tok, "lang_token_to_id", None)
    if found:
        return [c.strip("_") for c in found]
    # transformers 5 keeps them in extra_special_tokens (additional_special_tokens is gone from NLLB's tokenizer)
    extra = getattr(tok, "extra_special_tokens", None) or getattr(tok, "additional_special_tokens", None) or []
    return [t for t in (extra.values() if isinstance(extra, dict) else extra)
            if isinstance(t, str) and not t.startswith("<")]


def code_token(tok, lang: str) -> str:
    """The token of language code ``lang`` (M2M-100 writes ``__en__``)."""
    return tok.get_lang_token(lang) if hasattr(tok, "get_lang_token") else lang


def set_languages(tok, directory: Path, src_lang: str | None, tgt_lang: str | None) -> None:
    """Set the languages of a multilingual tokenizer (one with ``src_lang``), after checking that
    both are given and are its codes; other tokenizers are left as they are."""
    if not hasattr(tok, "src_lang"):
        return
    for attr, lang, flag in (("src_lang", src_lang, "--src-lang"), ("tgt_lang", tgt_lang, "--tgt-lang")):
        if lang is None:
            raise DocnmtError(f"{directory}: this model translates between many languages: give --src-lang "
                              f"and --tgt-lang (language codes of its tokenizer such as "
                              f"{', '.join(codes(tok)[:4])})")
        if tok.convert_tokens_to_ids(code_token(tok, lang)) in (None, tok.unk_token_id):
            raise DocnmtError(f"{flag} {lang}: not a language code of this tokenizer "
                              f"(e.g. {', '.join(codes(tok)[:6])})")
        setattr(tok, attr, lang)


def framing(tok, sample: str) -> tuple[list[int], list[int], list[int], list[int]]:
    """What the tokenizer puts around the pieces of a source and of a target sentence:
    (source prefix, source suffix, target prefix, target suffix)."""
    out = []
    for side in ({"text": sample}, {"text_target": sample}):
        ids, pieces = tok(**side).input_ids, tok(**side, add_special_tokens=False).input_ids
        k = next(i for i in range(len(ids)) if ids[i: i + len(pieces)] == pieces)
        out += [ids[:k], ids[k + len(pieces):]]
    return tuple(out)


def language_tokens(tok, tgt_lang: str | None) -> dict:
    """The model settings of the language tokens the tokenizer adds (``src_lang_token``,
    ``src_lang_last``, ``tgt_lang_token``) and the decoder ``start`` they imply (None: the config's)."""
    src_pre, src_post, tgt_pre, tgt_post = framing(tok, "a")
    langs = {"src_lang_token": -1, "src_lang_last": False, "tgt_lang_token": -1, "start": None}
    if src_pre:
        langs["src_lang_token"] = src_pre[-1]
    elif len(src_post) > 1:
        langs.update(src_lang_token=src_post[-1], src_lang_last=True)
    if tgt_pre:
        langs["tgt_lang_token"] = tgt_pre[-1]
    elif len(tgt_post) > 1:     # mBART-25: the target's language code after </s> starts the decoder
        langs["start"] = tgt_post[-1]
    if tgt_lang and f">>{tgt_lang}<<" in tok.get_vocab():      # a multilingual Marian model
        langs["src_lang_token"] = tok.convert_tokens_to_ids(f">>{tgt_lang}<<")
    return langs


def export_tokenizer(vocab, model_dir: Path, out_dir: Path, record, rows: int) -> dict:
    """Save the tokenizer next to the exported model: the original one of an imported model
    (a native model: a MarianTokenizer of its SentencePiece model and all its ids), with the
    rows it has no token for (docnmt's symbols) as its special tokens when they get docnmt's ids.
    Returns {symbol: whether the tokenizer maps it to docnmt's id}."""
    T = load_transformers()
    if record is None:
        pieces = {vocab.piece(i): i for i in range(len(vocab))}
        (out_dir / "spm.model").write_bytes(vocab.proto)
        (out_dir / "vocab.json").write_text(json.dumps(pieces, ensure_ascii=False))
        tok = T.MarianTokenizer(str(out_dir / "spm.model"), str(out_dir / "spm.model"), str(out_dir / "vocab.json"),
                                unk_token=vocab.piece(vocab.unk), eos_token=vocab.piece(vocab.eos),
                                pad_token=vocab.piece(vocab.pad))
        for f in ("spm.model", "vocab.json"):
            (out_dir / f).unlink()
        names = [s for s in vocab.extra if vocab.symbol_ids[s] < rows]
    else:
        tok = T.AutoTokenizer.from_pretrained(str(model_dir / TOKENIZER_DIR), local_files_only=True)
        for attr in ("src_lang", "tgt_lang"):
            if hasattr(tok, attr) and record.get(attr):
                setattr(tok, attr, record[attr])
        names = [vocab.piece(i) for i in range(min(len(tok), rows), rows)]
    found = {}
    if names:
        tok.add_special_tokens({"additional_special_tokens": names}, replace_extra_special_tokens=False)
        found = {s: tok.convert_tokens_to_ids(s) == vocab.symbol_ids[s] for s in names}
        if not all(found.values()):       # ids that are not docnmt's would mislead: keep the tokenizer as it was
            return _plain_tokenizer(T, model_dir, out_dir, record, found)
    tok.save_pretrained(str(out_dir))
    return found


def _plain_tokenizer(T, model_dir: Path, out_dir: Path, record, found: dict) -> dict:
    tok = T.AutoTokenizer.from_pretrained(str(model_dir / TOKENIZER_DIR), local_files_only=True)
    for attr in ("src_lang", "tgt_lang"):
        if hasattr(tok, attr) and record.get(attr):
            setattr(tok, attr, record[attr])
    tok.save_pretrained(str(out_dir))
    return {s: False for s in found}
