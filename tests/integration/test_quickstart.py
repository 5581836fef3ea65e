"""The quick start runs end to end (a few seconds of training): data unpacked, model trained and
saved, held-back chats translated sentence by sentence with a full coverage report."""
from docnmt.cli import main


def test_quickstart_runs_end_to_end(tmp_path, capsys):
    work = tmp_path / "qs"
    assert main(["quickstart", "--workdir", str(work), "--minutes", "0.05"]) == 0
    out = capsys.readouterr().out
    assert (work / "model" / "model.safetensors").exists() and (work / "model" / "config.yaml").exists()
    assert "5/5 documents fully recovered" in out and "d-BLEU" in out
