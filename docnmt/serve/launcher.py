"""Starting ``docnmt serve``: the served models (each loaded once per decoding worker, translating
exactly as ``docnmt translate`` does through :class:`docnmt.translate.Translator`), the listening
socket and uvicorn, and :func:`spawn` for scripts and tests that need a real server process."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from pathlib import Path

from ..errors import DataError, DocnmtError
from .app import Service, create_app
from .schemas import Settings, request_settings


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
                           **{s.name: getattr(c, s.name) for s in request_settings()}}}


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


def load_models(specs: list[str], workers: int, device: str | None = None, checkpoint: str | None = None,
                decode: dict | None = None) -> dict:
    """The models of ``specs``, one translator per worker; ``decode``: decoding settings for all
    (``--engine``, ``--precision``: docnmt.engines.prepare)."""
    from ..engines import prepare
    from ..translate import Translator
    def load(path):
        tr = Translator.load(path, checkpoint, device)
        prepare(tr, decode)
        return tr
    return {name: Served(name, path, [load(path) for _ in range(workers)]) for name, path in model_names(specs)}


def serve(models: list[str], host: str = "127.0.0.1", port: int = 8000, settings: Settings | None = None,
          device: str | None = None, threads: int = 0, log_level: str = "info", announce=print,
          decode: dict | None = None) -> None:
    """Load ``models`` and serve them until interrupted (``docnmt serve``)."""
    import torch
    import uvicorn
    settings = settings or Settings()
    cores = os.cpu_count() or 1
    torch.set_num_threads(threads or max(1, cores // settings.workers))
    service = Service(load_models(models, settings.workers, device, decode=decode), settings)
    sock = listen(host, port)
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


def listen(host: str, port: int):
    """A socket listening on ``host:port`` (port 0: a free one); DocnmtError when it cannot."""
    import socket
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise DocnmtError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    return sock


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
    """Start ``docnmt serve NAME=DIR... --port 0 FLAGS`` in a child process, its output in ``log``
    (stderr, and stdout, where uvicorn writes its access log), and wait until ``/healthz`` answers:
    ``(process, base URL)``. For scripts and tests that need a real server; :class:`DocnmtError`
    with the log when it stops or does not start."""
    import subprocess
    import sys
    import urllib.error
    import urllib.request
    cmd = [sys.executable, "-m", "docnmt.cli", "serve", *(f"{k}={v}" for k, v in models.items()),
           "--port", "0", *flags]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=err, env={**os.environ, **(env or {})})
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

