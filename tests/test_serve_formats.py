"""The service's file upload of SRT, WebVTT, DOCX, Markdown, HTML and text paragraphs: each comes
back in its own format with its media type (DOCX as bytes, base64 in a JSON answer), a damaged
file a 4xx naming it."""
from __future__ import annotations

import base64
import re

import pytest

from test_formats_docx import paragraphs, sample
from test_formats_markup import HTML, MARKDOWN, TEXT
from test_formats_subtitles import SRT, VTT
from test_serve import api  # noqa: F401  (the fixture: an app with an upper-casing stand-in decoder)

pytest.importorskip("fastapi")

TEXTS = [("a.srt", SRT, {}, "application/x-subrip"), ("b.vtt", VTT, {}, "text/vtt"),
         ("c.md", MARKDOWN, {}, "text/markdown"), ("d.html", HTML, {}, "text/html"),
         ("e.txt", TEXT, {"format": "text"}, "text/plain")]


@pytest.mark.parametrize("name,data,form,media", TEXTS, ids=[t[0] for t in TEXTS])
def test_text_formats_come_back_whole_with_their_media_type(api, name, data, form, media):  # noqa: F811
    client, _ = api()
    r = client.post("/v1/translate/file", files={"file": (name, data)}, data=form)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == media + "; charset=utf-8"
    stem, ext = name.split(".")
    assert f'filename="{stem}.translated.{ext}"' in r.headers["content-disposition"]
    assert r.content != data and (r.content.decode().upper() == data.decode().upper() or name == "c.md")
    if name == "c.md":                   # Markdown: inline code and URLs keep their case
        assert b"`inline code`" in r.content and b"# A TITLE HERE" in r.content
    body = client.post("/v1/translate/file", files={"file": (name, data)}, data={**form, "response": "json"}).json()
    assert body["file"] == r.text and body["encoding"] == "utf-8" and body["media_type"] == r.headers["content-type"]


def test_docx_comes_back_as_bytes_with_its_media_type(api):  # noqa: F811
    client, _ = api(max_upload_bytes=1 << 20)
    data = sample()
    r = client.post("/v1/translate/file", files={"file": ("report.docx", data)})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    want = [(w, st, [(t.upper(), b, i) for t, b, i in runs], text.upper()) for w, st, runs, text in paragraphs(data)]
    assert paragraphs(r.content) == want
    body = client.post("/v1/translate/file", files={"file": ("report.docx", data)}, data={"response": "json"}).json()
    assert body["format"] == "docx" and body["encoding"] == "base64" and body["filename"] == "report.translated.docx"
    assert paragraphs(base64.b64decode(body["file"])) == want
    assert body["documents"][0]["sentences"][0] == {**body["documents"][0]["sentences"][0], "source": "A short title",
                                                    "translation": "A SHORT TITLE"}


@pytest.mark.parametrize("name,data,words", [
    ("bad.docx", b"PK\x03\x04 not really a zip", "bad.docx: not a DOCX file"),
    ("bad.srt", b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n\n2\nno timing\nBye.\n", "bad.srt:6: broken cue"),
    ("bad.vtt", b"no header\n", "bad.vtt:1: not a WebVTT file"),
])
def test_a_damaged_file_is_a_4xx_naming_it(api, name, data, words):  # noqa: F811
    client, _ = api()
    r = client.post("/v1/translate/file", files={"file": (name, data)})
    assert 400 <= r.status_code < 500 and words in r.json()["error"]
    r = client.post("/v1/translate/file", files={"file": ("a.srt", SRT)}, data={"max_line_chars": "0"})
    assert 400 <= r.status_code < 500 and "positive" in r.json()["error"]
    assert client.post("/v1/translate/file", files={"file": ("a.srt", SRT)}).status_code == 200


def test_max_line_chars_and_lang_reach_the_reader(api):  # noqa: F811
    client, _ = api()
    r = client.post("/v1/translate/file", files={"file": ("a.srt", SRT)}, data={"max_line_chars": "12"})
    lines = [re.sub(r"<[^>]*>|\{[^}]*\}", "", x) for x in r.text.splitlines()
             if x.strip() and "-->" not in x and not x.strip("\ufeff").isdigit()]
    assert len(lines) > 6 and all(len(x) <= 12 for x in lines)
    r = client.post("/v1/translate/file", files={"file": ("c.md", MARKDOWN)}, data={"max_line_chars": "12"})
    assert r.status_code == 422 and "only for SRT and WebVTT" in r.json()["error"]
    r = client.post("/v1/translate/file", files={"file": ("e.txt", TEXT)}, data={"format": "text", "lang": "xx"})
    assert r.status_code == 422 and "lang 'xx': no sentence splitter" in r.json()["error"]
