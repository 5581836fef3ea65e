"""SRT and WebVTT come back with everything but their text as it was (docs/formats.md): one
document per file, a sentence over several cues translated once and cut back over them, lines
re-wrapped with --max-line-chars, a broken timing line one error line."""
from __future__ import annotations

import re

import pytest

from docnmt.errors import DataError
from docnmt.readers.filetypes import kept_format, read_kept
from docnmt.readers.kept import distribute

pytest.importorskip("pysbd")

SRT = ("\ufeff1\r\n00:00:01,000 --> 00:00:02,500\r\n<i>Hello there, how</i>\r\n\r\n"
       "2\r\n00:00:03,000 --> 00:00:04,000\r\n{\\an8}are you today? I am fine.\r\nThanks a lot.\r\n\r\n"
       "3\r\n00:00:05,000 --> 00:00:07,000\r\n- Good.\r\n- <b>Very</b> good.\r\n\r\n").encode()
VTT = """WEBVTT - a talk

STYLE
::cue { color: yellow }

NOTE written by hand,
not translated

intro
00:00:01.000 --> 00:00:02.500 align:start position:10%
<v Roger>We start with a sentence that goes

00:00:03.000 --> 00:00:04.000
on over the next cue &amp; ends here.
""".encode()


def text_lines(data: bytes) -> list[str]:
    """The lines that are not cue numbers, timings, headers or blank."""
    return [x for x in data.decode().splitlines() if x.strip() and "-->" not in x and not x.strip("\ufeff").isdigit()]


def structure(data: bytes) -> list[str]:
    return [x for x in data.decode().splitlines() if not x.strip() or "-->" in x or x.strip("\ufeff").isdigit()]


@pytest.mark.parametrize("name,data", [("a.srt", SRT), ("b.vtt", VTT)])
def test_the_source_as_translation_gives_the_file_back_byte_for_byte(name, data):
    layout = read_kept(data, name, kept_format(name, data))
    assert layout.write(layout.sentences) == data
    upper = layout.write([s.upper() for s in layout.sentences])
    assert structure(upper) == structure(data)
    assert upper.decode().upper() == data.decode().upper()            # tags and all in place


def test_a_sentence_over_two_cues_is_translated_once_and_cut_by_their_lengths():
    layout = read_kept(SRT, "a.srt", "srt")
    assert layout.sentences == ["Hello there, how are you today?", "I am fine.", "Thanks a lot.", "- Good.",
                                "- Very good."]
    # "Hello there, how" is 16 of the sentence's 31 characters: the first half of the translation
    out = layout.write(["Hallo du, wie geht es dir heute?", "Mir geht es gut.", "Danke sehr.", "- Gut.", "- Sehr gut."])
    lines = text_lines(out)
    assert lines[:3] == ["<i>Hallo du, wie geht</i>", "{\\an8}es dir heute? Mir geht es gut.", "Danke sehr."]
    assert lines[3:] == ["- Gut.", "- <b>Sehr</b> gut."]          # a tag inside a line stays between the runs
    assert structure(out) == structure(SRT)


def test_max_line_chars_wraps_every_cue_anew():
    layout = read_kept(SRT, "a.srt", "srt", max_line_chars=12)
    out = layout.write(["Hallo du, wie geht es dir heute?", "Mir geht es gut.", "Danke sehr.", "- Gut.",
                        "- Sehr gut, wirklich ausgezeichnet."])
    assert all(len(re.sub(r"<[^>]*>|\{[^}]*\}", "", x)) <= 12 for x in text_lines(out) if " " in x)
    assert [x for x in out.decode().splitlines() if "-->" in x] == [x for x in SRT.decode().splitlines() if "-->" in x]
    assert "ausgezeichnet." in text_lines(out)[-1]                  # a word longer than N stands alone
    assert text_lines(out)[0].startswith("<i>")


def test_a_translation_without_spaces_is_cut_between_characters():
    assert distribute("你好世界再见", [2, 4]) == ["你好", "世界", "再见"]
    assert distribute("one two three", [4]) == ["one", "two three"]
    assert distribute("see the link.", [12]) == ["see the link", "."]      # a cut before punctuation stays there
    assert distribute("a b c", [0, 0]) == ["a", "b", "c"]              # every piece a word while there are words
    assert distribute("a b", [0, 0, 9]) == ["a", "", "", "b"]


def test_a_one_word_translation_is_not_cut_inside_its_word():
    """A sentence over three cues translated as one word (``Oui.``) was cut between characters as
    if it were Chinese (``O`` / ``ui.``): only texts of scripts written without spaces are."""
    from docnmt.readers.kept import Pieces, Unit
    assert distribute("Oui.", [1, 2]) == ["Oui", "", "."]
    cues = Pieces([Unit(["The government has", "decided to present", "a new bill today."])], lambda text: [text])
    assert cues.fill(["Oui."]) == [["Oui.", "", ""]]
    assert distribute("สวัสดีครับ", [5]) == ["สวัสด", "ีครับ"]          # Thai: any character boundary


@pytest.mark.parametrize("crlf", [False, True])
def test_a_cue_left_without_text_keeps_its_timing_and_no_empty_line(crlf):
    """A question over two cues answered in one word: the second cue gets nothing and is written
    as its number and timing, with no empty text line before the blank line that ends it (which
    players would show as an empty subtitle line, and some parsers read as the cue's end)."""
    srt = ("1\n00:00:01,000 --> 00:00:02,000\nAre you coming\n\n2\n00:00:02,000 --> 00:00:03,000\n"
           "to the party tonight?\n\n3\n00:00:04,000 --> 00:00:05,000\nYes.\n")
    nl = "\r\n" if crlf else "\n"
    layout = read_kept(srt.replace("\n", nl).encode(), "a.srt", "srt")
    assert layout.sentences == ["Are you coming to the party tonight?", "Yes."]
    out = layout.write(["Oui.", "Oui."]).decode()
    assert out == ("1\n00:00:01,000 --> 00:00:02,000\nOui.\n\n2\n00:00:02,000 --> 00:00:03,000\n\n"
                   "3\n00:00:04,000 --> 00:00:05,000\nOui.\n").replace("\n", nl)
    assert read_kept(out.encode(), "b.srt", "srt").sentences == ["Oui.", "Oui."]    # it reads back


def test_a_space_the_cut_drops_between_touching_parts_is_put_back():
    """Parts that meet with nothing between them (``<c.yellow>Thank you</c>, <lang fr>merci``):
    a cut at a space of the translation keeps a space there, else two words run together
    (``c'est</c>la``); parts on two lines (a joiner " ") stay as they were."""
    from docnmt.readers.kept import Pieces, Unit
    inline = Pieces([Unit(["Thank you", ", ", "merci", "."], ["", "", ""])], lambda text: [text])
    assert inline.fill(["Merci, c'est la merci."]) == [["Merci, c'est", " la ", "merci", "."]]
    assert inline.fill(["Thank you, merci."]) == [["Thank you", ", ", "merci", "."]]     # itself: as it was
    runs = Pieces([Unit(["The gov", "ernment has decided."], [""])], lambda text: [text])     # DOCX runs of one word
    assert runs.fill(["Le gouvernement a décidé."]) == [["Le", " gouvernement a décidé."]]
    lines = Pieces([Unit(["The bill is", "ready now."])], lambda text: [text])
    assert lines.fill(["Le projet de loi est prêt."]) == [["Le projet de", "loi est prêt."]]


def test_closing_punctuation_a_cut_leaves_at_a_part_start_goes_back():
    """``<i>Hello everyone,</i> and welcome``: the cut before the translation's comma left it at
    the start of the next part, after that part's own space (``monde</i> , et``); it goes back
    to the end of the piece before, unless the source's part starts with punctuation itself."""
    from docnmt.readers.kept import Pieces, Unit
    tag = Pieces([Unit(["Hello everyone,", " and welcome"], [""])], lambda text: [text])
    assert tag.fill(["Bonjour tout le monde, et bienvenue"]) == [["Bonjour tout le monde,", " et bienvenue"]]
    link = Pieces([Unit(["See the ", "link", "."], ["", ""])], lambda text: [text])
    assert link.fill(["Voir le lien."]) == [["Voir le ", "lien", "."]]


@pytest.mark.parametrize("name,data,words,line", [
    ("a.srt", b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n\n2\n00:00:03,000 -> 00:00:04\nBye.\n", "broken cue", 6),
    ("b.vtt", b"WEBVTT\n\n00:01 --> 00:02.000\nHi.\n", "broken cue", 3),
    ("c.vtt", b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n", "no WEBVTT", 1),
    ("d.srt", b"\n\n", "no subtitle cues", None),
])
def test_a_damaged_subtitle_file_is_an_error_naming_file_and_line(name, data, words, line):
    with pytest.raises(DataError, match=words) as e:
        read_kept(data, name, kept_format(name, data))
    assert e.value.path == name and e.value.line == line


def test_subtitles_are_found_by_content_too():
    assert kept_format("talk.en", SRT) == "srt" and kept_format("talk", VTT) == "vtt"
    assert kept_format("talk.en", b"Hello.\n") is None and kept_format("t.xml", SRT) is None


def test_a_broken_srt_is_one_cli_error_line(cli_error, tmp_path):
    bad = tmp_path / "a.srt"
    bad.write_bytes(b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n\n2\nnot a timing\nBye.\n")
    line = cli_error("translate", tmp_path / "no-model", "-i", bad, "-o", tmp_path / "out.srt")
    assert f"{bad}:6: broken cue" in line
    (tmp_path / "x.en").write_text("Hello.\n")
    assert "--max-line-chars is for SRT" in cli_error("translate", tmp_path / "m", "-i", tmp_path / "x.en",
                                                      "--max-line-chars", "3")


def test_a_long_file_is_split_in_chunks_and_every_sentence_found_once():
    cues = "".join(f"{i}\n00:00:01,000 --> 00:00:02,000\nThis is cue number {i} and Mr. Smith\nsays hello. "
                   f"Short one.\n\n" for i in range(1, 400))
    layout = read_kept(cues.encode(), "long.srt", "srt")
    assert len(layout.sentences) == 2 * 399
    assert layout.sentences[-2] == "This is cue number 399 and Mr. Smith says hello."
    assert layout.write(layout.sentences) == cues.encode()
