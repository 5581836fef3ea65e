"""Tests of docnmt.readers on real files plus small broken ones. The real files are the slices in tests/data
(tests/data/README.md: whole documents of each original, its bytes kept) and the chats bundled with the package."""
from __future__ import annotations

import io
import json
import re
import warnings
from pathlib import Path

import pytest

from _tiny import DATA, chat_documents
from docnmt.document import Document
from docnmt.errors import ConfigError, DataError
from docnmt.readers import (
    read_bcontrast_json,
    read_blankline,
    read_documents,
    read_jsonl,
    read_marker,
    read_plain,
    read_xml,
    write_jsonl,
    write_marker,
)

ENDE = DATA / "ende"
RAW = DATA / "raw"
IWSLT = RAW / "iwslt17_xml"
SGM = RAW / "wmt_sgm"
BCON = RAW / "bcontrast_json"
MARUF = RAW / "maruf_marker" / "NC-2016.concatenated_en2de_dev_{}.txt"
PDC = DATA / "zhen" / "pdc" / "pdc-sample" / "pdc.{}.sample"


def curated(split: str, name: str, tgt: str = "de") -> list[Document]:
    base = ENDE / split / name
    return read_marker(f"{base}.en", f"{base}.{tgt}", f"{base}.docids")


@pytest.fixture(scope="module")
def ted_valid() -> list[Document]:
    return curated("valid", "ted")


@pytest.fixture(scope="module")
def news_train() -> dict[str, Document]:
    return {d.docid: d for d in curated("train", "news")}


def assert_aligned(docs: list[Document]) -> None:
    for d in docs:
        assert d.src and all(isinstance(s, str) and s and s == s.strip() for s in d.src)
        assert d.tgt is not None and len(d.tgt) == len(d.src)
        assert not any("\r" in s or "\n" in s for s in d.src + d.tgt)


def write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def raises_at(path: Path, line: int | None, fn, *args, match: str = "", **kw) -> DataError:
    """``fn`` raises a DataError located at ``path`` and ``line``, its message saying ``match``."""
    with pytest.raises(DataError, match=match) as info:
        fn(*args, **kw)
    err = info.value
    assert err.path == str(path) and err.line == line
    assert str(err).startswith(f"{path}:{line}: " if line else f"{path}: ")
    return err


# ---------------------------------------------------------------- real data

def test_marker_lf_ted_with_docids(ted_valid):
    assert len(ted_valid) == 2
    assert sum(len(d) for d in ted_valid) == 219
    assert ted_valid[0].docid == "iwslt17.tst2015/2183"
    assert ted_valid[0].src[0] == ("Today I'm going to speak to you about the last 30 years of "
                                   "architectural history.")
    assert_aligned(ted_valid)


def test_marker_default_docids_and_source_only():
    docs = read_marker(ENDE / "valid" / "ted.de")
    assert [d.docid for d in docs[:2]] == ["ted.de:0", "ted.de:1"]
    assert all(d.tgt is None for d in docs) and sum(len(d) for d in docs) == 219


def test_marker_crlf():
    docs = read_marker(str(MARUF).format("en"), str(MARUF).format("de"))
    assert len(docs) == 3 and sum(len(d) for d in docs) == 20
    assert docs[0].src[0] == "India and Japan prime ministers meet in Tokyo"
    assert docs[0].tgt[0].startswith("Die Premierminister Indiens und Japans")
    assert_aligned(docs)


def test_blankline_pdc_sample():
    docs = read_blankline(str(PDC).format("zh"), str(PDC).format("en"))
    assert len(docs) == 3 and sum(len(d) for d in docs) == 68
    assert len(docs[0]) == 26 and docs[1].docid == "pdc.zh.sample:1"
    assert docs[0].tgt[0].startswith("It is not the EU dream team this newspaper had hoped for")
    assert_aligned(docs)


def test_iwslt_xml_matches_curated_ted(ted_valid):
    docs = read_xml(IWSLT / "IWSLT17.TED.tst2015.en-de.en.xml",
                    IWSLT / "IWSLT17.TED.tst2015.en-de.de.xml")
    assert len(docs) == 2 and docs[0].docid == "2183"
    assert docs[0].src[0] == ted_valid[0].src[0]
    assert [(f"iwslt17.tst2015/{d.docid}", d.src, d.tgt) for d in docs] == \
        [(d.docid, d.src, d.tgt) for d in ted_valid]
    assert_aligned(docs)


def test_iwslt_xml_whitespace_collapsed_and_entities():
    docs = read_xml(IWSLT / "IWSLT17.TED.tst2010.en-de.en.xml")
    assert docs[0].tgt is None
    assert docs[0].src[0] == ("Several years ago here at TED, Peter Skillman introduced a design "
                              "challenge called the marshmallow challenge.")
    sents = [s for d in read_xml(IWSLT / "IWSLT17.TED.tst2012.en-de.en.xml") for s in d.src]
    assert ("When Proctor & Gamble went from 26 different kinds of Head & Shoulders to 15, they "
            "saw an increase in sales by 10 percent.") in sents
    de = [s for d in read_xml(IWSLT / "IWSLT17.TED.tst2010.en-de.de.xml") for s in d.src]
    assert sum("00:05:56,000 --> 00:05:58,000" in s for s in de) == 1  # subtitle debris, &gt;
    assert not any(e in s for s in sents + de for e in ("&lt;", "&gt;", "&amp;", "  "))


@pytest.mark.parametrize("en, de, setname, ndocs, nsegs", [
    ("news-test2008-src.en.sgm", "news-test2008-src.de.sgm", "news-test2008", 3, 40),
    ("newstest2012-src.en.sgm", "newstest2012-src.de.sgm", "newstest2012", 4, 79),
    ("newstest2014-deen-src.en.sgm", "newstest2014-deen-ref.de.sgm", "newstest2014", 3, 104),
])
def test_wmt_sgm_matches_curated_news(news_train, en, de, setname, ndocs, nsegs):
    # news-test2008 has CRLF endings; newstest2012 has NBSP and zero-width spaces and bare "&".
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no unpaired segments in these files
        docs = read_xml(SGM / en, SGM / de)
    assert len(docs) == ndocs and sum(len(d) for d in docs) == nsegs
    assert_aligned(docs)
    for d in docs:
        ref = news_train[f"{setname}/{d.docid}"]
        assert (d.src, d.tgt) == (ref.src, ref.tgt)
        assert "unpaired_segs" not in d.meta


def test_wmt_sgm_crlf_and_bare_ampersand():
    docs = read_xml(SGM / "news-test2008-src.en.sgm")
    assert docs[0].docid == "napi.hu/2007/12/12/0" and docs[0].meta["origlang"] == "hu"
    assert docs[0].src[0] == "Food: Where European inflation slipped up"
    sents = [s for d in docs for s in d.src]
    assert any("S&P" in s for s in sents)


def test_sgm_pairs_by_seg_id(tmp_path):
    # The shipped files pair 1:1, so derive an uneven pair from a real one: drop <seg id="2">
    # of the first document on the German side and add a German-only segment to the second.
    text = (SGM / "newstest2014-deen-ref.de.sgm").read_text(encoding="utf-8")
    text = re.sub(r'<seg id="2">[^\n]*\n', "", text, count=1)
    docs = text.split("</doc>")
    docs[1] += '<seg id="999">Nur auf Deutsch.</seg>\n'
    de = write(tmp_path / "uneven.de.sgm", "</doc>".join(docs))
    en = SGM / "newstest2014-deen-src.en.sgm"
    full = read_xml(en, SGM / "newstest2014-deen-ref.de.sgm")
    with pytest.warns(UserWarning, match="dropped 2 segments") as record:
        docs = read_xml(en, de)
    assert len(record) == 1
    assert docs[0].meta["unpaired_segs"] == 1 and docs[1].meta["unpaired_segs"] == 1
    assert "unpaired_segs" not in docs[2].meta
    assert docs[0].src == full[0].src[:1] + full[0].src[2:]
    assert docs[0].tgt == full[0].tgt[:1] + full[0].tgt[2:]
    assert (docs[1].src, docs[1].tgt) == (full[1].src, full[1].tgt)
    assert_aligned(docs)


def test_bcontrast_matches_curated_chat():
    for raw, split in (("dev.json", "valid"), ("test1_corpus-with_gold_references.json", "test")):
        docs, ref = read_bcontrast_json(BCON / raw), chat_documents(split)[:5]       # the first 5 chats of each
        assert len(docs) == 5 and [(d.docid, d.src, d.tgt) for d in docs] == \
            [(r.docid.split("/", 1)[1], r.src, r.tgt) for r in ref]
    assert docs[0].meta["speakers"][:2] == ["agent", "customer"]
    assert docs[0].meta["orig_lang"][:2] == ["en", "de"]


def test_bcontrast_without_gold_keeps_turns_as_written():
    docs = read_bcontrast_json(BCON / "test1_corpus.json")
    gold = read_bcontrast_json(BCON / "test1_corpus-with_gold_references.json")
    assert len(docs) == 5 and sum(len(d) for d in docs) == 117
    assert all(d.tgt is None for d in docs)
    d, g = docs[0], gold[0]
    assert d.src[:2] == ["hello, how can i help you?", "Hallo. Ich versuche Kinokarten im AMC "
                         "Houston 8 in Houston, Texas, zu kaufen."]
    assert [s if lang == "en" else t for s, t, lang in zip(g.src, g.tgt, g.meta["orig_lang"])] \
        == d.src


def test_plain_is_one_sentence_level_document():
    (doc,) = read_plain(ENDE / "sent" / "tatoeba.en", ENDE / "sent" / "tatoeba.de")
    assert doc.meta["sentence_level"] is True and len(doc) == 200 and doc.docid == "tatoeba.en"
    assert_aligned([doc])


def test_jsonl_round_trip(tmp_path, ted_valid):
    chats = read_bcontrast_json(BCON / "dev.json")
    for docs in (ted_valid, chats):
        path = tmp_path / "docs.jsonl"
        write_jsonl(docs, path)
        assert read_jsonl(path) == docs
    src_only = [Document(d.docid, d.src) for d in chats[:3]]
    write_jsonl(src_only, path)
    assert read_jsonl(path) == src_only


def test_marker_round_trip_is_byte_identical(tmp_path, ted_valid):
    out = {side: tmp_path / f"ted.{side}" for side in ("src", "tgt", "docids")}
    write_marker(ted_valid, out["src"], "src", docids_path=out["docids"])
    with open(out["tgt"], "w", encoding="utf-8", newline="\n") as fh:
        write_marker(ted_valid, fh, side="tgt")
    for side, ext in (("src", "en"), ("tgt", "de"), ("docids", "docids")):
        assert out[side].read_bytes() == (ENDE / "valid" / f"ted.{ext}").read_bytes()
    assert read_marker(out["src"], out["tgt"], out["docids"]) == ted_valid


def test_write_marker_rejects_unwritable(tmp_path):
    out = tmp_path / "x.txt"
    for bad in ("two\nlines", "<d>", "  "):
        raises_at(out, None, write_marker, [Document("a", [bad])], out, match="one line")
    raises_at(out, None, write_marker, [Document("a", ["x"])], out, "tgt", match="no tgt side")


def test_read_documents_auto(tmp_path, monkeypatch, ted_valid):
    assert read_documents(ENDE / "valid" / "ted.en", ENDE / "valid" / "ted.de",
                          docids=ENDE / "valid" / "ted.docids") == ted_valid
    assert len(read_documents(str(PDC).format("zh"))) == 3
    assert read_documents(ENDE / "sent" / "tatoeba.de")[0].meta["sentence_level"]
    assert len(read_documents(IWSLT / "IWSLT17.TED.tst2015.en-de.en.xml")) == 2
    assert len(read_documents(SGM / "newstest2012-src.de.sgm", fmt="sgml")) == 4
    assert len(read_documents(BCON / "dev.json")) == 5
    write_jsonl(ted_valid, tmp_path / "t.jsonl")
    assert read_documents(tmp_path / "t.jsonl") == ted_valid
    stdin = io.TextIOWrapper(io.BytesIO((ENDE / "valid" / "ted.en").read_bytes()))
    monkeypatch.setattr("sys.stdin", stdin)
    docs = read_documents("-")
    assert [d.src for d in docs] == [d.src for d in ted_valid] and docs[0].docid == "stdin:0"
    with pytest.raises(ConfigError):
        read_documents(ENDE / "valid" / "ted.en", fmt="tmx")
    with pytest.raises(ConfigError):
        read_documents(BCON / "dev.json", ENDE / "valid" / "ted.de")


def test_bom_and_crlf_accepted(tmp_path):
    src = write(tmp_path / "a.en", "\ufeff<d>\r\nOne.\r\nTwo.\r\n<d>\r\nThree.")
    docs = read_marker(src)
    assert [d.src for d in docs] == [["One.", "Two."], ["Three."]]


def test_marker_without_d_and_leading_content(tmp_path):
    assert read_marker(write(tmp_path / "a", "x\ny\n"))[0].src == ["x", "y"]
    docs = read_marker(write(tmp_path / "b", "x\n<d>\ny\n"))
    assert [d.src for d in docs] == [["x"], ["y"]]


@pytest.mark.parametrize("text", ["x\ny\n", "x\n<d>\ny\n", "<d>\nx\n<d>\ny\n", "\ufeffx\r\n<d>\r\ny\r\n"])
def test_written_marker_file_keeps_the_input_lines(tmp_path, text):
    """A translation lines up with its input: no <d> line is added before unmarked content."""
    docs = read_marker(write(tmp_path / "a", text))
    write_marker(docs, tmp_path / "b")
    assert (tmp_path / "b").read_text().splitlines() == text.lstrip("\ufeff").splitlines()


def test_written_plain_text_keeps_the_input_lines(tmp_path):
    (doc,) = read_plain(ENDE / "sent" / "tatoeba.en")
    write_marker([doc], tmp_path / "out")
    out = (tmp_path / "out").read_text().splitlines()
    assert out == [s.strip() for s in (ENDE / "sent" / "tatoeba.en").read_text().splitlines()]


# ---------------------------------------------------------------- errors

def test_error_line_counts_differ(tmp_path):
    a = write(tmp_path / "a.en", "<d>\nOne.\nTwo.\n")
    b = write(tmp_path / "b.de", "<d>\nEins.\nZwei.\nDrei.\n")
    raises_at(b, 4, read_marker, a, b, match="line counts differ")


def test_error_marker_at_different_lines(tmp_path):
    a = write(tmp_path / "a.en", "<d>\nOne.\nTwo.\n<d>\nThree.\n")
    b = write(tmp_path / "b.de", "<d>\nEins.\n<d>\nZwei.\nDrei.\n")
    err = raises_at(b, 3, read_marker, a, b, match="<d> here but not at line 3")
    assert str(a) in str(err)


def test_error_empty_sentence(tmp_path):
    a = write(tmp_path / "a.en", "<d>\nOne.\n  \t\nTwo.\n")
    raises_at(a, 3, read_marker, a, match="empty sentence")
    raises_at(a, 3, read_plain, a, match="empty sentence")


def test_error_empty_document(tmp_path):
    a = write(tmp_path / "a.en", "<d>\nOne.\n<d>\n<d>\nTwo.\n")
    raises_at(a, 3, read_marker, a, match="empty document")


def test_error_invalid_utf8_reports_line(tmp_path):
    a = write(tmp_path / "a.en", b"<d>\nGood.\nBad \xc3\x28 byte.\nGood.\n")
    raises_at(a, 3, read_marker, a, match="invalid UTF-8")
    raises_at(a, 3, read_documents, a, match="invalid UTF-8")


def test_error_missing_file(tmp_path):
    missing = tmp_path / "nope.en"
    for reader in (read_marker, read_blankline, read_xml, read_jsonl, read_bcontrast_json,
                   read_plain, read_documents):
        raises_at(missing, None, reader, missing, match="no such file")
    a = write(tmp_path / "a.en", "<d>\nOne.\n")
    raises_at(missing, None, read_marker, a, docids_path=missing, match="no such file")


def test_error_docids_count(tmp_path):
    a = write(tmp_path / "a.en", "<d>\nOne.\n<d>\nTwo.\n")
    ids = write(tmp_path / "a.docids", "d1\nd2\nd3\n")
    raises_at(ids, 3, read_marker, a, docids_path=ids, match="3 document ids for 2 documents")
    write(ids, "d1\nd1\n")
    raises_at(ids, 2, read_marker, a, docids_path=ids, match="duplicate")


def test_error_blankline_structure(tmp_path):
    a = write(tmp_path / "a.zh", "A1\nA2\n\nB1\nB2\nB3\n")
    b = write(tmp_path / "b.en", "a1\na2\n\n\nb1\nb2\n")
    raises_at(a, 6, read_blankline, a, b, match="document 2 has 3 sentences")
    write(b, "a1\na2\n\nb1\nb2\nb3\n\nc1\n")
    raises_at(b, 8, read_blankline, a, b, match="has 2 documents but")


@pytest.mark.parametrize("line, match", [
    ('{"src": ["a"], "tgt": ["b"]', "invalid JSON"),
    ('["a"]', "expected a JSON object"),
    ('{"src": "a"}', "src: expected a non-empty list"),
    ('{"src": []}', "src: expected a non-empty list"),
    ('{"src": ["a", ""]}', r"src\[1\]"),
    ('{"src": ["a", 3]}', r"src\[1\]"),
    ('{"src": ["a", " <d> "], "tgt": ["b", "c"]}', r"src\[1\]: a sentence '<d>' would read as a document"),
    ('{"src": ["a", "b"], "tgt": ["c"]}', "2 src sentences but 1 tgt"),
    ('{"src": ["a"], "tgt": ["b"], "id": null}', "id: expected"),
    ('{"src": ["a"]}', "tgt present in some documents only"),
    ('{"src": ["a"], "tgt": ["b"], "id": "x:0"}', "duplicate document id"),
])
def test_error_jsonl(tmp_path, line, match):
    good = '{"id": "x:0", "src": ["s"], "tgt": ["t"]}\n\n'
    path = write(tmp_path / "x.jsonl", good + line + "\n")
    raises_at(path, 3, read_jsonl, path, match=match)


def test_jsonl_custom_keys(tmp_path):
    path = write(tmp_path / "k.jsonl", '{"en": ["a", "b"], "de": ["c", "d"]}\n')
    (doc,) = read_jsonl(path, src_key="en", tgt_key="de", id_key="name")
    assert (doc.docid, doc.src, doc.tgt) == ("k.jsonl:0", ["a", "b"], ["c", "d"])


def test_error_xml(tmp_path):
    head = '<refset>\n<doc docid="d1">\n<seg id="1">A</seg>\n'
    a = write(tmp_path / "a.xml", head + '<seg id="2">  &#32; \n </seg>\n</doc>\n</refset>\n')
    raises_at(a, 4, read_xml, a, match="empty segment")
    write(a, head + '</doc>\n<doc docid="d2">\n<seg id="1">B</seg>\n</doc>\n')
    b = write(tmp_path / "b.xml", head + "</doc>\n")
    raises_at(a, 5, read_xml, a, b, match="'d2' is not in")
    write(a, head + '<seg id="2">B\n</doc>\n')
    raises_at(a, 4, read_xml, a, match="not closed")
    raises_at(b, None, read_xml, write(b, "<seg id=1>x</seg>\n"), match="no <doc>")
    raises_at(b, 2, read_xml, write(b, "<refset>\n<seg id=1>x</seg>\n" + head[9:] + "</doc>\n"),
              match="outside any <doc>")   # not silently dropped


def test_xml_lenient_sgml(tmp_path):
    text = ("<srcset>\r\n<DOC genre=news DocID='d 1'>\r\n<p>\r\n<seg id=1>Tom &quot;&#39;&amp; "
            "AT&T\t  Co.</seg>\r\n<seg id=\"2\" >\r\n two\r\n lines </SEG>\r\n</p>\r\n</DOC>\r\n")
    (doc,) = read_xml(write(tmp_path / "s.sgm", text))
    assert doc.docid == "d 1" and doc.src == ["Tom \"'& AT&T Co.", "two lines"]
    cdata = '<doc docid="c">\n<seg id="1"><![CDATA[a <b> &amp;\n c]]> &amp; d</seg>\n</doc>\n'
    assert read_xml(write(tmp_path / "c.xml", cdata))[0].src == ["a <b> &amp; c & d"]


def test_error_bcontrast(tmp_path):
    conv = {"c1": [{"speaker": "agent", "source": "Hi", "target": "Hallo"}],
            "c2": [{"speaker": "agent", "source": "Bye", "target": ""}]}
    path = write(tmp_path / "chat.json", json.dumps(conv, indent=2))
    raises_at(path, 9, read_bcontrast_json, path, match="'c2': a turn has no target")
    conv["c2"][0]["speaker"] = "bot"
    raises_at(path, 9, read_bcontrast_json, write(path, json.dumps(conv, indent=2)),
              match="unknown speaker 'bot'")
    raises_at(path, 2, read_bcontrast_json, write(path, '{\n"c1": [}'), match="invalid JSON")


def test_auto_format_reads_jsonl_and_xml_by_content(tmp_path):
    """Standard input and files with other names are recognised by their first line too."""
    jsonl = tmp_path / "talk.en"
    jsonl.write_text('{"id": "a", "src": ["Hello .", "Bye ."]}\n')
    docs = read_documents(str(jsonl))
    assert [(d.docid, d.src) for d in docs] == [("a", ["Hello .", "Bye ."])]
    sgml = tmp_path / "news.en"
    sgml.write_text('<srcset setid="x" srclang="en">\n<doc docid="d1">\n<seg id="1">Caf&eacute; .</seg>\n'
                    '<seg id="2">Two .</seg>\n</doc>\n</srcset>\n')
    docs = read_documents(str(sgml))
    assert [(d.docid, d.src) for d in docs] == [("d1", ["Café .", "Two ."])]


def test_evaluation_reads_sgml_references_and_keeps_empty_hypothesis_lines(tmp_path):
    from docnmt.readers import read_sentences
    ref = tmp_path / "ref.de"
    ref.write_text('<refset setid="x" trglang="de">\n<doc docid="d1">\n<seg id="1">Eins .</seg>\n'
                   '<seg id="2">Zwei .</seg>\n</doc>\n</refset>\n')
    assert read_sentences(str(ref)) == [["Eins .", "Zwei ."]]
    hyp = tmp_path / "hyp.de"
    hyp.write_text("<d>\nEins .\n\n")
    assert read_sentences(str(hyp), hypothesis=True) == [["Eins .", ""]]
