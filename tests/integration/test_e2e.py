"""End to end through the command line: prepare → train → translate → evaluate → average."""
import io
import json
import sys
from pathlib import Path

import pytest

from _tiny import tiny_corpus_files
from docnmt.cli import main
from docnmt.readers import read_documents

TINY = ["--arch", "transformer_tiny", "--set", "model.d_model=32", "--set", "model.ffn_dim=64",
        "--max-tokens", "600", "--lr", "3e-3", "--warmup-updates", "10", "--max-epoch", "0",
        "--patience", "0", "--no-progress"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    prefix = tiny_corpus_files(root / "raw")
    assert main(["prepare", "-s", "en", "-t", "de", "--trainpref", str(prefix), "--validpref", str(prefix),
                 "--destdir", str(root / "data"), "--vocab-size", "400"]) == 0
    assert main(["train", str(root / "data"), "--save-dir", str(root / "model"), "--mode", "doc2doc",
                 "--max-update", "8", "--save-interval-updates", "2", *TINY]) == 0
    return root, prefix


def test_train_says_what_it_runs(run):
    """The first line of train.log (also printed by `docnmt train`): method, mode, device,
    precision, parameters, data and the run's length."""
    root, _ = run
    head = next(line for line in (root / "model" / "train.log").read_text().splitlines() if "training " in line)
    for part in ("training transformer (doc2doc) on cpu (", "fp32", "M parameters", "training instances",
                 "validation instances", "8 updates"):
        assert part in head, head


def test_translate_evaluate_and_report(run, capsys):
    root, prefix = run
    hyp = root / "hyp.de"
    report = root / "coverage.json"
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "-o", str(hyp), "--beam", "2",
                 "--report", str(report)]) == 0
    err = capsys.readouterr().err
    assert "coverage:" in err
    src = read_documents(f"{prefix}.en")
    out = read_documents(str(hyp), fmt="marker", allow_empty=True)
    assert [len(d.src) for d in out] == [len(d.src) for d in src]       # one line per source sentence
    cov = json.loads(report.read_text())                                 # the same report, as JSON
    assert cov["documents"] == len(src) and cov["sentences"] == sum(len(d.src) for d in src)
    assert cov["empty_sentences"] == sum(line == "" for d in out for line in d.src)
    assert cov["documents_fully_recovered"] == len(src) - len(cov["documents_with_problems"])
    assert f"{cov['documents_fully_recovered']}/{len(src)} documents fully recovered" in err
    # the report is an output like any other: never overwritten, never the translation itself
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "-o", str(root / "other.de"),
                 "--report", str(report), "-q"]) == 2
    assert "--force" in capsys.readouterr().err and not (root / "other.de").exists()
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "-o", str(root / "same"),
                 "--report", str(root / "same"), "-q"]) == 2
    assert "same file" in capsys.readouterr().err
    assert main(["evaluate", "--hyp", str(hyp), "--ref", f"{prefix}.de", "--json", str(root / "scores.json")]) == 0
    table = capsys.readouterr().out
    assert "d-BLEU" in table and "nrefs:1" in table
    scores = json.loads((root / "scores.json").read_text())
    assert 0 <= scores["d_bleu"]["score"] <= 100 and scores["n_docs"] == len(src)


def test_output_is_never_overwritten(run, capsys):
    root, prefix = run
    target = root / "exists.txt"
    target.write_text("keep")
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "-o", str(target)]) == 2
    assert target.read_text() == "keep" and "--force" in capsys.readouterr().err


def test_no_repeat_ngram_flag_on_a_document_model(run, capsys):
    """Blocking repeated bigrams of word pieces leaves the separators alone: one line per
    source sentence still comes back; a negative size is a config error."""
    root, prefix = run
    hyp = root / "norepeat.de"
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "-o", str(hyp), "--greedy",
                 "--no-repeat-ngram-size", "2", "-q"]) == 0
    out = read_documents(str(hyp), fmt="marker", allow_empty=True)
    assert [len(d.src) for d in out] == [len(d.src) for d in read_documents(f"{prefix}.en")]
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "--no-repeat-ngram-size", "-1", "-q"]) == 2
    assert "--no-repeat-ngram-size must be at least 0" in capsys.readouterr().err


def test_translate_stdin_to_jsonl_greedy(run, capsys, monkeypatch):
    root, _ = run
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"<d>\nHello world.\nThank you.\n")))
    assert main(["translate", str(root / "model"), "--greedy", "--output-format", "jsonl", "-q"]) == 0
    obj = json.loads(capsys.readouterr().out.strip())
    assert obj["src"] == ["Hello world.", "Thank you."] and len(obj["tgt"]) == 2


def test_average_and_translate_with_it(run, capsys):
    root, prefix = run
    assert main(["average", str(root / "model"), "--last", "3"]) == 0
    assert (root / "model" / "averaged.safetensors").exists()
    assert main(["average", str(root / "model"), "--last", "3"]) == 2          # no silent overwrite
    capsys.readouterr()
    assert main(["average", str(root / "model"), "--last", "500", "-o", str(root / "all.safetensors")]) == 0
    err = capsys.readouterr().err
    assert "WARNING: --last 500 asked for" in err and "averaging those" in err   # fewer than asked: said so
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "--checkpoint",
                 str(root / "model" / "averaged.safetensors"), "-q", "--beam", "1"]) == 0


def test_compare_two_systems_with_bootstrap(run, capsys):
    root, prefix = run
    ref = f"{prefix}.de"
    assert main(["evaluate", "--hyp", ref, "--ref", ref, "--compare", f"{prefix}.en",
                 "--bootstrap-samples", "50"]) == 0
    out = capsys.readouterr().out
    assert "paired bootstrap" in out and "p =" in out and "d-chrF" in out
    # both systems named by the paths given, and the sign says which is better (the source scores below the reference)
    assert f"--hyp {ref} 100.00" in out and f"--compare {prefix}.en" in out and "compare - hyp = -" in out


def test_python_api(run):
    import docnmt
    root, _ = run
    docs, report = docnmt.load(root / "model", device="cpu").translate([["Hello world.", "Thank you."]])
    assert len(docs[0].tgt) == 2 and report.sentences == 2


def test_presets_and_help(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in ("transformer_base", "transformer_small", "transformer_tiny", "doc2doc_small", "mr_small"):
        assert name in out
    from docnmt.config import Config, preset_names
    for name in preset_names():           # every preset resolves (parents, strict keys, valid values)
        assert Config.load(name).model.d_model > 0, name
    assert Config.load("p_transformer_nocross_small").method.pos_attn_cross is False
    ablations = {"noselfsrc": "pos_attn_enc_self", "noselftgt": "pos_attn_dec_self", "norel": "rel_positions"}
    for name, switch in ablations.items():   # each P-Transformer ablation turns off its own switch only
        full = vars(Config.load("p_transformer_small").method)
        abl = vars(Config.load(f"p_transformer_{name}_small").method)
        assert {k for k in full if full[k] != abl[k]} == {switch}, name
    full, uni = Config.load("p_transformer_small"), Config.load("p_transformer_uniformsep_small")
    assert vars(full.model) == vars(uni.model) and (full.data.separator, uni.data.separator) == ("index", "uniform")
    assert main(["train", "--help"]) == 0
    assert "--update-freq" in capsys.readouterr().out


def test_jsonl_output_evaluates(run, capsys):
    root, prefix = run
    hyp = root / "hyp.jsonl"
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "-o", str(hyp), "--output-format",
                 "jsonl", "-q", "--beam", "1", "--max-len-b", "2"]) == 0
    assert main(["evaluate", "--hyp", str(hyp), "--ref", f"{prefix}.de"]) == 0
    assert "s-BLEU" in capsys.readouterr().out


def test_coverage_report_counts_merged_and_empty_sentences(run, monkeypatch):
    """A Doc2Doc output without separators: its words land in the first sentence
    (docs/methods/baselines.md#recovering-sentences-from-document-outputs), the others come back
    empty, and the report says so."""
    import docnmt
    from docnmt import translate as tmod
    from docnmt.search import Hypothesis
    root, _ = run
    tr = docnmt.load(root / "model", device="cpu")
    word = tr.vocab.encode("Hallo")

    def fake_search(model, src, cfg, bos, eos, **kw):
        return [[Hypothesis(word * 3, 0.0)] for _ in range(src.size(0))]
    monkeypatch.setattr(tmod, "beam_search", fake_search)
    docs, report = tr.translate([["One.", "Two.", "Three."], ["Alone."]], tr.cfg.override(
        {"decode.fallback": "none"}).decode)
    assert docs[0].tgt == [tr.vocab.decode(word * 3), "", ""]
    assert docs[1].tgt == [tr.vocab.decode(word * 3)]
    assert report.malformed_instances == 1 and report.empty_sentences == 2
    assert report.documents_with_problems == ["0"]
    assert "1/2 documents fully recovered" in report.summary()
    docs, report = tr.translate([["One.", "Two.", "Three."], ["Alone."]])     # the fallback: each again alone
    assert docs[0].tgt == [tr.vocab.decode(word * 3)] * 3 and report.repaired_sentences == 3
    assert "2/2 documents fully recovered" in report.summary()


def test_bf16_decoding_path(run, capsys):
    """bf16 autocast decoding (the CUDA default) also runs on CPU."""
    root, prefix = run
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "--precision", "bf16", "-q",
                 "--beam", "2", "--max-len-b", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count("<d>") == len(read_documents(f"{prefix}.en"))
    assert main(["translate", str(root / "model"), "-i", f"{prefix}.en", "--precision", "fp8", "-q"]) == 2


def test_translate_keeps_document_ids_of_same_name_inputs_apart(run, tmp_path):
    """Two inputs of the same file name number their documents alike; the JSONL output must
    still give every document its own id (evaluate and read_documents refuse duplicates)."""
    root, prefix = run
    paths = []
    for side in ("x", "y"):
        (tmp_path / side).mkdir()
        paths.append(tmp_path / side / "a.en")
        paths[-1].write_text(Path(f"{prefix}.en").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "hyp.jsonl"
    assert main(["translate", str(root / "model"), "-i", *map(str, paths), "-o", str(out), "--output-format",
                 "jsonl", "-q", "--beam", "1", "--max-len-b", "2"]) == 0
    ids = [d.docid for d in read_documents(str(out), fmt="jsonl", allow_empty=True)]
    n = len(read_documents(f"{prefix}.en"))
    assert len(ids) == len(set(ids)) == 2 * n
    assert ids[0].startswith(str(paths[0])) and ids[n].startswith(str(paths[1]))
