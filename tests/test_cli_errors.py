"""The ``docnmt`` command on bad input: exit status 2 and one line naming the file (and line),
never a traceback (the contract stated in ``docnmt/cli/__init__.py``).

Most cases run ``docnmt.cli.main`` in-process through the ``cli_error`` fixture of conftest.py;
one runs the installed console script in a subprocess.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

# A well-formed two-document pair; the cases below break one thing at a time.
GOOD = "<d>\nHello .\nHow are you ?\n<d>\nGood bye .\n"


@pytest.fixture
def corpus(tmp_path, write_files):
    """``corpus(en, de)`` writes ``corpus.en`` / ``corpus.de`` and returns
    ``(prefix, {"en": path, "de": path})``; ``None`` leaves a side out."""
    def make(en: str | bytes | None, de: str | bytes | None):
        files = {f"corpus.{lang}": text for lang, text in (("en", en), ("de", de)) if text is not None}
        paths = write_files(tmp_path, files)
        return tmp_path / "corpus", {name.split(".")[1]: path for name, path in paths.items()}
    return make


def prepare_argv(prefix: Path, destdir: Path) -> list:
    return ["prepare", "-s", "en", "-t", "de", "--trainpref", prefix, "--destdir", destdir,
            "--vocab-size", "50"]


# (case, en text, de text, side named in the error, its line, words the message must hold)
DATA_CASES = [
    ("misaligned", GOOD, "<d>\nHallo .\nWie geht's ?\n", "en", 4, "line counts differ"),
    ("misaligned-longer-de", GOOD, GOOD + "Extra .\n", "de", 6, "line counts differ"),
    ("doc-marker-moved", GOOD, "<d>\nHallo .\n<d>\nWie geht's ?\nTschuess .\n", "de", 3, "<d> here but not"),
    ("empty-document", "<d>\n<d>\nHello .\n", "<d>\n<d>\nHallo .\n", "en", 1, "empty document"),
    ("empty-last-document", "<d>\nHello .\n<d>\n", "<d>\nHallo .\n<d>\n", "en", 3, "empty document"),
    ("empty-sentence", "<d>\nHello .\n\nBye .\n", "<d>\nHallo .\nNa ?\nTschuess .\n", "en", 3, "empty sentence"),
    ("blank-sentence", GOOD, "<d>\nHallo .\n   \n<d>\nTschuess .\n", "de", 3, "empty sentence"),
    ("invalid-utf8", GOOD.encode() + "Caf\u00e9 .\n".encode("latin-1"), GOOD + "Caf\u00e9 .\n", "en", 6,
     "invalid UTF-8"),
    ("invalid-utf8-after-multibyte", "<d>\nGr\u00fc\u00dfe .\nBye .\n".encode() + b"x \xe2\x82\n",
     "<d>\nA .\nB .\nC .\n", "en", 4, "invalid UTF-8"),
]


@pytest.mark.parametrize("case, en, de, side, line, words", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_prepare_reports_bad_data_by_file_and_line(corpus, tmp_path, cli_error, case, en, de, side, line, words):
    prefix, paths = corpus(en, de)
    message = cli_error(*prepare_argv(prefix, tmp_path / "out"))
    assert f"{paths[side]}:{line}: " in message
    assert words in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", [False, True], ids=["new-destdir", "empty-destdir"])
def test_failed_prepare_leaves_no_half_prepared_directory(corpus, tmp_path, run_cli, given):
    prefix, _ = corpus(GOOD, GOOD)
    dest = tmp_path / "out"
    if given:
        dest.mkdir()
    status, _, err = run_cli(*prepare_argv(prefix, dest), "--max-sentence-tokens", "2")   # fails after the vocab
    assert status == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("docnmt: error: ") and "more than the 2" in err
    assert (dest.exists() and not any(dest.iterdir())) if given else not dest.exists()


def test_prepare_missing_target_side(corpus, tmp_path, cli_error):
    prefix, paths = corpus(GOOD, None)
    message = cli_error(*prepare_argv(prefix, tmp_path / "out"))
    assert str(paths["en"]) in message and f"{prefix}.de" in message


def test_prepare_missing_corpus(tmp_path, cli_error):
    message = cli_error(*prepare_argv(tmp_path / "nothing", tmp_path / "out"))
    assert str(tmp_path / "nothing") in message and "no corpus found" in message


def test_prepare_into_non_empty_destdir(corpus, tmp_path, write_files, cli_error):
    prefix, _ = corpus(GOOD, GOOD)
    dest = tmp_path / "out"
    write_files(dest, {"keep.txt": "precious\n"})
    message = cli_error(*prepare_argv(prefix, dest))
    assert str(dest) in message and "--force" in message
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]


def test_evaluate_missing_file(corpus, tmp_path, cli_error):
    _, paths = corpus(GOOD, None)
    missing = tmp_path / "missing.de"
    message = cli_error("evaluate", "--hyp", missing, "--ref", paths["en"])
    assert f"{missing}: no such file" in message


@pytest.mark.parametrize("flag", ["--tcp", "--comet-model"])
def test_evaluate_checks_scorer_paths_before_printing_scores(corpus, tmp_path, run_cli, flag):
    _, paths = corpus(GOOD, None)
    missing = tmp_path / "nope"
    status, out, err = run_cli("evaluate", "--hyp", paths["en"], "--ref", paths["en"], flag, missing)
    assert status == 2 and out == "" and str(missing) in err and len(err.strip().splitlines()) == 1


def test_evaluate_different_document_counts(corpus, tmp_path, write_files, cli_error):
    _, paths = corpus(GOOD, None)
    hyp = write_files(tmp_path, {"hyp.de": "<d>\nHallo .\nWie ?\n"})["hyp.de"]
    message = cli_error("evaluate", "--hyp", hyp, "--ref", paths["en"])
    assert str(hyp) in message and str(paths["en"]) in message
    assert f"{hyp} has 1 document, " in message and "has 2 documents" in message and "<d> lines" in message


# ---- an output is never written over an input, --force or not ------------------------------------

@pytest.mark.parametrize("which", ["hyp", "ref"])
def test_evaluate_json_never_replaces_an_input(tmp_path, write_files, cli_error, which):
    files = write_files(tmp_path, {"hyp.de": "<d>\nHallo .\n", "ref.de": "<d>\nHallo .\n"})
    before = {n: p.read_bytes() for n, p in files.items()}
    target = files[f"{which}.de"]
    message = cli_error("evaluate", "--hyp", files["hyp.de"], "--ref", files["ref.de"], "--json", target)
    assert str(target) in message and "input" in message
    assert {n: p.read_bytes() for n, p in files.items()} == before


@pytest.mark.parametrize("output", ["--json", "--scores", "--plot"])
def test_score_contrastive_never_writes_over_its_suite(tmp_path, write_files, cli_error, output):
    suite = write_files(tmp_path, {"suite.json": '{"1": {}}\n'})["suite.json"]
    message = cli_error("score-contrastive", tmp_path / "model", suite, output, suite, "--force")
    assert "input" in message and suite.read_text() == '{"1": {}}\n'
    scat = tmp_path / "scat"                                   # a suite directory: nothing inside it either
    write_files(scat, {"highlighted.valid.en": "x\n"})
    message = cli_error("score-contrastive", tmp_path / "model", scat, output, scat / "report.json")
    assert "input" in message and sorted(p.name for p in scat.iterdir()) == ["highlighted.valid.en"]


@pytest.mark.parametrize("fmt", ["auto", "bawden"])
def test_a_suite_directory_error_names_the_suite_files_in_it(tmp_path, write_files, fmt):
    from docnmt.errors import DataError
    from docnmt.suites import read_suite
    root = tmp_path / "bawden"
    write_files(root / "test-sets", {"anaphora.json": "{}", "lexical-choice.json": "{}", "README": "x"})
    with pytest.raises(DataError, match=r"give one of its files \(test-sets/anaphora.json, "
                                        r"test-sets/lexical-choice.json\)"):
        read_suite(root, fmt)


def test_abbreviated_flags_are_errors_not_guesses(cli_error):
    message = cli_error("translate", "MODEL", "--be", "3")
    assert "unrecognized arguments: --be 3" in message


def test_translate_never_writes_over_its_input_or_the_model(tmp_path, write_files, cli_error):
    src = write_files(tmp_path, {"in.en": "<d>\nHello .\n"})["in.en"]
    model = tmp_path / "model"
    write_files(model, {"config.yaml": "model: {}\n"})
    for output in (src, model / "config.yaml"):
        message = cli_error("translate", model, "-i", src, "-o", output, "--force")
        assert str(output) in message and "input" in message
    assert src.read_text() == "<d>\nHello .\n" and (model / "config.yaml").read_text() == "model: {}\n"


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_directory_as_output_file_is_one_clear_error(tmp_path, write_files, cli_error, force):
    """-o naming a directory: "is a directory" at once, with or without --force (never a
    temporary file's name, never "pass --force" first)."""
    import torch

    from docnmt.checkpoint import save_checkpoint
    src = write_files(tmp_path, {"in.en": "<d>\nHello .\n"})["in.en"]
    model = tmp_path / "model"
    write_files(model, {"config.yaml": "model: {}\n"})
    save_checkpoint(model, "u00000001", torch.nn.Linear(2, 2), {"updates": 1}, keep_last=2)
    out = tmp_path / "out"
    out.mkdir()
    for argv in (["translate", model, "-i", src, "-o", out], ["average", model, "-o", out]):
        message = cli_error(*argv, *force)
        assert message.endswith(f"{out}: is a directory; give a file name"), message
    assert list(out.iterdir()) == [] and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_average_writes_into_a_pipe_without_force_and_never_replaces_it(tmp_path, run_cli):
    """An output that exists but is not a regular file (a named pipe here, /dev/null alike) is
    written to, not replaced (safetensors' save_file would replace it), and needs no --force."""
    import threading

    import torch

    from docnmt.checkpoint import save_checkpoint
    model = tmp_path / "model"
    save_checkpoint(model, "u00000001", torch.nn.Linear(2, 2), {"updates": 1}, keep_last=2)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    status, _, err = run_cli("average", model, "-o", fifo)
    reader.join(timeout=30)
    assert status == 0, err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and got and b'"weight"' in got[0]


# ---------------------------------------------------------------------------- configuration

@pytest.mark.parametrize("yaml_text, key, hint", [
    ("preset: transformer_small\ntrain:\n  lrr: 0.001\n", "lrr", "lr"),
    ("data:\n  mdoe: doc2doc\n", "mdoe", "mode"),
    ("trian:\n  lr: 0.001\n", "trian", "train"),
], ids=["train-key", "data-key", "section"])
def test_train_unknown_config_key(tmp_path, write_files, cli_error, yaml_text, key, hint):
    cfg = write_files(tmp_path, {"exp.yaml": yaml_text})["exp.yaml"]
    message = cli_error("train", tmp_path / "data", "--save-dir", tmp_path / "model", "--config", cfg)
    assert str(cfg) in message
    assert f"unknown key {key!r}" in message and f"did you mean {hint!r}" in message


@pytest.mark.parametrize("flag", ["--arch", "--config"])
def test_train_unknown_preset(tmp_path, cli_error, flag):
    message = cli_error("train", tmp_path / "data", "--save-dir", tmp_path / "model", flag, "transformer_smal")
    assert "'transformer_smal'" in message and "did you mean 'transformer_small'" in message


def test_train_invalid_mode_value_names_the_config_file(tmp_path, write_files, cli_error):
    cfg = write_files(tmp_path, {"exp.yaml": "preset: doc2doc_small\ndata:\n  mode: doc2dog\n"})["exp.yaml"]
    message = cli_error("train", tmp_path / "data", "--save-dir", tmp_path / "model", "--config", cfg)
    assert "doc2dog" in message
    assert f"{cfg}: data: " in message


@pytest.mark.parametrize("what", ["directory", "latin-1"])
def test_train_unreadable_config_file(tmp_path, write_files, cli_error, what):
    if what == "directory":
        cfg = tmp_path / "configs"
        cfg.mkdir()
    else:
        latin1 = "# r\u00e9glages\ntrain:\n  lr: 0.001\n".encode("latin-1")
        cfg = write_files(tmp_path, {"exp.yaml": latin1})["exp.yaml"]
    message = cli_error("train", tmp_path / "data", "--save-dir", tmp_path / "model", "--config", cfg)
    assert str(cfg) in message


def test_train_on_unprepared_data_directory(tmp_path, cli_error):
    data = tmp_path / "data"
    data.mkdir()
    message = cli_error("train", data, "--save-dir", tmp_path / "model", "--arch", "transformer_tiny")
    assert str(data) in message


# ------------------------------------------------------------------------------- translate

@pytest.mark.parametrize("exists", [True, False], ids=["empty-dir", "no-dir"])
def test_translate_with_a_directory_that_is_not_a_model(corpus, tmp_path, cli_error, exists):
    _, paths = corpus(GOOD, None)
    model = tmp_path / "not-a-model"
    if exists:
        model.mkdir()
    message = cli_error("translate", model, "--input", paths["en"])
    assert str(model) in message and "not a docnmt model" in message


# -------------------------------------------------------------------- the installed command

def test_console_script_exits_2_without_traceback(corpus, tmp_path):
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    exe = shutil.which("docnmt", path=search)
    if exe is None:
        pytest.skip("the docnmt console script is not installed")
    prefix, paths = corpus(GOOD, "<d>\nHallo .\n")
    proc = subprocess.run([exe, *map(str, prepare_argv(prefix, tmp_path / "out"))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("docnmt: error: ") and proc.stderr.count("\n") == 1
    assert f"{paths['en']}:3: line counts differ" in proc.stderr


def test_numbers_in_float_notation_are_accepted_for_integers():
    from docnmt.config import Config
    from docnmt.errors import ConfigError
    cfg = Config.load("transformer_tiny").override({"train.max_update": "1e3", "train.adam_betas": "0.9,0.98",
                                                    "train.valid_bleu": "true", "train.tensorboard_dir": None})
    assert cfg.train.max_update == 1000 and cfg.train.adam_betas == (0.9, 0.98) and cfg.train.valid_bleu
    assert cfg.train.tensorboard_dir == ""
    with pytest.raises(ConfigError, match="whole number"):
        Config.load("transformer_tiny").override({"train.warmup_updates": 0.5})


# ---- values out of range, devices, paths, weights: one error line, never a traceback ----------

@pytest.mark.parametrize("key, value, words", [
    ("train.update_freq", 0, "train.update_freq must be at least 1"),
    ("model.dropout", 1.5, "model.dropout must be in [0, 1)"),
    ("decode.beam", 0, "decode.beam must be at least 1"),
    ("method.rel_max_distance", -4, "method: rel_max_distance must be at least 1"),
    ("decode.nbest", 0, "decode.nbest must be at least 1"),
    ("decode.no_repeat_ngram_size", -1, "decode.no_repeat_ngram_size must be at least 0"),
    ("decode.lenpen_style", "foo", "fairseq or gnmt"),
    ("decode.nbest", 9, "cannot exceed decode.beam"),
])
def test_out_of_range_settings_are_config_errors(key, value, words):
    from docnmt.config import Config
    from docnmt.errors import ConfigError
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace(")", r"\)")):
        method = {"method.name": "ptransformer"} if key.startswith("method.") else {}
        Config.load("transformer_tiny").override({**method, key: value})


def test_train_with_update_freq_0_names_the_setting(tmp_path, cli_error):
    message = cli_error("train", tmp_path / "data", "--save-dir", tmp_path / "m", "--update-freq", "0")
    assert "--update-freq must be at least 1, not 0" in message               # the flag typed, not the config key
    assert not (tmp_path / "m").exists()                    # nothing half-made left behind


@pytest.mark.parametrize("argv", [["average", "MODEL", "--last", "0"], ["evaluate", "--hyp", "h", "--ref", "r",
                                                                          "--bootstrap-samples", "-5"],
                                  ["prepare", "-s", "en", "-t", "de", "--trainpref", "x", "--destdir", "d",
                                   "--vocab-size", "0"]])
def test_counts_below_one_are_rejected_by_the_parser(argv, capsys):
    from docnmt.cli import main
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "must be at least 1" in err and len(err.strip().splitlines()) == 1 and err.startswith("docnmt: error: ")


def test_unknown_or_missing_devices():
    import torch

    from docnmt.errors import DocnmtError
    from docnmt.translate import check_device
    assert check_device("cpu") == torch.device("cpu")
    with pytest.raises(DocnmtError, match="unknown device"):
        check_device("foo")
    if not torch.cuda.is_available():
        with pytest.raises(DocnmtError, match="no CUDA GPU"):
            check_device("cuda")


def test_unreadable_weights_are_a_clear_error(tmp_path):
    import torch

    from docnmt.checkpoint import load_weights
    from docnmt.errors import DocnmtError
    (tmp_path / "w.safetensors").write_text("not weights")
    with pytest.raises(DocnmtError, match="not a readable safetensors weights file"):
        load_weights(torch.nn.Linear(2, 2), tmp_path / "w.safetensors")


def test_unwritable_output_paths_are_one_error_line(corpus, tmp_path, cli_error):
    prefix, paths = corpus(GOOD, GOOD)
    message = cli_error("evaluate", "--hyp", paths["en"], "--ref", paths["en"], "--json", tmp_path / "no/such/x.json")
    assert "no/such/x.json" in message


def test_force_never_empties_a_directory_docnmt_did_not_make(tmp_path, tiny_dir, cli_error):
    save = tmp_path / "mine"
    (save / "sub").mkdir(parents=True)
    (save / "notes.txt").write_text("keep me")
    message = cli_error("train", tiny_dir / "data", "--arch", "transformer_tiny", "--save-dir", save, "--force")
    assert "not a docnmt model directory" in message
    assert (save / "notes.txt").read_text() == "keep me" and (save / "sub").is_dir()


def test_a_compare_stopped_by_bad_input_does_not_block_the_corrected_command(tmp_path, write_files, cli_error,
                                                                             run_cli):
    """Bad input (the reference, a translation file) is found before anything is written; a
    compare that stopped after it started (its marker, no compare.json) is taken up again, while a
    directory of the user's that merely holds a hyps/ is never written into."""
    de = "<d>\nHallo .\nWie geht's ?\n<d>\nTschüss .\n"
    f = write_files(tmp_path, {"src.en": GOOD, "ref.de": de, "short.de": "<d>\nHallo .\n", "hyp.de": de})
    out = tmp_path / "cmp"
    argv = ["--src", f["src.en"], "--bootstrap-samples", "20", "-q"]
    message = cli_error("compare", f["hyp.de"], f"b={f['hyp.de']}", "--ref", f["short.de"], "--out", out, *argv)
    assert "same documents" in message and not out.exists()
    message = cli_error("compare", f["hyp.de"], f"b={f['short.de']}", "--ref", f["ref.de"], "--out", out, *argv)
    assert "documents" in message and not out.exists()
    mine = tmp_path / "mine"
    (mine / "hyps").mkdir(parents=True)
    message = cli_error("compare", f["hyp.de"], "--ref", f["ref.de"], "--out", mine, *argv)
    assert "not a compare directory" in message and list(mine.iterdir()) == [mine / "hyps"]
    (mine / "hyps" / "a.txt").write_text("mine\n")         # --force adds to it, never over a file of the user's
    message = cli_error("compare", f["hyp.de"], "--ref", f["ref.de"], "--out", mine, "--force", *argv)
    assert "already holds hyps" in message and (mine / "hyps" / "a.txt").read_text() == "mine\n"
    assert list(mine.iterdir()) == [mine / "hyps"]
    status, _, err = run_cli("compare", f["hyp.de"], f"b={f['hyp.de']}", "--ref", f["ref.de"], "--out", out, *argv)
    assert status == 0, err
    (out / "compare.json").unlink()                        # as if it had stopped before the end
    status, _, err = run_cli("compare", f["hyp.de"], f"b={f['hyp.de']}", "--ref", f["ref.de"], "--out", out, *argv)
    assert status == 0 and (out / "compare.json").exists(), err
