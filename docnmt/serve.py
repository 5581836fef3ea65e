"""``docnmt serve``: a document translation service, an HTTP API and a web page (docs/serving.md).

Every model is loaded once per decoding worker and translates exactly as ``docnmt translate``
does, through :class:`docnmt.translate.Translator` (Doc2Doc splitting, G-Transformer's frame,
sliding decoding, DocFlat's passes, context inputs). A request becomes *units*: one per document,
or the whole request for a model that looks across its decoding batch (DocFlat's flat-batch
attention; ``Method.score_alone``), so requests never see each other there. The
:class:`Scheduler` hands units to worker threads (decoding runs off the event loop):

* units of one model with the same decoding options that arrive together are translated in one
  ``Translator.translate`` call, up to ``batch_tokens`` source tokens, after waiting at most
  ``batch_wait`` seconds for company;
* the shortest unit goes first, except that a unit waiting longer than ``aging`` seconds goes
  before any other; a *long* unit (over ``long_tokens`` source tokens) is never grouped with short
  ones, and with two or more workers one worker is always left to short units, so a long
  document never starves short requests;
* at most ``queue`` requests are in the service at once; past that a request is answered 503 with
  ``Retry-After``, as is one that is not done within ``timeout`` seconds.

Nothing a request names is ever opened as a path; an uploaded file is size-limited, written only
into a fresh temporary directory under a sanitised name and removed after reading.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hmac
import io
import json
import logging
import math
import os
import re
import signal
import tempfile
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import swagger_ui  # the swagger-ui-py package: Swagger UI's own files, so /docs needs no CDN
from fastapi import FastAPI, File, Form, Request, Security, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException

from . import __version__, readers
from .document import Document
from .errors import DataError, DocnmtError

log = logging.getLogger("docnmt.serve")
WEB = Path(__file__).parent / "web"


# --------------------------------------------------------------------------------------------
# Settings and requests
# --------------------------------------------------------------------------------------------

@dataclass
class Settings:
    """Limits and scheduling of a server (the ``docnmt serve`` flags)."""

    max_sentences: int = 5000            # per request
    max_chars: int = 500_000             # source characters per request
    max_tokens: int = 100_000            # source subword tokens per request
    max_upload_bytes: int = 4_000_000    # request body (JSON or uploaded file)
    max_beam: int = 16
    timeout: float = 600.0               # seconds a request may wait and decode
    queue: int = 64                      # requests in the service at once
    batch_wait: float = 0.005            # seconds a unit waits for others to be decoded with
    batch_tokens: int = 4000             # source tokens decoded in one batch, at most
    long_tokens: int = 1000              # a unit over this is long: decoded alone, never by the last free worker
    aging: float = 10.0                  # seconds after which a unit goes before shorter ones
    workers: int = 1
    api_key: str = ""

    def __post_init__(self):
        for name in ("max_sentences", "max_chars", "max_tokens", "max_upload_bytes", "max_beam", "queue",
                     "batch_tokens", "long_tokens", "workers"):
            if getattr(self, name) < 1:
                raise DocnmtError(f"{name.replace('_', '-')} must be at least 1, not {getattr(self, name)}")
        for name in ("timeout", "batch_wait", "aging"):
            if not getattr(self, name) >= 0 or not math.isfinite(getattr(self, name)):
                raise DocnmtError(f"{name.replace('_', '-')} must be at least 0, not {getattr(self, name)}")


class Options(BaseModel):
    """Decoding options of one request; those left out are the model's own (its config's ``decode``)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    beam: int | None = Field(None, ge=1, description="beam size (1 = greedy)")
    lenpen: float | None = Field(None, ge=0, le=10, description="length penalty: score / length**lenpen")
    lenpen_style: Literal["fairseq", "gnmt"] | None = None
    max_len_a: float | None = Field(None, ge=0, le=10,
                                    description="max output length = a * source length + b per output sentence")
    max_len_b: int | None = Field(None, ge=0, le=1024, description="added to the max output length per output sentence")
    min_len: int | None = Field(None, ge=0, le=1024)
    nbest: int | None = Field(None, ge=1, description="hypotheses returned per sentence (at most the beam)")
    no_repeat_ngram_size: int | None = Field(None, ge=0, le=64)
    sliding: bool | None = Field(None, description="Doc2Doc: sliding decoding of documents longer than the window")
    sliding_window: float | None = Field(None, gt=0, le=1)
    sentence_count: bool | None = Field(None, description="separator formats: force the source's sentence count")
    official_start: bool | None = Field(None, description="G-Transformer: start decoding from <s>")
    max_instance_tokens: int | None = Field(None, ge=0, description="Doc2Doc: instance budget (0 = whole documents)")
    scores: bool = Field(True, description="per-sentence scores (a teacher-forced pass over the translation)")

    def overrides(self) -> dict:
        """The config overrides these options make (``decode.*``, ``data.max_instance_tokens``)."""
        out = {}
        for key, value in self.model_dump(exclude={"scores"}).items():
            if value is not None:
                out[("data." if key == "max_instance_tokens" else "decode.") + key] = value
        return out


class TranslateRequest(BaseModel):
    """One document: ``sentences``, or ``text`` split into sentences as ``split`` says."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = Field(None, description="a name from GET /v1/models (default: the first)")
    sentences: list[str] | None = Field(None, description="the document, one sentence an item")
    text: str | None = Field(None, description="the document as text; paragraphs are separated by blank lines")
    split: Literal["lines", "sentences"] = Field(
        "lines", description="text: lines = every non-empty line is a sentence; sentences = every paragraph is "
                             "split into sentences by a rule-based splitter (pysbd) for `lang`")
    lang: str = Field("en", description="split=sentences: the source language (ISO 639-1)")
    options: Options = Field(default_factory=Options)


def inline_schema(schema: dict) -> dict:
    """A JSON schema with its ``$defs`` references written in place (for the OpenAPI page)."""
    defs = schema.pop("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(dict(defs[node["$ref"].rsplit("/", 1)[1]]))
            return {k: walk(v) for k, v in node.items()}
        return [walk(v) for v in node] if isinstance(node, list) else node
    return walk(schema)


def one_line(e: ValidationError, prefix: str = "") -> str:
    """The first problem pydantic found, as one line."""
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    where = prefix + loc if loc else prefix.rstrip(".")
    if err["type"] == "extra_forbidden":
        known = Options.model_fields if "options" in where or prefix == "options." else TranslateRequest.model_fields
        return f"unknown field {where!r}; known: {', '.join(known)}"
    return f"{where}: {err['msg']}" if where else err["msg"]


def check_sentences(sentences: list[str]) -> list[str]:
    if not sentences:
        raise DataError("empty document: no sentences")
    for k, s in enumerate(sentences):
        if not s.strip():
            raise DataError(f"sentences[{k}]: empty sentence")
        if "\n" in s or "\r" in s:
            raise DataError(f"sentences[{k}]: a line break inside a sentence; send one sentence an item")
    return [" ".join(s.split()) for s in sentences]


def split_text(text: str, split: str, lang: str) -> tuple[list[str], list[int]]:
    """``text`` as sentences and the paragraph (blank-line separated block) each is in."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n").replace("\r", "\n")) if p.strip()]
    if not paragraphs:
        raise DataError("empty document: the text has no sentences")
    segment = None
    if split == "sentences":
        import pysbd
        from pysbd.languages import LANGUAGE_CODES
        if lang not in LANGUAGE_CODES:
            raise DataError(f"lang {lang!r}: no sentence splitter for it; use split 'lines' or one of "
                            f"{', '.join(sorted(LANGUAGE_CODES))}")
        segment = pysbd.Segmenter(language=lang, clean=False).segment
    sents, paras = [], []
    for k, p in enumerate(paragraphs):
        parts = segment(" ".join(p.split())) if segment else p.split("\n")
        for s in parts:
            if s.strip():
                sents.append(" ".join(s.split()))
                paras.append(k)
    return sents, paras


def join_text(sentences: list[str], paragraphs: list[int], split: str) -> str:
    """Translated sentences put back together the way ``split_text`` took the source apart."""
    out: list[list[str]] = []
    last = None
    for s, p in zip(sentences, paragraphs):
        if p != last:
            out.append([])
            last = p
        out[-1].append(s)
    if split == "sentences":        # an empty translation leaves no stray space
        return "\n\n".join(" ".join(s for s in p if s) for p in out)
    return "\n\n".join("\n".join(p) for p in out)


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------

class Served:
    """One model: a translator per worker, and the configs of the option sets requests used."""

    def __init__(self, name: str, path: str, translators: list):
        self.name, self.path, self.translators = name, path, translators
        self.cfg = translators[0].cfg
        self.vocab = translators[0].vocab
        self.alone = bool(translators[0].method.score_alone)
        self._configs: dict = {}
        self._lock = threading.Lock()

    def config(self, overrides: dict):
        """The model's config with ``overrides``; ConfigError for values out of range."""
        key = tuple(sorted(overrides.items()))
        with self._lock:
            if key not in self._configs:
                if len(self._configs) > 256:
                    self._configs.clear()
                try:
                    self._configs[key] = self.cfg.override(overrides) if overrides else self.cfg
                except DocnmtError as e:    # name the request's options, not the config keys
                    message = str(e).removeprefix("command line: ")
                    raise DataError(re.sub(r"\b(decode|data)\.", "options.", message)) from None
            return self._configs[key]

    def info(self) -> dict:
        d, c = self.cfg.data, self.cfg.decode
        return {"name": self.name, "method": self.cfg.method_name, "mode": d.mode, "separator": d.separator,
                "context": d.context, "context_input": d.context_input, "document_level": d.is_document_level,
                "max_instance_tokens": d.max_instance_tokens, "max_positions": self.cfg.model.max_positions,
                "decode": {"beam": c.beam, "lenpen": c.lenpen, "lenpen_style": c.lenpen_style,
                           "max_len_a": c.max_len_a, "max_len_b": c.max_len_b, "nbest": c.nbest,
                           "sliding": c.sliding}}


def model_names(specs: list[str]) -> list[tuple[str, str]]:
    """``[NAME=]DIR`` arguments as (name, directory); the name defaults to the directory's."""
    out = []
    for spec in specs:
        name, _, path = spec.rpartition("=") if "=" in spec and not Path(spec).exists() else ("", "", spec)
        name = name or Path(path).resolve().name
        if not re.fullmatch(r"[\w.-]+", name):
            raise DocnmtError(f"{spec}: a model name may hold letters, digits, '.', '_' and '-' only")
        if name in {n for n, _ in out}:
            raise DocnmtError(f"two models named {name!r}; name them: NAME=DIR")
        out.append((name, path))
    return out


def load_models(specs: list[str], workers: int, device: str | None = None, checkpoint: str | None = None) -> dict:
    from .translate import Translator
    return {name: Served(name, path, [Translator.load(path, checkpoint, device) for _ in range(workers)])
            for name, path in model_names(specs)}


# --------------------------------------------------------------------------------------------
# Scheduling
# --------------------------------------------------------------------------------------------

class Busy(Exception):
    """The service is full: answered 503 with Retry-After."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(eq=False)
class Unit:
    """Documents decoded together, never split: one document, or a whole request (DocFlat)."""

    job: "Job"
    docs: list[Document]
    tokens: int
    arrived: float = field(default_factory=time.monotonic)
    long: bool = False
    alone: bool = False             # the model looks across its batch: never decoded with another request
    result: list | None = None
    batch: dict | None = None


@dataclass(eq=False)
class Job:
    """One request: its units, decoding key and the future its handler awaits."""

    model: Served
    key: tuple
    cfg: object
    scores: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    units: list[Unit] = field(default_factory=list)
    left: int = 0
    started: float | None = None

    def unit_done(self, unit: Unit, error: BaseException | None) -> None:     # on the event loop
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
            return
        self.left -= 1
        if self.left == 0:
            self.future.set_result(self.units)


def chunks(docs: list[Document], tokens: list[int], size: int) -> list[tuple[list[Document], int]]:
    """Consecutive documents in units of about ``size`` source tokens (a longer document alone), so
    that a file of many short documents does not flood the queue with units."""
    out: list[tuple[list[Document], int]] = []
    for d, t in zip(docs, tokens):
        if out and out[-1][1] + t <= size:
            out[-1][0].append(d)
            out[-1] = (out[-1][0], out[-1][1] + t)
        else:
            out.append(([d], t))
    return out


class Scheduler:
    """Units waiting for a worker, and the worker threads that decode them (module docstring)."""

    def __init__(self, settings: Settings, metrics: "Metrics", decode=None):
        self.s, self.metrics = settings, metrics
        self.decode = decode or decode_group
        self.pending: list[Unit] = []
        self.jobs = 0                    # requests admitted and not answered
        self.long_busy = 0               # workers decoding a long unit
        self.cond = threading.Condition()
        self.stopped = False
        self.threads = [threading.Thread(target=self._work, args=(w,), name=f"docnmt-decode-{w}", daemon=True)
                        for w in range(settings.workers)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    # ---- on the event loop -------------------------------------------------------------------
    def submit(self, model: Served, key: tuple, cfg, docs: list[Document], tokens: list[int], scores: bool) -> Job:
        """Queue a request (documents and their source tokens); Busy when the service is full."""
        loop = asyncio.get_running_loop()
        job = Job(model, key, cfg, scores, loop, loop.create_future())
        parts = [(docs, sum(tokens))] if model.alone else chunks(docs, tokens, self.s.long_tokens // 2)
        with self.cond:
            if self.jobs >= self.s.queue:
                raise Busy(f"the service is full ({self.jobs} requests in it); retry later", self.retry_after())
            self.jobs += 1
            job.units = [Unit(job, d, t, long=t > self.s.long_tokens, alone=model.alone) for d, t in parts]
            job.left = len(job.units)
            self.pending.extend(job.units)
            self.cond.notify_all()
        return job

    def finish(self, job: Job) -> None:
        """The request is answered (or given up): drop its units that have not started."""
        with self.cond:
            self.jobs -= 1
            self.pending = [u for u in self.pending if u.job is not job]

    def retry_after(self) -> int:
        rate = self.metrics.token_rate()
        waiting = sum(u.tokens for u in self.pending)
        return int(min(60, max(1, math.ceil(waiting / rate) if rate else 5)))

    def queue_length(self) -> dict:
        with self.cond:
            return {"requests": self.jobs, "units_waiting": len(self.pending),
                    "tokens_waiting": sum(u.tokens for u in self.pending)}

    # ---- in the worker threads ---------------------------------------------------------------
    def take(self, now: float | None = None) -> tuple[list[Unit] | None, float | None]:
        """The units a free worker decodes next, or (None, seconds to wait); under ``cond``."""
        now = time.monotonic() if now is None else now
        reserve = self.s.workers > 1 and self.long_busy >= self.s.workers - 1
        ready = [u for u in self.pending if not (u.long and reserve)]
        if not ready:
            return None, None
        aged = [u for u in ready if now - u.arrived > self.s.aging]
        first = min(aged, key=lambda u: u.arrived) if aged else min(ready, key=lambda u: (u.tokens, u.arrived))
        group, total = [first], first.tokens
        if not (first.long or first.alone):
            for u in sorted((u for u in ready if u is not first and not u.long and not u.alone
                             and u.job.key == first.job.key),
                            key=lambda u: (u.tokens, u.arrived)):
                if total + u.tokens > self.s.batch_tokens:
                    break
                group.append(u)
                total += u.tokens
        full = first.long or first.alone or total * 2 > self.s.batch_tokens
        wait = first.arrived + self.s.batch_wait - now
        if not full and wait > 0:
            return None, wait
        return group, None

    def _work(self, worker: int) -> None:
        while True:
            with self.cond:
                while True:
                    if self.stopped:
                        return
                    group, wait = self.take()
                    if group is not None:
                        break
                    self.cond.wait(wait)
                taken = set(map(id, group))
                self.pending = [u for u in self.pending if id(u) not in taken]
                long = group[0].long
                self.long_busy += long
            try:
                self._run(worker, group)
            finally:
                with self.cond:
                    self.long_busy -= long
                    self.cond.notify_all()

    def _run(self, worker: int, group: list[Unit]) -> None:
        start = time.monotonic()
        for u in group:
            if u.job.started is None:
                u.job.started = start
        errors: dict[int, Exception] = {}
        try:
            self.decode(worker, group)
        except DocnmtError as e:
            if len(group) == 1:
                errors[0] = e
            else:       # one bad unit must not fail the others: decode them one by one
                for k, u in enumerate(group):
                    try:
                        self.decode(worker, [u])
                    except Exception as e1:     # reported to that request only
                        errors[k] = e1
        except Exception as e:                  # a bug or out of memory: 500, and the server lives on
            log.exception("decoding failed")
            errors = dict.fromkeys(range(len(group)), e)
        seconds = time.monotonic() - start
        release_memory()
        self.metrics.batch(len({id(u.job) for u in group}), len(group), sum(u.tokens for u in group), seconds)
        for k, u in enumerate(group):
            if u.batch is not None:
                u.batch["decode_ms"] = round(1000 * seconds, 1)
            u.job.loop.call_soon_threadsafe(u.job.unit_done, u, errors.get(k))


def release_memory() -> None:
    """Give the heap memory freed by a batch back to the system (glibc keeps it otherwise, and the
    server's resident memory ratchets up to the largest batches it has seen: bench/serve_load.py)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):       # not glibc
        pass


def decode_group(worker: int, group: list[Unit]) -> None:
    """Translate the units of ``group`` (one model, one option set) in one ``translate`` call; fill
    each unit's ``result`` (documents with ``tgt``, meta ``problem`` and ``scores``) and ``batch``."""
    job = group[0].job
    tr = job.model.translators[worker]
    tr.cfg = job.cfg
    docs = [Document(f"{n}/{k}", d.src, None, dict(d.meta)) for n, u in enumerate(group) for k, d in enumerate(u.docs)]
    out, report = tr.translate(docs, job.cfg.decode, origin="request")
    problems = set(report.documents_with_problems)
    scores = score_documents(tr, out) if any(u.job.scores for u in group) else [None] * len(out)
    batch = {"requests": len({id(u.job) for u in group}), "documents": len(docs), "instances": report.instances,
             "malformed_instances": report.malformed_instances}
    it = iter(zip(out, scores))
    for u in group:
        u.result = []
        for d in u.docs:
            o, sc = next(it)
            u.result.append(Document(d.docid, d.src, o.tgt, {**d.meta, **o.meta, "problem": o.docid in problems,
                                                              "scores": sc if u.job.scores else None}))
        u.batch = batch


def score_documents(tr, docs: list[Document]) -> list[list[float | None]]:
    """Per sentence: the log-probability per target token (its end or separator token included) of
    the translation, teacher-forced in the instances translation decodes
    (:func:`docnmt.scoring.document_logprobs`, as ``docnmt translate --print-scores``); None for an
    empty translation."""
    from .scoring import document_logprobs
    try:
        scored = document_logprobs(tr, [Document(d.docid, d.src, list(d.tgt)) for d in docs], origin="translation")
    except DocnmtError as e:        # a context the model cannot take: no scores rather than no translation
        log.warning("no scores: %s", e)
        return [[None] * len(d.tgt) for d in docs]
    return [[round(lp / n, 4) if t.strip() and n else None for (lp, n), t in zip(per, d.tgt)]
            for per, d in zip(scored, docs)]


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------

class Metrics:
    """Counters for GET /metrics: requests by status, tokens, batches, latency percentiles."""

    def __init__(self, window: float = 60.0):
        self.started = time.time()
        self.lock = threading.Lock()
        self.status: Counter = Counter()
        self.latency: dict[str, deque] = {}
        self.tokens: deque = deque()            # (time, source tokens) of finished batches, last ``window`` s
        self.window = window
        self.totals = Counter()

    def request(self, kind: str, status: int, seconds: float) -> None:
        with self.lock:
            self.status[f"{kind} {status}"] += 1
            if status == 200:
                self.latency.setdefault(kind, deque(maxlen=2000)).append(seconds)

    def batch(self, requests: int, units: int, tokens: int, seconds: float) -> None:
        now = time.monotonic()
        with self.lock:
            self.totals.update(batches=1, batch_requests=requests, units=units, source_tokens=tokens,
                               decode_seconds=seconds)
            self.tokens.append((now, tokens))
            while self.tokens and self.tokens[0][0] < now - self.window:
                self.tokens.popleft()

    def token_rate(self) -> float:
        """Source tokens per second over the last ``window`` seconds (or the uptime, if shorter)."""
        now = time.monotonic()
        with self.lock:
            recent = sum(n for t, n in self.tokens if t >= now - self.window)
        return recent / max(min(self.window, time.time() - self.started), 1.0)

    def snapshot(self) -> dict:
        with self.lock:
            lat = {k: {"count": len(v), **{f"p{q}_ms": round(1000 * float(np.percentile(v, q)), 1)
                                           for q in (50, 90, 99)}} for k, v in self.latency.items() if v}
            t, status = dict(self.totals), dict(self.status)
        uptime = time.time() - self.started
        return {"uptime_s": round(uptime, 1), "requests": status,
                "requests_total": sum(status.values()), "latency": lat,
                "source_tokens_total": t.get("source_tokens", 0),
                "source_tokens_per_s": {"last_60s": round(self.token_rate(), 1),
                                        "while_decoding": round(t.get("source_tokens", 0)
                                                                / max(t.get("decode_seconds", 0), 1e-9), 1)},
                "batches": t.get("batches", 0),
                "requests_per_batch": round(t.get("batch_requests", 0) / max(t.get("batches", 0), 1), 2),
                "rss_mb": rss_mb()}


def rss_mb() -> float | None:
    """Resident memory of this process in MB (Linux), else None."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


# --------------------------------------------------------------------------------------------
# Files: the formats `prepare` reads, written back the same way
# --------------------------------------------------------------------------------------------

UPLOAD_FORMATS = ("auto", "marker", "plain", "blankline", "xml", "sgml", "jsonl")
MEDIA = {"jsonl": "application/jsonl", "xml": "application/xml", "sgml": "application/xml"}


def safe_name(filename: str | None) -> str:
    """An uploaded file's name reduced to its last component of safe characters (never a path)."""
    base = re.split(r"[\\/]", filename or "")[-1]
    base = re.sub(r"[^\w.-]", "_", base, flags=re.ASCII).lstrip(".")[:100]     # ASCII: it goes into a header
    return base or "upload.txt"


def read_upload(data: bytes, filename: str, fmt: str) -> tuple[list[Document], str, str]:
    """Documents of an uploaded file, its format and its text; DataError naming ``filename``."""
    if fmt not in UPLOAD_FORMATS:
        raise DataError(f"format {fmt!r}: use one of {', '.join(UPLOAD_FORMATS)}")
    with tempfile.TemporaryDirectory(prefix="docnmt-upload-") as tmp:
        path = Path(tmp) / filename
        path.write_bytes(data)
        try:
            text = readers.read_text(path)
            fmt = readers.detect_format(text) if fmt == "auto" else fmt
            if fmt == "bcontrast":
                raise DataError("BConTrasT JSON cannot be written back: convert it to JSONL first")
            docs = readers.read_documents(path, fmt=fmt)
        except DataError as e:
            raise DataError(e.message, filename, e.line) from None
    return docs, fmt, text.text


def write_back(docs: list[Document], fmt: str, original: str) -> str:
    """The translation in the input's format: ``<d>`` lines (plain and blank-line input as
    ``docnmt translate`` writes them), JSONL with ``tgt``, or the XML/SGML file with every
    segment's text replaced by its translation (``srcset`` renamed ``tstset``)."""
    buf = io.StringIO()
    if fmt == "jsonl":
        readers.write_jsonl([Document(d.docid, d.src, d.tgt, _public_meta(d.meta)) for d in docs], buf)
    elif fmt in ("xml", "sgml"):
        return readers.replace_segments(original, [t for d in docs for t in d.tgt])
    else:
        readers.write_marker(docs, buf, side="tgt", allow_empty=True)
    return buf.getvalue()


def _public_meta(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k not in ("problem", "scores")}




# --------------------------------------------------------------------------------------------
# The HTTP application
# --------------------------------------------------------------------------------------------

class Service:
    """What the application serves: models, settings, the scheduler and the metrics."""

    def __init__(self, models: dict[str, Served], settings: Settings, decode=None):
        if not models:
            raise DocnmtError("no model to serve")
        self.models, self.settings = models, settings
        self.metrics = Metrics()
        self.scheduler = Scheduler(settings, self.metrics, decode)

    def model(self, name: str | None) -> Served:
        if name is None:
            return next(iter(self.models.values()))
        if name not in self.models:
            raise LookupError(f"unknown model {name!r}; served: {', '.join(self.models)}")
        return self.models[name]

    def prepare(self, served: Served, docs: list[Document], options: Options) -> tuple[tuple, object, list[int]]:
        """Check a request against the limits and the model; its decoding key, config and tokens."""
        s = self.settings
        n = sum(len(d.src) for d in docs)
        chars = sum(len(x) for d in docs for x in d.src)
        if n > s.max_sentences:
            raise TooLarge(f"{n} sentences; a request may have {s.max_sentences}")
        if chars > s.max_chars:
            raise TooLarge(f"{chars} characters; a request may have {s.max_chars}")
        if options.beam is not None and options.beam > s.max_beam:
            raise DataError(f"options.beam: at most {s.max_beam} here, not {options.beam}")
        overrides = options.overrides()
        cfg = served.config(overrides)          # ConfigError for values the model cannot take
        ids = served.vocab.encode_batch([x for d in docs for x in d.src], "src")
        total = sum(map(len, ids))
        if total > s.max_tokens:
            raise TooLarge(f"{total} subword tokens; a request may have {s.max_tokens}")
        limit = served.cfg.model.max_positions - 2
        tokens, pos = [], 0
        for d in docs:
            for k, sent in enumerate(ids[pos:pos + len(d.src)]):
                if len(sent) > limit:
                    raise DataError(f"{'' if len(docs) == 1 else f'document {d.docid!r}, '}sentence {k + 1}: "
                                    f"{len(sent)} subword tokens, more than the {limit} the model takes")
            tokens.append(sum(len(x) for x in ids[pos:pos + len(d.src)]))
            pos += len(d.src)
        return (served.name, *sorted(overrides.items())), cfg, tokens     # units decoded together share this

    async def translate(self, served: Served, docs: list[Document], options: Options) -> tuple[list[Document], dict]:
        arrived = time.monotonic()
        key, cfg, tokens = await asyncio.to_thread(self.prepare, served, docs, options)
        job = self.scheduler.submit(served, key, cfg, docs, tokens, options.scores)
        try:
            units = await asyncio.wait_for(asyncio.shield(job.future), self.settings.timeout or None)
        except asyncio.TimeoutError:
            raise Busy(f"not translated within {self.settings.timeout:g} s; retry later or send a shorter "
                       "document", self.scheduler.retry_after()) from None
        finally:
            self.scheduler.finish(job)
        done = time.monotonic()
        out = [d for u in units for d in u.result]
        started = job.started or done
        timing = {"queued_ms": round(1000 * (started - arrived), 1), "total_ms": round(1000 * (done - arrived), 1),
                  "source_tokens": sum(tokens)}
        batches = list({id(u.batch): u.batch for u in units}.values())      # units of one batch share it
        return out, {"timing": timing, "batches": batches}


class TooLarge(DataError):
    """A request over a size limit: 413."""


def coverage(docs: list[Document]) -> dict:
    """The coverage report of a request's documents (``docnmt translate --report``'s
    document-level fields)."""
    problems = [d.docid for d in docs if d.meta.get("problem") or any(not t.strip() for t in d.tgt)]
    return {"documents": len(docs), "documents_fully_recovered": len(docs) - len(problems),
            "sentences": sum(len(d.src) for d in docs),
            "empty_sentences": sum(1 for d in docs for t in d.tgt if not t.strip()),
            "documents_with_problems": problems}


def sentence_rows(doc: Document, paragraphs: list[int] | None = None) -> list[dict]:
    scores = doc.meta.get("scores") or [None] * len(doc.src)
    nbest = doc.meta.get("nbest")
    rows = []
    for k, (s, t) in enumerate(zip(doc.src, doc.tgt)):
        row = {"source": s, "translation": t, "score": scores[k], "empty": not t.strip()}
        if paragraphs is not None:
            row["paragraph"] = paragraphs[k]
        if nbest:
            row["nbest"] = nbest[k]
        rows.append(row)
    return rows


class UnsupportedMedia(Exception):
    """A request body in a form encoding where JSON is expected: 415."""


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
KINDS = {"/v1/translate": "translate", "/v1/translate/file": "file"}      # the request kinds of /metrics


def not_json(constant: str):
    """``json.loads``' hook for NaN and Infinity, which JSON does not have."""
    raise ValueError(f"{constant} is not a JSON number")


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(message).split())}, status, headers=headers)


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is answered 413 before the app reads it."""

    def __init__(self, app, limit: int, metrics: "Metrics | None" = None):
        self.app, self.limit, self.metrics = app, limit, metrics

    async def _refuse(self, scope, receive, send):
        if self.metrics is not None and scope["path"] in KINDS:
            self.metrics.request(KINDS[scope["path"]], 413, 0.0)
        await error(413, f"request body over the limit of {self.limit} bytes")(scope, receive, send)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await self._refuse(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            size += len(message.get("body", b""))
            if size > self.limit:
                return await self._refuse(scope, receive, send)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        await self.app(scope, replay, send)


def create_app(service: Service) -> FastAPI:
    """The FastAPI application of ``service`` (its scheduler started and stopped with it)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        service.scheduler.start()
        yield
        service.scheduler.stop()

    app = FastAPI(title="docnmt", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Document-level translation: POST a document, get it back sentence by sentence "
                              "with scores and a coverage report. See docs/serving.md.")
    app.add_middleware(BodyLimit, limit=service.settings.max_upload_bytes, metrics=service.metrics)
    key_header = APIKeyHeader(name="X-API-Key", auto_error=False)
    bearer = HTTPBearer(auto_error=False)
    metrics = service.metrics

    def authorised(key: str | None = Security(key_header),
                   token: HTTPAuthorizationCredentials | None = Security(bearer)) -> None:
        expected = service.settings.api_key
        given = key or (token.credentials if token else None)
        if expected and not (given and hmac.compare_digest(given.encode(), expected.encode())):
            raise HTTPException(401, "missing or wrong API key (X-API-Key header or Authorization: Bearer)")

    @app.exception_handler(HTTPException)
    async def http_error(request, e: HTTPException):
        if request.url.path in KINDS:          # a wrong method, a missing key: counted like the other answers
            metrics.request(KINDS[request.url.path], e.status_code, 0.0)
        return error(e.status_code, e.detail, getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request, e: RequestValidationError):
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"] if p != "body")
        if request.url.path in KINDS:
            metrics.request(KINDS[request.url.path], 422, 0.0)
        return error(422, f"{where}: {err['msg']}" if where else err["msg"])

    @app.exception_handler(Exception)
    async def crashed(request, e: Exception):
        log.exception("internal error")
        return error(500, "internal error (see the server log)")

    async def answer(kind: str, handler):
        start = time.monotonic()
        try:
            response = await handler()
        except TooLarge as e:
            response = error(413, e)
        except UnsupportedMedia as e:
            response = error(415, e)
        except Busy as e:
            response = error(503, e, {"Retry-After": str(e.retry_after)})
        except LookupError as e:
            response = error(404, e.args[0])
        except DocnmtError as e:
            response = error(422, e)
        except Exception:                       # noqa: BLE001 - logged; the server lives on
            log.exception("internal error")
            response = error(500, "internal error (see the server log)")
        metrics.request(kind, response.status_code, time.monotonic() - start)
        return response

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(WEB / "index.html")

    app.mount("/static", StaticFiles(directory=WEB), name="static")
    app.mount("/swagger-ui", StaticFiles(directory=Path(swagger_ui.__file__).parent / "static"), name="swagger")

    @app.get("/docs", include_in_schema=False)
    async def api_docs():
        return get_swagger_ui_html(openapi_url="/openapi.json", title="docnmt API",
                                   swagger_js_url="/swagger-ui/swagger-ui-bundle.js",
                                   swagger_css_url="/swagger-ui/swagger-ui.css",
                                   swagger_favicon_url="/swagger-ui/favicon-32x32.png")

    @app.get("/healthz", summary="liveness: ok while the server runs")
    async def healthz():
        return {"status": "ok", "models": list(service.models), "api_key_required": bool(service.settings.api_key)}

    @app.get("/v1/models", summary="the served models and their decoding defaults",
             dependencies=[Security(authorised)])
    async def list_models():
        s = service.settings
        return {"models": [m.info() for m in service.models.values()],
                "limits": {"max_sentences": s.max_sentences, "max_chars": s.max_chars, "max_tokens": s.max_tokens,
                           "max_upload_bytes": s.max_upload_bytes, "max_beam": s.max_beam, "timeout_s": s.timeout}}

    @app.get("/metrics", summary="requests, tokens/s, queue length, latency percentiles",
             dependencies=[Security(authorised)])
    async def get_metrics():
        return {**metrics.snapshot(), "queue": service.scheduler.queue_length(),
                "workers": service.settings.workers}

    schema = inline_schema(TranslateRequest.model_json_schema())

    @app.post("/v1/translate", summary="translate one document (JSON)", dependencies=[Security(authorised)],
              openapi_extra={"requestBody": {"required": True,
                                             "content": {"application/json": {"schema": schema}}}})
    async def translate(request: Request):
        async def handle():
            media = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if media in FORM_TYPES:
                raise UnsupportedMedia(f"the body is {media}: send the request as JSON (Content-Type: "
                                       "application/json); files go to POST /v1/translate/file")
            body = await request.body()
            try:
                obj = json.loads(body.decode("utf-8"), parse_constant=not_json)
            except UnicodeDecodeError as e:
                raise DataError(f"the request body is not valid UTF-8 (byte {e.start})") from None
            except (ValueError, RecursionError) as e:
                raise DataError(f"invalid JSON: {getattr(e, 'msg', e)}"
                                + (f" (line {e.lineno} column {e.colno})" if hasattr(e, "lineno") else "")) from None
            try:
                req = TranslateRequest.model_validate(obj)
            except ValidationError as e:
                raise DataError(one_line(e)) from None
            if (req.sentences is None) == (req.text is None):
                raise DataError("give the document as either 'sentences' or 'text'")
            served = service.model(req.model)
            if req.text is not None:
                sents, paras = split_text(req.text, req.split, req.lang)
            else:
                sents, paras = check_sentences(req.sentences), None
            out, extra = await service.translate(served, [Document("0", sents)], req.options)
            doc = out[0]
            result = {"model": served.name, "translation": doc.tgt,
                      "sentences": sentence_rows(doc, paras), "coverage": coverage(out), **extra}
            if req.text is not None:
                result["text"] = join_text(doc.tgt, paras, req.split)
                result["split"] = {"by": req.split, "lang": req.lang if req.split == "sentences" else None,
                                   "paragraphs": len(set(paras)), "sentences": len(sents)}
            return JSONResponse(result)
        return await answer("translate", handle)

    @app.post("/v1/translate/file", summary="translate a file (marker, plain, XML/SGML, JSONL) into the same format",
              dependencies=[Security(authorised)])
    async def translate_file(file: UploadFile = File(..., description="the documents to translate"),
                             model: str | None = Form(None),
                             format: str = Form("auto", description=" | ".join(UPLOAD_FORMATS)),
                             options: str = Form("{}", description="decoding options as JSON (see /v1/translate)"),
                             response: Literal["file", "json"] = Form(
                                 "file", description="file: the translated file; json: sentence-aligned JSON "
                                                     "with the file in `file`")):
        async def handle():
            try:
                opts = Options.model_validate_json(options)
            except ValidationError as e:
                raise DataError(one_line(e, "options.")) from None
            served = service.model(model)
            name = safe_name(file.filename)
            data = await file.read()
            docs, fmt, original = await asyncio.to_thread(read_upload, data, name, format)
            out, extra = await service.translate(served, docs, opts)
            text = await asyncio.to_thread(write_back, out, fmt, original)
            stem, dot, ext = name.rpartition(".")
            out_name = f"{stem}.translated.{ext}" if dot else f"{name}.translated"
            cov = coverage(out)
            if response == "json":
                return JSONResponse({"model": served.name, "format": fmt, "filename": out_name, "file": text,
                                     "documents": [{"id": d.docid, "sentences": sentence_rows(d)} for d in out],
                                     "coverage": cov, **extra})
            return Response(text, media_type=MEDIA.get(fmt, "text/plain") + "; charset=utf-8",
                            headers={"Content-Disposition": f'attachment; filename="{out_name}"',
                                     "X-Docnmt-Coverage": json.dumps({k: v for k, v in cov.items()
                                                                      if k != "documents_with_problems"})})
        return await answer("file", handle)

    return app


def serve(models: list[str], host: str = "127.0.0.1", port: int = 8000, settings: Settings | None = None,
          device: str | None = None, threads: int = 0, log_level: str = "info", announce=print) -> None:
    """Load ``models`` and serve them until interrupted (``docnmt serve``)."""
    import socket

    import torch
    import uvicorn
    settings = settings or Settings()
    cores = os.cpu_count() or 1
    torch.set_num_threads(threads or max(1, cores // settings.workers))
    service = Service(load_models(models, settings.workers, device), settings)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise DocnmtError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    port = sock.getsockname()[1]
    if host not in ("127.0.0.1", "localhost", "::1") and not settings.api_key:
        announce(f"warning: listening on {host} without an API key: anyone who reaches it can use it")
    where = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    announce(f"docnmt serve: {', '.join(service.models)} on {where} (web page at /, API docs at /docs)")
    config = uvicorn.Config(create_app(service), log_level=log_level, access_log=log_level == "debug",
                            timeout_graceful_shutdown=5)
    server = quiet_stop_server(config)
    server.run(sockets=[sock])
    if server.signals:
        announce(f"docnmt serve: stopped ({signal.Signals(server.signals[-1]).name}); requests in flight were answered")


def quiet_stop_server(config):
    """uvicorn's server for ``config``, for which SIGINT and SIGTERM are a normal stop: after its
    graceful shutdown it does not raise the signal again (uvicorn does, so a supervisor would see
    exit 130 or 143 for every stop); the signals it got end up in ``signals``."""
    import uvicorn

    class Server(uvicorn.Server):
        signals: list[int] = []

        @contextlib.contextmanager
        def capture_signals(self):
            with super().capture_signals():
                try:
                    yield
                finally:
                    self.signals = list(self._captured_signals)
                    self._captured_signals.clear()
    return Server(config)


def spawn(models: dict[str, str], log: Path, flags: list[str] = (), env: dict | None = None,
          timeout: float = 300) -> tuple:
    """Start ``docnmt serve NAME=DIR... --port 0 FLAGS`` in a child process, its stderr in
    ``log``, and wait until ``/healthz`` answers: ``(process, base URL)``. For scripts and tests
    that need a real server; :class:`DocnmtError` with the log when it stops or does not start."""
    import subprocess
    import sys
    import urllib.error
    import urllib.request
    cmd = [sys.executable, "-m", "docnmt.cli", "serve", *(f"{k}={v}" for k, v in models.items()),
           "--port", "0", *flags]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, **(env or {})})
    deadline = time.time() + timeout
    while time.time() < deadline:
        if m := re.search(r" on (http://\S+) ", Path(log).read_text()):
            try:
                with urllib.request.urlopen(m.group(1) + "/healthz", timeout=5) as r:
                    if r.status == 200:
                        return proc, m.group(1)
            except (urllib.error.URLError, OSError):
                pass
        if proc.poll() is not None:
            raise DocnmtError(f"the server stopped: {Path(log).read_text()}")
        time.sleep(0.2)
    proc.kill()
    raise DocnmtError(f"the server did not start in {timeout:g} s: {Path(log).read_text()}")
