"""The worked example of README.md "Extending": a new method in one module plus one registry line.

``LocalWindow`` restricts encoder self-attention to a window of ±``window`` tokens. It is built
only from the core's extension points -- an options dataclass (the ``method:`` section), an
:class:`~docnmt.model.AttentionPolicy` subclass, and a :class:`~docnmt.methods.Method` record --
and the tests register it the way ``docnmt/methods/__init__.py`` lists every method. Nothing in
the core changes: configs, training, checkpoints and translation pick it up by name.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from docnmt import methods
from docnmt.attention import AttentionProbe, AttnSpec
from docnmt.config import Config
from docnmt.data import build_instances
from docnmt.errors import ConfigError
from docnmt.methods import Extension, Method, Setting
from docnmt.model import AttentionPolicy, ModelConfig, Transformer
from docnmt.translate import Translator

# ---- the method: what a module docnmt/methods/local_window.py would hold -----------------------

@dataclass
class LocalWindowOptions:
    """The ``method:`` section: how far a source token may look."""

    window: int = 2

    def __post_init__(self):
        if self.window < 0:
            raise ConfigError(f"window must be at least 0, not {self.window}")


class LocalWindowPolicy(AttentionPolicy):
    """Encoder self-attention sees keys at most ``window`` positions away (and no padding)."""

    def __init__(self, cfg: ModelConfig, window: int):
        super().__init__(cfg)
        self.window = window

    def encoder_specs(self, src, src_pad):
        pos = torch.arange(src.size(1), device=src.device)
        far = (pos[:, None] - pos[None, :]).abs() > self.window
        return {"enc_self": AttnSpec(mask=src_pad[:, None, None, :] | far)}


def build(cfg: ModelConfig, opts: LocalWindowOptions, vocab) -> Transformer:
    return Transformer(cfg, LocalWindowPolicy(cfg, opts.window))


METHOD = Method("local_window", build, LocalWindowOptions)


# ---- the registry line -------------------------------------------------------------------------

@pytest.fixture
def registered(monkeypatch):
    """``METHODS`` with the toy method added, as its one line in docnmt/methods/__init__.py would."""
    monkeypatch.setitem(methods.METHODS, METHOD.name, METHOD)


# ---- what the core now does with it -------------------------------------------------------------

def test_config_takes_the_methods_own_section(registered):
    cfg = Config.load("transformer_tiny").override({"method.name": "local_window", "method.window": 1})
    assert cfg.method_name == "local_window" and cfg.method == LocalWindowOptions(window=1)
    assert cfg.to_dict()["method"] == {"name": "local_window", "window": 1}     # config.yaml: its own keys only
    with pytest.raises(ConfigError, match="window must be at least 0"):
        cfg.override({"method.window": -1})
    with pytest.raises(ConfigError, match="unknown key 'flat_gate'"):          # another method's key
        cfg.override({"method.flat_gate": "discrete"})


def test_unregistered_method_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown method 'local_window'"):
        Config.load("transformer_tiny").override({"method.name": "local_window"})


def test_the_registry_builds_it_and_attention_stays_in_the_window(registered, tiny_vocab):
    cfg = Config.load("transformer_tiny").override({"method.name": "local_window", "method.window": 1})
    torch.manual_seed(0)
    model = methods.build_model(cfg, tiny_vocab).eval()
    assert isinstance(model.policy, LocalWindowPolicy)
    src = torch.randint(10, 300, (2, 7))
    with torch.no_grad(), AttentionProbe() as probe:
        model.encode(src)
    # entropy of the head-averaged weights: a query sees at most 3 keys, so at most log2(3) bits
    entropy = torch.stack([h for hs in probe.entropy.values() for h in hs])
    assert float(entropy.max()) <= torch.log2(torch.tensor(3.0)) + 1e-5
    plain = Transformer(cfg.model).eval()
    plain.load_state_dict(model.state_dict())
    with torch.no_grad(), AttentionProbe() as probe:
        plain.encode(src)
    assert float(torch.stack([h for hs in probe.entropy.values() for h in hs]).max()) > 1.6


@pytest.mark.slow
def test_it_trains_saves_and_translates(registered, tiny_dir, tmp_path):
    from _tiny import tiny_config, translate_checked
    from docnmt.training import Trainer
    data = tiny_dir / "data"
    cfg = tiny_config("sent2sent", max_update=4).override({"method.name": "local_window", "method.window": 3})
    Trainer.from_dirs(cfg, data, tmp_path / "m", progress_bar=False).train()
    saved = Config.load(tmp_path / "m" / "config.yaml")
    assert saved.method_name == "local_window" and saved.method.window == 3
    tr, docs, out, report = translate_checked(tmp_path / "m", tiny_dir / "raw" / "chat.en", 3)
    assert isinstance(tr.model.policy, LocalWindowPolicy) and report.sentences == 6


# ================================================================================================
# Switches: a toy decoding option and a toy training-rows hook, each what one module
# docnmt/methods/<name>.py would hold plus its one line in EXTENSIONS.
# ================================================================================================

# ---- a decoding option: never generate one token ----------------------------------------------

class Forbid:
    """A beam-search processor: token ``token`` gets -inf at every step. (``seen``: the
    hypotheses' tokens it was shown, for the test.)"""

    seen: list = []

    def __init__(self, token: int):
        self.token = token

    def __call__(self, step, tokens, lprobs, rows, limit) -> None:
        Forbid.seen.append(tokens.clone())
        lprobs[:, self.token] = float("-inf")


def forbid_args(translator, search, rows, src):
    return {"processors": [Forbid(search.forbid_token)]} if search.forbid_token >= 0 else None


FORBID = Extension(name="forbid", search_args=forbid_args, settings=(
    Setting("decode.forbid_token", -1, "never generate this token id (-1 = off)", "--forbid-token"),))


# ---- a training-rows hook: train on the first sentences of every document only ------------------

def first_rows(corpus, data, epoch, seed):
    if data.first_sentences <= 0:
        return None
    rows = build_instances(corpus, data, training=True, epoch=epoch, seed=seed)
    index_in_doc = rows[:, 2] - corpus.doc_offsets[corpus.doc_of(rows[:, 2])]
    return rows[index_in_doc < data.first_sentences]


FIRST = Extension(name="first_sentences", training_rows=first_rows, settings=(
    Setting("data.first_sentences", 0, "train on the first N sentences of every document (0 = all)",
            "--first-sentences"),))


@pytest.fixture
def switches(monkeypatch):
    """``EXTENSIONS`` with both toy switches added, as their lines in docnmt/methods/__init__.py would."""
    monkeypatch.setitem(methods.EXTENSIONS, FORBID.name, FORBID)
    monkeypatch.setitem(methods.EXTENSIONS, FIRST.name, FIRST)


def test_a_switch_brings_its_settings_and_flags(switches):
    from docnmt.cli import build_parser
    cfg = Config.load("transformer_tiny").override({"decode.forbid_token": 7, "data.first_sentences": 2})
    assert (cfg.decode.forbid_token, cfg.data.first_sentences) == (7, 2)
    assert cfg.to_dict()["decode"]["forbid_token"] == 7                  # saved in config.yaml like a core key
    assert Config.load("transformer_tiny").decode.forbid_token == -1      # off by default
    verbs = next(a for a in build_parser()._actions if a.choices and "train" in a.choices).choices
    assert "--forbid-token" in verbs["translate"].format_help() and "--first-sentences" in verbs["train"].format_help()
    assert "--forbid-token" not in verbs["train"].format_help().split("--valid-bleu")[0]   # decoding verbs only


def test_a_setting_that_qualifies_one_no_extension_declares_is_refused(monkeypatch):
    """``Setting.needs`` names another setting; a typo there is the registry's error, not silence."""
    typo = Extension(name="typo", settings=(
        Setting("decode.forbid_token", -1, "never generate this token id (-1 = off)", "--forbid-token",
                needs="decode.forbid_tokn"),))
    monkeypatch.setitem(methods.EXTENSIONS, typo.name, typo)
    with pytest.raises(ConfigError, match="decode.forbid_token needs decode.forbid_tokn, which no extension declares"):
        methods.settings()


def test_an_unregistered_switch_is_unknown():
    with pytest.raises(ConfigError, match="unknown key 'forbid_token'"):
        Config.load("transformer_tiny").override({"decode.forbid_token": 7})
    assert "forbid" not in methods.EXTENSIONS


def test_the_training_rows_hook_replaces_the_modes_instances(switches, tiny_corpus):
    cfg = Config.load("transformer_tiny")
    every = methods.training_rows(tiny_corpus, cfg.data, epoch=1)
    first = methods.training_rows(tiny_corpus, cfg.override({"data.first_sentences": 2}).data, epoch=1)
    assert len(every) == tiny_corpus.n_sents and len(first) == 2 * tiny_corpus.n_docs
    assert set(first[:, 2]) == {int(o) + k for o in tiny_corpus.doc_offsets[:-1] for k in (0, 1)}


def test_the_decoding_option_reaches_the_beam_search(switches, tiny_vocab):
    """The translator asks every switch for search arguments: with ``forbid_token`` set, the token
    the untrained model likes best never comes out, and the output changes."""
    cfg = Config.load("transformer_tiny").override({"decode.beam": 1, "decode.max_len_b": 4, "decode.max_len_a": 0})
    torch.manual_seed(0)     # greedy search: every hypothesis the processor sees is the output
    tr = Translator(methods.build_model(cfg, tiny_vocab), tiny_vocab, cfg)
    docs = [["Hello there.", "How are you?"]]
    Forbid.seen = []         # forbidding <pad>, which is never generated anyway, records what the model says
    plain, _ = tr.translate(docs, cfg.override({"decode.forbid_token": tiny_vocab.pad}).decode)
    said = torch.cat([t[:, 1:].flatten() for t in Forbid.seen if t.size(1) > 1])
    liked = int(said[said >= tiny_vocab.word_ids[0]].mode().values)
    Forbid.seen = []
    banned, _ = tr.translate(docs, cfg.override({"decode.forbid_token": liked}).decode)
    assert Forbid.seen and not any(bool((t == liked).any()) for t in Forbid.seen)
    assert banned[0].tgt != plain[0].tgt
