"""Document-level methods on top of an imported Hugging Face model (docs/pretrained.md): import a
tiny mBART model, prepare real data with its tokenizer, ``train --init-from`` it with every method,
and use the results with the other commands."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _tiny import DATA, DOCFLAT, tiny_corpus_files

pytest.importorskip("transformers")

METHODS = {   # name -> config overrides (a tiny CPU run)
    "doc2doc": {"data.mode": "doc2doc"},
    "gtransformer": {"method.name": "gtransformer", "data.mode": "doc2doc", "data.separator": "group",
                     "method.combined_enc_self": 1, "method.combined_dec_self": 1, "method.combined_cross": 1},
    "ptransformer": {"method.name": "ptransformer", "data.mode": "doc2doc"},
    "docflat": {**DOCFLAT, "data.mode": "pseudodoc"},
    "context": {"method.name": "context_transformer", "data.context_input": 2},
    "dls": {"data.mode": "doc2doc", "data.dls": True},
    "laa": {"data.mode": "doc2doc", "model.length_aware": True},
}
TRAIN = {"train.max_tokens": 700, "train.max_update": 2, "train.max_epoch": 0, "train.patience": 0,
         "train.warmup_updates": 2, "train.lr": 1e-3, "train.pretrained_lr_scale": 0.2, "train.log_interval": 1,
         "data.max_instance_tokens": 200}


@pytest.fixture(scope="module")
def setup(tmp_path_factory, run_cli_module):
    """(imported model, prepared data, raw corpus prefix)."""
    from test_hf import LANGS, build_hf
    root = tmp_path_factory.mktemp("pretrained")
    hf = build_hf("mbart", root / "hf")
    status, _, err = run_cli_module("import-hf", hf, "--save-dir", root / "mbart", "--src-lang", LANGS["mbart"][0],
                                    "--tgt-lang", LANGS["mbart"][1])
    assert status == 0, err
    raw = tiny_corpus_files(root / "raw", n_docs=3, max_sents=12)
    status, _, err = run_cli_module("prepare", "-s", "en", "-t", "de", "--trainpref", raw, "--validpref", raw,
                                    "--destdir", root / "data", "--spm-model", root / "mbart")
    assert status == 0, err
    return root / "mbart", root / "data", raw


@pytest.fixture(scope="module")
def run_cli_module():
    from docnmt.cli import main

    def run(*argv):
        import contextlib
        import io
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main([str(a) for a in argv])
        return status, out.getvalue(), err.getvalue()
    return run


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_trains_from_an_imported_model(method, setup, tmp_path):
    """The imported weights land in the parameters of the same name (a G-Transformer's local
    attention), the method's own parameters are new and get the full lr, the pretrained
    tokenizer is kept, and the trained model translates."""
    from safetensors.torch import load_file

    from docnmt.checkpoint import WEIGHTS
    from docnmt.config import Config
    from docnmt.hf import init_from_overrides
    from docnmt.training import Trainer
    from docnmt.translate import Translator
    imported, data, raw = setup
    cfg = Config.load("transformer_small").override({**init_from_overrides(imported, data), **METHODS[method],
                                                     **TRAIN})
    trainer = Trainer.from_dirs(cfg, data, tmp_path / method, init_from=imported, progress_bar=False)
    pretrained = load_file(str(imported / WEIGHTS))
    params = dict(trainer.model.named_parameters())
    assert set(trainer.pretrained) == set(pretrained) & set(params)
    for name in ("encoder.layers.0.sublayers.0.attn.in_proj.weight", "decoder.layers.1.sublayers.1.attn.out_proj.bias",
                 "encoder.embed.table.weight", "decoder.embed.positions.weight"):
        assert torch.equal(params[name], pretrained[name]), name
    fresh = [n for n in params if n not in pretrained]
    assert bool(fresh) == (method in ("gtransformer", "ptransformer", "docflat", "context")), fresh
    assert ("length_scale" in trainer.model.pieces) == (method == "laa")      # LAA: no parameters of its own
    if method == "gtransformer":      # global attention and gates new, two learning rates
        assert any("attn_global" in n for n in fresh) and any(".gate." in n for n in fresh)
        assert [g["initial_lr"] for g in trainer.optimizer.param_groups] == pytest.approx([1e-3, 2e-4])
    assert trainer.model.cfg.output_tokens == 0       # the new symbols are predicted now
    trainer.train()
    tr = Translator.load(tmp_path / method)
    assert tr.vocab.meta == Translator.load(imported).vocab.meta
    from docnmt.readers import read_documents
    docs = read_documents(f"{raw}.en", fmt="marker")[:1]
    docs[0].src = docs[0].src[:4]
    out, _ = tr.translate(docs, tr.cfg.decode.__class__(beam=2, max_len_a=0.0, max_len_b=8))
    assert len(out[0].tgt) == 4


def test_the_recipe_presets_and_commands(setup, tmp_path, run_cli_module):
    """train --arch g_transformer_mbart --init-from an imported model, then the commands that
    read models accept both the imported and the trained model."""
    imported, data, raw = setup
    status, _, err = run_cli_module("train", data, "--arch", "g_transformer_mbart", "--init-from", imported,
                                    "--save-dir", tmp_path / "gt", "--max-update", "1", "--no-progress",
                                    "--set", "train.max_tokens=700", "--set", "data.max_instance_tokens=200")
    assert status == 0, err
    from docnmt.config import Config
    cfg = Config.load(tmp_path / "gt" / "config.yaml")
    assert cfg.model.positions == "learned" and cfg.model.embed_norm and cfg.model.d_model == 16
    assert cfg.model.dropout == 0.3 and cfg.train.pretrained_lr_scale == 0.2
    for model in (imported, tmp_path / "gt"):
        hyp = tmp_path / f"{model.name}.de"
        status, _, err = run_cli_module("translate", model, "-i", f"{raw}.en", "-o", hyp, "-q", "--beam", "1",
                                        "--max-len-a", "0", "--max-len-b", "6")
        assert status == 0, err
        status, out, err = run_cli_module("evaluate", "--hyp", hyp, "--ref", f"{raw}.de")
        assert status == 0 and "BLEU" in out, err
        status, out, err = run_cli_module("entropy", model, "--src", f"{raw}.en", "--ref", f"{raw}.de", "-q")
        assert status == 0 and "bits/token" in out, err
        status, out, err = run_cli_module("score", model, "--src", f"{raw}.en", "--ref", f"{raw}.de", "-q")
        assert status == 0, err
        status, out, err = run_cli_module("probe", model, "--train", f"{raw}.en", "--valid", f"{raw}.en", "--test",
                                          f"{raw}.en", "--out", tmp_path / f"probe-{model.name}", "--max-examples",
                                          "300", "--max-epochs", "2")
        assert status == 0, err
    status, out, err = run_cli_module("compare", imported, tmp_path / "gt", "--src", f"{raw}.en", "--ref", f"{raw}.de",
                                      "--out", tmp_path / "compare", "--bootstrap-samples", "10", "-q",
                                      "--suite", DATA / "enfr/suites/scat_yin2021_enfr", "--suite-format", "scat")
    assert status == 0 and "d-BLEU" in out, err


def test_init_from_needs_data_prepared_with_its_tokenizer(setup, tiny_dir, cli_error, tmp_path):
    imported, _, _ = setup
    err = cli_error("train", tiny_dir / "data", "--init-from", imported, "--save-dir", tmp_path / "x")
    assert "was not prepared with the tokenizer of" in err and "--spm-model" in err


def test_export_of_a_model_trained_from_an_imported_one(setup, tmp_path, run_cli_module):
    """A Doc2Doc model fine-tuned from the imported one exports to the imported family."""
    imported, data, _ = setup
    status, _, err = run_cli_module("train", data, "--init-from", imported, "--save-dir", tmp_path / "d2d",
                                    "--mode", "doc2doc", "--max-update", "1", "--no-progress",
                                    "--set", "train.max_tokens=700", "--set", "data.max_instance_tokens=200")
    assert status == 0, err
    status, _, err = run_cli_module("export-hf", tmp_path / "d2d", tmp_path / "hf")
    assert status == 0, err
    import json
    info = json.loads(Path(tmp_path / "hf" / "docnmt.json").read_text())
    assert info["family"] == "MBartForConditionalGeneration" and info["separator"] == "index"
