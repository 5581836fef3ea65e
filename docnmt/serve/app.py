"""The HTTP application of ``docnmt serve``: the routes of the API and the web page
(docs/serving.md) over a :class:`~docnmt.serve.service.Service`, the error answers, and
:class:`BodyLimit`, which refuses an oversized body before it is read. :func:`create_app` calls one
``add_*`` function per group of routes."""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import swagger_ui  # the swagger-ui-py package: Swagger UI's own files, so /docs needs no CDN
from fastapi import FastAPI, File, Form, Request, Security, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from .. import __version__
from ..document import Document
from ..errors import DataError, DocnmtError
from .files import (
    UPLOAD_FORMATS,
    file_fields,
    join_text,
    media_type,
    read_upload,
    safe_name,
    split_text,
    translated_name,
    write_back,
)
from .metrics import Metrics
from .scheduler import Busy, ClientGone
from .schemas import (
    Options,
    Settings,
    TooLarge,
    TranslateRequest,
    check_sentences,
    coverage,
    inline_schema,
    one_line,
    sentence_rows,
)
from .service import Service

log = logging.getLogger("docnmt.serve")
WEB = Path(__file__).parent.parent / "web"          # docnmt/web: the page, its script and style
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
KINDS = {"/v1/translate": "translate", "/v1/translate/file": "file"}      # the request kinds of /metrics


class UnsupportedMedia(Exception):
    """A request body in a form encoding where JSON is expected: 415."""


def not_json(constant: str):
    """``json.loads``' hook for NaN and Infinity, which JSON does not have."""
    raise ValueError(f"{constant} is not a JSON number")


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(message).split())}, status, headers=headers)


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is answered 413 before the app reads it
    (a declared Content-Length at once, a streamed body as soon as it passes the limit), and one
    that has not arrived whole within ``timeout`` seconds is answered 408 and its connection closed,
    so a client that trickles or stalls its upload holds nothing but its socket for that long."""

    def __init__(self, app, limit: int, metrics: Metrics | None = None, timeout: float = 0):
        self.app, self.limit, self.metrics, self.timeout = app, limit, metrics, timeout

    async def _refuse(self, scope, receive, send, status: int, message: str):
        if self.metrics is not None and scope["path"] in KINDS:
            self.metrics.request(KINDS[scope["path"]], status, 0.0)
        # the rest of the body is never read: the connection closes rather than parse it as a request
        await error(status, message, {"Connection": "close"})(scope, receive, send)

    async def _read(self, receive) -> tuple[bytes | None, int]:
        """The whole body, or (None, 413 | 408 | 0 for a client that hung up)."""
        deadline = time.monotonic() + self.timeout if self.timeout else None
        chunks, size = [], 0
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                message = await asyncio.wait_for(receive(), left)
            except asyncio.TimeoutError:
                return None, 408
            if message["type"] != "http.request":
                return None, 0
            size += len(message.get("body", b""))
            if size > self.limit:
                return None, 413
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                return b"".join(chunks), 200

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        over = f"request body over the limit of {self.limit} bytes"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await self._refuse(scope, receive, send, 413, over)
        body, status = await self._read(receive)
        if body is None:
            if status:
                await self._refuse(scope, receive, send, status, over if status == 413 else
                                   f"the request body did not arrive within {self.timeout:g} s")
            return
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        await self.app(scope, replay, send)


async def client_gone(request: Request) -> None:
    """Returns when the client of ``request`` (its body read) disconnects."""
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)       # not expected after the body; never spin


# --------------------------------------------------------------------------------------------
# The application: each function below adds one group of routes
# --------------------------------------------------------------------------------------------

def create_app(service: Service) -> FastAPI:
    """The FastAPI application of ``service`` (its scheduler started and stopped with it)."""

    @asynccontextmanager
    async def lifespan(app):
        service.scheduler.start()
        yield
        service.scheduler.stop()

    app = FastAPI(title="docnmt", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Document-level translation: POST a document, get it back sentence by sentence "
                              "with scores and a coverage report. See docs/serving.md.")
    app.add_middleware(BodyLimit, limit=service.settings.max_upload_bytes, metrics=service.metrics,
                       timeout=service.settings.body_timeout)
    authorised = api_key_check(service.settings)
    add_error_handlers(app, service.metrics)
    add_pages(app)
    add_info_routes(app, service, authorised)
    add_translate_route(app, service, authorised)
    add_file_route(app, service, authorised)
    return app


def api_key_check(settings: Settings):
    """The dependency that guards the API: 401 unless the request carries ``settings.api_key``
    (``X-API-Key`` or ``Authorization: Bearer``); open when no key is set."""
    key_header = APIKeyHeader(name="X-API-Key", auto_error=False)
    bearer = HTTPBearer(auto_error=False)

    def authorised(key: str | None = Security(key_header),
                   token: HTTPAuthorizationCredentials | None = Security(bearer)) -> None:
        expected = settings.api_key
        given = key or (token.credentials if token else None)
        if expected and not (given and hmac.compare_digest(given.encode(), expected.encode())):
            raise HTTPException(401, "missing or wrong API key (X-API-Key header or Authorization: Bearer)")
    return authorised


def add_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    """Every error answered as ``{"error": one line}``; those of the translate routes counted."""

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


async def answer(metrics: Metrics, kind: str, handler) -> Response:
    """``handler()``'s response, or the error answer of what it raised; counted in ``metrics``."""
    start = time.monotonic()
    try:
        response = await handler()
    except TooLarge as e:
        response = error(413, e)
    except UnsupportedMedia as e:
        response = error(415, e)
    except Busy as e:
        response = error(503, e, {"Retry-After": str(e.retry_after)})
    except ClientGone as e:                 # no one to answer: counted, its work dropped
        response = error(499, e)
    except LookupError as e:
        response = error(404, e.args[0])
    except DocnmtError as e:
        response = error(422, e)
    except Exception:                       # noqa: BLE001 - logged; the server lives on
        log.exception("internal error")
        response = error(500, "internal error (see the server log)")
    metrics.request(kind, response.status_code, time.monotonic() - start)
    return response


def add_pages(app: FastAPI) -> None:
    """The web page at ``/`` (its files under ``/static``) and the API docs at ``/docs``."""

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


def add_info_routes(app: FastAPI, service: Service, authorised) -> None:
    """``/healthz`` (open: it names the models only when no API key is set), ``/v1/models`` and
    ``/metrics`` (behind the API key)."""

    @app.get("/healthz", summary="liveness: ok while the server runs")
    async def healthz():
        keyed = bool(service.settings.api_key)
        return {"status": "ok", **({} if keyed else {"models": list(service.models)}), "api_key_required": keyed}

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
        return {**service.metrics.snapshot(), "queue": service.scheduler.queue_length(),
                "workers": service.settings.workers}


def add_translate_route(app: FastAPI, service: Service, authorised) -> None:
    """``POST /v1/translate``: one document as JSON (its schema written out for the API docs)."""
    schema = inline_schema(TranslateRequest.model_json_schema())

    @app.post("/v1/translate", summary="translate one document (JSON)", dependencies=[Security(authorised)],
              openapi_extra={"requestBody": {"required": True,
                                             "content": {"application/json": {"schema": schema}}}})
    async def translate(request: Request):
        return await answer(service.metrics, "translate", lambda: translate_json(service, request))


async def read_request(request: Request) -> TranslateRequest:
    """The body of ``POST /v1/translate`` checked; UnsupportedMedia for a form, DataError else."""
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
    return req


async def translate_json(service: Service, request: Request) -> JSONResponse:
    """The answer of ``POST /v1/translate``: the document sentence by sentence (and as text)."""
    req = await read_request(request)
    served = service.model(req.model)
    if req.text is not None:
        sents, paras = split_text(req.text, req.split, req.lang)
    else:
        sents, paras = check_sentences(req.sentences), None
    out, extra = await service.translate(served, [Document("0", sents, None, req.meta())], req.options,
                                         lambda: client_gone(request))
    doc = out[0]
    result = {"model": served.name, "translation": doc.tgt,
              "sentences": sentence_rows(doc, paras), "coverage": coverage(out), **extra}
    if req.text is not None:
        result["text"] = join_text(doc.tgt, paras, req.split)
        result["split"] = {"by": req.split, "lang": req.lang if req.split == "sentences" else None,
                           "paragraphs": len(set(paras)), "sentences": len(sents)}
    return JSONResponse(result)


def add_file_route(app: FastAPI, service: Service, authorised) -> None:
    """``POST /v1/translate/file``: a file translated into the same format (or sentence-aligned JSON)."""

    @app.post("/v1/translate/file", summary="translate a file (marker, plain, XML/SGML, JSONL, SRT, WebVTT, "
                                                    "DOCX, Markdown, HTML, text) into the same format",
              dependencies=[Security(authorised)])
    async def translate_file(request: Request, file: UploadFile = File(..., description="the documents to translate"),
                             model: str | None = Form(None),
                             format: str = Form("auto", description=" | ".join(UPLOAD_FORMATS)),
                             options: str = Form("{}", description="decoding options as JSON (see /v1/translate)"),
                             response: Literal["file", "json"] = Form(
                                 "file", description="file: the translated file; json: sentence-aligned JSON "
                                                     "with the file in `file`"),
                             lang: str = Form("en", description="SRT, WebVTT, DOCX, Markdown, HTML, text: the "
                                                                "language whose rules split sentences"),
                             max_line_chars: int | None = Form(None, description="SRT, WebVTT: wrap cue lines")):
        return await answer(service.metrics, "file", lambda: translate_upload(
            service, request, file, model, format, options, response, lang, max_line_chars))


async def translate_upload(service: Service, request: Request, file: UploadFile, model: str | None, fmt: str,
                           options: str, response: str, lang: str = "en",
                           max_line_chars: int | None = None) -> Response:
    """The answer of ``POST /v1/translate/file``: the translated file, or JSON holding it."""
    try:
        opts = Options.model_validate_json(options)
    except ValidationError as e:
        raise DataError(one_line(e, "options.")) from None
    served = service.model(model)
    name = safe_name(file.filename)
    data = await file.read()
    docs, fmt, original = await asyncio.to_thread(read_upload, data, name, fmt, lang, max_line_chars)
    out, extra = await service.translate(served, docs, opts, lambda: client_gone(request))
    text = await asyncio.to_thread(write_back, out, fmt, original)
    out_name = translated_name(name)
    cov = coverage(out)
    if response == "json":
        return JSONResponse({"model": served.name, "format": fmt, "filename": out_name, **file_fields(text, fmt),
                             "documents": [{"id": d.docid, "sentences": sentence_rows(d)} for d in out],
                             "coverage": cov, **extra})
    return Response(text, media_type=media_type(fmt),
                    headers={"Content-Disposition": f'attachment; filename="{out_name}"',
                             "X-Docnmt-Coverage": json.dumps({k: v for k, v in cov.items()
                                                              if k != "documents_with_problems"})})
