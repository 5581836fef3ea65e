"""Language codes of multilingual Hugging Face tokenizers (mBART, M2M-100, NLLB, multilingual
Marian): checking the ``--src-lang``/``--tgt-lang`` a user gives, and finding the language tokens
a model reads and starts its output with."""
from __future__ import annotations

from pathlib import Path

from ..errors import DocnmtError


def codes(tok) -> list[str]:
    """The language codes a tokenizer knows, for error messages."""
    found = getattr(tok, "lang_code_to_id", None) or getattr(tok, "lang_token_to_id", None)
    if found:
        return [c.strip("_") for c in found]
    return [t for t in tok.additional_special_tokens if not t.startswith("<")]


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
