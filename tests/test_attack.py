"""The malformed-input attack on the ``docnmt`` command, kept: every verb (prepare, train,
translate, evaluate, score-contrastive) against every kind of bad input -- broken data files,
damaged model and data directories, settings out of range, outputs that would land on an input or
cannot be written. Each case must give exit status 2 and exactly one ``docnmt: error:`` line
(no traceback) that names the file and line, or the flag, at fault, and must leave every file
under the test's directory as it was (inputs, models, prepared data, earlier outputs: nothing
written, nothing deleted).

A case is a function registered with ``@case(verb, name)``: it builds its files with the
:class:`Attack` helper and returns the command line and the words the error line must hold.
``prepare`` prints progress lines before some errors; those (and only those) are allowed beside
the error line (``progress=True``).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from _tiny import chat_documents

GOOD = "<d>\nHello .\nHow are you ?\n<d>\nGood bye .\n"
GOOD_DE = "<d>\nHallo .\nWie geht es ?\n<d>\nTschuess .\n"
LONG = " ".join(f"w{i}" for i in range(1500))          # more subword tokens than any limit here
PROGRESS = ("learning a joint SentencePiece", "using the existing subword model", "Moses-tokenising", "train: ",
            "valid: ", "test: ")

CASES: dict[str, tuple] = {}


def case(verb: str, name: str, progress: bool = False):
    def register(fn):
        CASES[f"{verb}:{name}"] = (fn, progress)
        return fn
    return register


class Attack:
    """Files of one case, all under ``root`` (which the test snapshots)."""

    def __init__(self, root: Path, request):
        self.root, self.request = root, request

    def write(self, name: str, content: str | bytes) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        return path

    def corpus(self, en: str | bytes = GOOD, de: str | bytes = GOOD_DE, name: str = "corpus") -> Path:
        self.write(f"{name}.en", en)
        self.write(f"{name}.de", de)
        return self.root / name

    def model(self) -> Path:
        """A copy of the tiny trained sent2sent model (its files are then protected)."""
        src = self.request.getfixturevalue("tiny_model")("sent2sent")
        dst = self.root / "model"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints"))
        return dst

    def data(self) -> Path:
        """A copy of the tiny prepared data directory."""
        dst = self.root / "data"
        shutil.copytree(self.request.getfixturevalue("tiny_dir") / "data", dst)
        return dst

    def prepared(self) -> Path:
        """A small directory prepared by `docnmt prepare` itself (for --force over it)."""
        from docnmt.prepare import prepare
        prefix = self.corpus(GOOD * 3, GOOD_DE * 3, "old")
        prepare(self.root / "prepared", "en", "de", [str(prefix)], vocab_size=40, log=lambda m: None)
        return self.root / "prepared"


def snapshot(root: Path) -> dict:
    """Every file under ``root`` with a hash of its bytes (a lock file: only that it exists)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = "lock" if p.name == ".lock" else hashlib.sha1(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[str(p.relative_to(root))] = "dir"
    return out


# ================================================================================== prepare

def prepare_argv(prefix, dest, *more):
    return ["prepare", "-s", "en", "-t", "de", "--trainpref", prefix, "--destdir", dest, "--vocab-size", "40", *more]


@case("prepare", "misaligned")
def _(a):
    prefix = a.corpus(GOOD, "<d>\nHallo .\nWie ?\n")
    return prepare_argv(prefix, a.root / "out"), [f"{prefix}.en:4", "line counts differ"]


@case("prepare", "invalid-utf8")
def _(a):
    prefix = a.corpus(GOOD.encode() + "Caf\u00e9 .\n".encode("latin-1"), GOOD_DE + "Cafe .\n")
    return prepare_argv(prefix, a.root / "out"), [f"{prefix}.en:6", "invalid UTF-8"]


@case("prepare", "truncated-xml")
def _(a):
    a.write("corpus.en.xml", '<refset>\n<doc docid="a">\n<seg id="1">Hello .</seg>\n<seg id="2">How are')
    a.write("corpus.de.xml", '<refset>\n<doc docid="a">\n<seg id="1">Hallo .</seg>\n<seg id="2">Wie ?</seg>\n'
                             '</doc>\n</refset>\n')
    return prepare_argv(a.root / "corpus", a.root / "out"), [f"{a.root / 'corpus.en.xml'}:4", "not closed"]


@case("prepare", "truncated-jsonl")
def _(a):
    a.write("corpus.jsonl", '{"id": "a", "src": ["Hello ."], "tgt": ["Hallo ."]}\n{"id": "b", "src": ["How')
    return prepare_argv(a.root / "corpus", a.root / "out"), [f"{a.root / 'corpus.jsonl'}:2", "invalid JSON"]


@case("prepare", "duplicate-docids")
def _(a):
    prefix = a.corpus()
    a.write("corpus.docids", "talk1\ntalk1\n")
    return prepare_argv(prefix, a.root / "out"), [f"{prefix}.docids:2", "duplicate document id"]


@case("prepare", "missing-target-side")
def _(a):
    a.write("corpus.en", GOOD)
    return prepare_argv(a.root / "corpus", a.root / "out"), [f"{a.root / 'corpus.en'}", "no target side"]


@case("prepare", "empty-file")
def _(a):
    prefix = a.corpus("", "")
    return prepare_argv(prefix, a.root / "out"), [f"{prefix}.en", "empty input"]


@case("prepare", "every-line-too-long-for-sentencepiece", progress=True)
def _(a):
    prefix = a.corpus("<d>\n" + ("word " * 1000 + "\n") * 3, "<d>\n" + ("wort " * 1000 + "\n") * 3)
    return prepare_argv(prefix, a.root / "out"), ["no sentence to learn the subword model from", "4192 bytes"]


@case("prepare", "one-1MB-line", progress=True)
def _(a):
    prefix = a.corpus("<d>\n" + "x" * 1_000_000 + "\n", "<d>\n" + "y" * 1_000_000 + "\n")
    return prepare_argv(prefix, a.root / "out"), [f"{prefix}.en", "no sentence to learn the subword model from"]


@case("prepare", "random-valid-utf8-without-newline", progress=True)
def _(a):
    import random
    rng = random.Random(1)
    text = "".join(chr(rng.choice([rng.randrange(0x20, 0xd7ff), rng.randrange(0xe000, 0x10ffff)])) for _ in range(6000))
    text = text.replace("\r", " ").replace("\x85", " ").replace("\u2028", " ").replace("\u2029", " ")
    prefix = a.corpus("<d>\n" + text, "<d>\n" + text[::-1])
    return prepare_argv(prefix, a.root / "out"), [f"{prefix}.en", "no sentence to learn the subword model from"]


@case("prepare", "format-jsonl-on-marker-files")
def _(a):
    prefix = a.corpus()
    return prepare_argv(prefix, a.root / "out", "--format", "jsonl"), [f"{prefix}.en", "format jsonl"]


@case("prepare", "vocab-size-10", progress=True)
def _(a):
    prefix = a.corpus()
    return prepare_argv(prefix, a.root / "out")[:-1] + ["10"], ["--vocab-size 10 is too small", "at least"]


@case("prepare", "spm-model-of-random-bytes")
def _(a):
    spm = a.write("random.model", os.urandom(3000))
    return prepare_argv(a.corpus(), a.root / "out", "--spm-model", spm), [f"{spm}: not a SentencePiece model"]


@case("prepare", "sentence-too-long", progress=True)
def _(a):
    prefix = a.corpus(GOOD + "<d>\nshort .\n" + LONG + "\n", GOOD_DE + "<d>\nkurz .\nlang .\n")
    return prepare_argv(prefix, a.root / "out"), [f"{prefix}.en:8", "subword tokens", "--max-sentence-tokens"]


@case("prepare", "sentence-too-long-in-a-sentence-level-file", progress=True)
def _(a):
    prefix = a.corpus("Hello .\nHow are you ?\n" + LONG + "\n", "Hallo .\nWie geht es ?\nlang .\n")
    return prepare_argv(prefix, a.root / "out"), [f"{prefix}.en:3", "subword tokens"]


@case("prepare", "force-into-a-directory-of-other-files")
def _(a):
    a.write("out/notes.txt", "precious\n")
    a.write("out/spm.model", "mine too\n")
    return prepare_argv(a.corpus(), a.root / "out", "--force"), [str(a.root / "out"), "notes.txt"]


@case("prepare", "force-over-a-user-file-alone")
def _(a):
    a.write("out/results.npy", b"\x93NUMPY my own results")        # a name like a prepared file, no prepare.json
    return prepare_argv(a.corpus(), a.root / "out", "--force"), [str(a.root / "out"), "no readable prepare.json"]


@case("prepare", "force-over-prepared-data-and-a-user-file")
def _(a):
    old = a.prepared()
    a.write("prepared/results.npy", b"\x93NUMPY my own results")
    return prepare_argv(a.corpus(), old, "--force"), [str(old), "results.npy", "did not write"]


@case("prepare", "force-with-a-mistyped-prefix")
def _(a):
    old = a.prepared()
    return prepare_argv(a.root / "corpsu", old, "--force"), [str(a.root / "corpsu"), "no corpus found"]


@case("prepare", "force-then-a-bad-sentence", progress=True)
def _(a):
    old = a.prepared()
    prefix = a.corpus(GOOD + LONG + "\n", GOOD_DE + "lang .\n")
    return prepare_argv(prefix, old, "--force"), [f"{prefix}.en:6", "subword tokens"]


@case("prepare", "destdir-is-a-file")
def _(a):
    dest = a.write("out", "a file\n")
    return prepare_argv(a.corpus(), dest, "--force"), [str(dest), "is a file"]


# ==================================================================================== train

def train_argv(data, save, *more):
    return ["train", data, "--save-dir", save, "--arch", "transformer_tiny", "--max-update", "1", "--no-progress",
            *more]


def damaged_data(a, name: str, content) -> tuple[Path, Path]:
    """A copy of the prepared data with file ``name`` replaced by ``content`` (bytes, or a function
    that rewrites the file)."""
    data = a.data()
    path = data / name
    content(path) if callable(content) else path.write_bytes(content)
    return data, path


@case("train", "truncated-npy")
def _(a):
    data = a.data()
    tokens = data / "train.src.tokens.npy"
    tokens.write_bytes(tokens.read_bytes()[: tokens.stat().st_size // 2])
    return train_argv(data, a.root / "m"), [str(tokens), "not a readable prepared data file"]


@case("train", "random-npy")
def _(a):
    data, path = damaged_data(a, "train.src.offsets.npy", os.urandom(400))
    return train_argv(data, a.root / "m"), [str(path), "not a readable prepared data file"]


@case("train", "offsets-that-do-not-fit")
def _(a):
    data, path = damaged_data(a, "train.tgt.offsets.npy", lambda p: np.save(p, np.array([0, 5, 3], dtype=np.int64)))
    return train_argv(data, a.root / "m"), [str(path), "offsets do not fit"]


@case("train", "token-ids-outside-the-vocabulary")
def _(a):
    data, path = damaged_data(a, "train.src.tokens.npy",
                              lambda p: np.save(p, np.load(p) + np.int32(100_000)))
    return train_argv(data, a.root / "m"), [str(path), "token ids outside"]


@case("train", "garbage-spm-model")
def _(a):
    data, path = damaged_data(a, "spm.model", os.urandom(300))
    return train_argv(data, a.root / "m"), [f"{path}: not a SentencePiece model"]


@case("train", "truncated-vocab-json")
def _(a):
    data = a.data()
    vocab = data / "vocab.json"
    vocab.write_bytes(vocab.read_bytes()[:40])
    return train_argv(data, a.root / "m"), [f"{vocab}: not a docnmt vocab.json"]


@case("train", "garbage-docids")
def _(a):
    data, path = damaged_data(a, "train.docids.json", b"[1,")
    return train_argv(data, a.root / "m"), [str(path), "not a readable prepared data file"]


@case("train", "no-prepared-data")
def _(a):
    (a.root / "data").mkdir()
    return train_argv(a.root / "data", a.root / "m"), [str(a.root / "data")]


# settings out of range, each named by the flag typed
BAD_FLAGS = [
    (["--set", "model.heads=3", "--set", "model.d_model=64"], "--set model.heads (3) must divide"),
    (["--set", "train.adam_betas=0.9"], "--set train.adam_betas must be two numbers"),
    (["--seed", "-1"], "--seed must be in"),
    (["--seed", str(2**70)], "--seed must be in"),
    (["--set", "model.d_model=100000", "--set", "model.heads=4"], "parameters"),
    (["--lr", "inf"], "--lr must be a finite number above 0"),
    (["--lr", "nan"], "--lr must be a finite number above 0"),
    (["--max-update", "-1"], "--max-update must be at least 0"),
    (["--max-epoch", "-1"], "--max-epoch must be at least 0"),
    (["--warmup-updates", "-5"], "--warmup-updates must be at least 0"),
    (["--save-interval-updates", "-1"], "--save-interval-updates must be at least 0"),
    (["--validate-interval-updates", "-1"], "--validate-interval-updates must be at least 0"),
    (["--threads", "-1"], "--threads must be at least 0"),
    (["--threads", "100000"], "--threads 100000 is more than 4 per CPU"),        # before OpenMP dies
    (["--set", "model.max_positions=1"], "none of the 260 training instances fits in 1 positions"),
    (["--clip-norm", "-1"], "--clip-norm must be a finite number, at least 0"),
    (["--clip-norm", "nan"], "--clip-norm must be a finite number, at least 0"),
    (["--max-minutes", "-1"], "--max-minutes must be a finite number, at least 0"),
    (["--max-instance-tokens", "-1"], "--max-instance-tokens must be at least 0"),
    (["--update-freq", "0"], "--update-freq must be at least 1"),
    (["--dropout", "1.5"], "--dropout must be in [0, 1)"),
    (["--set", "data.mix_sentences=maybe"], "--set data.mix_sentences must be true or false"),
    (["--mix-sentences", "maybe"], "unrecognized arguments: maybe"),       # a switch takes no value
    (["--set", "train.weight_decay=nan"], "--set train.weight_decay must be"),
]
for _flags, _words in BAD_FLAGS:
    case("train", "flag" + "".join(_flags).replace("--set", "").replace("=", "-"))(
        lambda a, flags=_flags, words=_words: (train_argv(a.data(), a.root / "m", *flags), [words]))


@case("train", "config-with-one-adam-beta")
def _(a):
    cfg = a.write("exp.yaml", "preset: transformer_tiny\ntrain:\n  adam_betas: [0.9]\n")
    return ["train", a.data(), "--save-dir", a.root / "m", "--config", cfg], \
        [f"{cfg}: train.adam_betas must be two numbers"]


@case("train", "empty-config-file")
def _(a):
    cfg = a.write("exp.yaml", "")
    return ["train", a.data(), "--save-dir", a.root / "m", "--config", cfg], [f"{cfg}: empty config file"]


@case("train", "config-of-random-bytes")
def _(a):
    cfg = a.write("exp.yaml", b"\xff\xfe\x00\x81garbage")
    return ["train", a.data(), "--save-dir", a.root / "m", "--config", cfg], [str(cfg), "cannot read config"]


@case("train", "config-not-a-mapping")
def _(a):
    cfg = a.write("exp.yaml", "- a\n- b\n")
    return ["train", a.data(), "--save-dir", a.root / "m", "--config", cfg], [str(cfg), "mapping"]


@case("train", "config-naming-a-mistyped-preset")
def _(a):
    cfg = a.write("exp.yaml", "preset: transformer_tinny\n")
    return ["train", a.data(), "--save-dir", a.root / "m", "--config", cfg], \
        [f"{cfg}: unknown preset", "did you mean 'transformer_tiny'"]


@case("train", "config-naming-a-list-as-preset")
def _(a):
    cfg = a.write("exp.yaml", "preset: [1, 2]\n")
    return ["train", a.data(), "--save-dir", a.root / "m", "--config", cfg], [f"{cfg}: preset must be the name"]


@case("train", "force-into-a-directory-of-other-files")
def _(a):
    a.write("mine/notes.txt", "keep me\n")
    return train_argv(a.data(), a.root / "mine", "--force"), [str(a.root / "mine"), "not a docnmt model directory"]


@case("train", "init-from-random-bytes")
def _(a):
    weights = a.write("w.safetensors", os.urandom(200))
    return train_argv(a.data(), a.root / "m", "--init-from", weights), [str(weights), "not a readable safetensors"]


@case("train", "resume-with-another-model")
def _(a):
    run = a.model()                        # d_model 32; --arch transformer_tiny is d_model 64
    shutil.copytree(a.request.getfixturevalue("tiny_model")("sent2sent") / "checkpoints", run / "checkpoints")
    return train_argv(a.data(), run), [str(run), "different model or data config"]


# ================================================================================ translate

def translate_argv(model, inp, *more):
    return ["translate", model, "-i", inp, "-q", *more]


def damaged_model(a, name: str, content) -> tuple[Path, Path]:
    model = a.model()
    path = model / name
    path.write_bytes(content(path.read_bytes()) if callable(content) else content)
    return model, path


@case("translate", "corrupt-spm-model")
def _(a):
    model, path = damaged_model(a, "spm.model", os.urandom(500))
    return translate_argv(model, a.write("in.en", GOOD)), [f"{path}: not a SentencePiece model"]


@case("translate", "truncated-vocab-json")
def _(a):
    model, path = damaged_model(a, "vocab.json", lambda b: b[: len(b) // 2])
    return translate_argv(model, a.write("in.en", GOOD)), [f"{path}: not a docnmt vocab.json"]


@case("translate", "empty-config-yaml")
def _(a):
    model, path = damaged_model(a, "config.yaml", b"")
    return translate_argv(model, a.write("in.en", GOOD)), [f"{path}: empty config file"]


@case("translate", "config-yaml-of-random-bytes")
def _(a):
    model, path = damaged_model(a, "config.yaml", b"\x80\x81\xfe" + os.urandom(100))
    return translate_argv(model, a.write("in.en", GOOD)), [str(path), "cannot read config"]


@case("translate", "weights-of-random-bytes")
def _(a):
    model, path = damaged_model(a, "model.safetensors", os.urandom(1000))
    return translate_argv(model, a.write("in.en", GOOD)), [str(path), "not a readable safetensors weights file"]


@case("translate", "truncated-weights")
def _(a):
    model, path = damaged_model(a, "model.safetensors", lambda b: b[: len(b) // 2])
    return translate_argv(model, a.write("in.en", GOOD)), [str(path), "not a readable safetensors weights file"]


@case("translate", "not-a-model-directory")
def _(a):
    (a.root / "empty").mkdir()
    return translate_argv(a.root / "empty", a.write("in.en", GOOD)), [str(a.root / "empty"), "not a docnmt model"]


BAD_DECODING = [
    (["--beam", "100000"], "--beam 100000 is more than this model's"),
    (["--lenpen", "nan"], "--lenpen must be a finite number"),
    (["--max-len-b", "-5"], "--max-len-b must be at least 0"),
    (["--max-len-a", "inf"], "--max-len-a must be a finite number"),
    (["--max-instance-tokens", "-1"], "--max-instance-tokens must be at least 0"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--max-tokens", "0"], "--max-tokens must be at least 1"),
    (["--batch-tokens", "0"], "--batch-tokens must be at least 1"),            # the old name, as typed
    (["--nbest", "9", "--beam", "2"], "--nbest (9) cannot exceed --beam (2)"),
    (["--precision", "fp64"], "--precision must be"),
    (["--device", "tpu"], "unknown device"),
    (["--format", "pdf"], "unknown input format"),
]
for _flags, _words in BAD_DECODING:
    case("translate", "flag" + "".join(_flags))(
        lambda a, flags=_flags, words=_words: (translate_argv(a.model(), a.write("in.en", GOOD), *flags), [words]))


@case("translate", "output-is-the-input")
def _(a):
    inp = a.write("in.en", GOOD)
    return translate_argv(a.model(), inp, "-o", inp, "--force"), [str(inp), "is an input"]


@case("translate", "output-is-a-model-file")
def _(a):
    model = a.model()
    return translate_argv(model, a.write("in.en", GOOD), "-o", model / "config.yaml", "--force"), ["is an input"]


@case("translate", "report-is-the-input")
def _(a):
    inp = a.write("in.en", GOOD)
    return translate_argv(a.model(), inp, "--report", inp, "--force"), [str(inp), "is an input"]


@case("translate", "output-exists")
def _(a):
    out = a.write("out.de", "earlier translation\n")
    return translate_argv(a.model(), a.write("in.en", GOOD), "-o", out), [str(out), "--force"]


@case("translate", "output-in-a-missing-directory")
def _(a):
    out = a.root / "no" / "such" / "out.de"
    return translate_argv(a.model(), a.write("in.en", GOOD), "-o", out), [str(out), "no such directory"]


@case("translate", "output-is-a-directory")
def _(a):
    (a.root / "outdir").mkdir()
    return translate_argv(a.model(), a.write("in.en", GOOD), "-o", a.root / "outdir", "--force"), \
        [str(a.root / "outdir"), "is a directory"]


@case("translate", "output-on-a-full-disk")
def _(a):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    return translate_argv(a.model(), a.write("in.en", GOOD), "-o", "/dev/full", "--force"), \
        ["/dev/full: cannot write file", "No space left"]


@case("translate", "input-invalid-utf8")
def _(a):
    inp = a.write("in.en", GOOD.encode() + b"caf\xe9 .\n")
    return translate_argv(a.model(), inp), [f"{inp}:6", "invalid UTF-8"]


@case("translate", "input-truncated-jsonl")
def _(a):
    inp = a.write("in.jsonl", '{"id": "a", "src": ["Hello ."]}\n{"id": "b", "src": ["Bye')
    return translate_argv(a.model(), inp), [f"{inp}:2", "invalid JSON"]


@case("translate", "input-truncated-xml")
def _(a):
    inp = a.write("in.xml", '<srcset>\n<doc docid="a">\n<seg id="1">Hello .</seg>\n<seg id="2">Bye')
    return translate_argv(a.model(), inp), [f"{inp}:4", "not closed"]


@case("translate", "input-corrupt-docx")
def _(a):
    inp = a.write("in.docx", b"PK\x03\x04" + b"\0" * 40)
    return translate_argv(a.model(), inp), [str(inp), "not a DOCX file"]


@case("translate", "input-srt-with-a-broken-timing-line")
def _(a):
    inp = a.write("in.srt", "1\n00:00:01,000 --> 00:00:02,000\nHello .\n\n2\n00:00:03,000 -> 4\nBye .\n")
    return translate_argv(a.model(), inp), [f"{inp}:6", "broken cue"]


@case("translate", "input-missing")
def _(a):
    return translate_argv(a.model(), a.root / "nothing.en"), [f"{a.root / 'nothing.en'}: no such file"]


@case("translate", "input-empty-document")
def _(a):
    inp = a.write("in.en", "<d>\nHello .\n<d>\n<d>\nBye .\n")
    return translate_argv(a.model(), inp), [f"{inp}:3", "empty document"]


@case("translate", "sentence-too-long")
def _(a):
    inp = a.write("in.en", GOOD + LONG + "\n")
    return translate_argv(a.model(), inp), [f"{inp}:6", "subword tokens, more than the"]


@case("translate", "sentence-too-long-jsonl")
def _(a):
    inp = a.write("in.jsonl", '{"id": "a", "src": ["Hello ."]}\n{"id": "b", "src": ["Hi .", "' + LONG + '"]}\n')
    return translate_argv(a.model(), inp), [f"{inp}:2", "document 'b', sentence 2"]


@case("translate", "sentence-too-long-xml")
def _(a):
    inp = a.write("in.xml", '<srcset>\n<doc docid="a">\n<seg id="1">Hi .</seg>\n</doc>\n<doc docid="b">\n'
                            f'<seg id="1">Hi .</seg>\n<seg id="2">{LONG}</seg>\n</doc>\n</srcset>\n')
    return translate_argv(a.model(), inp), [f"{inp}:5", "document 'b', sentence 2"]


# ================================================================================= evaluate

def eval_files(a):
    return a.write("hyp.de", GOOD_DE), a.write("ref.de", GOOD_DE)


@case("evaluate", "json-is-the-hypothesis")
def _(a):
    hyp, ref = eval_files(a)
    return ["evaluate", "--hyp", hyp, "--ref", ref, "--json", hyp], [str(hyp), "is an input"]


@case("evaluate", "json-is-the-reference")
def _(a):
    hyp, ref = eval_files(a)
    return ["evaluate", "--hyp", hyp, "--ref", ref, "--json", ref, ], [str(ref), "is an input"]


@case("evaluate", "json-in-a-missing-directory")
def _(a):
    hyp, ref = eval_files(a)
    out = a.root / "no" / "r.json"
    return ["evaluate", "--hyp", hyp, "--ref", ref, "--json", out], [str(out), "no such directory"]


@case("evaluate", "hypothesis-missing")
def _(a):
    _, ref = eval_files(a)
    return ["evaluate", "--hyp", a.root / "none.de", "--ref", ref], [f"{a.root / 'none.de'}: no such file"]


@case("evaluate", "hypothesis-invalid-utf8")
def _(a):
    _, ref = eval_files(a)
    hyp = a.write("bad.de", b"<d>\nHallo .\n\xff\n")
    return ["evaluate", "--hyp", hyp, "--ref", ref], [f"{hyp}:3", "invalid UTF-8"]


@case("evaluate", "hypothesis-truncated-jsonl")
def _(a):
    _, ref = eval_files(a)
    hyp = a.write("hyp.jsonl", '{"id": "a", "src": ["x"], "tgt": ["Hallo ."]}\n{"id": "b", "src": ["y"], "tg')
    return ["evaluate", "--hyp", hyp, "--ref", ref], [f"{hyp}:2", "invalid JSON"]


@case("evaluate", "different-document-counts")
def _(a):
    _, ref = eval_files(a)
    hyp = a.write("short.de", "<d>\nHallo .\n")
    return ["evaluate", "--hyp", hyp, "--ref", ref], [str(hyp), str(ref), "documents"]


@case("evaluate", "compare-invalid-utf8")
def _(a):
    hyp, ref = eval_files(a)
    other = a.write("other.de", b"<d>\n\xc3\n")
    return ["evaluate", "--hyp", hyp, "--ref", ref, "--compare", other, "--bootstrap-samples", "10"], \
        [f"{other}:2", "invalid UTF-8"]


@case("evaluate", "compare-with-fewer-documents")
def _(a):
    hyp, ref = eval_files(a)
    other = a.write("other.de", "<d>\nHallo .\n")
    return ["evaluate", "--hyp", hyp, "--ref", ref, "--compare", other], [str(other), str(ref), "1 document"]


@case("evaluate", "more-bootstrap-samples-than-the-maximum")
def _(a):         # one over: without the guard this case runs (quickly) and fails; a billion would fill the memory
    hyp, ref = eval_files(a)
    return ["evaluate", "--hyp", hyp, "--ref", ref, "--compare", hyp, "--bootstrap-samples", "10001"], \
        ["--bootstrap-samples", "at most 10,000, not 10,001"]


def test_a_billion_bootstrap_samples_are_refused_by_the_flag():
    import argparse

    from docnmt.cli.evaluate import bootstrap_samples
    with pytest.raises(argparse.ArgumentTypeError, match="at most 10,000, not 1,000,000,000"):
        bootstrap_samples("1000000000")


@case("evaluate", "by-length-source-of-other-documents")
def _(a):
    hyp, ref = eval_files(a)
    src = a.write("src.en", "<d>\nHello .\n")
    return ["evaluate", "--hyp", hyp, "--ref", ref, "--by-length", "--src", src], [str(src), "not the same documents"]


# ======================================================================== score-contrastive

def score_argv(a, suite, *more):
    return ["score-contrastive", a.model(), suite, "-q", *more]


VOITA = [{"src": "a . _eos b .", "dst": ["c . _eos d .", "c . _eos e ."], "true_ind": 0, "ctx_dist": 1}]
BAD_SUITES = [  # (name, file, content, --format, words)
    ("unknown-shape", "suite.json", "[1, 2, 3]", "auto", "cannot tell the test suite format"),
    ("voita-not-a-list", "suite.json", '{"a": 1}', "voita", "expected a list of Voita et al. examples"),
    ("voita-src-not-text", "suite.json", '[{"src": 1, "dst": ["c", "e"], "true_ind": 0}]', "voita", "example 1"),
    ("voita-true-ind-out-of-range", "suite.json", json.dumps([{**VOITA[0], "true_ind": 5}]), "voita", "example 1"),
    ("bawden-not-an-object", "suite.json", "[[1]]", "bawden", "expected an object of Bawden et al. blocks"),
    ("bawden-block-of-the-wrong-shape", "suite.json", '{"x": {"src": ["a", "b"], "trg": ["s"]}}', "bawden",
     "block 'x'"),
    ("contrapro-not-a-list", "contrapro.json", '{"a": 1}', "contrapro", "expected a list of ContraPro examples"),
    ("contrapro-errors-not-a-list", "contrapro.json", '[{"errors": 5}]', "contrapro", "example 1"),
    ("contrapro-segment-id-text", "contrapro.json", '[{"errors": [], "segment id": "x"}]', "contrapro",
     "segment id must be a whole number"),
    ("invalid-utf8", "suite.json", b'[{"src": "\xff"}]', "auto", "invalid UTF-8"),
    ("truncated-json", "suite.json", '[{"src": "a . _eos b .",\n "dst": ["c', "voita", "invalid JSON"),
    ("empty", "suite.json", "[]", "voita", "no contrastive examples"),
]
for _name, _file, _content, _fmt, _words in BAD_SUITES:
    case("score-contrastive", _name)(
        lambda a, file=_file, content=_content, fmt=_fmt, words=_words:
        (score_argv(a, a.write(file, content), "--format", fmt), [str(a.root / file), words]))


@case("score-contrastive", "contrapro-line-counts")
def _(a):
    suite = a.write("cp/contrapro.json", '[{"errors": ["x"], "segment id": 3}]')
    for name, lines in (("text.en", 2), ("text.de", 1), ("context.en", 2), ("context.de", 2)):
        a.write(f"cp/contrapro.{name}", "line\n" * lines)
    return score_argv(a, suite), [str(a.root / "cp"), "lines"]


@case("score-contrastive", "scat-file-missing")
def _(a):
    for name in ("en", "fr", "context.en"):
        a.write(f"scat/highlighted.valid.{name}", "x\n")
    return score_argv(a, a.root / "scat"), [str(a.root / "scat" / "highlighted.valid.context.fr"), "SCAT file missing"]


@case("score-contrastive", "scat-invalid-utf8")
def _(a):
    for name in ("en", "fr", "context.en", "context.fr"):
        a.write(f"scat/highlighted.valid.{name}", b"fine\n\xfe\n")
    return score_argv(a, a.root / "scat"), [f"{a.root / 'scat' / 'highlighted.valid.en'}:2", "invalid UTF-8"]


@case("score-contrastive", "scat-line-counts")
def _(a):
    for name, n in (("en", 2), ("fr", 1), ("context.en", 2), ("context.fr", 2)):
        a.write(f"scat/highlighted.valid.{name}", "x\n" * n)
    return score_argv(a, a.root / "scat"), [str(a.root / "scat"), "different line counts"]


@case("score-contrastive", "suite-missing")
def _(a):
    return score_argv(a, a.root / "none.json"), [str(a.root / "none.json"), "no such test suite"]


for _flags, _words in ((["--max-tokens", "0"], "--max-tokens must be at least 1, not 0"),
                       (["--batch-tokens", "-4"], "--batch-tokens must be at least 1, not -4"),
                       (["--max-context", "-1"], "--max-context must be at least 0, not -1")):
    case("score-contrastive", "flag" + "".join(_flags))(
        lambda a, flags=_flags, words=_words: (score_argv(a, a.write("suite.json", json.dumps(VOITA)), "--format",
                                                          "voita", *flags), [words]))


@case("score-contrastive", "json-report-is-the-suite")
def _(a):
    suite = a.write("suite.json", json.dumps(VOITA))
    return score_argv(a, suite, "--json", suite, "--force"), [str(suite), "is an input"]


@case("score-contrastive", "scores-inside-a-suite-directory")
def _(a):
    for name in ("en", "fr", "context.en", "context.fr"):
        a.write(f"scat/highlighted.valid.{name}", "x\n")
    return score_argv(a, a.root / "scat", "--scores", a.root / "scat" / "s.jsonl"), ["is an input"]


@case("score-contrastive", "against-a-file-that-is-not-scores")
def _(a):
    against = a.write("base.jsonl", '{"x": 1}\n')
    return score_argv(a, a.write("suite.json", json.dumps(VOITA)), "--against", against), \
        [str(against), "not a per-example scores file"]


@case("score-contrastive", "report-in-a-missing-directory")
def _(a):
    out = a.root / "no" / "r.json"
    return score_argv(a, a.write("suite.json", json.dumps(VOITA)), "--json", out), [str(out), "no such directory"]


# ==================================================================================== the test

def one_error_line(status: int, err: str, progress: bool) -> str:
    assert "Traceback" not in err, err
    assert status == 2, f"exit status {status}, stderr: {err!r}"
    lines = [line for line in err.strip().splitlines() if not (progress and line.startswith(PROGRESS))]
    assert len(lines) == 1 and lines[0].startswith("docnmt: error: "), f"not one error line: {err!r}"
    return lines[0]


def test_every_verb_is_attacked():
    assert {name.split(":")[0] for name in CASES} == {"prepare", "train", "translate", "evaluate",
                                                      "score-contrastive"}
    assert len(CASES) >= 100


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_error_line_and_changes_nothing(name, tmp_path, request, cli_error, run_cli):
    build, progress = CASES[name]
    attack = Attack(tmp_path, request)
    argv, words = build(attack)
    before = snapshot(tmp_path)
    if progress:
        status, _, err = run_cli(*argv)
        message = one_error_line(status, err, progress)
    else:
        message = cli_error(*argv)
    for w in words:
        assert w in message, f"{w!r} not in {message!r}"
    assert snapshot(tmp_path) == before, "a file was written, changed or deleted"


# ============================================ property-based: the readers and the config loader

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from docnmt.config import Config  # noqa: E402
from docnmt.document import Document  # noqa: E402
from docnmt.errors import ConfigError, DataError, DocnmtError  # noqa: E402
from docnmt.readers import FORMATS, read_documents, write_jsonl, write_marker  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# text that exercises the formats' syntax: markers, blank lines, XML, JSON, bad bytes
PIECES = st.sampled_from([b"<d>\n", b"\n", b"\r\n", b"Hello .\n", b"<doc docid=\"a\">", b"<seg id=\"1\">",
                          b"</seg>", b"</doc>", b'{"id": "a", "src": ["x"]', b"}\n", b"\xff", b"\xc3", b"\xef\xbb\xbf",
                          b"&amp;", b"<![CDATA[", b"]]>", b" ", b"\t"])
FILES = st.one_of(st.binary(max_size=200), st.lists(PIECES, max_size=30).map(b"".join))


@settings(FUZZ, max_examples=200)
@given(src=FILES, tgt=st.one_of(st.none(), FILES), fmt=st.sampled_from(FORMATS))
def test_any_bytes_give_documents_or_one_located_data_error(tmp_path, src, tgt, fmt):
    a = tmp_path / "a.txt"
    a.write_bytes(src)
    b = None
    if tgt is not None and fmt not in ("jsonl", "bcontrast"):
        b = tmp_path / "b.txt"
        b.write_bytes(tgt)
    try:
        docs = read_documents(a, b, fmt=fmt)
    except (DataError, ConfigError) as e:
        assert "\n" not in str(e)                         # one line
        if isinstance(e, DataError):
            assert e.path in (str(a), str(b))             # naming one of the files
        return
    assert docs and all(d.src and all(s.strip() and "\n" not in s for s in d.src) for d in docs)
    assert all(d.tgt is None or len(d.tgt) == len(d.src) for d in docs)


SENTENCE = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=20) \
    .map(lambda s: " ".join(s.split())).filter(lambda s: s and s != "<d>")
DOCS = st.lists(st.integers(1, 4).flatmap(lambda n: st.tuples(st.lists(SENTENCE, min_size=n, max_size=n),
                                                               st.lists(SENTENCE, min_size=n, max_size=n))),
                min_size=1, max_size=4)


@FUZZ
@given(pairs=DOCS)
def test_marker_and_jsonl_files_read_back_what_was_written(tmp_path, pairs):
    docs = [Document(f"doc{k}", src, tgt) for k, (src, tgt) in enumerate(pairs)]
    write_marker(docs, tmp_path / "x.en", "src", tmp_path / "x.docids")
    write_marker(docs, tmp_path / "x.de", "tgt")
    back = read_documents(tmp_path / "x.en", tmp_path / "x.de", fmt="marker", docids=tmp_path / "x.docids")
    assert [(d.docid, d.src, d.tgt) for d in back] == [(d.docid, d.src, d.tgt) for d in docs]
    write_jsonl(docs, tmp_path / "x.jsonl")
    back = read_documents(tmp_path / "x.jsonl")
    assert [(d.docid, d.src, d.tgt) for d in back] == [(d.docid, d.src, d.tgt) for d in docs]


KEYS = {section: [*Config().to_dict()[section], "no_such_key"] for section in ("model", "data", "train", "decode")}
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                   st.text(max_size=8), st.lists(st.floats(-2, 2), max_size=3),
                   st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
SECTIONS = st.dictionaries(st.sampled_from(sorted(KEYS)), st.none(), max_size=4).flatmap(
    lambda chosen: st.fixed_dictionaries({s: st.dictionaries(st.sampled_from(KEYS[s]), VALUES, max_size=3)
                                          for s in chosen}))


@FUZZ
@given(raw=st.one_of(SECTIONS, st.dictionaries(st.text(max_size=6), VALUES, max_size=3)))
def test_any_mapping_gives_a_config_or_one_config_error(raw):
    try:
        cfg = Config.from_dict({"preset": "transformer_tiny", **raw}, "exp.yaml")
    except ConfigError as e:
        assert str(e).startswith("exp.yaml") and "\n" not in str(e)
        return
    assert Config.from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()      # what a run saves loads back


@FUZZ
@given(text=st.one_of(st.binary(max_size=120), st.text(max_size=120).map(str.encode)))
def test_any_config_file_gives_a_config_or_one_config_error(tmp_path, text):
    path = tmp_path / "exp.yaml"
    path.write_bytes(text)
    try:
        Config.load(path)
    except ConfigError as e:
        assert str(path) in str(e)


# ================================= sizes checked before decoding (docnmt.limits, `translate`)

@pytest.fixture(scope="module")
def small_vocab():
    from docnmt.vocab import Vocab
    return Vocab.train([f"sentence number {i} of a document ." for i in range(50)], size=40)


def whole_document_translator(vocab, **model):
    from types import SimpleNamespace

    import torch
    cfg = Config.load("transformer_tiny").override({"data.mode": "doc2doc", "data.max_instance_tokens": 0,
                                                    **{f"model.{k}": v for k, v in model.items()}})
    return SimpleNamespace(cfg=cfg, vocab=vocab, device=torch.device("cpu"))


def test_a_whole_document_longer_than_the_model_is_warned_about_with_its_size(small_vocab, tmp_path):
    from docnmt.limits import check_translation
    tr = whole_document_translator(small_vocab, max_positions=64)
    doc = Document("talk", [f"sentence number {i} of a document ." for i in range(40)])
    said = []
    check_translation(tr, [doc], tr.cfg.decode, [str(tmp_path / "in.en")], log=said.append)
    assert len(said) == 1 and "document 'talk' is one instance of" in said[0] and "GiB per layer" in said[0]
    assert "64 positions" in said[0]
    said.clear()
    check_translation(tr, [Document("short", doc.src[:2])], tr.cfg.decode, ["in.en"], log=said.append)
    assert not said                                                  # short enough: nothing to say


def test_a_whole_document_whose_attention_cannot_fit_is_refused(small_vocab, monkeypatch):
    import docnmt.limits as limits
    monkeypatch.setattr(limits, "memory_bytes", lambda device: 2**20)          # a 1 MiB machine
    tr = whole_document_translator(small_vocab)
    doc = Document("talk", [f"sentence number {i} of a document ." for i in range(60)])
    with pytest.raises(ConfigError, match="document 'talk' is one instance of .* more than the 0.0 GiB"):
        limits.check_translation(tr, [doc], tr.cfg.decode, ["in.en"])


@pytest.mark.parametrize("name", ["doc2doc", "gtransformer"])
def test_an_instance_budget_above_the_models_positions_translates_with_a_warning(tiny_model, small_vocab, tmp_path,
                                                                                  name):
    """--max-instance-tokens above the model's positions is the length-bias experiment's question:
    translated (sinusoidal positions grow; a G-Transformer with sentence positions reads none past a
    sentence), with a warning naming both figures, like a whole document (it was refused)."""
    from docnmt.limits import check_translation
    from docnmt.translate import Translator
    tr = Translator.load(tiny_model(name), None, "cpu")
    tr.cfg.model.max_positions, tr.cfg.data.max_instance_tokens = 32, 128
    short = [s for d in chat_documents("valid") for s in d.src if len(s.split()) <= 5][:30]
    doc = Document("chat", short)
    said = []
    check_translation(tr, [doc], tr.cfg.decode, [str(tmp_path / "in.en")], log=said.append)
    assert len(said) == 1 and "--max-instance-tokens 128 is more than the model's 32 positions" in said[0]
    out, report = tr.translate([doc.src])
    assert len(out[0].tgt) == len(doc.src) and report.instances < len(doc.src) / 4     # instances > 32 tokens
    tr.cfg.data.max_instance_tokens = 32
    said.clear()
    check_translation(tr, [doc], tr.cfg.decode, [str(tmp_path / "in.en")], log=said.append)
    assert not said                                                  # within the positions: nothing to say


def test_search_scores_that_cannot_fit_are_refused_naming_beam_and_batch_size(small_vocab, monkeypatch):
    import docnmt.limits as limits
    monkeypatch.setattr(limits, "memory_bytes", lambda device: 2**20)
    tr = whole_document_translator(small_vocab)
    tr.cfg = tr.cfg.override({"data.max_instance_tokens": 512, "decode.beam": 40, "decode.max_sentences": 64})
    docs = [Document(str(i), ["sentence number 1 of a document ."]) for i in range(64)]
    with pytest.raises(ConfigError, match="--beam 40 with --batch-size 64: each search step needs"):
        limits.check_translation(tr, docs, tr.cfg.decode, ["in.en"])


# ================================ cases that need more than a command line: stdin, a run, transformers

@pytest.mark.parametrize("stdin", [b"", b"<d>\n\n<d>\n"])
def test_empty_standard_input_is_refused_like_an_empty_file(stdin, tmp_path, request, cli_error, monkeypatch):
    import io
    import sys
    a = Attack(tmp_path, request)
    model, empty = a.model(), a.write("empty.en", "")
    from_file = cli_error("translate", model, "-i", empty, "-q")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    from_stdin = cli_error("translate", model, "-o", tmp_path / "out.de", "-q")
    assert from_stdin == from_file.replace(str(empty), "<stdin>") == "docnmt: error: <stdin>: empty input: no sentences"
    assert not (tmp_path / "out.de").exists()                            # nothing written


def test_train_force_removes_only_the_names_a_run_writes(tmp_path, request, run_cli):
    """--force over a model directory starts the run over and leaves a file of the user's there."""
    a = Attack(tmp_path, request)
    model = a.model()
    a.write("model/results.npy", b"my own results")
    a.write("model/notes/today.txt", "keep me\n")
    status, _, err = run_cli(*train_argv(a.data(), model, "--force"))
    assert status == 0, err
    assert (model / "results.npy").read_bytes() == b"my own results"
    assert (model / "notes/today.txt").read_text() == "keep me\n"
    assert (model / "model.safetensors").exists() and (model / "checkpoints").is_dir()


def test_a_training_set_partly_longer_than_the_positions_is_warned_about_with_its_share(tmp_path, request, run_cli):
    a = Attack(tmp_path, request)
    status, _, err = run_cli(*train_argv(a.data(), tmp_path / "m", "--set", "model.max_positions=8"))
    assert status == 0, err
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warning == ["warning: 226 of the 260 training instances (86.9%) are longer than the model's 8 positions "
                       "(model.max_positions); translation refuses inputs that long"]


def _nllb_tokenizer(directory: Path) -> Path:
    """A tiny NLLB tokenizer (a SentencePiece model learned on the bundled chats) and a config.json
    naming the family: import-hf reads no further before it asks for the languages."""
    import io

    import sentencepiece as spm
    T = pytest.importorskip("transformers")
    texts = [s for s in (GOOD + GOOD_DE).splitlines() if s != "<d>"] * 20
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=buf, vocab_size=30, model_type="bpe",
                                   character_coverage=1.0, minloglevel=2, hard_vocab_limit=False, num_threads=1)
    (directory / "spm").mkdir(parents=True)
    (directory / "spm/sentencepiece.bpe.model").write_bytes(buf.getvalue())
    tok = T.NllbTokenizer.from_pretrained(str(directory / "spm"), extra_special_tokens=["eng_Latn", "deu_Latn"])
    tok.save_pretrained(str(directory))
    (directory / "config.json").write_text(json.dumps({"model_type": "m2m_100"}))
    return directory


def test_import_hf_of_nllb_without_languages_lists_its_codes(tmp_path, cli_error):
    hf = _nllb_tokenizer(tmp_path / "nllb")
    err = cli_error("import-hf", hf, "--save-dir", tmp_path / "m")
    assert f"{hf}: this model translates between many languages" in err and "eng_Latn, deu_Latn" in err
    assert "deu_Latn" in cli_error("import-hf", hf, "--save-dir", tmp_path / "m", "--src-lang", "eng_Latn",
                                   "--tgt-lang", "xx_Yyyy")
    assert not (tmp_path / "m").exists()


def test_a_tokenizer_without_ordinary_pieces_is_a_docnmt_error():
    T = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    from docnmt.hf import vocab_layout
    specials = ["<pad>", "</s>", "<unk>"]
    tok = T.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({s: i for i, s in enumerate(specials)},
                                                                                unk_token="<unk>")),
                                    pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    with pytest.raises(DocnmtError, match="the tokenizer has no ordinary pieces"):
        vocab_layout(tok, 3, None)
