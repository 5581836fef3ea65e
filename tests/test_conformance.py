"""Conformance of every registered method and every preset, parametrised over the registry
(issue 62): a method added to ``docnmt.methods.METHODS`` or a preset added to ``docnmt/presets``
is checked here without a new test.

Every method, as a tiny random model of its reference preset built by ``methods.build_model``:

* incremental decoding (one token at a time with the decoder cache) gives the states of the
  full teacher-forced pass, on a batch in the method's own data format (its separators, its
  context input);
* batched decoding equals decoding one instance at a time (``decode.max_sentences`` 16 against
  1): beam search hypotheses, n-best lists and scores;
* a model directory saved (``config.yaml``, vocabulary, weights) and loaded back with
  ``Translator.load`` translates exactly as the model in memory.

A method that looks across its batch on purpose (``Method.score_alone``: DocFlat's flat-batch
attention) is held to the first two inside :func:`docnmt.model.rows_apart`, where each row is
computed as if alone; outside it, its batch is part of its input.

Every preset (slow): shrunk (width, layers, heads; its method, data mode, separator and switches
kept), it builds through the registry, trains one update with ``Trainer.from_dirs`` on a prepared
directory of the bundled BConTrasT chats, and its model directory loads and translates. A preset
meant to start from another model (its description says ``--init-from``) starts from one: a
preset of ``INIT_FROM`` trained here, or a tiny Hugging Face model built with ``transformers``
and imported (``test_hf.build_hf``), with data prepared with its tokenizer.
"""
from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from _tiny import assert_incremental_equals_full, chat_documents, tiny_corpus_files
from docnmt import methods
from docnmt.checkpoint import WEIGHTS, save_weights
from docnmt.config import PRESET_DIR, Config, preset_description, preset_names
from docnmt.data import Corpus, InstanceSet, build_instances, model_inputs
from docnmt.model import rows_apart
from docnmt.prepare import prepare
from docnmt.training import Trainer
from docnmt.training.setup import starts_from_another_model
from docnmt.translate import Translator
from docnmt.vocab import Vocab

# the size every case is shrunk to; what makes a preset what it is stays
TINY = {"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 2,
        "model.decoder_layers": 2}
ONE_UPDATE = {"train.max_update": 1, "train.max_epoch": 0, "train.patience": 0, "train.log_interval": 1}

# the preset each method is checked with; a method missing here gets the first preset naming it,
# or, with none, transformer_tiny with its name
REFERENCE = {"transformer": "doc2doc_small", "gtransformer": "g_transformer_small",
             "ptransformer": "p_transformer_small", "docflat": "docflat_small",
             "context_transformer": "context_transformer_small"}

# presets whose description says they start from another model (--init-from), and what that is:
# another preset, or a Hugging Face family imported with import-hf; presets built on them inherit it
INIT_FROM = {"context_transformer_small": "sent2sent_small", "context_transformer_base": "transformer_base",
             "docflat_small": "sent2sent_small", "docflat_base": "transformer_base",
             "g_transformer_finetune_small": "g_transformer_sent_small",
             "g_transformer_finetune_docnmt_small": "sent2sent_small",
             "g_transformer_finetune_base": "g_transformer_sent_base",
             "g_transformer_mbart": "hf:mbart", "g_transformer_opus_mt": "hf:marian"}


# --------------------------------------------------------------------------------------------
# Every method
# --------------------------------------------------------------------------------------------

def method_config(name: str) -> Config:
    """The tiny config method ``name`` is checked with (dropout off: the checks compare outputs)."""
    preset = REFERENCE.get(name) or next((p for p in preset_names() if Config.load(p).method_name == name), None)
    cfg = Config.load(preset) if preset else Config.load("transformer_tiny").override({"method.name": name})
    return cfg.override({**TINY, "model.dropout": 0.0})


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    """A small joint vocabulary of the first 20 bundled chats, with docnmt's extra symbols."""
    return Vocab.train([s for d in chat_documents("valid")[:20] for s in d.src + d.tgt], size=300)


@pytest.fixture(scope="module")
def docs() -> list:
    """Three bundled chats, four turns each (their lengths differ: batches are padded)."""
    out = chat_documents("valid")[:3]
    for d in out:
        d.src, d.tgt = d.src[:4], d.tgt[:4]
    return out


@pytest.fixture(scope="module")
def translator(vocab):
    """``translator(name)`` -> a Translator around a tiny random model of method ``name`` (built once)."""
    made = {}

    def get(name: str) -> Translator:
        if name not in made:
            cfg = method_config(name)
            torch.manual_seed(0)
            made[name] = Translator(methods.build_model(cfg, vocab), vocab, cfg, device="cpu")
        return made[name]
    return get


class WithInputs(torch.nn.Module):
    """A model with a batch's extra inputs (a context) bound to ``encode``, for helpers that call
    ``encode(src)``."""

    def __init__(self, model, inputs: dict):
        super().__init__()
        self.model, self.inputs = model, inputs

    def encode(self, src):
        return self.model.encode(src, **self.inputs)

    def decode(self, *args):
        return self.model.decode(*args)


def format_batch(tr: Translator, docs: list, n: int = 3) -> dict:
    """The first ``n`` instances of ``docs`` in the model's own mode and format, with targets."""
    corpus = Corpus.encode(docs, tr.vocab)
    rows = build_instances(corpus, tr.cfg.data, training=False)
    return InstanceSet(corpus, rows, tr.joiner).collate(list(range(min(n, len(rows)))))


def translations(tr: Translator, docs: list, **search) -> list:
    """Per document: its output lines, n-best lists and their scores (beam 2, 2-best)."""
    cfg = replace(tr.cfg.decode, beam=2, nbest=2, **search)
    out, _ = tr.translate(docs, cfg)
    return [(d.tgt, d.meta["nbest"], d.meta["nbest_scores"]) for d in out]


def assert_same_translations(got: list, want: list) -> None:
    assert [(tgt, nbest) for tgt, nbest, _ in got] == [(tgt, nbest) for tgt, nbest, _ in want]
    scores = [[s for d in docs for sent in d[2] for s in sent] for docs in (got, want)]
    assert scores[0] == pytest.approx(scores[1], abs=1e-4)


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_incremental_decoding_equals_the_full_pass(name, translator, docs):
    tr = translator(name)
    batch = format_batch(tr, docs)
    assert batch["tgt_in"].size(1) > 5 and batch["tgt_in"].eq(tr.vocab.pad).any()      # a padded batch
    with rows_apart(tr.model, tr.method.score_alone):
        assert_incremental_equals_full(WithInputs(tr.model, model_inputs(batch)), batch["src"], batch["tgt_in"])


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_batched_decoding_equals_one_instance_at_a_time(name, translator, docs):
    tr = translator(name)
    with rows_apart(tr.model, tr.method.score_alone):
        batched = translations(tr, docs[:2], max_sentences=16)
        alone = translations(tr, docs[:2], max_sentences=1)
    assert [len(tgt) for tgt, _, _ in batched] == [len(d.src) for d in docs[:2]]
    assert_same_translations(batched, alone)


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_saved_model_directory_loads_and_translates_the_same(name, translator, docs, tmp_path):
    built = translator(name)
    tr = Translator(copy.deepcopy(built.model), built.vocab, built.cfg, device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():           # every tensor unlike a fresh model's (LayerNorms start at 1 and 0)
        for p in tr.model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    tr.vocab.save(tmp_path)
    tr.cfg.dump(tmp_path / "config.yaml")
    save_weights(tr.model, tmp_path / WEIGHTS)
    torch.manual_seed(1)                        # a fresh model's weights differ from the saved ones
    loaded = Translator.load(tmp_path, device="cpu")
    assert loaded.cfg.method_name == name and type(loaded.model) is type(tr.model)
    want = tr.model.state_dict()
    assert all(torch.equal(v, want[k]) for k, v in loaded.model.state_dict().items())
    assert_same_translations(translations(loaded, docs[:2]), translations(tr, docs[:2]))


# --------------------------------------------------------------------------------------------
# Every preset
# --------------------------------------------------------------------------------------------

def preset_chain(name: str) -> list[str]:
    """``name`` and the presets it is built on (its ``preset:`` key), nearest first."""
    chain = [name]
    while (parent := (yaml.safe_load((PRESET_DIR / f"{chain[-1]}.yaml").read_text()) or {}).get("preset")):
        chain.append(parent)
    return chain


def init_source(preset: str) -> str | None:
    """What ``preset`` starts from: a preset, ``hf:FAMILY``, or None (random initialisation)."""
    chain = preset_chain(preset)
    source = next((INIT_FROM[p] for p in chain if p in INIT_FROM), None)
    says = [p for p in chain if "--init-from" in preset_description(p)]
    assert source or not says, f"preset {preset}: {says[0]} starts from --init-from a model; add it to INIT_FROM"
    return source


def test_init_from_table_names_presets():
    assert set(INIT_FROM) <= set(preset_names())
    assert all(s.startswith("hf:") or s in preset_names() for s in INIT_FROM.values())
    assert all("--init-from" in preset_description(p) for p in INIT_FROM)


def test_a_preset_meant_to_start_from_another_model_warns_without_init_from(tiny_dir, tmp_path, capsys):
    assert [p for p in preset_names() if starts_from_another_model(p)] == \
        [p for p in preset_names() if init_source(p) is not None]
    cfg = Config.load("g_transformer_finetune_docnmt_split_small").override(TINY)
    Trainer.from_dirs(cfg, tiny_dir / "data", tmp_path / "m", progress_bar=False, device="cpu").close()
    assert "warning: preset g_transformer_finetune_docnmt_split_small starts from another model" in \
        capsys.readouterr().err
    plain = Config.load("doc2doc_small").override(TINY)
    Trainer.from_dirs(plain, tiny_dir / "data", tmp_path / "d", progress_bar=False, device="cpu").close()
    assert "warning" not in capsys.readouterr().err


def train_one_update(cfg: Config, data: Path, save_dir: Path, init_from: Path | None) -> dict:
    """Train ``cfg`` for one update into ``save_dir``; what changed and what was copied."""
    trainer = Trainer.from_dirs(cfg, data, save_dir, init_from=init_from, progress_bar=False, device="cpu")
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    return {"dir": save_dir, "updates": trainer.progress.updates, "pretrained": list(trainer.pretrained),
            "changed": [n for n, p in before.items() if not torch.equal(p, after[n].detach())]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs(preset)`` -> the record of ``train_one_update`` of ``preset`` (trained on first use,
    then shared, so a preset another starts from is trained once)."""
    root = tmp_path_factory.mktemp("presets")
    raw = tiny_corpus_files(root / "raw", n_docs=4, max_sents=10)
    prepare(root / "data", "en", "de", [str(raw)], [str(raw)], vocab_size=300, log=lambda m: None)
    done: dict[str, dict] = {}

    def imported(family: str) -> tuple[Path, Path]:
        """A tiny random Hugging Face model of ``family``, imported, and data prepared with its tokenizer."""
        from docnmt.hf import import_hf
        from test_hf import LANGS, build_hf
        model, data = root / f"{family}-docnmt", root / f"{family}-data"
        if not model.exists():
            import_hf(build_hf(family, root / f"{family}-hf"), model, *LANGS[family], log=lambda m: None)
            prepare(data, "en", "de", [str(raw)], [str(raw)], spm_from=str(model), log=lambda m: None)
        return model, data

    def run(preset: str) -> dict:
        if preset not in done:
            source, data, init = init_source(preset), root / "data", None
            if source and source.startswith("hf:"):
                from docnmt.hf import init_from_overrides
                init, data = imported(source[3:])
                over = init_from_overrides(init, data)           # the imported architecture
            else:
                init, over = (run(source)["dir"] if source else None), TINY
            cfg = Config.load(preset).override({**over, **ONE_UPDATE})
            done[preset] = train_one_update(cfg, data, root / preset, init)
        return done[preset]
    return run


@pytest.mark.slow
@pytest.mark.parametrize("preset", preset_names())
def test_preset_builds_trains_one_update_and_translates(preset, runs, docs):
    run = runs(preset)
    assert run["updates"] == 1 and run["changed"]
    cfg = Config.load(preset)
    if init_source(preset):
        assert run["pretrained"], f"{preset}: nothing copied from the model it starts from"
    if cfg.train.freeze_pretrained:
        assert not set(run["changed"]) & set(run["pretrained"]), "frozen parameters moved"
    tr = Translator.load(run["dir"], device="cpu")
    assert (tr.cfg.method_name, tr.cfg.data.mode, tr.cfg.data.separator) == \
        (cfg.method_name, cfg.data.mode, cfg.data.separator)
    doc = replace(docs[0], src=docs[0].src[:2], tgt=None)
    out, _ = tr.translate([doc], replace(tr.cfg.decode, beam=1, nbest=1, max_len_a=0.0, max_len_b=4))
    assert len(out[0].tgt) == 2


@pytest.mark.parametrize("preset", [p for p in preset_names() if Config.load(p).data.is_document_level])
def test_a_document_presets_decoding_batch_holds_a_long_documents_instances(preset):
    """A document of 16 full-length instances decodes as one batch with the preset's decoding
    settings: one pass of a few hundred steps instead of two (the presets' 8 instances per batch
    made a 400-sentence sitting two passes, docs/performance.md#document-models)."""
    from docnmt.data.batching import token_batches
    cfg = Config.load(preset)
    lens = np.full(16, cfg.data.max_instance_tokens)
    batches = token_batches(lens, np.zeros_like(lens), cfg.decode.max_tokens, shuffle=False,
                            max_sentences=cfg.decode.max_sentences)
    assert len(batches) == 1, (preset, [len(b) for b in batches])
