"""The service behind ``docnmt serve``'s HTTP routes: the served models, the limits a request is
checked against, and a request's documents handed to the :class:`~docnmt.serve.scheduler.Scheduler`
and awaited (with the answer's timing and batches)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..document import Document
from ..errors import DataError, DocnmtError
from .metrics import Metrics
from .scheduler import Busy, ClientGone, Job, Scheduler
from .schemas import Options, Settings, TooLarge

if TYPE_CHECKING:
    from .launcher import Served


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
        n = sum(len(d.src) + len((d.meta.get("context") or {}).get("src", ())) for d in docs)    # context too
        chars = sum(len(x) for d in docs for x in [*d.src, *(d.meta.get("context") or {}).get("src", ())])
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

    async def translate(self, served: Served, docs: list[Document], options: Options,
                        disconnected: Callable[[], Awaitable] | None = None) -> tuple[list[Document], dict]:
        """Translate ``docs``; ``disconnected()`` returns when the client hangs up, which gives the
        request up (ClientGone) rather than decoding for no one."""
        arrived = time.monotonic()
        self.scheduler.check_room()             # full: 503 before any work (submit checks again)
        key, cfg, tokens = await asyncio.to_thread(self.prepare, served, docs, options)
        job = self.scheduler.submit(served, key, cfg, docs, tokens, options.scores)
        try:
            units = await self.wait(job, disconnected)
        finally:            # answered, timed out, client gone or the handler cancelled: its place is freed
            self.scheduler.finish(job)
        done = time.monotonic()
        out = [d for u in units for d in u.result]
        started = job.started or done
        timing = {"queued_ms": round(1000 * (started - arrived), 1), "total_ms": round(1000 * (done - arrived), 1),
                  "source_tokens": sum(tokens)}
        batches = list({id(u.batch): u.batch for u in units}.values())      # units of one batch share it
        return out, {"timing": timing, "batches": batches}

    async def wait(self, job: Job, disconnected: Callable[[], Awaitable] | None) -> list:
        """The job's units once decoded; Busy after ``timeout``, ClientGone if the client left first."""
        watcher = asyncio.ensure_future(disconnected()) if disconnected else None
        try:
            done, _ = await asyncio.wait([job.future, *([watcher] if watcher else [])],
                                         timeout=self.settings.timeout or None, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if watcher is not None:
                watcher.cancel()
        if job.future.done():
            return job.future.result()
        if watcher in done:
            raise ClientGone("the client disconnected")
        raise Busy(f"not translated within {self.settings.timeout:g} s; retry later or send a shorter "
                   "document", self.scheduler.retry_after())
