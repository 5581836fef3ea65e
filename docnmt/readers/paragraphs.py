"""Plain text in paragraphs (``--format text``): paragraphs are separated by blank lines, each is
split into sentences by a language-aware splitter (pysbd), and the translation goes back into the
paragraph's lines by :mod:`.kept`'s rule, so blank lines, indentation and line endings stay as they
were. (The ``plain`` format, one sentence a line, is another thing: it is read as it is.)"""
from __future__ import annotations

from .kept import Layout, Pieces, Splitter, Unit, decode, lines_of, replace_spans


def read(data: bytes, name: str, split: Splitter, **_) -> Layout:
    """A text file as one document of paragraphs; written back with every paragraph translated."""
    text = decode(data, name)
    paragraphs, block = [], []
    for line in lines_of(text):
        if line.text.strip():
            block.append(line)
        elif block:
            paragraphs.append(block)
            block = []
    paragraphs += [block] if block else []
    spans = [(line.start + len(line.text) - len(line.text.lstrip()), line.start + len(line.text.rstrip()))
             for block in paragraphs for line in block]
    units = [Unit([line.text.strip() for line in block]) for block in paragraphs]

    def build(new: list[list[str]]) -> bytes:
        return replace_spans(text, spans, [t for unit in new for t in unit]).encode("utf-8")
    return Layout(Pieces(units, split), build)
