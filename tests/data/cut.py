"""How the slices in ``tests/data`` were cut from the project's full copy of the data (``../shared/data``).

Run from the repository root: ``python tests/data/cut.py ../shared/data``. Every slice keeps the
original's lines byte for byte (line endings, entities, stray spaces included): whole documents,
chats, suite blocks or lines are kept or dropped, nothing inside one is changed. Where a format
needs its closing lines (XML, JSON) they are the original's own closing lines. The README beside
this script says what each slice is, where it comes from and under which licence.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def write(rel: str, data: bytes | list[bytes]) -> None:
    out = HERE / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data if isinstance(data, bytes) else b"".join(data))


def xml_docs(src: Path, rel: str, keep: list[int]) -> list[bytes]:
    """The header, the ``keep``-th ``<doc>`` blocks (0-based, in file order) and the trailer; returns their docids."""
    text = lines(src)
    starts = [i for i, line in enumerate(text) if re.match(rb"\s*<doc[ >]", line, re.I)]
    ends = [i for i, line in enumerate(text) if re.match(rb"\s*</doc>", line, re.I)]
    blocks = [text[s:e + 1] for s, e in zip(starts, ends)]
    write(rel, text[:starts[0]] + [line for k in keep for line in blocks[k]] + text[ends[-1] + 1:])
    return [re.search(rb'docid="([^"]*)"', blocks[k][0]).group(1) for k in keep]


def marker_docs(src: Path, keep, docids: Path | None = None) -> tuple[list[bytes], list[bytes]]:
    """The ``<d>`` documents of a marker file whose index (or docid, when ``docids`` is given) ``keep`` accepts."""
    text, ids = lines(src), lines(docids) if docids else None
    starts = [i for i, line in enumerate(text) if line.rstrip(b"\r\n") == b"<d>"] + [len(text)]
    out, out_ids = [], []
    for n, (s, e) in enumerate(zip(starts, starts[1:])):
        if keep(ids[n].strip() if ids else n):
            out += text[s:e]
            out_ids += [ids[n]] if ids else []
    return out, out_ids


def blankline_docs(src: Path, n: int) -> list[bytes]:
    """The first ``n`` documents of a file with a blank line between documents."""
    out, docs = [], 0
    for line in lines(src):
        if not line.strip():
            docs += 1
            if docs == n:
                break
        out.append(line)
    return out


def json_chats(src: Path, n: int) -> list[bytes]:
    """The first ``n`` chats of a BConTrasT JSON file (one ``"dlg-…": [`` key per chat, indented 4)."""
    text = lines(src)
    keys = [i for i, line in enumerate(text) if re.match(rb'    "[^"]+": \[', line)]
    body = text[:keys[n]]
    body[-1] = body[-1].replace(b"],", b"]")          # the n-th chat's closing line, as the file's last chat has it
    return body + text[-1:]


def json_blocks(src: Path, n: int) -> tuple[list[bytes], int]:
    """The first ``n`` numbered blocks of a Bawden et al. suite and how many examples they hold."""
    text = lines(src)
    keys = [i for i, line in enumerate(text) if re.match(rb'  "\d+": \{', line)]
    body = text[:keys[n]]
    body[-1] = body[-1].replace(b"},", b"}")
    blocks = list(json.loads(b"".join(body + text[-1:])).values())
    return body + text[-1:], sum(len(b["trg"] if "trg" in b else b["examples"]) for b in blocks)  # anaphora, lexical


def main(shared: Path) -> None:
    raw, ende = shared / "raw", shared / "ende"
    # TED (CC BY-NC-ND 3.0): verbatim talks of the IWSLT17 XML files and the same talks of ende/valid/ted
    iwslt = raw / "iwslt17_xml"
    for name, keep in (("tst2015.en-de.en", [0, 1]), ("tst2015.en-de.de", [0, 1]),
                       ("tst2010.en-de.en", [0, 9]), ("tst2010.en-de.de", [0, 9]),  # talk 767: subtitle debris (de)
                       ("tst2012.en-de.en", [0])):                                    # "Proctor &amp; Gamble"
        xml_docs(iwslt / f"IWSLT17.TED.{name}.xml", f"raw/iwslt17_xml/IWSLT17.TED.{name}.xml", keep)
    shutil.copy(iwslt / "README", HERE / "raw/iwslt17_xml/README")
    for ext in ("en", "de"):
        write(f"ende/valid/ted.{ext}", marker_docs(ende / f"valid/ted.{ext}", lambda n: n < 2)[0])
    write("ende/valid/ted.docids", lines(ende / "valid/ted.docids")[:2])
    # WMT news test sets: the first documents and those with the quirks the reader handles
    sgm, news = raw / "wmt_sgm", set()
    for names, keep in ((("news-test2008-src.en.sgm", "news-test2008-src.de.sgm"), [0, 5, 72]),   # CRLF; & and S&P
                        (("newstest2012-src.en.sgm", "newstest2012-src.de.sgm"), [0, 14, 24, 72]),  # NBSP; bare &; ZWSP
                        (("newstest2014-deen-src.en.sgm", "newstest2014-deen-ref.de.sgm"), [0, 1, 2])):
        setname = names[0].split("-src")[0].replace("-deen", "")
        for name in names:
            news |= {f"{setname}/{d.decode()}" for d in xml_docs(sgm / name, f"raw/wmt_sgm/{name}", keep)}
    for ext in ("en", "de"):
        text, ids = marker_docs(ende / f"train/news.{ext}", lambda d: d.decode() in news, ende / "train/news.docids")
        write(f"ende/train/news.{ext}", text)
    write("ende/train/news.docids", ids)
    # Maruf et al.'s marker files (CRLF), the PDC sample (blank lines), Tatoeba (plain)
    for lang in ("en", "de"):
        name = f"NC-2016.concatenated_en2de_dev_{lang}.txt"
        write(f"raw/maruf_marker/{name}", marker_docs(raw / "maruf_marker" / name, lambda n: n < 3)[0])
        write(f"ende/sent/tatoeba.{lang}", lines(ende / f"sent/tatoeba.{lang}")[:200])
    for lang in ("zh", "en"):
        name = f"zhen/pdc/pdc-sample/pdc.{lang}.sample"
        write(name, blankline_docs(shared / name, 3))
    # BConTrasT JSON (CC BY-SA 4.0): the first 5 chats of dev and test (the bundled quick-start test chats)
    bcon = raw / "bcontrast_json"
    for name in ("dev.json", "test1_corpus.json", "test1_corpus-with_gold_references.json"):
        write(f"raw/bcontrast_json/{name}", json_chats(bcon / name, 5))
    for name in ("LICENSE-CC-BY-SA-4.0", "README.md"):
        shutil.copy(bcon / name, HERE / "raw/bcontrast_json" / name)
    # DiaBLa (CC BY-SA 4.0): the miniature en-fr corpus of the GPU run's dry run (bench/gpu/prepare.py --dry-run)
    enfr = shared / "enfr/train"
    for split, keep in (("train", lambda n: n < 10), ("valid", lambda n: 10 <= n < 12)):
        for ext in ("en", "fr"):
            write(f"enfr/{split}/diabla.{ext}", marker_docs(enfr / f"diabla.{ext}", keep)[0])
        write(f"enfr/{split}/diabla.docids", [d for n, d in enumerate(lines(enfr / "diabla.docids")) if keep(n)])
    suites(shared)


def suites(shared: Path) -> None:
    """The first blocks, items or lines of each contrastive suite and of the PDC test set."""
    bawden = shared / "enfr/suites/bawden2018_discourse_test_sets_enfr"
    out = "enfr/suites/bawden2018_discourse_test_sets_enfr"
    for name, flat in (("anaphora", "anaphora"), ("lexical-choice", "lexical_choice")):
        text, examples = json_blocks(bawden / f"test-sets/{name}.json", 10)
        write(f"{out}/test-sets/{name}.json", text)
        for part in ("current.en", "current.fr", "prev.en", "prev.fr"):       # correct, then incorrect: 2 lines each
            write(f"{out}/test-sets/{flat}.{part}", lines(bawden / f"test-sets/{flat}.{part}")[:2 * examples])
    for name in ("LICENSE", "README.md"):
        shutil.copy(bawden / name, HERE / out / name)
    scat = shared / "enfr/suites/scat_yin2021_enfr"
    for split, n in (("valid", 30), ("train", 60)):
        for part in ("context.en", "context.fr", "en", "fr"):
            name = f"highlighted.{split}.{part}"
            write(f"enfr/suites/scat_yin2021_enfr/{name}", lines(scat / name)[:n])
    shutil.copy(scat / "README.md", HERE / "enfr/suites/scat_yin2021_enfr/README.md")
    voita = shared / "enru/suites/voita2019/consistency_testsets"
    for name, first in (("deixis_test.json", 0), ("lex_cohesion_test.json", 400)):    # 418-429 have 5 candidates
        items = json.loads(voita.joinpath(name).read_text(encoding="utf-8"))[first:first + 30]
        write(f"enru/suites/voita2019/consistency_testsets/{name}", json.dumps(items).encode())
    for part in ("doc/en.tok", "doc/en.candidates", "del/en"):     # whole: TCP's groups are its 148 documents
        write(f"zhen/pdc/testsets/{part}", lines(shared / "zhen/pdc/testsets" / part))
    shutil.copy(shared / "zhen/pdc/README.md", HERE / "zhen/pdc/README.md")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
