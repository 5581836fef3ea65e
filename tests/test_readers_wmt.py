"""The WMT test-set format of 2021 on: one file with the source and several references."""
from __future__ import annotations

import pytest

from docnmt.errors import DataError
from docnmt.readers import read_documents, read_sentences

WMT = """<?xml version="1.0" encoding="utf-8"?>
<dataset id="wmttest2022">
  <collection id="general">
    <doc id="news_1" origlang="en">
      <src lang="en">
        <p>
          <seg id="1">The cat sat &amp; slept.</seg>
          <seg id="2">It was tired.</seg>
        </p>
        <p>
          <seg id="3">Then it woke up.</seg>
        </p>
      </src>
      <ref lang="de" translator="A">
        <p><seg id="1">Die Katze saß und schlief.</seg><seg id="2">Sie war müde.</seg></p>
        <p><seg id="3">Dann wachte sie auf.</seg></p>
      </ref>
      <ref lang="de" translator="B">
        <p><seg id="1">Die Katze saß &amp; schlief.</seg><seg id="2">Sie war erschöpft.</seg></p>
        <p><seg id="3">Danach wachte sie auf.</seg></p>
      </ref>
      <hyp system="x" lang="de"><p><seg id="1">no</seg><seg id="2">no</seg><seg id="3">no</seg></p></hyp>
    </doc>
    <doc id="news_2" origlang="de">
      <src lang="en"><p><seg id="1">Hello.</seg></p></src>
      <ref lang="de" translator="A"><p><seg id="1">Hallo.</seg></p></ref>
      <ref lang="de" translator="B"><p><seg id="1">Guten Tag.</seg></p></ref>
    </doc>
  </collection>
</dataset>
"""


def test_wmt2021_format_source_first_reference_and_all_references(write_files, tmp_path):
    path = write_files(tmp_path, {"wmt22.en-de.all.xml": WMT})["wmt22.en-de.all.xml"]
    docs = read_documents(str(path))
    assert [d.docid for d in docs] == ["news_1", "news_2"]
    assert docs[0].src == ["The cat sat & slept.", "It was tired.", "Then it woke up."]     # across <p>
    assert docs[0].tgt == ["Die Katze saß und schlief.", "Sie war müde.", "Dann wachte sie auf."]
    assert docs[0].meta["references"]["B"][1] == "Sie war erschöpft."
    assert docs[1].meta["origlang"] == "de" and docs[1].meta["references"]["B"] == ["Guten Tag."]
    # evaluate --ref reads the reference, --src (COMET, by length) the source; content sniffing too
    assert read_sentences(str(path))[1] == ["Hallo."]
    assert read_sentences(str(path), source=True)[1] == ["Hello."]
    plain_name = write_files(tmp_path, {"test.txt": WMT})["test.txt"]
    assert read_sentences(str(plain_name)) == read_sentences(str(path))


def test_wmt2021_format_errors_name_file_and_line(write_files, tmp_path):
    bad = WMT.replace('<doc id="news_2" origlang="de">', '<doc origlang="de">')
    path = write_files(tmp_path, {"bad.xml": bad})["bad.xml"]
    with pytest.raises(DataError, match=r"bad\.xml:24: <doc> without id"):
        read_documents(str(path))
    no_src = WMT.replace('<src lang="en"><p><seg id="1">Hello.</seg></p></src>', "")
    with pytest.raises(DataError, match="news_2.*no <src>"):
        read_documents(str(write_files(tmp_path, {"n.xml": no_src})["n.xml"]))
