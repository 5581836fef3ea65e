"""The probe's input-length study in both setups (docs/methods/ptransformer.md#position-probing):
one model probed at every length (``--lengths``), and the paper's one model per length
(``--own-length``: each model probed on inputs of at most its own training length); the outputs
say which setup each number comes from."""
import json

import pytest

from docnmt import probe
from docnmt.checkpoint import WEIGHTS, save_weights
from docnmt.config import Config
from docnmt.errors import DocnmtError
from docnmt.methods import build_model

TINY = {"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 2,
        "model.decoder_layers": 1}


def model_dir(path, vocab, mode="doc2doc", max_tokens=512):
    """An untrained tiny model saved as a model directory (the probe only reads its encoder)."""
    cfg = Config.load("transformer_tiny").override({**TINY, "data.mode": mode, "data.max_instance_tokens": max_tokens})
    path.mkdir(parents=True)
    vocab.save(path)
    save_weights(build_model(cfg, vocab), path / WEIGHTS)
    cfg.dump(path / "config.yaml")
    return path


def fake_probe(calls):
    def probe_model(tr, splits, s, max_tokens=None, tasks=("absolute", "relative", "word_order"), layers=None,
                    log=print):
        calls.append((tr.cfg.data.max_instance_tokens, max_tokens, tuple(tasks)))
        row = {"layer": 1, "accuracy": max_tokens / 1000 if max_tokens else 0.5, "accuracy_pm3": 0.9, "n": 1,
               "by_distance": {1: 0.5}}
        return {t: [row] for t in tasks}
    return probe_model


def test_own_length_probes_each_model_at_its_training_length(tiny_vocab, chat_docs, tmp_path, monkeypatch):
    models = [model_dir(tmp_path / f"m{n}", tiny_vocab, max_tokens=n) for n in (64, 32)]
    calls = []
    monkeypatch.setattr(probe, "probe_model", fake_probe(calls))
    monkeypatch.setattr(probe, "plot", lambda *a, **k: [])
    splits = {"train": chat_docs, "valid": chat_docs, "test": chat_docs}
    out = probe.run([str(m) for m in models], splits, tmp_path / "out", probe.ProbeSettings(), [16], log=lambda m: None,
                    own_length=True)
    absolute = [c for c in calls if c[2] == ("absolute",)]
    assert sorted(absolute) == [(32, 16, ("absolute",)), (32, 32, ("absolute",)),
                                (64, 16, ("absolute",)), (64, 64, ("absolute",))]
    assert out["by_own_length"] == [{"model": "m64", "length": 64, "accuracy": 0.064},
                                    {"model": "m32", "length": 32, "accuracy": 0.032}]
    saved = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert saved["by_own_length"] == out["by_own_length"] and saved["by_input_length"]["m32"] == {"16": 0.016}
    assert saved["input_length_setups"] == {"by_input_length": probe.ONE_MODEL, "by_own_length": probe.PER_LENGTH}
    md = (tmp_path / "out" / "probe.md").read_text()
    assert f"{probe.ONE_MODEL}:" in md and f"{probe.PER_LENGTH}:" in md
    assert "| model | m32 | m64 |" in md and "| accuracy | 0.032 | 0.064 |" in md      # sorted by length


def test_one_model_at_other_lengths_says_so(tiny_vocab, chat_docs, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(probe, "probe_model", fake_probe(calls))
    monkeypatch.setattr(probe, "plot", lambda *a, **k: [])
    splits = {"train": chat_docs, "valid": chat_docs, "test": chat_docs}
    logged = []
    probe.run([str(model_dir(tmp_path / "m", tiny_vocab))], splits, tmp_path / "out", probe.ProbeSettings(), [16, 32],
              log=logged.append)
    md = (tmp_path / "out" / "probe.md").read_text()
    assert probe.ONE_MODEL in md and probe.PER_LENGTH not in md
    assert any("this one model at another length" in m for m in logged)
    assert "one model per length" in probe.ONE_MODEL                  # the caption points to the other setup


def test_own_length_needs_models_trained_on_a_token_budget(tiny_vocab, chat_docs, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(probe, "probe_model", fake_probe(calls))
    models = [model_dir(tmp_path / "doc", tiny_vocab), model_dir(tmp_path / "sent", tiny_vocab, mode="sent2sent")]
    splits = {"train": chat_docs, "valid": chat_docs, "test": chat_docs}
    with pytest.raises(DocnmtError, match="--own-length: sent was not trained on Doc2Doc instances"):
        probe.run([str(m) for m in models], splits, tmp_path / "out", probe.ProbeSettings(), own_length=True,
                  log=lambda m: None)
    assert calls == []                                                # refused before any probing


@pytest.mark.slow
def test_probe_cli_one_model_per_length(tiny_vocab, tiny_dir, tmp_path, run_cli):
    models = [model_dir(tmp_path / f"len{n}", tiny_vocab, max_tokens=n) for n in (32, 64)]
    raw = tiny_dir / "raw" / "chat.en"
    status, out, _ = run_cli("probe", *models, "--own-length", "--train", raw, "--valid", raw, "--test", raw,
                             "--out", tmp_path / "probe", "--max-examples", "500", "--max-epochs", "1")
    assert status == 0, out
    result = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert [(r["model"], r["length"]) for r in result["by_own_length"]] == [("len32", 32), ("len64", 64)]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in result["by_own_length"])
    assert (tmp_path / "probe" / "probe_input_length.png").stat().st_size > 0
    assert probe.PER_LENGTH in out


def test_a_probe_depends_only_on_its_data_and_seed():
    """The two setups probe a model at its own length the same way: the same numbers in both tables."""
    import torch
    x, y = torch.randn(200, 8, generator=torch.Generator().manual_seed(0)), torch.arange(200) % 4
    first = probe.train_probe((x, y), (x, y), 4, probe.ProbeSettings(max_epochs=2))
    torch.randn(5)                                                   # the global RNG moves on
    second = probe.train_probe((x, y), (x, y), 4, probe.ProbeSettings(max_epochs=2))
    assert torch.equal(first.weight, second.weight)
