"""The length-bias experiment's scripts (README.md): which settings run.py decodes, how it cuts the
sittings, and what paired.py tests and writes, on hand-made translations."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(name: str):
    """This folder's ``name`` module (another experiment's ``run`` may already be imported)."""
    saved = {m: sys.modules.pop(m) for m in ("run", name) if m in sys.modules}
    sys.path.insert(0, str(HERE))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(HERE))
        for m in ("run", name):
            sys.modules.pop(m, None)
        sys.modules.update(saved)


run = load("run")
paired = load("paired")


def test_every_budget_is_decoded_plain_and_all_but_whole_documents_sliding():
    plain = [b for b, s in run.settings() if not s]
    sliding = [b for b, s in run.settings() if s]
    assert plain == run.BUDGETS and 0 in plain
    assert sliding == [b for b in run.BUDGETS if b]            # a whole document has no window


def test_the_cut_keeps_the_same_sentences_of_the_first_sittings(tmp_path):
    src = tmp_path / "in"
    src.write_text("".join("<d>\n" + "".join(f"s{d}.{i}\n" for i in range(6)) for d in range(3)))
    run.cut(src, tmp_path / "out", docs=2, skip=2, sents=3)
    kept = (tmp_path / "out").read_text().split("\n")[:-1]
    assert kept == ["<d>", "s0.2", "s0.3", "s0.4", "<d>", "s1.2", "s1.3", "s1.4"]


def test_each_setting_is_tested_against_512_its_plain_decoding_and_the_other_model():
    pairs = paired.pairs()
    assert len(pairs) == len(set(pairs))
    m0, m1 = paired.MODELS
    assert ("budget", f"{m0}.512", f"{m0}.whole") in pairs
    assert ("budget", f"{m1}.512+sliding", f"{m1}.4096+sliding") in pairs
    assert ("sliding", f"{m1}.128", f"{m1}.128+sliding") in pairs
    assert not any(b.endswith("whole+sliding") for _, _, b in pairs)
    assert not any(a == b for _, a, b in pairs)
    dls = [p for p in pairs if p[0] == "dls_laa"]
    assert len(dls) == len(run.settings()) and all(a.startswith(m0) and b.startswith(m1) for _, a, b in dls)


def test_the_paired_file_holds_each_test_with_the_worse_system_negative(tmp_path, monkeypatch):
    work, results = tmp_path / "work", tmp_path / "results"
    work.mkdir()
    sents = [f"the member for riding {i} said that the bill was read a second time" for i in range(40)]
    (work / "valid1x0+40.fr").write_text("<d>\n" + "\n".join(sents) + "\n")
    for m in paired.MODELS:
        for b, s in run.settings():
            # every setting exact, but the second model loses a word in every third sentence at 4096
            drop = m == paired.MODELS[1] and b == 4096
            hyp = [" ".join(t.split()[:-1]) if drop and i % 3 == 0 else t for i, t in enumerate(sents)]
            (work / f"{m}.{paired.key(b, s)}.fr").write_text("<d>\n" + "\n".join(hyp) + "\n")
    monkeypatch.setattr(sys, "argv", ["paired.py", "--work", str(work), "--results", str(results), "--samples", "50"])
    paired.main()
    data = json.loads((results / "paired.json").read_text())
    assert data["about"]["sentences"] == 40 and data["about"]["samples"] == 50
    rows = {(r["a"], r["b"]): r for r in data["rows"]}
    assert len(rows) == len(paired.pairs())
    m0, m1 = paired.MODELS
    worse = rows[(f"{m0}.4096", f"{m1}.4096")]
    assert worse["s_bleu"]["delta"] < 0 and worse["s_bleu"]["p_value"] < 0.05
    assert rows[(f"{m1}.512", f"{m1}.4096")]["s_bleu"]["delta"] < 0
    assert rows[(f"{m0}.512", f"{m0}.128")]["s_bleu"]["delta"] == 0      # identical translations


def test_document_lengths_count_each_documents_word_pieces(tmp_path):
    import sentencepiece
    text = tmp_path / "text"
    text.write_text("".join(f"the member for riding {i} said that the bill was read\n" for i in range(50)))
    sentencepiece.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "spm"), vocab_size=30,
                                             minloglevel=2)
    src = tmp_path / "src"
    src.write_text("<d>\nthe bill\nthe member said\n<d>\nread\n")
    docs = run.document_lengths(src, tmp_path / "spm.model")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    first, second = len(sp.encode("the bill")) + len(sp.encode("the member said")), len(sp.encode("read"))
    assert docs == [{"sentences": 2, "word_pieces": first, "with_sentence_ends": first + 2},
                    {"sentences": 1, "word_pieces": second, "with_sentence_ends": second + 1}]


def test_a_timed_decode_starts_from_scratch_not_from_a_stopped_decodes_journal(tmp_path, monkeypatch):
    """translate goes on from FILE.partial.jsonl after a stop; the seconds run.py keeps must cover
    the whole decode, so a left-over journal is deleted before the timed command."""
    from docnmt.journal import journal_path
    work, results = tmp_path / "work", tmp_path / "results"
    work.mkdir()
    for lang in ("en", "fr"):
        (work / f"valid3x300+300.{lang}").write_text("<d>\na\n", encoding="utf-8")
    stale = journal_path(work / "m.512.fr")
    stale.write_text("{}\n", encoding="utf-8")
    seen = {}

    def fake_docnmt(*argv):
        argv = [str(a) for a in argv]
        if argv[0] == "translate":
            out = Path(argv[argv.index("-o") + 1])
            seen[out.name] = journal_path(out).exists()
            out.write_text("a\n", encoding="utf-8")
            Path(argv[argv.index("--report") + 1]).write_text("{}", encoding="utf-8")
        else:
            Path(argv[argv.index("--json") + 1]).write_text("{}", encoding="utf-8")

    monkeypatch.setattr(run, "docnmt", fake_docnmt)
    monkeypatch.setattr(sys, "argv", ["run.py", "--model", str(tmp_path / "model"), "--name", "m",
                                      "--work", str(work), "--results", str(results), "--keys", "512"])
    run.main()
    assert seen == {"m.512.fr": False}
    assert "512" in json.loads((results / "m.json").read_text())
