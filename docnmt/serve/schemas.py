"""What a request and an answer of ``docnmt serve`` hold: the server's limits (:class:`Settings`),
the JSON request models, their validation messages as one line, and the answer's sentence rows and
coverage report."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .. import methods
from ..document import Document
from ..errors import DataError, DocnmtError
from ..forced_context import check_context


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
    body_timeout: float = 30.0           # seconds a request body may take to arrive whole (408 beyond)

    def __post_init__(self):
        for name in ("max_sentences", "max_chars", "max_tokens", "max_upload_bytes", "max_beam", "queue",
                     "batch_tokens", "long_tokens", "workers"):
            if getattr(self, name) < 1:
                raise DocnmtError(f"{name.replace('_', '-')} must be at least 1, not {getattr(self, name)}")
        for name in ("timeout", "batch_wait", "aging", "body_timeout"):
            if not getattr(self, name) >= 0 or not math.isfinite(getattr(self, name)):
                raise DocnmtError(f"{name.replace('_', '-')} must be at least 0, not {getattr(self, name)}")


class CoreOptions(BaseModel):
    """Decoding options of one request; those left out are the model's own (its config's ``decode``).
    :data:`Options` adds the decoding settings the methods and switches declare."""

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
    max_instance_tokens: int | None = Field(None, ge=0, description="Doc2Doc: instance budget (0 = whole documents)")
    scores: bool = Field(True, description="per-sentence scores (a teacher-forced pass over the translation)")
    fallback: Literal["auto", "sentence", "none"] | None = Field(
        None, description="sentences an output lost (empty or merged) translated again, each alone: auto (on for "
                          "models whose outputs hold several sentences) | sentence | none")

    def overrides(self) -> dict:
        """The config overrides these options make (``decode.*``, ``data.max_instance_tokens``)."""
        out = {}
        for key, value in self.model_dump(exclude={"scores"}).items():
            if value is not None:
                out[("data." if key == "max_instance_tokens" else "decode.") + key] = value
        return out


def request_settings() -> list:
    """The decoding settings of the methods and switches that a request may set (their ranges are
    checked with the model's config, :meth:`docnmt.serve.launcher.Served.config`)."""
    return [s for s in methods.settings() if s.section == "decode" and s.service]


Options = create_model(
    "Options", __base__=CoreOptions, __doc__=CoreOptions.__doc__,
    **{s.name: (s.type | None, Field(None, description=s.help)) for s in request_settings()})


class Context(BaseModel):
    """Earlier sentences of the document and their translations: the context of the new ones."""

    model_config = ConfigDict(extra="forbid", strict=True)
    src: list[str] = Field(description="earlier source sentences of the document, one an item")
    tgt: list[str] | None = Field(None, description="their translations (edited or not), as many as src: forced as "
                                                    "the target context (left out: translated, not returned)")


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
    context: Context | None = Field(None, description="earlier sentences and their translations, forced as the "
                                                      "context; only the new sentences are translated and returned")

    def meta(self) -> dict:
        """The document's meta: its context, checked (DataError)."""
        return {"context": check_context(self.context.model_dump(), "context")} if self.context else {}


class TooLarge(DataError):
    """A request over a size limit: 413."""


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
    """A request's ``sentences``, whitespace normalised; DataError for an empty one or a line break."""
    if not sentences:
        raise DataError("empty document: no sentences")
    for k, s in enumerate(sentences):
        if not s.strip():
            raise DataError(f"sentences[{k}]: empty sentence")
        if "\n" in s or "\r" in s:
            raise DataError(f"sentences[{k}]: a line break inside a sentence; send one sentence an item")
    return [" ".join(s.split()) for s in sentences]


def coverage(docs: list[Document]) -> dict:
    """The coverage report of a request's documents (``docnmt translate --report``'s
    document-level fields)."""
    problems = [d.docid for d in docs if d.meta.get("problem") or any(not t.strip() for t in d.tgt)]
    return {"documents": len(docs), "documents_fully_recovered": len(docs) - len(problems),
            "sentences": sum(len(d.src) for d in docs),
            "empty_sentences": sum(1 for d in docs for t in d.tgt if not t.strip()),
            "documents_with_problems": problems,
            "repaired_sentences": sum(len(d.meta.get("repaired") or ()) for d in docs)}


def sentence_rows(doc: Document, paragraphs: list[int] | None = None) -> list[dict]:
    """A translated document as the answer's rows: source, translation, score (and paragraph, n-best)."""
    scores = doc.meta.get("scores") or [None] * len(doc.src)
    nbest = doc.meta.get("nbest")
    rows = []
    for k, (s, t) in enumerate(zip(doc.src, doc.tgt)):
        row = {"source": s, "translation": t, "score": scores[k], "empty": not t.strip(),
               "repaired": k in (doc.meta.get("repaired") or ())}
        if paragraphs is not None:
            row["paragraph"] = paragraphs[k]
        if nbest:
            row["nbest"] = nbest[k]
        rows.append(row)
    return rows
