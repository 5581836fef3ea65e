"""BConTrasT JSON (WMT20 chat task): ``{conversation id: [{"speaker", "source", "target", ...}, ...]}``,
each conversation a document, each turn a sentence, oriented source=English, target=German."""
from __future__ import annotations

import json

from ..document import Document
from ..errors import DataError
from .jsonl import json_error
from .text import Text, read_text

# the language each role writes in (customers write German, agents English)
BCONTRAST_LANG = {"agent": "en", "customer": "de"}


def read(f: Text, b: Text | None = None, docids_path=None, allow_empty: bool = False) -> list[Document]:
    """The conversations of ``f`` (``b``, ``docids_path`` and ``allow_empty`` do not apply).

    With gold targets every turn is oriented source=English, target=German. Without them
    (``test1_corpus.json``: all targets empty) ``src`` holds the turns as written and ``tgt``
    is None. ``meta["speakers"]`` and ``meta["orig_lang"]`` (the language each turn was
    written in) are kept either way.
    """
    try:
        data = json.loads(f.text)
    except (ValueError, RecursionError) as e:
        raise json_error(e, f, getattr(e, "lineno", None)) from None
    if not isinstance(data, dict) or not data:
        raise DataError("expected a JSON object mapping conversation ids to turns", f.name, 1)
    gold = any(isinstance(t, dict) and t.get("target") for turns in data.values()
               if isinstance(turns, list) for t in turns)
    return [_conversation(f, cid, turns, gold) for cid, turns in data.items()]


def _conversation(f: Text, cid: str, turns, gold: bool) -> Document:
    pos = f.text.find(json.dumps(cid))
    no = f.text.count("\n", 0, pos) + 1 if pos >= 0 else None
    if not isinstance(turns, list) or not turns or not all(isinstance(t, dict) for t in turns):
        raise DataError(f"conversation {cid!r}: expected a non-empty list of turns", f.name, no)
    speakers = [t.get("speaker") for t in turns]
    if bad := [s for s in speakers if not isinstance(s, str) or s not in BCONTRAST_LANG]:
        raise DataError(f"conversation {cid!r}: unknown speaker {bad[0]!r}", f.name, no)
    orig = [BCONTRAST_LANG[s] for s in speakers]
    source = [_one_string(t.get("source"), cid, "source", f, no) for t in turns]
    meta = {"speakers": speakers, "orig_lang": orig}
    if not gold:
        return Document(cid, source, None, meta)
    target = [_one_string(t.get("target"), cid, "target", f, no) for t in turns]
    pairs = [(s, t) if lang == "en" else (t, s) for s, t, lang in zip(source, target, orig)]
    return Document(cid, [p[0] for p in pairs], [p[1] for p in pairs], meta)


def _one_string(s, cid: str, key: str, f: Text, no: int | None) -> str:
    if not isinstance(s, str) or not s.strip():
        raise DataError(f"conversation {cid!r}: a turn has no {key} text", f.name, no)
    return " ".join(s.split())


def read_bcontrast_json(path) -> list[Document]:
    """Read BConTrasT chat JSON (see :func:`read`)."""
    return read(read_text(path))
