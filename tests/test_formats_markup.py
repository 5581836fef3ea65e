"""Markdown, HTML and text paragraphs come back with everything but their text as it was
(docs/formats.md): code blocks, inline code, URLs, attributes and markup untouched but the
attributes people read (HTML's alt, title, placeholder, aria-label; Markdown's alt texts and titles),
the block structure kept, text split into sentences by a language-aware splitter."""
from __future__ import annotations

import pytest

from docnmt.errors import DataError
from docnmt.readers.filetypes import kept_format, read_kept

pytest.importorskip("markdown_it")
pytest.importorskip("pysbd")

MARKDOWN = """---
title: Front matter stays
---
# A title here

Some *emphasis* with `inline code` and a [link](https://example.com/a_b "a title"). Mr. Smith
went on over a second line <span class="x">with HTML</span> and https://example.org/raw too.

> A quoted line
> over two lines.

- First item
  continues here.
- Second item with ![an image](img/pic.png).

| Name | Value |
|------|-------|
| left cell | right cell |

```python
print("code is never translated")
```

    indented code stays too

[ref]: https://example.com/ref
""".encode()

HTML = """<!DOCTYPE html>
<html lang="en"><head><title>The page title</title>
<style>p { content: "no"; }</style></head>
<body>
  <h1 class="big" title="A heading">Hello &amp; welcome</h1>
  <p>This is <b>bold</b> text. Go <a href="https://a.example/x?y=z">over there</a> now.<br>A new line.</p>
  <pre>pre text stays</pre><p>Run <code>ls -l</code> to list.</p>
  <script>var s = "script stays";</script>
  <!-- a comment stays -->
  <img alt="A small picture" src="a.png">
</body></html>
""".encode()

TEXT = "  First paragraph. Dr. Who said it\nover two lines.\r\n\r\n\r\nSecond paragraph.\n".encode()


@pytest.mark.parametrize("name,data,fmt", [("a.md", MARKDOWN, "auto"), ("a.html", HTML, "auto"),
                                           ("a.txt", TEXT, "text")])
def test_the_source_as_translation_gives_the_file_back_byte_for_byte(name, data, fmt):
    layout = read_kept(data, name, kept_format(name, data, fmt))
    assert layout.write(layout.sentences) == data


def test_markdown_keeps_code_urls_and_block_structure():
    layout = read_kept(MARKDOWN, "a.md", "markdown")
    assert layout.sentences == [
        "A title here", "Some emphasis with and a link.", "Mr. Smith went on over a second line with HTML and too.",
        "a title", "A quoted line over two lines.", "First item continues here.", "Second item with .", "an image",
        "Name", "Value", "left cell", "right cell"]
    out = layout.write([s.upper() for s in layout.sentences]).decode()
    assert out == MARKDOWN.decode().replace("title here", "TITLE HERE").replace(
        "Some *emphasis* with `inline code` and a [link]", "SOME *EMPHASIS* WITH `inline code` AND A [LINK]").replace(
        "Mr. Smith\nwent on over a second line", "MR. SMITH\nWENT ON OVER A SECOND LINE").replace(
        ">with HTML</span> and", ">WITH HTML</span> AND").replace(" too.", " TOO.").replace(
        "A quoted line\n> over two lines.", "A QUOTED LINE\n> OVER TWO LINES.").replace(
        "First item\n  continues here.", "FIRST ITEM\n  CONTINUES HERE.").replace(
        "Second item with ![an image]", "SECOND ITEM WITH ![AN IMAGE]").replace(
        '"a title"', '"A TITLE"').replace("| Name | Value |", "| NAME | VALUE |").replace(
        "| left cell | right cell |", "| LEFT CELL | RIGHT CELL |")


def test_a_markdown_translation_is_cut_over_the_lines_it_came_from():
    layout = read_kept(b"One two three\nfour five six.\n\nNext.\n", "a.md", "markdown")
    assert layout.sentences == ["One two three four five six.", "Next."]
    out = layout.write(["Eins zwei drei vier fuenf sechs.", "Weiter."])
    assert out == b"Eins zwei drei\nvier fuenf sechs.\n\nWeiter.\n"


def test_html_keeps_tags_attributes_code_and_scripts():
    layout = read_kept(HTML, "a.html", "html")
    assert layout.sentences == ["The page title", "A heading", "Hello & welcome", "This is bold text.",
                                "Go over there now.", "A new line.", "Run to list.", "A small picture"]
    out = layout.write([s.upper() for s in layout.sentences]).decode()
    assert out == HTML.decode().replace("The page title", "THE PAGE TITLE").replace(
        "A heading", "A HEADING").replace("A small picture", "A SMALL PICTURE").replace(
        "Hello &amp; welcome", "HELLO &amp; WELCOME").replace(
        "This is <b>bold</b> text. Go", "THIS IS <b>BOLD</b> TEXT. GO").replace(
        ">over there</a> now.<br>A new line.", ">OVER THERE</a> NOW.<br>A NEW LINE.").replace(
        "<p>Run <code>ls -l</code> to list.", "<p>RUN <code>ls -l</code> TO LIST.")
    out = layout.write(["Titel", "Kopf", "Hallo & willkommen <3", *layout.sentences[3:]]).decode()
    assert "Hallo &amp; willkommen &lt;3</h1>" in out                 # a changed node escapes what it must


PAGE = """<head><meta name="description" content="A page &amp; more"><meta name="keywords" content="keep this">
</head><p class=c id="i" data-note="keep me">Go <a href="/x?a=1&amp;b=2" title='Say &quot;hi&quot;'>there</a>.
<img alt=Dog src=dog.png><img alt="  " src=blank.png><input placeholder="Type &lt;here&gt;" aria-label="Search">
<textarea placeholder="Write">as typed</textarea><svg aria-label="Chart"><rect title="a shape"/></svg>
<script>var s = '<img alt="in a script">';</script><pre title="Output"><b title="inside pre">x</b></pre></p>
""".encode()


def test_html_attributes_people_read_are_translated_and_the_rest_kept():
    layout = read_kept(PAGE, "a.html", "html")
    assert layout.sentences == ["A page & more", "Go there.", 'Say "hi"', "Dog", "Type <here>", "Search", "Write",
                                "Chart", "Output"]                   # in the page's order, decoded
    assert layout.write(layout.sentences) == PAGE
    out = layout.write([s.upper() for s in layout.sentences]).decode()
    assert out == PAGE.decode().replace("A page &amp; more", "A PAGE &amp; MORE").replace(
        "Go <a", "GO <a").replace(">there</a>.", ">THERE</a>.").replace("Say &quot;hi&quot;", 'SAY "HI"').replace(
        "alt=Dog", "alt=DOG").replace("Type &lt;here&gt;", "TYPE &lt;HERE&gt;").replace(
        '"Search"', '"SEARCH"').replace('"Write"', '"WRITE"').replace('"Chart"', '"CHART"').replace(
        '"Output"', '"OUTPUT"')
    marked = layout.write([f"{s} & <x> \"'" for s in layout.sentences]).decode()
    assert 'content="A page &amp; more &amp; &lt;x&gt; &quot;\'"' in marked    # its own quote escaped
    assert "title='Say \"hi\" &amp; &lt;x&gt; \"&#x27;'>" in marked
    assert 'alt="Dog &amp; &lt;x&gt; &quot;\'" src=dog.png' in marked           # unquoted: quoted where it must be
    assert layout.write(["x" if s == "Dog" else s for s in layout.sentences]).decode().count("alt=x src=dog.png") == 1
    for kept in ['<meta name="keywords" content="keep this">', 'class=c id="i" data-note="keep me"',
                 'href="/x?a=1&amp;b=2"', '<img alt="  " src=blank.png>', ">as typed</textarea>",
                 '<rect title="a shape"/>', "'<img alt=\"in a script\">'", '<b title="inside pre">x</b>']:
        assert kept in marked


def test_markdown_alt_texts_and_titles_are_translated_when_plain():
    data = (b'See ![a dog](dog.png "Our dog") and [the site](https://a.example/x_y \'Its "home"\').\n\n'
            b'![an *odd* one](o.png) ![a &amp; b](ab.png) `![code](c.png "no")`\n')
    layout = read_kept(data, "a.md", "markdown")
    assert layout.sentences == ["See and the site.", "a dog", "Our dog", 'Its "home"']
    assert layout.write(layout.sentences) == data
    out = layout.write([s.upper() for s in layout.sentences])
    assert out == data.replace(b"See", b"SEE").replace(b"and [the site]", b"AND [THE SITE]").replace(
        b"a dog", b"A DOG").replace(b"Our dog", b"OUR DOG").replace(b'Its "home"', b'ITS "HOME"')
    out = layout.write(["x", "a [b]", 'say "hi"', "it's"]).decode()
    assert '![a \\[b\\]](dog.png "say \\"hi\\"")' in out and "(https://a.example/x_y 'it\\'s')" in out


def test_text_paragraphs_are_split_by_a_language_aware_splitter():
    layout = read_kept(TEXT, "a.txt", "text")
    assert layout.sentences == ["First paragraph.", "Dr. Who said it over two lines.", "Second paragraph."]
    out = layout.write([s.upper() for s in layout.sentences])
    assert out == "  FIRST PARAGRAPH. DR. WHO SAID IT\nOVER TWO LINES.\r\n\r\n\r\nSECOND PARAGRAPH.\n".encode()
    assert read_kept(b"Ein Satz. Noch einer.\n", "d.txt", "text", lang="de").sentences == ["Ein Satz.", "Noch einer."]
    with pytest.raises(DataError, match="no sentence splitter"):
        read_kept(TEXT, "a.txt", "text", lang="xx")


def test_formats_are_chosen_by_extension_then_content():
    assert kept_format("a.md", b"x") == "markdown" and kept_format("a.htm", b"x") == "html"
    assert kept_format("page", HTML) == "html" and kept_format("a.txt", TEXT) is None
    assert kept_format("a.txt", TEXT, "text") == "text" and kept_format("a.en", b"<d>\nHi.\n") is None


def test_a_file_without_text_or_not_utf8_is_an_error_naming_it():
    with pytest.raises(DataError, match="no text to translate"):
        read_kept(b"```\ncode only\n```\n", "a.md", "markdown")
    with pytest.raises(DataError, match="invalid UTF-8") as e:
        read_kept(b"<p>caf\xe9</p>", "b.html", "html")
    assert e.value.path == "b.html" and e.value.line == 1


def test_brackets_without_a_link_and_sentences_split_without_a_space_stay_as_they_were():
    data = b"Read M[i, j] and x[0].\n\n1. Extract sentences from .json files:<br>\nthen go on.\n"
    layout = read_kept(data, "a.md", "markdown")
    assert "Read M[i, j] and x[0]." in layout.sentences           # not a link: the model sees the brackets
    assert layout.write(layout.sentences) == data
    assert layout.write([s.upper() for s in layout.sentences]) == data.upper().replace(b"<BR>", b"<br>")


def test_a_splitter_that_changes_the_text_falls_back_to_ends_of_sentences():
    from docnmt.readers.kept import Pieces, Unit
    changed = Pieces([Unit(["Hello there. How are", "you? Fine! ok"])], lambda text: ["Hello there.", "H0w are"])
    assert changed.sentences == ["Hello there.", "How are you?", "Fine!", "ok"]
