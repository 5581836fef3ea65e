"""``docnmt serve``: text splitting, files written back, the scheduler, and the HTTP API.

The fast tests run the application in-process with a stand-in decoder (upper-casing each
sentence), so every bad input, the limits, back-pressure, timeouts and the API key are checked in
well under a second. The slow ones start a real server process on a loopback port with tiny
trained models and check the same bad inputs there, translations equal to ``docnmt translate``'s
and 50 concurrent requests.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from docnmt import readers  # noqa: E402
from docnmt.config import Config  # noqa: E402
from docnmt.document import Document  # noqa: E402
from docnmt.errors import DataError, DocnmtError  # noqa: E402
from docnmt.readers import replace_segments  # noqa: E402
from docnmt.serve import (  # noqa: E402
    Scheduler,
    Served,
    Service,
    Settings,
    Unit,
    create_app,
    join_text,
    read_upload,
    safe_name,
    spawn,
    split_text,
)

# the limits of every server here, in-process and real
LIMITS = Settings(max_sentences=50, max_chars=2000, max_tokens=400, max_upload_bytes=20000, max_beam=4)
FLAGS = ["--request-sentences", "50", "--request-chars", "2000", "--request-tokens", "400", "--max-upload-mb",
         str(20000 / 2**20), "--max-beam", "4"]
KEY = "test-key"

XML = """<?xml version="1.0" encoding="UTF-8"?>
<mteval>
<srcset setid="t" srclang="en">
<doc docid="d1" genre="talk">
<seg id="1">Thank you &amp; welcome.</seg>
<!-- <seg id="9">not a segment</seg> -->
<seg id="2">Hello   there.</seg>
</doc>
<doc docid="d2"><seg id="1">Good morning.</seg></doc>
</srcset>
</mteval>
"""

# (method, path, request keyword arguments, status, words of the one-line error)
BAD = [
    ("post", "/v1/translate", {"content": b'{"sentences": ["a"'}, 422, "invalid JSON"),
    ("post", "/v1/translate", {"content": b'{"sentences": ["\xff"]}'}, 422, "not valid UTF-8"),
    ("post", "/v1/translate", {"json": [1, 2]}, 422, "valid dictionary"),
    ("post", "/v1/translate", {"json": {}}, 422, "either 'sentences' or 'text'"),
    ("post", "/v1/translate", {"json": {"sentences": ["a"], "text": "b"}}, 422, "either 'sentences' or 'text'"),
    ("post", "/v1/translate", {"json": {"sentences": []}}, 422, "empty document"),
    ("post", "/v1/translate", {"json": {"sentences": ["Hello.", "  "]}}, 422, "sentences[1]: empty sentence"),
    ("post", "/v1/translate", {"json": {"sentences": ["Hello\nthere."]}}, 422, "line break"),
    ("post", "/v1/translate", {"json": {"text": " \n\n \n"}}, 422, "empty document"),
    ("post", "/v1/translate", {"json": {"sentences": ["a"], "model": "nope"}}, 404, "unknown model 'nope'"),
    ("post", "/v1/translate", {"json": {"sentence": ["a"]}}, 422, "unknown field 'sentence'"),
    ("post", "/v1/translate", {"json": {"sentences": ["a"], "options": {"beams": 2}}}, 422,
     "unknown field 'options.beams'"),
    ("post", "/v1/translate", {"json": {"sentences": ["a"], "options": {"first_pass": "/etc/passwd"}}}, 422,
     "unknown field 'options.first_pass'"),
    ("post", "/v1/translate", {"json": {"sentences": ["a"], "options": {"beam": 0}}}, 422, "options.beam"),
    ("post", "/v1/translate", {"json": {"sentences": ["a"], "options": {"beam": "2"}}}, 422, "options.beam"),
    ("post", "/v1/translate", {"json": {"sentences": ["a"], "options": {"beam": 9}}}, 422, "at most 4"),
    ("post", "/v1/translate", {"json": {"sentences": ["a"], "options": {"beam": 2, "nbest": 3}}}, 422,
     "options.nbest (3) cannot exceed options.beam (2)"),
    ("post", "/v1/translate", {"json": {"text": "Hi. Yes.", "split": "sentences", "lang": "xx"}}, 422,
     "no sentence splitter"),
    ("post", "/v1/translate", {"json": {"text": "Hi.", "split": "words"}}, 422, "split"),
    ("post", "/v1/translate", {"json": {"sentences": ["Hello."] * 51}}, 413, "51 sentences"),
    ("post", "/v1/translate", {"json": {"sentences": ["Hello there, my friend. " * 4] * 25}}, 413, "characters"),
    ("post", "/v1/translate", {"json": {"sentences": [" ".join("abcdefghijk")] * 40}}, 413, "subword tokens"),
    ("post", "/v1/translate", {"json": {"text": "x" * 30000}}, 413, "over the limit of 20000 bytes"),
    ("get", "/v1/translate", {}, 405, "Method Not Allowed"),
    ("post", "/v1/translate", {"data": {"sentences": "Hi"}}, 415, "Content-Type: application/json"),
    ("post", "/v1/translate", {"content": b'{"sentences": ["a"], "options": {"lenpen": NaN}}'}, 422,
     "NaN is not a JSON number"),
    ("post", "/v1/translate/file", {"files": {"file": ("a.en", b"Hello.\n")}, "data": {"options": '{"lenpen": NaN}'}},
     422, "finite number"),
    ("post", "/v1/translate/file", {"data": {"model": "s"}}, 422, "file: Field required"),
    ("post", "/v1/translate/file", {"files": {"file": ("a.en", b"<d>\n\xff\n")}}, 422,
     "a.en:2: invalid UTF-8"),
    ("post", "/v1/translate/file", {"files": {"file": ("../../etc/b.en", b"<d>\nHello.\n<d>\n")}}, 422,
     "b.en:3: empty document"),
    ("post", "/v1/translate/file", {"files": {"file": ("c.json", b'{"1": [{"speaker": "agent", "source": "Hi"}]}')}},
     422, "convert it to JSONL"),
    ("post", "/v1/translate/file", {"files": {"file": ("a.en", b"Hello.\n")}, "data": {"format": "rtf"}}, 422,
     "format 'rtf'"),
    ("post", "/v1/translate/file", {"files": {"file": ("a.en", b"Hello.\n")}, "data": {"options": '{"beam": '}},
     422, "options: Invalid JSON"),
    ("post", "/v1/translate/file", {"files": {"file": ("a.en", b"Hello.\n")}, "data": {"options": '{"x": 1}'}},
     422, "unknown field 'options.x'"),
]


def check_bad(client, method, path, kwargs, status, words) -> None:
    r = getattr(client, method)(path, **kwargs)
    assert r.status_code == status, (path, kwargs, r.status_code, r.text)
    body = r.json()
    assert list(body) == ["error"] and "\n" not in body["error"] and "Traceback" not in r.text, r.text
    assert words in body["error"], body["error"]


# --------------------------------------------------------------------------------------------
# Text, files and names
# --------------------------------------------------------------------------------------------

def test_text_is_split_into_paragraphs_and_sentences_and_put_back():
    text = "First line.\nSecond line.\n\n\nNew paragraph. With two sentences.\r\n"
    sents, paras = split_text(text, "lines", "en")
    assert sents == ["First line.", "Second line.", "New paragraph. With two sentences."] and paras == [0, 0, 1]
    assert join_text(sents, paras, "lines") == "First line.\nSecond line.\n\nNew paragraph. With two sentences."
    sents, paras = split_text(text, "sentences", "en")
    assert sents == ["First line. Second line.", "New paragraph.", "With two sentences."][:0] or \
        sents == ["First line.", "Second line.", "New paragraph.", "With two sentences."]
    assert paras == [0, 0, 1, 1]
    assert join_text(["A.", "", "C.", "D."], paras, "sentences") == "A.\n\nC. D."    # no stray space for ""
    with pytest.raises(DataError, match="no sentence splitter"):
        split_text("Hi.", "sentences", "xx")


def test_xml_comes_back_with_every_segment_translated():
    docs, fmt, original = read_upload(XML.encode(), "talk.xml", "auto")
    assert fmt == "xml" and [d.src for d in docs] == [["Thank you & welcome.", "Hello there."], ["Good morning."]]
    out = replace_segments(original, ["Danke & willkommen <3", "Hallo.", "Guten Morgen."])
    assert '<seg id="1">Danke &amp; willkommen &lt;3</seg>' in out
    assert "<!-- <seg id=\"9\">not a segment</seg> -->" in out          # comments left alone
    assert "<tstset setid=\"t\"" in out and "</tstset>" in out and "srcset" not in out
    again, fmt, _ = read_upload(out.encode(), "talk.xml", "auto")
    assert [d.src for d in again] == [["Danke & willkommen <3", "Hallo."], ["Guten Morgen."]]
    assert [d.docid for d in again] == ["d1", "d2"]
    with pytest.raises(DataError, match="3 segments but 2"):
        replace_segments(original, ["a", "b"])


def test_uploaded_names_are_never_paths_and_errors_name_the_upload(tmp_path, monkeypatch):
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\x\\..\\a b.en") == "a_b.en"
    assert safe_name("..") == "upload.txt" and safe_name(None) == "upload.txt"
    assert safe_name("Übersicht.en") == "_bersicht.en"             # ASCII only: it is sent back in a header
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(DataError) as e:
        read_upload(b"<d>\nok\n\n", "doc.en", "marker")
    assert str(e.value) == "doc.en:3: empty sentence"
    docs, fmt, _ = read_upload(b"Hello.\nBye.\n", "plain.en", "auto")
    assert fmt == "plain" and docs[0].src == ["Hello.", "Bye."]
    assert list(tmp_path.iterdir()) == []            # the temporary directory is gone


# --------------------------------------------------------------------------------------------
# The scheduler
# --------------------------------------------------------------------------------------------

def units(scheduler, *specs, now=100.0):
    """Pending units from (tokens, key, seconds ago) specs, each its own request."""
    out = []
    for tokens, key, ago in specs:
        job = SimpleNamespace(key=key)
        out.append(Unit(job, [], tokens, arrived=now - ago, long=tokens > scheduler.s.long_tokens))
    scheduler.pending.extend(out)
    return out


def scheduler(**kw) -> Scheduler:
    from docnmt.serve import Metrics
    return Scheduler(Settings(**{"batch_tokens": 100, "long_tokens": 50, "batch_wait": 0.01, "aging": 5.0, **kw}),
                     Metrics())


def test_units_of_one_option_set_are_decoded_together_shortest_first():
    s = scheduler(long_tokens=80)
    a, b, c, d = units(s, (30, "x", 1), (10, "x", 1), (20, "y", 1), (70, "x", 1))
    group, _ = s.take(now=100.0)
    assert group == [b, a]          # shortest first, same options only; 10 + 30 + 40 > 100 tokens
    s = scheduler()
    long, short = units(s, (80, "x", 2), (5, "x", 1))
    group, _ = s.take(now=100.0)
    assert group == [short]                          # a long unit is never batched with short ones
    s.pending.remove(short)
    assert s.take(now=100.0)[0] == [long]


def test_a_file_of_many_documents_becomes_a_few_units():
    from docnmt.serve import chunks
    docs = [Document(str(k), ["x"]) for k in range(5)]
    parts = chunks(docs, [100, 200, 300, 600, 50], 500)
    assert [([d.docid for d in ds], t) for ds, t in parts] == [(["0", "1"], 300), (["2"], 300), (["3"], 600),
                                                               (["4"], 50)]


def test_a_lone_short_unit_waits_a_little_for_company():
    s = scheduler()
    (u,) = units(s, (5, "x", 0.0))
    group, wait = s.take(now=100.0)
    assert group is None and wait == pytest.approx(0.01)
    assert s.take(now=100.02)[0] == [u]


def test_long_units_never_take_the_last_free_worker_and_old_units_go_first():
    s = scheduler(workers=2)
    long, short = units(s, (80, "x", 3), (10, "y", 0.5))
    s.long_busy = 1                                  # the other worker decodes a long document
    assert s.take(now=100.0)[0] == [short]
    s.pending.remove(short)
    assert s.take(now=100.0) == (None, None)         # the long one waits for a worker it may use
    s.long_busy = 0
    assert s.take(now=100.0)[0] == [long]
    s.pending = []
    old, young = units(s, (40, "x", 6.0), (5, "y", 1.0))
    assert s.take(now=100.0)[0] == [old]             # waited past `aging`: before the shorter one


# --------------------------------------------------------------------------------------------
# The HTTP API in-process, with a stand-in decoder
# --------------------------------------------------------------------------------------------

class Words:
    """A vocabulary whose tokens are words."""

    def encode_batch(self, texts, side="src"):
        return [t.split() for t in texts]


def fake_translator(alone: bool = False):
    return SimpleNamespace(cfg=Config.load("transformer_tiny"), vocab=Words(),
                           method=SimpleNamespace(score_alone=alone))


class Upper:
    """Decodes by upper-casing, optionally held at a gate; records the groups it decoded."""

    def __init__(self):
        self.gate = threading.Event()
        self.gate.set()
        self.groups = []

    def __call__(self, worker, group):
        assert self.gate.wait(10)
        self.groups.append(group)
        for u in group:
            model = group[0].job.model.name             # as decode_group, the group's first unit's model
            u.result = [Document(d.docid, d.src, [s.upper() if model != "t" else s.lower() for s in d.src],
                                 {**d.meta, "problem": False})
                        for d in u.docs]
            u.batch = {"requests": len({id(x.job) for x in group})}


@pytest.fixture
def api():
    """``api(**settings)`` -> (TestClient of an app serving models ``s`` and ``d``, the Upper decoder)."""
    from fastapi.testclient import TestClient
    clients = []

    def make(**kw):
        settings = Settings(**{**vars(LIMITS), **kw})
        decoder = Upper()
        models = {"s": Served("s", "s", [fake_translator()] * settings.workers),
                  "d": Served("d", "d", [fake_translator(alone=True)] * settings.workers),
                  "t": Served("t", "t", [fake_translator()] * settings.workers)}     # lower-cases
        client = TestClient(create_app(Service(models, settings, decoder)), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client, decoder
    yield make
    for c in clients:
        c.__exit__(None, None, None)


def test_a_document_comes_back_sentence_by_sentence(api):
    client, _ = api()
    r = client.post("/v1/translate", json={"sentences": ["Hello  there.", "Bye."]})
    assert r.status_code == 200
    body = r.json()
    assert body["model"] == "s" and body["translation"] == ["HELLO THERE.", "BYE."]
    assert [s["source"] for s in body["sentences"]] == ["Hello there.", "Bye."]
    assert body["coverage"] == {"documents": 1, "documents_fully_recovered": 1, "sentences": 2,
                                "empty_sentences": 0, "documents_with_problems": [], "repaired_sentences": 0}
    assert body["timing"]["source_tokens"] == 3 and body["timing"]["total_ms"] >= body["timing"]["queued_ms"]
    r = client.post("/v1/translate", json={"model": "d", "text": "One. Two.\n\nThree.", "split": "sentences"})
    body = r.json()
    assert body["text"] == "ONE. TWO.\n\nTHREE." and [s["paragraph"] for s in body["sentences"]] == [0, 0, 1]
    assert body["split"] == {"by": "sentences", "lang": "en", "paragraphs": 2, "sentences": 3}
    models = client.get("/v1/models").json()
    assert [m["name"] for m in models["models"]] == ["s", "d", "t"] and models["limits"]["max_beam"] == 4
    assert client.get("/healthz").json()["status"] == "ok"
    assert "docnmt" in client.get("/").text and client.get("/static/app.js").status_code == 200
    assert "/v1/translate" in client.get("/openapi.json").json()["paths"]
    docs = client.get("/docs").text                     # Swagger UI from the package, no CDN
    assert "/swagger-ui/swagger-ui-bundle.js" in docs and "cdn" not in docs.lower()
    assert client.get("/swagger-ui/swagger-ui-bundle.js").status_code == 200


@pytest.mark.parametrize("method,path,kwargs,status,words", BAD, ids=[b[-1][:30] for b in BAD])
def test_bad_input_is_a_4xx_with_one_json_line(api, method, path, kwargs, status, words):
    client, _ = api()
    check_bad(client, method, path, kwargs, status, words)
    assert client.post("/v1/translate", json={"sentences": ["still here"]}).status_code == 200


def test_metrics_count_every_refused_request(api):
    """/metrics counts the answers given before a handler runs too: bodies over the size limit
    (declared or streamed), wrong methods, form fields that fail validation."""
    client, _ = api()
    big = b'{"text": "' + b"x" * 30000 + b'"}'
    assert client.post("/v1/translate", content=big).status_code == 413
    assert client.post("/v1/translate", content=(big[i:i + 1000] for i in range(0, len(big), 1000))).status_code == 413
    assert client.post("/v1/translate/file", files={"file": ("a.en", b"Hello.\n" * 5000)}).status_code == 413
    assert client.get("/v1/translate").status_code == 405
    assert client.post("/v1/translate/file", data={"model": "s"}).status_code == 422
    counts = client.get("/metrics").json()["requests"]
    assert counts == {"translate 413": 2, "file 413": 1, "translate 405": 1, "file 422": 1}


def test_files_come_back_in_their_own_format(api):
    client, _ = api()
    r = client.post("/v1/translate/file", files={"file": ("../x/talk.xml", XML.encode())})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/xml")
    assert 'filename="talk.translated.xml"' in r.headers["content-disposition"]
    assert '<seg id="1">THANK YOU &amp; WELCOME.</seg>' in r.text and "<!-- <seg id=\"9\">not a" in r.text
    assert json.loads(r.headers["x-docnmt-coverage"])["sentences"] == 3
    r = client.post("/v1/translate/file", files={"file": ("a.en", b"<d>\nHi.\nYes.\n<d>\nNo.\n")})
    assert r.text == "<d>\nHI.\nYES.\n<d>\nNO.\n"
    r = client.post("/v1/translate/file", files={"file": ("p.txt", b"Hi.\nNo.\n")})
    assert r.text == "HI.\nNO.\n"
    jsonl = b'{"id": "a", "src": ["Hi."], "meta": {"genre": "chat"}}\n'
    r = client.post("/v1/translate/file", files={"file": ("c.jsonl", jsonl)}, data={"response": "json"})
    body = r.json()
    assert body["format"] == "jsonl" and body["documents"][0]["sentences"][0]["translation"] == "HI."
    assert json.loads(body["file"]) == {"id": "a", "src": ["Hi."], "tgt": ["HI."], "meta": {"genre": "chat"}}


def test_concurrent_requests_are_batched_and_all_answered(api):
    client, decoder = api(batch_wait=0.2)
    decoder.gate.clear()                                # hold the worker until all requests are in

    def one(i):
        return client.post("/v1/translate", json={"sentences": [f"Sentence {i}.", "Two."], "model": "st"[i % 2]})
    with cf.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(one, i) for i in range(16)]
        deadline = time.time() + 30      # wait for the requests, not for a time that a slow machine may need more of
        while client.get("/metrics").json()["queue"]["requests"] < 8 and time.time() < deadline:
            time.sleep(0.02)
        decoder.gate.set()
        answers = [f.result() for f in futures]
    assert all(r.status_code == 200 for r in answers)
    assert [r.json()["translation"][0] for r in answers] == [f"SENTENCE {i}." if i % 2 == 0 else f"sentence {i}."
                                                             for i in range(16)]
    assert max(r.json()["batches"][0]["requests"] for r in answers) > 1
    assert all(len({u.job.model.name for u in g}) == 1 for g in decoder.groups)      # one model a batch
    metrics = client.get("/metrics").json()
    assert metrics["requests"]["translate 200"] == 16 and metrics["requests_per_batch"] > 1
    assert metrics["latency"]["translate"]["count"] == 16 and metrics["queue"]["requests"] == 0


def test_docflat_like_models_never_batch_requests_together(api):
    client, decoder = api(batch_wait=0.2)
    decoder.gate.clear()
    with cf.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(client.post, "/v1/translate", json={"model": "d", "sentences": ["a.", "b."]})
                   for _ in range(4)]
        time.sleep(0.4)
        decoder.gate.set()
        assert all(f.result().status_code == 200 for f in futures)
    assert all(len({id(u.job) for u in g}) == 1 for g in decoder.groups)


def test_a_full_service_answers_503_with_retry_after(api):
    client, decoder = api(queue=2)
    decoder.gate.clear()
    with cf.ThreadPoolExecutor(2) as pool:
        held = [pool.submit(client.post, "/v1/translate", json={"sentences": ["a"]}) for _ in range(2)]
        deadline = time.time() + 5
        while client.get("/metrics").json()["queue"]["requests"] < 2 and time.time() < deadline:
            time.sleep(0.02)
        r = client.post("/v1/translate", json={"sentences": ["b"]})
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1 and "full" in r.json()["error"]
        decoder.gate.set()
        assert [f.result().status_code for f in held] == [200, 200]


def test_a_request_not_done_in_time_is_answered_503(api):
    client, decoder = api(timeout=0.3)
    decoder.gate.clear()
    r = client.post("/v1/translate", json={"sentences": ["slow"]})
    assert r.status_code == 503 and "within 0.3 s" in r.json()["error"] and "retry-after" in r.headers
    decoder.gate.set()
    assert client.post("/v1/translate", json={"sentences": ["fast"]}).json()["translation"] == ["FAST"]


def test_the_api_key_guards_the_api_but_not_the_page(api):
    client, _ = api(api_key=KEY)
    assert client.get("/healthz").json()["api_key_required"] is True
    assert client.get("/").status_code == 200
    for path in ("/v1/models", "/metrics"):
        r = client.get(path)
        assert r.status_code == 401 and "API key" in r.json()["error"]
    assert client.post("/v1/translate", json={"sentences": ["a"]}, headers={"X-API-Key": "wrong"}).status_code == 401
    assert client.post("/v1/translate", json={"sentences": ["a"]}, headers={"X-API-Key": KEY}).status_code == 200
    assert client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_serve_without_the_extra_says_how_to_install_it(cli_error, monkeypatch, tmp_path):
    for name in [m for m in sys.modules if m == "docnmt.serve" or m.startswith("docnmt.serve.")]:
        monkeypatch.delitem(sys.modules, name)                  # the package and its modules, as in a fresh process
    monkeypatch.setitem(sys.modules, "fastapi", None)           # as if it were not installed
    line = cli_error("serve", tmp_path)
    assert "fastapi is missing" in line and "pip install 'docnmt[serve]'" in line


def test_serve_refuses_a_missing_model_and_bad_limits(cli_error, tmp_path):
    assert "not a docnmt model directory" in cli_error("serve", tmp_path, "--port", "0")
    assert "a model name may hold" in cli_error("serve", f"a/b={tmp_path}", "--port", "0")
    assert "timeout must be at least 0" in cli_error("serve", tmp_path, "--timeout", "-1")
    assert "body-timeout must be at least 0" in cli_error("serve", tmp_path, "--body-timeout", "-1")
    import os
    cores = os.cpu_count()
    for threads in (cores + 1, 10_000, -1):                     # more threads than cores only oversubscribe
        assert f"1 to {cores}, this machine's cores" in cli_error("serve", tmp_path, "--threads", str(threads))


def test_spawn_says_why_a_server_process_stopped(tmp_path):
    with pytest.raises(DocnmtError, match="(?s)the server stopped: .*not a docnmt model directory"):
        spawn({"m": tmp_path}, tmp_path / "server.log", timeout=60)


# --------------------------------------------------------------------------------------------
# A real server process with tiny trained models
# --------------------------------------------------------------------------------------------

def start_server(models: dict, log: Path, *flags: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """``docnmt serve NAME=DIR... --port 0 FLAGS`` in a process of its own; (process, base URL)."""
    return spawn(models, log, list(flags), env={"OMP_NUM_THREADS": "1", **(env or {})}, timeout=180)


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


SERVED = ("sent2sent", "doc2doc", "docflat")
# beam 2 and short outputs (the tiny models often run to the length limit): the same on both sides
SHORT = ["--beam", "2", "--max-len-a", "1", "--max-len-b", "4"]
SHORT_OPTIONS = {"beam": 2, "max_len_a": 1.0, "max_len_b": 4}


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    """A real server of three tiny models with the test limits and an API key; (URL, models, log)."""
    models = {name: tiny_model(name) for name in SERVED}
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    proc, url = start_server(models, log, *FLAGS, "--batch-wait-ms", "50", env={"DOCNMT_API_KEY": KEY})
    yield url, models, log
    stop_server(proc)
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_is_a_normal_stop(tiny_model, tmp_path, sig):
    """Ctrl-C or a supervisor's SIGTERM: graceful shutdown, exit status 0, one line saying so."""
    log = tmp_path / "serve.log"
    proc, url = start_server({"m": tiny_model("sent2sent")}, log)
    assert httpx.get(url + "/healthz", timeout=30).status_code == 200
    proc.send_signal(sig)
    assert proc.wait(30) == 0
    text = log.read_text()
    assert f"docnmt serve: stopped ({sig.name})" in text and "Traceback" not in text and "interrupted" not in text


def client_of(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"X-API-Key": KEY}, timeout=120)


def documents(raw: Path, n: int, size: int) -> list[Document]:
    """``n`` documents of ``size`` sentences cut from the tiny TED documents."""
    sents = [s for d in readers.read_documents(str(raw), fmt="marker") for s in d.src]
    return [Document(f"doc{k}", sents[(k * size) % (len(sents) - size):][:size]) for k in range(n)]


def cli_translations(run_cli, model: Path, docs: list[Document], tmp_path: Path, *flags) -> list[list[str]]:
    """``docnmt translate`` of ``docs`` (a marker file): one list of lines per document."""
    src, out = tmp_path / "src.en", tmp_path / "out.de"
    tmp_path.mkdir(exist_ok=True)
    readers.write_marker(docs, src)
    status, _, err = run_cli("translate", model, "-i", src, "-o", out, "-q", "--force", *flags)
    assert status == 0, err
    return [d.src for d in readers.read_documents(str(out), fmt="marker", allow_empty=True)]


@pytest.mark.slow
def test_real_server_refuses_bad_input_and_lives_on(server):
    url, _, _ = server
    with client_of(url) as client:
        for method, path, kwargs, status, words in BAD:
            check_bad(client, method, path, kwargs, status, words)
        assert httpx.get(url + "/v1/models").status_code == 401        # the key came from $DOCNMT_API_KEY
        assert client.get("/healthz").json() == {"status": "ok", "api_key_required": True}    # no model names
        r = client.post("/v1/translate", json={"sentences": ["Thank you."], "model": "doc2doc"})
        assert r.status_code == 200 and len(r.json()["translation"]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", SERVED)
def test_real_server_translates_as_docnmt_translate_does(server, tiny_dir, run_cli, tmp_path, name):
    url, models, _ = server
    """Each request as ``docnmt translate`` translates the same input: a document alone (DocFlat looks
    across its batch, so there the file's two documents translate differently together)."""
    docs = documents(tiny_dir / "raw/chat.en", 2, 4)        # under the test limits together (the file)
    alone = [cli_translations(run_cli, models[name], [d], tmp_path / str(k), *SHORT)[0] for k, d in enumerate(docs)]
    cli_translations(run_cli, models[name], docs, tmp_path, *SHORT)
    with client_of(url) as client:
        for doc, want in zip(docs, alone):
            r = client.post("/v1/translate", json={"model": name, "sentences": doc.src, "options": SHORT_OPTIONS})
            body = r.json()
            assert r.status_code == 200 and body["translation"] == want
            scores = [s["score"] for s in body["sentences"]]
            assert all(s is None if not t else s < 0 for s, t in zip(scores, want))
            cov = body["coverage"]
            assert cov["empty_sentences"] == sum(not t for t in want) and cov["sentences"] == len(doc.src)
        r = client.post("/v1/translate/file", data={"model": name, "options": json.dumps(SHORT_OPTIONS)},
                        files={"file": ("src.en", (tmp_path / "src.en").read_bytes())})
        assert r.status_code == 200, r.text
        assert r.text == (tmp_path / "out.de").read_text()


@pytest.mark.slow
def test_real_server_answers_50_requests_from_10_clients_batched(server, tiny_dir, run_cli, tmp_path):
    url, models, _ = server
    docs = documents(tiny_dir / "raw/chat.en", 50, 3)
    expected = cli_translations(run_cli, models["doc2doc"], docs, tmp_path, *SHORT)
    with client_of(url) as client:
        before = client.get("/metrics").json()

        def one(doc):
            return client.post("/v1/translate", json={"model": "doc2doc", "sentences": doc.src,
                                                      "options": {**SHORT_OPTIONS, "scores": False}})
        with cf.ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(one, docs))
        after = client.get("/metrics").json()
    assert [r.status_code for r in answers] == [200] * 50
    assert [r.json()["translation"] for r in answers] == expected
    assert max(r.json()["batches"][0]["requests"] for r in answers) > 1          # decoded together
    assert after["batches"] - before["batches"] < 50
    assert after["requests"]["translate 200"] - before["requests"].get("translate 200", 0) == 50
    assert after["latency"]["translate"]["p99_ms"] >= after["latency"]["translate"]["p50_ms"] > 0
