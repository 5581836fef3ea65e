"""``docnmt serve``: models over HTTP (the service itself is :mod:`docnmt.serve`)."""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import DocnmtError
from .flags import add_verb, positive_int


def add_serve(sub) -> None:
    p = add_verb(sub, "serve", "serve models over HTTP: a JSON API, file upload and a web page "
                               "(needs pip install docnmt[serve])")
    p.add_argument("models", nargs="+", metavar="MODEL", help="model directories, optionally NAME=DIR")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed at start)")
    p.add_argument("--api-key", default=os.environ.get("DOCNMT_API_KEY", ""),
                   help="require this key (X-API-Key or Authorization: Bearer) for the API; default "
                        "$DOCNMT_API_KEY, else none")
    p.add_argument("--workers", type=positive_int, default=1,
                   help="decoding threads, each with its own copy of every model; with two or more one is "
                        "always kept for short requests")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads per process (0: cores / workers; at most the machine's cores)")
    p.add_argument("--device", help="cpu | cuda")
    p.add_argument("--request-sentences", type=positive_int, default=5000, metavar="N",
                   help="source sentences per request, at most (413 beyond)")
    p.add_argument("--request-chars", type=positive_int, default=500_000, metavar="N",
                   help="source characters per request, at most (413 beyond)")
    p.add_argument("--request-tokens", type=positive_int, default=100_000, metavar="N",
                   help="source subword tokens per request, at most (413 beyond)")
    p.add_argument("--max-upload-mb", type=float, default=4.0, help="request body size (JSON or uploaded file)")
    p.add_argument("--max-beam", type=positive_int, default=16, help="largest beam a request may ask for")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds a request may wait and decode before it is answered 503")
    p.add_argument("--queue", type=positive_int, default=64,
                   help="requests in the service at once; more are answered 503 with Retry-After")
    p.add_argument("--batch-wait-ms", type=float, default=5.0,
                   help="how long a request waits for others to be decoded with it")
    p.add_argument("--max-tokens", dest="batch_tokens", type=positive_int, default=4000, metavar="N",
                   help="batch budget: source tokens decoded together, at most")
    p.add_argument("--batch-tokens", dest="batch_tokens", type=positive_int, help=argparse.SUPPRESS)  # the old name
    p.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                   help="seconds a request body may take to arrive whole (408 and the connection closed beyond)")
    p.add_argument("--engine", default="docnmt", choices=["docnmt", "ctranslate2"],
                   help="who runs the search: docnmt, or CTranslate2 for plain Transformers (pip install docnmt[ct2])")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "int8"],
                   help="decoding precision (default: the model's; int8: dynamic int8 linear layers on a CPU)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="server log level on stderr")


def check_threads(threads: int) -> None:
    """``--threads``: 0 (automatic) up to the machine's cores; more only oversubscribes them."""
    cores = os.cpu_count() or 1
    if not 0 <= threads <= cores:
        raise DocnmtError(f"--threads {threads}: give 0 (cores / workers) or 1 to {cores}, this machine's cores")


def cmd_serve(args) -> int:
    check_threads(args.threads)
    try:
        from ..serve import Settings, serve
    except ImportError as e:
        raise DocnmtError(f"docnmt serve needs the serve extra ({e.name} is missing): "
                          "pip install 'docnmt[serve]'") from None
    settings = Settings(max_sentences=args.request_sentences, max_chars=args.request_chars,
                        max_tokens=args.request_tokens,
                        max_upload_bytes=int(args.max_upload_mb * 2**20), max_beam=args.max_beam,
                        timeout=args.timeout, queue=args.queue, batch_wait=args.batch_wait_ms / 1000,
                        batch_tokens=args.batch_tokens, workers=args.workers, api_key=args.api_key,
                        body_timeout=args.body_timeout)
    decode = {"decode.engine": args.engine, **({"decode.precision": args.precision} if args.precision else {})}
    serve(args.models, args.host, args.port, settings, args.device, args.threads, args.log_level,
          announce=lambda m: print(m, file=sys.stderr, flush=True), decode=decode)
    return 0
