"""DOCX comes back with everything but its text as it was (docs/formats.md): paragraph styles,
tables, headers and footers, every other member of the zip byte for byte; a paragraph's
translation cut over its runs by their shares of its characters; a damaged file one error line."""
from __future__ import annotations

import io
import zipfile

import pytest

from docnmt.errors import DataError
from docnmt.readers.filetypes import kept_format, read_kept

docx = pytest.importorskip("docx")
pytest.importorskip("pysbd")


def add_link(paragraph, text: str, url: str) -> None:
    """A ``w:hyperlink`` holding one run (python-docx has no call for it)."""
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn
    rid = paragraph.part.relate_to(url, RELATIONSHIP_TYPE.HYPERLINK, is_external=True)
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), rid)
    run = OxmlElement("w:r")
    t = OxmlElement("w:t")
    t.text = text
    run.append(t)
    link.append(run)
    paragraph._p.append(link)


def sample() -> bytes:
    d = docx.Document()
    d.sections[0].header.paragraphs[0].text = "The header says hello."
    d.sections[0].footer.paragraphs[0].text = "Page footer."
    d.add_heading("A short title", level=1)
    p = d.add_paragraph("one two ")
    p.add_run("three").bold = True
    p.add_run(" four. Five six.").italic = True
    p = d.add_paragraph("Name:")
    p.add_run().add_tab()
    p.add_run("Ada")
    p = d.add_paragraph("Read ", style="Quote")
    add_link(p, "the manual", "https://example.com/manual")
    p.add_run(" first.")
    table = d.add_table(rows=2, cols=2)
    for k, cell in enumerate(c for row in table.rows for c in row.cells):
        cell.text = f"Cell number {k}."
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def paragraphs(data: bytes) -> list[tuple]:
    """(where, style, [(run text, bold, italic)]) of every paragraph, links' text included."""
    d = docx.Document(io.BytesIO(data))
    out = [("body", p.style.name, [(r.text, r.bold, r.italic) for r in p.runs], p.text) for p in d.paragraphs]
    out += [("cell", p.style.name, [], p.text) for t in d.tables for row in t.rows for c in row.cells
            for p in c.paragraphs]
    for s in d.sections:
        out += [(part, p.style.name, [], p.text) for part, hf in (("header", s.header), ("footer", s.footer))
                for p in hf.paragraphs]
    return out


def test_the_source_as_translation_keeps_styles_tables_headers_and_every_other_member():
    data = sample()
    layout = read_kept(data, "a.docx", kept_format("a.docx", data))
    assert layout.sentences == ["A short title", "one two three four.", "Five six.", "Name: Ada",  # a tab: a space
                                "Read the manual first.", *[f"Cell number {k}." for k in range(4)],
                                "The header says hello.", "Page footer."]
    for translate in (lambda s: s, str.upper):
        out = layout.write([translate(s) for s in layout.sentences])
        assert paragraphs(out) == [(w, st, [(translate(t), b, i) for t, b, i in runs], translate(text))
                                   for w, st, runs, text in paragraphs(data)]
        before, after = zipfile.ZipFile(io.BytesIO(data)), zipfile.ZipFile(io.BytesIO(out))
        assert after.namelist() == before.namelist()
        kept = [n for n in before.namelist() if n != "word/document.xml" and not n.startswith(("word/header",
                                                                                              "word/footer"))]
        assert all(after.read(n) == before.read(n) for n in kept)          # styles, relationships (link URL) ...
    assert b"https://example.com/manual" in zipfile.ZipFile(io.BytesIO(out)).read("word/_rels/document.xml.rels")


def test_a_paragraph_translation_is_cut_over_its_runs_by_their_share_of_the_characters():
    layout = read_kept(sample(), "a.docx", "docx")
    tgt = dict(zip(layout.sentences, layout.sentences))
    tgt["one two three four."] = "uno dos tres cuatro."          # runs "one two " | "three" | " four."
    tgt["Five six."] = "Cinco seis."
    tgt["Read the manual first."] = "Lee primero el manual."       # "Read " | link "the manual" | " first."
    out = paragraphs(layout.write([tgt[s] for s in layout.sentences]))
    assert out[1][2] == [("uno dos ", None, None), ("tres", True, None), (" cuatro. Cinco seis.", None, True)]
    assert out[3][3] == "Lee primero el manual."
    link = docx.Document(io.BytesIO(layout.write([tgt[s] for s in layout.sentences]))).paragraphs[3]
    assert [r.text for r in link.iter_inner_content()][0] == "Lee "          # the link got "primero el"
    assert link.hyperlinks[0].text == "primero el" and link.hyperlinks[0].url == "https://example.com/manual"


@pytest.mark.parametrize("damage,words", [
    (lambda d: d[:len(d) // 2], "not a zip archive, or a damaged one"),
    (lambda d: b"plain text", "not a zip archive"),
    (lambda d: _without(d, "word/document.xml"), "no word/document.xml"),
    (lambda d: _with(d, "word/document.xml", b"<w:document"), "bad XML"),
])
def test_a_damaged_docx_is_an_error_naming_the_file(damage, words):
    with pytest.raises(DataError, match=words) as e:
        read_kept(damage(sample()), "bad.docx", "docx")
    assert e.value.path == "bad.docx"


def _without(data: bytes, name: str) -> bytes:
    return _with(data, name, None)


def _with(data: bytes, name: str, body: bytes | None) -> bytes:
    src, buf = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            if info.filename != name:
                dst.writestr(info, src.read(info))
            elif body is not None:
                dst.writestr(info, body)
    return buf.getvalue()


def test_a_corrupt_docx_is_one_cli_error_line(cli_error, tmp_path):
    bad = tmp_path / "report.docx"
    bad.write_bytes(sample()[:300])
    line = cli_error("translate", tmp_path / "no-model", "-i", bad, "-o", tmp_path / "o.docx")
    assert f"{bad}: not a DOCX file" in line
    assert kept_format("report.bin", sample()) == "docx"           # a zip by its content


def test_a_docx_is_not_written_to_a_terminal(cli_error, tmp_path, monkeypatch):
    import docnmt.cli.kept
    good = tmp_path / "report.docx"
    good.write_bytes(sample())
    monkeypatch.setattr(docnmt.cli.kept, "_terminal", lambda: True)
    assert "binary file: give -o" in cli_error("translate", tmp_path / "no-model", "-i", good)
