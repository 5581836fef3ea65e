"""DOCX (Word) documents, translated with everything but their text kept: paragraphs and their
styles, tables, headers and footers, footnotes, images, fields and every other part of the file.

The document is one document to the model: every paragraph's text (``<w:p>``) in the order of the
body (table cells where the table stands), then the headers, footers, footnotes and endnotes. A
paragraph is split into sentences; its translation goes back into the paragraph's own text
elements (``<w:t>``, one or more per run, links' runs included) by :mod:`.kept`'s rule: each run
gets the share of the translation that its share of the paragraph's characters gives, cut at word
boundaries, so a bold word in the middle of a sentence makes the middle of its translation bold.
Runs keep their formatting; no run is added or removed.

The file is rewritten member by member: only the XML parts holding text change, every other
member (styles, images, settings) is copied byte for byte.
"""
from __future__ import annotations

import copy
import io
import re
import zipfile
import zlib

from ..errors import DataError
from .kept import Layout, Pieces, Splitter, Unit

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
SPACE = "{http://www.w3.org/XML/1998/namespace}space"
BODY = "word/document.xml"
OTHERS = re.compile(r"word/(header|footer|footnotes|endnotes)(\d*)\.xml")
KINDS = ("header", "footer", "footnotes", "endnotes")
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")    # characters XML cannot hold


def _order(member: str) -> tuple[int, int]:
    """Headers, footers, footnotes, endnotes; each by number."""
    m = OTHERS.fullmatch(member)
    return KINDS.index(m.group(1)), int(m.group(2) or 0)


def _load(data: bytes, name: str):
    """The zip and its text parts parsed (``{member: root}``), the body first."""
    try:
        from lxml import etree
    except ImportError:
        raise DataError("reading DOCX needs lxml: pip install 'docnmt[formats]'") from None
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        members = {info.filename: (info, z.read(info)) for info in z.infolist()}    # every member checked
        texts = [BODY, *sorted((n for n in members if OTHERS.fullmatch(n)), key=_order)]
        parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)
        return members, {m: etree.fromstring(members[m][1], parser) for m in texts}
    except zipfile.BadZipFile:
        raise DataError("not a DOCX file: not a zip archive, or a damaged one", name) from None
    except KeyError:
        raise DataError(f"not a DOCX file: no {BODY} in the archive", name) from None
    except etree.XMLSyntaxError as e:
        raise DataError(f"damaged DOCX file: bad XML ({e})", name) from None
    except (OSError, EOFError, ValueError, RuntimeError, NotImplementedError, zlib.error) as e:
        raise DataError(f"damaged DOCX file: {e}", name) from None


def _paragraph_texts(root) -> list[tuple[list, list[str]]]:
    """Per paragraph, its own ``<w:t>`` elements (not those of a text box's paragraphs inside it)
    and the joiners between them: a space where a tab or a line break lies between, else none."""
    out = []
    for p in root.iter(W + "p"):
        texts, joiners, gap = [], [], ""
        for el in p.iter(W + "t", W + "tab", W + "br", W + "cr"):
            if next(el.iterancestors(W + "p")) is not p:
                continue
            if el.tag != W + "t":
                gap = " "
            else:
                joiners += [gap] if texts else []
                texts.append(el)
                gap = ""
        out.append((texts, joiners))
    return out


def read(data: bytes, name: str, split: Splitter, **_) -> Layout:
    """A DOCX file as one document of paragraphs; written back with every paragraph translated."""
    from lxml import etree
    members, roots = _load(data, name)
    found = [p for root in roots.values() for p in _paragraph_texts(root)]
    paragraphs = [texts for texts, _ in found]
    units = [Unit([t.text or "" for t in texts], joiners) for texts, joiners in found]

    def build(new: list[list[str]]) -> bytes:
        for texts, parts in zip(paragraphs, new):
            for t, text in zip(texts, parts):
                if text != (t.text or ""):
                    t.text = text = NOT_XML.sub("", text)
                    if text != text.strip():
                        t.set(SPACE, "preserve")
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as dst:
            for info, body in members.values():
                if info.filename in roots:
                    body = etree.tostring(roots[info.filename], xml_declaration=True, encoding="UTF-8",
                                          standalone=True)
                dst.writestr(copy.copy(info), body)         # a copy: writing sets its sizes and CRC
        return out.getvalue()
    return Layout(Pieces(units, split), build)
