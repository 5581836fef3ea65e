"""``docnmt serve``: a document translation service, an HTTP API and a web page (docs/serving.md).

Every model is loaded once per decoding worker and translates exactly as ``docnmt translate``
does, through :class:`docnmt.translate.Translator` (Doc2Doc splitting, G-Transformer's frame,
sliding decoding, DocFlat's passes, context inputs). The package, by responsibility:

* :mod:`.schemas` -- the server's limits (``Settings``), the request models and their one-line
  validation messages, the answer's sentence rows and coverage report;
* :mod:`.files` -- text split into sentences and joined back; uploaded files in every format, read
  and written back (the one place a new upload format goes);
* :mod:`.scheduler` -- units, the scheduler and its worker threads, batched decoding (how requests
  are batched, ordered and refused when the service is full);
* :mod:`.metrics` -- the counters of ``GET /metrics``;
* :mod:`.service` -- a request checked against the limits, scheduled and awaited;
* :mod:`.app` -- the FastAPI application: routes, error answers, the body-size middleware;
* :mod:`.launcher` -- the served models, the socket and uvicorn (``serve``), and ``spawn`` for a
  server in a child process.

Nothing a request names is ever opened as a path; an uploaded file is size-limited, written only
into a fresh temporary directory under a sanitised name and removed after reading.
"""
from .app import WEB, BodyLimit, create_app
from .files import UPLOAD_FORMATS, join_text, read_upload, safe_name, split_text, write_back
from .launcher import Served, load_models, model_names, serve, spawn
from .metrics import Metrics, rss_mb
from .scheduler import Busy, ClientGone, Job, Scheduler, Unit, chunks, decode_group, release_memory
from .schemas import Options, Settings, TooLarge, TranslateRequest, inline_schema, one_line
from .service import Service

__all__ = ["WEB", "BodyLimit", "create_app", "UPLOAD_FORMATS", "join_text", "read_upload", "safe_name", "split_text",
           "write_back", "Served", "load_models", "model_names", "serve", "spawn", "Metrics", "rss_mb", "Busy",
           "ClientGone", "Job", "Scheduler", "Unit", "chunks", "decode_group", "release_memory", "Options",
           "Settings", "TooLarge", "TranslateRequest", "inline_schema", "one_line", "Service"]
