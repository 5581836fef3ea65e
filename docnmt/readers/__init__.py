"""Read and write document-level parallel data: one module per format family, and the format
table (:mod:`.formats`) that ``read_documents`` dispatches on.

Formats read (every file UTF-8, decoded strictly; a leading BOM is dropped; LF or CRLF endings):

``marker``
    Maruf et al. (2019): one sentence per line, a line holding only ``<d>`` starts a document
    (lines before the first ``<d>`` form a document too); optional ``.docids`` file, one id a line.
``blankline``
    One sentence per line, documents separated by one or more blank lines (PDC zh-en).
``xml`` / ``sgml``
    IWSLT mteval XML and WMT SGML: ``<doc docid=...>`` elements holding ``<seg id=...>``
    segments, parsed leniently with regular expressions (``&...;`` references unescaped,
    ``<![CDATA[...]]>`` unwrapped, whitespace collapsed; a ``<seg>`` before the first ``<doc>``
    is an error). Two sides are paired by docid, then by seg id. The WMT test-set format of 2021
    on (``<dataset><collection><doc id=...>`` with ``<src>`` and several ``<ref translator=...>``,
    segments in ``<p>`` paragraphs) holds both sides in one file: the source, the first reference
    as the target, every reference in ``meta["references"]``.
``jsonl``
    One JSON object a line: ``{"id": ..., "src": [...], "tgt": [...], "meta": {...}}``.
``bcontrast``
    BConTrasT JSON (WMT20 chat task): each conversation a document, each turn a sentence,
    oriented source=English, target=German.
``plain``
    One sentence per line, no documents: one document per file, ``meta["sentence_level"]``.

A document read without its own ``<d>`` line has ``meta["unmarked"]``.

Files that come back whole, only their text translated (docs/formats.md), are not documents of
this table but :class:`~.kept.Layout` s: SRT and WebVTT (:mod:`.subtitles`), DOCX (:mod:`.docx`),
Markdown (:mod:`.markdown`), HTML (:mod:`.html`) and text in paragraphs (:mod:`.paragraphs`),
with their own table and detection in :mod:`.filetypes` (DOCX is bytes, not UTF-8 text).

Line-based formats strip whitespace around each sentence. :func:`write_marker` and
:func:`write_jsonl` are the inverses of the matching readers. Every problem with the input
raises :class:`docnmt.errors.DataError` naming the file and, when known, the 1-based line.

Modules: :mod:`.text` (decoding, :class:`Text`), :mod:`.lines` (marker, blankline, plain),
:mod:`.markup`, :mod:`.xml` and :mod:`.wmt` (XML/SGML), :mod:`.jsonl`, :mod:`.bcontrast`,
:mod:`.formats` (the table), :mod:`.detect` (``fmt="auto"``), :mod:`.documents`
(``read_documents`` and the functions built on it), :mod:`.writers`.

Adding a format: a module here with ``read(src: Text, tgt: Text | None, docids_path=None,
allow_empty=False) -> list[Document]`` (raise ``DataError`` with the file and line for bad input),
one line in ``formats.TABLE`` (what it accepts, its file extensions for ``fmt="auto"``, and how
to find a sentence's line for error messages), and a test in ``tests/test_readers.py``; the CLI's
``--format`` choices come from ``FORMATS``. A format recognised by content rather than by
extension also adds a rule to :func:`~.detect.detect_format`.
"""
from .bcontrast import read_bcontrast_json
from .detect import detect_format
from .documents import locate_sentence, read_documents, read_inputs, read_sentences, sentence_line
from .formats import FORMATS
from .jsonl import read_jsonl
from .lines import read_blankline, read_marker, read_plain
from .text import DOC_MARK, STDIN, Text, read_text
from .writers import _output as _output  # the CLI's writer of output files
from .writers import write_jsonl, write_marker
from .xml import read_xml, replace_segments

__all__ = ["FORMATS", "read_text", "read_marker", "read_blankline", "read_xml", "read_jsonl",
           "read_bcontrast_json", "read_plain", "read_documents", "read_inputs", "write_marker", "write_jsonl",
           "DOC_MARK", "STDIN", "Text", "detect_format", "locate_sentence", "read_sentences", "replace_segments",
           "sentence_line"]
