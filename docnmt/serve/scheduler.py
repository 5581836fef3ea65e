"""Scheduling of ``docnmt serve``: requests become *units* that worker threads decode (decoding
runs off the event loop).

A unit is one document, or the whole request for a model that looks across its decoding batch
(DocFlat's flat-batch attention; ``Method.score_alone``), so requests never see each other there.
The :class:`Scheduler` hands units to the workers:

* units of one model with the same decoding options that arrive together are translated in one
  ``Translator.translate`` call, up to ``batch_tokens`` source tokens, after waiting at most
  ``batch_wait`` seconds for company;
* the shortest unit goes first, except that a unit waiting longer than ``aging`` seconds goes
  before any other; a *long* unit (over ``long_tokens`` source tokens) is never grouped with short
  ones, and with two or more workers one worker is always left to short units, so a long
  document never starves short requests;
* at most ``queue`` requests are in the service at once; past that a request is answered 503 with
  ``Retry-After`` (:class:`Busy`), as is one that is not done within ``timeout`` seconds.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..document import Document
from ..errors import DocnmtError
from .metrics import Metrics
from .schemas import Settings

if TYPE_CHECKING:
    from .launcher import Served

log = logging.getLogger("docnmt.serve")


class Busy(Exception):
    """The service is full: answered 503 with Retry-After."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class ClientGone(Exception):
    """The client hung up before its answer was ready: its work is dropped (counted as 499)."""


@dataclass(eq=False)
class Unit:
    """Documents decoded together, never split: one document, or a whole request (DocFlat)."""

    job: Job
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

    def __init__(self, settings: Settings, metrics: Metrics, decode=None):
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
            self.check_room()
            self.jobs += 1
            job.units = [Unit(job, d, t, long=t > self.s.long_tokens, alone=model.alone) for d, t in parts]
            job.left = len(job.units)
            self.pending.extend(job.units)
            self.cond.notify_all()
        return job

    def check_room(self) -> None:
        """Busy when ``queue`` requests are in the service: called before a request is even checked
        and tokenized, so that under overload the 503 comes at once."""
        if self.jobs >= self.s.queue:
            raise Busy(f"the service is full ({self.jobs} requests in it); retry later", self.retry_after())

    def finish(self, job: Job) -> None:
        """The request is answered or given up (timeout, client gone, cancelled): drop its units that
        have not started, and cancel its future so that units in progress keep no results for it.
        On the event loop."""
        with self.cond:
            self.jobs -= 1
            self.pending = [u for u in self.pending if u.job is not job]
        job.future.cancel()

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
    from ..scoring import document_logprobs
    try:
        scored = document_logprobs(tr, [Document(d.docid, d.src, list(d.tgt)) for d in docs], origin="translation")
    except DocnmtError as e:        # a context the model cannot take: no scores rather than no translation
        log.warning("no scores: %s", e)
        return [[None] * len(d.tgt) for d in docs]
    return [[round(lp / n, 4) if t.strip() and n else None for (lp, n), t in zip(per, d.tgt)]
            for per, d in zip(scored, docs)]
