"""``docnmt serve`` under faults: clients that hang up, a full queue, slow or oversized uploads,
the API key on every route, and ``kill -9`` under load (issue 66 §3; docs/serving.md#what-you-can-rely-on).

The fast tests run the application in-process or under a real uvicorn in a thread on a free
loopback port, with the stand-in decoder of ``test_serve.py`` held at its gate, so "dropped" means
never decoded. The slow ones start real server processes on tiny trained models.
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import gc
import hashlib
import socket
import threading
import time
import tracemalloc
import weakref
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from docnmt.document import Document  # noqa: E402
from docnmt.serve import ClientGone, Options, Served, Service, Settings, create_app  # noqa: E402
from docnmt.serve.launcher import listen  # noqa: E402
from test_serve import LIMITS, Upper, api, fake_translator, start_server, stop_server  # noqa: E402, F401

SECRET = "s3cret-key-1b9f"       # a key that no log line may hold


def service(decoder, **kw) -> Service:
    settings = Settings(**{**vars(LIMITS), **kw})
    return Service({"s": Served("s", "s", [fake_translator()] * settings.workers)}, settings, decoder)


def wait_for(condition, seconds: float = 20.0) -> bool:
    """Poll ``condition()`` until true or ``seconds`` pass (waits for events, never for a duration)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@contextlib.contextmanager
def uvicorn_thread(app, **config):
    """``app`` under a real uvicorn on a free loopback port, in a thread: its base URL."""
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert wait_for(lambda: server.started)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(20)


def raw(url: str, head: str, body: bytes = b"") -> socket.socket:
    """A socket that has sent ``head`` (request line and headers) and ``body``, nothing more."""
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=20)
    s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
    return s


def answer_of(s: socket.socket) -> bytes:
    """What the server sends until it closes the connection (socket timeout: 20 s)."""
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            out += chunk
    return out


def post_head(path: str, length: int, extra: str = "") -> str:
    return f"POST {path} HTTP/1.1\nHost: x\nContent-Type: application/json\nContent-Length: {length}\n{extra}"


def upload(text: bytes) -> tuple[str, bytes]:
    """The head and body of a file upload of ``text`` to /v1/translate/file."""
    request = httpx.Request("POST", "http://x/v1/translate/file", files={"file": ("a.en", text)})
    body = request.read()
    return (f"POST /v1/translate/file HTTP/1.1\nHost: x\nContent-Type: {request.headers['content-type']}\n"
            f"Content-Length: {len(body)}\n"), body


# --------------------------------------------------------------------------------------------
# Clients that hang up
# --------------------------------------------------------------------------------------------

def test_a_thousand_requests_given_up_leave_the_queue_empty_and_memory_flat():
    """Requests whose client disconnected or whose handler was cancelled, 1,000 of each kind, while
    no worker takes them: none stays queued and nothing of them is kept in memory. (A batch already
    decoding when its client leaves: the real-server test below.)"""
    svc = service(Upper(), queue=2000)                  # its worker threads never started
    jobs = weakref.WeakSet()
    submit = svc.scheduler.submit
    svc.scheduler.submit = lambda *a: jobs.add(job := submit(*a)) or job

    async def give_up(n: int) -> None:
        gone = asyncio.Event()
        tasks = [asyncio.ensure_future(svc.translate(svc.model("s"), [Document("0", [f"a {k}."])], Options(),
                                                     gone.wait if k % 2 else None)) for k in range(n)]
        while svc.scheduler.queue_length()["requests"] < n:
            await asyncio.sleep(0.01)
        gone.set()                                      # half the clients disconnect ...
        for t in tasks[::2]:                            # ... the others' handlers are cancelled
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, (ClientGone, asyncio.CancelledError)) for r in results)

    asyncio.run(give_up(1000))                          # warm-up: the first thousand
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    asyncio.run(give_up(1000))
    gc.collect()
    grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert svc.scheduler.queue_length() == {"requests": 0, "units_waiting": 0, "tokens_waiting": 0}
    assert len(jobs) == 0                               # no request, unit or result kept around
    assert grown < 100_000, grown                       # bytes after 1,000 more requests given up: flat


def test_clients_that_disconnect_from_a_real_server_free_their_places():
    decoder = Upper()
    decoder.gate.clear()
    app = create_app(service(decoder, batch_tokens=2))
    body = b'{"sentences": ["Hello."]}'
    with uvicorn_thread(app) as url, httpx.Client(base_url=url, timeout=20) as http:
        socks = [raw(url, post_head("/v1/translate", len(body)), body) for _ in range(20)]
        socks += [raw(url, *upload(b"<d>\nHello.\n")) for _ in range(5)]           # file uploads too
        assert wait_for(lambda: http.get("/metrics").json()["queue"]["requests"] == 25)
        for s in socks:
            s.close()
        assert wait_for(lambda: http.get("/metrics").json()["queue"] == {"requests": 0, "units_waiting": 0,
                                                                           "tokens_waiting": 0})
        decoder.gate.set()              # only the batch held at the gate was decoded
        assert http.post("/v1/translate", json={"sentences": ["Still here."]}).json()["translation"] == ["STILL HERE."]
        assert len(decoder.groups) == 2 and len(decoder.groups[0]) <= 2
        counts = http.get("/metrics").json()["requests"]
        assert wait_for(lambda: http.get("/metrics").json()["requests"].get("translate 499") == 20), counts
        assert http.get("/metrics").json()["requests"].get("file 499") == 5


# --------------------------------------------------------------------------------------------
# Overload, slow and oversized uploads
# --------------------------------------------------------------------------------------------

def refuse_work(*args):
    raise AssertionError("a request refused for a full queue was checked and tokenized first")


def test_a_full_queue_answers_503_at_once_and_the_accepted_requests_finish():
    from fastapi.testclient import TestClient
    decoder = Upper()
    decoder.gate.clear()
    svc = service(decoder, queue=3, timeout=60)
    with TestClient(create_app(svc)) as client, cf.ThreadPoolExecutor(3) as pool:
        held = [pool.submit(client.post, "/v1/translate", json={"sentences": [f"a {k}."]}) for k in range(3)]
        assert wait_for(lambda: client.get("/metrics").json()["queue"]["requests"] == 3)
        svc.prepare = refuse_work                     # a refused request is not even tokenized
        for _ in range(10):             # answered while the worker is still held
            r = client.post("/v1/translate", json={"sentences": ["b."]})
            assert r.status_code == 503 and 1 <= int(r.headers["retry-after"]) <= 60, r.text
        decoder.gate.set()
        assert [f.result().json()["translation"] for f in held] == [["A 0."], ["A 1."], ["A 2."]]
        assert client.get("/metrics").json()["requests"] == {"translate 503": 10, "translate 200": 3}


def test_slow_uploads_time_out_and_oversized_ones_are_refused_before_they_are_read():
    app = create_app(service(Upper(), body_timeout=0.5))
    with uvicorn_thread(app) as url, httpx.Client(base_url=url, timeout=20) as http:
        stalled = raw(url, post_head("/v1/translate", 100), b'{"sentences": ["hal')      # half, then nothing
        trickle = raw(url, post_head("/v1/translate", 1000), b"{")
        head, body = upload(b"<d>\nHello.\n" * 50)
        half_file = raw(url, head, body[:len(body) // 2])
        assert http.post("/v1/translate", json={"sentences": ["meanwhile."]}).status_code == 200
        for _ in range(40):                                                     # a byte every 50 ms
            with contextlib.suppress(OSError):
                trickle.sendall(b" ")
            time.sleep(0.05)
        for s in (stalled, trickle, half_file):
            head = answer_of(s).decode()                # answered, and the connection closed
            assert head.startswith("HTTP/1.1 408") and "did not arrive within 0.5 s" in head, head
        huge = raw(url, post_head("/v1/translate", 10**9))                     # declared: refused unread
        assert answer_of(huge).startswith(b"HTTP/1.1 413")
        streamed = raw(url, "POST /v1/translate/file HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\n")
        for _ in range(5):                              # 25,000 bytes of an endless body, limit 20,000
            streamed.sendall(b"1388\r\n" + b"x" * 5000 + b"\r\n")
        assert answer_of(streamed).startswith(b"HTTP/1.1 413")
        counts = http.get("/metrics").json()["requests"]
    assert counts == {"translate 200": 1, "translate 408": 2, "file 408": 1, "translate 413": 1, "file 413": 1}


# --------------------------------------------------------------------------------------------
# The API key
# --------------------------------------------------------------------------------------------

# Open with a key set: the page and its files (they ask for the key), the API's description, and
# /healthz (which then names no model).
OPEN = {"/", "/static", "/swagger-ui", "/docs", "/openapi.json", "/healthz"}


def routes(app) -> list[tuple[str, str]]:
    """(method, path) of every route in the app's route table (a mount as its path)."""
    out = []
    for r in app.routes:
        for method in sorted(getattr(r, "methods", None) or {"GET"}):
            out.append((method, r.path))
    return out


def test_every_route_but_the_open_ones_needs_the_api_key(api):  # noqa: F811 (the fixture)
    client, _ = api(api_key=SECRET)
    table = routes(client.app)
    assert {p for _, p in table} >= {"/v1/translate", "/v1/translate/file", "/v1/models", "/metrics", *OPEN}
    for method, path in table:
        if path in OPEN:
            continue
        for headers in ({}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"},
                        {"X-API-Key": SECRET[:-1]}):
            r = client.request(method, path, headers=headers)
            assert r.status_code == 401 and "API key" in r.json()["error"], (method, path, headers, r.text)
        r = client.request(method, path, headers={"X-API-Key": SECRET})
        assert r.status_code != 401, (method, path)
    assert "models" not in client.get("/healthz").json()
    r = client.post("/v1/translate/file", files={"file": ("a.en", b"Hello.\n")}, headers={"X-API-Key": "no"})
    assert r.status_code == 401


@pytest.mark.slow
def test_the_api_key_never_appears_in_the_server_log(tiny_model, tmp_path):
    log = tmp_path / "serve.log"
    proc, url = start_server({"m": tiny_model("sent2sent")}, log, "--log-level", "debug", "--api-key", SECRET)
    try:
        for headers in ({"X-API-Key": SECRET}, {"Authorization": f"Bearer {SECRET}"}, {"X-API-Key": SECRET + "x"}):
            httpx.post(url + "/v1/translate", json={"sentences": ["Hello."]}, headers=headers, timeout=60)
            httpx.get(url + "/metrics", headers=headers, timeout=60)
            httpx.post(url + "/v1/translate", content=b"{bad", headers=headers, timeout=60)
    finally:
        stop_server(proc)
    text = log.read_text()
    assert "POST /v1/translate" in text and "401" in text      # the access log was on ...
    assert SECRET not in text                                   # ... and never held the key


# --------------------------------------------------------------------------------------------
# kill -9
# --------------------------------------------------------------------------------------------

def tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_kill_9_under_load_changes_nothing_on_disk_and_the_server_restarts(tiny_model, tmp_path):
    model = tiny_model("sent2sent")
    before = tree_hashes(model)
    proc, url = start_server({"m": model}, tmp_path / "serve.log")
    outcomes, stop = [], threading.Event()

    def client(k: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            while not stop.is_set():
                try:
                    r = http.post("/v1/translate", json={"sentences": [f"Thank you {k}.", "Yes."] * (1 + k)})
                    outcomes.append(r.status_code)
                except httpx.TransportError as e:          # connection refused, reset or cut short
                    outcomes.append(type(e).__name__)
    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    assert wait_for(lambda: outcomes.count(200) >= 4, 120)
    proc.kill()
    proc.wait(30)
    assert wait_for(lambda: len([o for o in outcomes if o != 200]) >= 4, 60)
    stop.set()
    for t in threads:
        t.join(60)
    assert {o for o in outcomes if not isinstance(o, str)} == {200}, outcomes        # no 5xx, no partial answer
    assert tree_hashes(model) == before                         # no file added, removed or changed
    proc, url = start_server({"m": model}, tmp_path / "again.log")
    try:
        r = httpx.post(url + "/v1/translate", json={"sentences": ["Thank you."]}, timeout=60)
        assert r.status_code == 200 and len(r.json()["translation"]) == 1
    finally:
        stop_server(proc)
