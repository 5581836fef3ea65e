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
from docnmt.errors import ConfigError
from docnmt.methods import Method
from docnmt.model import AttentionPolicy, ModelConfig, Transformer

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
    from docnmt.train import Trainer
    data = tiny_dir / "data"
    cfg = tiny_config("sent2sent", max_update=4).override({"method.name": "local_window", "method.window": 3})
    Trainer(cfg, data, tmp_path / "m", progress_bar=False).train()
    saved = Config.load(tmp_path / "m" / "config.yaml")
    assert saved.method_name == "local_window" and saved.method.window == 3
    tr, docs, out, report = translate_checked(tmp_path / "m", tiny_dir / "raw" / "ted.en", 3)
    assert isinstance(tr.model.policy, LocalWindowPolicy) and report.sentences == 6
