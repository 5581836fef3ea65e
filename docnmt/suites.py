"""Readers for contrastive discourse test suites in their own formats (docs/methods/discourse.md#contrastive-scoring).

Every reader returns :class:`ContrastiveExample` objects: a current source sentence with its
source context, and candidate translations, each a current target sentence with its own target
context (the suites' candidates usually share the context, Bawden et al.'s do not always).
``correct`` is the index of the right candidate; ``meta`` holds the breakdown keys
(``phenomenon``, ``pronoun``, ``distance``, ``type``).

Formats (all tested on the real files in ``../shared/data``):

* ``voita`` -- Voita et al. (2019) En-Ru consistency sets: a JSON list of ``{src, dst[],
  true_ind, ctx_dist}`` where sentences are joined with `` _eos `` (3 context sentences + the
  current one) and the text is Moses-tokenised (``detokenize`` undoes it with sacremoses).
* ``bawden`` -- Bawden et al. (2018) En-Fr ``anaphora.json`` / ``lexical-choice.json``: blocks of
  (correct or semi-correct, incorrect) pairs with one previous sentence on each side.
* ``scat`` -- SCAT (Yin et al. 2021) ``highlighted.{split}.{en,fr}`` plus ``.context.{en,fr}``: the
  French pronoun marked ``<p>…</p>`` is swapped for its other gender (il/elle, ils/elles) to make
  the contrastive candidate; markup is removed. The context is split into sentences when both
  sides split into the same number, else kept as one context segment per side.
* ``contrapro`` -- ContraPro (Müller et al. 2018), which users build from OpenSubtitles with its
  ``json2text_and_context.pl --context N``: ``contrapro.json`` beside ``contrapro.text.{en,de}``
  (one line per candidate: the reference first, then each entry of ``errors``) and
  ``contrapro.context.{en,de}`` (N lines per candidate, oldest first). N is inferred from the
  line counts; of an example at segment id s only the last min(N, s − 1) context lines are
  real (the script writes "null" or the film's last lines before a document's start).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import DataError


@dataclass
class Candidate:
    tgt: str
    tgt_context: list[str] = field(default_factory=list)


@dataclass
class ContrastiveExample:
    src: str
    src_context: list[str]
    candidates: list[Candidate]
    correct: int = 0
    meta: dict = field(default_factory=dict)


FORMATS = ("voita", "bawden", "scat", "contrapro")


def read_suite(path: str | Path, fmt: str = "auto", split: str = "valid", detokenize: bool = True,
               lang: tuple[str, str] | None = None) -> list[ContrastiveExample]:
    """Read a suite file or directory; ``fmt`` auto-detects from the path and content."""
    path = Path(path)
    if not path.exists():
        raise DataError("no such test suite file or directory", path)
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "voita":
        return read_voita(path, detokenize=detokenize, lang=lang or ("en", "ru"))
    if fmt == "bawden":
        return read_bawden(path)
    if fmt == "scat":
        return read_scat(path, split)
    if fmt == "contrapro":
        return read_contrapro(path, lang=lang or ("en", "de"))
    raise DataError(f"unknown test suite format {fmt!r}; choose {', '.join(FORMATS)}", path)


def detect_format(path: Path) -> str:
    if path.is_dir():
        names = {p.name for p in path.iterdir()}
        if any(n.startswith("highlighted.") for n in names):
            return "scat"
        if "contrapro.json" in names:
            return "contrapro"
        raise DataError("cannot tell the suite format of this directory (SCAT files or contrapro.json expected)"
                        + (_suite_files_hint(path) or "; give --format"), path)
    if path.name.startswith("contrapro"):
        return "contrapro"
    data = _load_json(path)
    if isinstance(data, list) and data and isinstance(data[0], dict):
        if {"src", "dst", "true_ind"} <= set(data[0]):
            return "voita"
        if "errors" in data[0]:
            return "contrapro"
    if isinstance(data, dict) and data and isinstance(next(iter(data.values())), dict):
        return "bawden"
    raise DataError("cannot tell the test suite format of this JSON file; give --format", path)


def _load_json(path: Path, expect: type | None = None, what: str = ""):
    """The JSON value of ``path``; with ``expect``, a DataError unless it is of that type."""
    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"invalid JSON: {e.msg} (column {e.colno})", path, e.lineno) from None
    except (ValueError, RecursionError) as e:
        raise DataError(f"invalid JSON: {e}", path) from None
    if expect is not None and not isinstance(data, expect):
        raise DataError(f"expected {what}, found a JSON {type(data).__name__}", path, 1)
    return data


def _suite_files_hint(directory: Path) -> str:
    """"; give one of its files (a.json, b.json)" for a directory holding JSON suite files, else ""."""
    names = sorted(str(p.relative_to(directory)) for p in directory.rglob("*.json"))
    return f"; give one of its files ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})" if names else ""


def _read_text(path: Path) -> str:
    """A suite file as strict UTF-8, or a DataError naming the file and line of the bad byte."""
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise DataError("is a directory, not a suite file" + _suite_files_hint(path), path) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"invalid UTF-8 (byte 0x{data[e.start]:02x})", path, data.count(b"\n", 0, e.start) + 1) \
            from None


# ---- Voita et al. 2019 ---------------------------------------------------------------------

def read_voita(path: Path, detokenize: bool = True, lang: tuple[str, str] = ("en", "ru")) -> list[ContrastiveExample]:
    data = _load_json(path, list, "a list of Voita et al. examples")
    detok = _detokenizers(lang) if detokenize else (lambda s: s, lambda s: s)
    phenomenon = path.stem
    out = []
    for k, ex in enumerate(data):
        try:
            src = [detok[0](s) for s in _split_eos(ex["src"])]
            cands = [[detok[1](s) for s in _split_eos(d)] for d in ex["dst"]]
            correct = int(ex["true_ind"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DataError(f"example {k + 1}: not a Voita et al. example ({e})", path) from None
        if any(len(c) != len(src) for c in cands) or not 0 <= correct < len(cands):
            raise DataError(f"example {k + 1}: candidates and source have different sentence counts "
                            "or true_ind is out of range", path)
        out.append(ContrastiveExample(src[-1], src[:-1], [Candidate(c[-1], c[:-1]) for c in cands], correct,
                                      {"phenomenon": phenomenon, "distance": ex.get("ctx_dist")}))
    return out


def _split_eos(text: str) -> list[str]:
    return [s.strip() for s in text.split(" _eos ")]


def _detokenizers(lang: tuple[str, str]):
    try:
        from sacremoses import MosesDetokenizer
    except ModuleNotFoundError:
        raise DataError("the Voita et al. suites are Moses-tokenised; detokenising needs pip install "
                        "docnmt[moses] (or pass --no-detokenize)") from None
    src, tgt = MosesDetokenizer(lang[0]), MosesDetokenizer(lang[1])
    return (lambda s: src.detokenize(s.split())), (lambda s: tgt.detokenize(s.split()))


# ---- Bawden et al. 2018 --------------------------------------------------------------------

def read_bawden(path: Path) -> list[ContrastiveExample]:
    """Each (correct | semi-correct, incorrect) pair is one example; ``meta["type"]`` is the
    block's type (m.sg/f.pl/... for anaphora, repet/disambig... for lexical choice)."""
    data = _load_json(path, dict, "an object of Bawden et al. blocks")
    phenomenon = path.stem.replace("-", "_")
    out = []
    for key, block in data.items():
        try:
            if "examples" in block:          # lexical choice: each example has its own source
                pairs = [(ex["src"], ex["trg"], block.get("type")) for ex in block["examples"]]
            else:                            # anaphora: one source, several target variants
                pairs = [(block["src"], t, t.get("type")) for t in block["trg"]]
            for src, trg, typ in pairs:
                good = trg.get("correct") or trg.get("semi-correct")
                bad = trg["incorrect"]
                if not good:
                    raise ValueError("no 'correct' or 'semi-correct' translation")
                if len(src) != 2 or len(good) != 2 or len(bad) != 2:
                    raise ValueError("expected a previous and a current sentence on each side")
                out.append(ContrastiveExample(src[1], [src[0]], [Candidate(good[1], [good[0]]),
                                                                 Candidate(bad[1], [bad[0]])], 0,
                                              {"phenomenon": phenomenon, "type": typ, "block": key,
                                               "semi_correct": "correct" not in trg}))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DataError(f"block {key!r}: not a Bawden et al. block ({e})", path) from None
    return out


# ---- SCAT (Yin et al. 2021) ----------------------------------------------------------------

_SWAP = {"il": "elle", "elle": "il", "ils": "elles", "elles": "ils"}
_PRONOUN = re.compile(r"(?<![^\W\d_])<p>\s*([^<]*?)\s*</p>")          # a marked whole word
_SENT_END = re.compile(r"(?<=[.!?…])\s+(?=[\"«“'(\-–—]?[A-ZÀ-ÖØ-Þ0-9])")


def clean_markup(text: str) -> str:
    """Remove SCAT's markup: ``<p>``/``</p>`` sit inside the text, ``<hon>``/``<hoff>`` came
    with one space of their own on the outside (``l' <hon>artefact<hoff> ,`` = ``l'artefact,``)."""
    text = re.sub(r" ?<hon>", "", text)
    text = re.sub(r"<hoff> ?", "", re.sub(r"</?p>", "", text))
    return " ".join(re.sub(r"<h\w*>?|[<>]", " ", text).split())      # broken tags left in SCAT train


def split_sentences(text: str) -> list[str]:
    """A simple splitter (after . ! ? … before an upper-case start) for context paragraphs."""
    return [s for s in _SENT_END.split(text.strip()) if s]


def swap_pronoun(text: str) -> str | None:
    """The SCAT target with every marked whole-word pronoun swapped for the other gender
    (capitalisation kept); None if no marked pronoun can be swapped. A marker inside a word
    (``t<p>elle</p>``, i.e. *telle*) is left alone."""
    found = False

    def swap(m: re.Match) -> str:
        nonlocal found
        word = m.group(1)
        if word.lower() not in _SWAP:
            return m.group(0)
        found = True
        other = _SWAP[word.lower()]
        return "<p>" + (other.capitalize() if word[0].isupper() else other) + "</p>"
    out = _PRONOUN.sub(swap, text)
    return out if found else None


def read_scat(directory: Path, split: str = "valid") -> list[ContrastiveExample]:
    files = [directory / f"highlighted.{split}.{s}" for s in ("en", "fr", "context.en", "context.fr")]
    for f in files:
        if not f.exists():
            raise DataError(f"SCAT file missing (split {split!r})", f)
    en, fr, cen, cfr = (_read_text(f).splitlines() for f in files)
    if not len(en) == len(fr) == len(cen) == len(cfr):
        raise DataError(f"SCAT files of split {split!r} have different line counts", directory)
    out = []
    for k, (s, t, cs, ct) in enumerate(zip(en, fr, cen, cfr)):
        wrong = swap_pronoun(t)
        if wrong is None:
            continue
        cs, ct = clean_markup(cs), clean_markup(ct)
        src_ctx, tgt_ctx = split_sentences(cs), split_sentences(ct)
        if len(src_ctx) != len(tgt_ctx):
            src_ctx, tgt_ctx = [cs] if cs else [], [ct] if ct else []
        pronoun = next(m.group(1).lower() for m in _PRONOUN.finditer(t) if m.group(1).lower() in _SWAP)
        out.append(ContrastiveExample(
            clean_markup(s), src_ctx, [Candidate(clean_markup(t), tgt_ctx), Candidate(clean_markup(wrong), tgt_ctx)],
            0, {"phenomenon": "scat", "line": k + 1, "pronoun": pronoun}))
    return out


# ---- ContraPro (Müller et al. 2018) --------------------------------------------------------

def read_contrapro(path: Path, lang: tuple[str, str] = ("en", "de")) -> list[ContrastiveExample]:
    directory, json_path = (path, path / "contrapro.json") if path.is_dir() else (path.parent, path)
    stem = json_path.stem
    data = _load_json(json_path, list, "a list of ContraPro examples")
    for k, ex in enumerate(data):
        if not isinstance(ex, dict) or not isinstance(ex.get("errors", []), list):
            raise DataError(f"example {k + 1}: not a ContraPro example (an object with a list of errors)", json_path)
        for key in ("segment id", "ante distance"):
            if not isinstance(ex.get(key, 0), int) or isinstance(ex.get(key), bool):
                raise DataError(f"example {k + 1}: {key} must be a whole number, not {ex[key]!r}", json_path)
    names = [directory / f"{stem}.{kind}.{lg}" for kind in ("text", "context") for lg in lang]
    for f in names:
        if not f.exists():
            raise DataError(f"missing {f.name}: build it with ContraPro's conversion_scripts/json2text_and_context.pl "
                            f"--source {lang[0]} --target {lang[1]} --context N "
                            "(see docs/methods/discourse.md#contrastive-scoring)", f)
    ts, tt, cs, ct = (_read_text(f).split("\n") for f in names)
    ts, tt = (x[:-1] if x and x[-1] == "" else x for x in (ts, tt))
    n_lines = sum(1 + len(ex.get("errors", [])) for ex in data)
    if len(ts) != n_lines or len(tt) != n_lines:
        raise DataError(f"{names[0].name}/{names[1].name} have {len(ts)}/{len(tt)} lines; contrapro.json "
                        f"needs {n_lines} (one per candidate)", directory)
    cs, ct = (x[: len(x) - 1] if len(x) % n_lines == 1 and x[-1] == "" else x for x in (cs, ct))
    if len(cs) != len(ct) or len(cs) % n_lines:
        raise DataError(f"context files have {len(cs)}/{len(ct)} lines, not N x {n_lines}", directory)
    n_ctx = len(cs) // n_lines
    out, line = [], 0
    for k, ex in enumerate(data):
        cands = []
        for _ in range(1 + len(ex.get("errors", []))):
            # the script reads line (segment id - c) of a file it prefixed with "null": lines before
            # the document's start are "null" or wrap around to its end; keep only real ones
            keep = min(n_ctx, max(int(ex.get("segment id", n_ctx + 1)) - 1, 0))
            sc = cs[(line + 1) * n_ctx - keep: (line + 1) * n_ctx]
            tc = ct[(line + 1) * n_ctx - keep: (line + 1) * n_ctx]
            pairs = [(a, b) for a, b in zip(sc, tc) if a.strip() or b.strip()]
            cands.append((ts[line], Candidate(tt[line], [b for _, b in pairs]), [a for a, _ in pairs]))
            line += 1
        if any(c[0] != cands[0][0] for c in cands):
            raise DataError(f"example {k + 1}: candidates have different source sentences", directory)
        dist = ex.get("ante distance")
        out.append(ContrastiveExample(
            cands[0][0], cands[0][2], [c[1] for c in cands], 0,
            {"phenomenon": f"{str(ex.get('src pronoun', '')).lower()}:{str(ex.get('ref pronoun', '')).lower()}",
             "pronoun": str(ex.get("ref pronoun", "")).lower(),
             "distance": None if dist is None else (">3" if dist > 3 else dist),
             "intrasegmental": ex.get("intrasegmental")}))
    return out
