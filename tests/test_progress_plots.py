"""What training, validation and probing show the user: one progress bar towards the run's real
end (``run_end``), a validation bar, and the learning-curve and probe figures (read from the
matplotlib objects, not from pixels)."""
import json
import shutil

import pytest

from _tiny import tiny_config
from docnmt import probe, progress_log
from docnmt.checkpoint import WEIGHTS, save_weights
from docnmt.config import Config
from docnmt.document import Document
from docnmt.methods import build_model
from docnmt.training import Trainer, learning_curve, run_end, run_kind
from docnmt.training import trainer as trainer_module


def limits(**train_cfg):
    """A train config with only the given limits (no others from the preset)."""
    train_cfg = {"max_update": 0, "max_epoch": 0, "max_minutes": 0, "patience": 0, **train_cfg}
    return Config.load("transformer_tiny").override({f"train.{k}": v for k, v in train_cfg.items()}).train


# ---- where the bar ends ----------------------------------------------------------------------

def test_max_update_is_the_end():
    assert run_end(limits(max_update=100), 7, 1, 3, 14, 5.0, 1.0) == (100, "max-update 100")


def test_max_epoch_end_counts_this_epoch_then_whole_ones():
    # update 10, 4 updates left in epoch 2, then epoch 3 of 14: ends at 28
    assert run_end(limits(max_epoch=3), 10, 2, 4, 14, 5.0, 1.0) == (28, "end of epoch 3")
    # the nearer of two limits
    assert run_end(limits(max_update=20, max_epoch=3), 10, 2, 4, 14, 5.0, 1.0) == (20, "max-update 20")
    assert run_end(limits(max_update=50, max_epoch=3), 10, 2, 4, 14, 5.0, 1.0) == (28, "end of epoch 3")


def test_time_cap_ends_at_the_update_the_speed_reaches():
    # 1 minute cap, 30 s gone, 2 updates/s: 60 more updates
    assert run_end(limits(max_minutes=1), 40, 1, 3, 14, 30.0, 2.0) == (100, "time cap in 30 s")
    # no update yet: no speed, no end known
    assert run_end(limits(max_minutes=1), 0, 1, 3, 14, 0.5, 0.0)[0] is None
    # the time cap comes before max-update at this speed: the bar says so and ends there
    assert run_end(limits(max_update=10_000, max_minutes=10), 100, 1, 3, 14, 0.0, 1.0) == (700, "time cap in 10 min")
    # ... and not when max-update comes first
    assert run_end(limits(max_update=200, max_minutes=10), 100, 1, 3, 14, 0.0, 1.0) == (200, "max-update 200")


def test_no_end_known_and_never_behind_the_count():
    assert run_end(limits(patience=5), 3, 1, 3, 14, 1.0, 1.0) == (None, "early stopping")
    assert run_end(limits(max_update=5), 9, 1, 3, 14, 1.0, 1.0)[0] == 9      # resumed past a lowered max-update


# ---- the bars of a real run ------------------------------------------------------------------

@pytest.fixture
def bars(monkeypatch):
    """Every tqdm bar training makes (its run and its validations), with the keywords it was made with."""
    made = []

    class Recorder(trainer_module.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.made_with = kwargs
            made.append(self)
    monkeypatch.setattr(progress_log, "tqdm", Recorder)       # every bar is made there: tqdm's, as on a terminal
    monkeypatch.setattr(progress_log, "_is_terminal", lambda stream: True)
    return made


def training_bars(made):
    return [b for b in made if b.made_with.get("unit") == "upd"]


@pytest.mark.slow
def test_one_bar_to_max_update_across_epochs_and_from_the_resumed_update(tiny_dir, tmp_path, bars, capsys):
    data = tiny_dir / "data"
    per_epoch = len(Trainer.from_dirs(tiny_config(max_update=1), data, tmp_path / "n",
                                      progress_bar=False).epoch_batches(1))
    first = per_epoch + 4                                          # into epoch 2
    Trainer.from_dirs(tiny_config(max_update=first, save_interval_updates=2), data, tmp_path / "m").train()
    [bar] = training_bars(bars)                                    # one bar, not one per epoch
    assert (bar.total, bar.n) == (first, first) and bar.desc.startswith("epoch 2")
    assert bar.postfix.endswith(f"stop=max-update {first}")
    valid = [b for b in bars if b.made_with.get("desc") == "valid"]
    assert valid and all(b.made_with["leave"] is False and b.n == b.total > 0 for b in valid)
    err = capsys.readouterr().err
    assert f"{first}/{first}" in err and "valid:" in err and f"valid | update {first}" in err

    bars.clear()
    Trainer.from_dirs(tiny_config(max_update=first + 3, save_interval_updates=2), data, tmp_path / "m").train()
    [bar] = training_bars(bars)
    assert bar.made_with["initial"] == first and (bar.total, bar.n) == (first + 3, first + 3)


@pytest.mark.slow
def test_bar_ends_with_the_last_epoch(tiny_dir, tmp_path, bars):
    data = tiny_dir / "data"
    per_epoch = len(Trainer.from_dirs(tiny_config(max_update=1), data, tmp_path / "n",
                                      progress_bar=False).epoch_batches(1))
    Trainer.from_dirs(tiny_config(max_update=0, max_epoch=2), data, tmp_path / "m").train()
    [bar] = training_bars(bars)
    assert (bar.total, bar.n) == (2 * per_epoch, 2 * per_epoch)


@pytest.mark.slow
def test_no_progress_is_silent_and_valid_bleu_decodes_with_a_bar(tiny_dir, tmp_path, bars, capsys, monkeypatch):
    from docnmt.translate import Translator
    asked = []

    def translate(self, docs, search=None, progress=False, origin="input"):
        asked.append(progress)
        return [Document(d.docid, d.src, list(d.src)) for d in docs], None
    monkeypatch.setattr(Translator, "translate", translate)
    cfg = tiny_config(max_update=2, valid_bleu=True)
    Trainer.from_dirs(cfg, tiny_dir / "data", tmp_path / "quiet", progress_bar=False).train()
    assert asked == [False] and bars and all(b.disable for b in bars)
    assert capsys.readouterr().err == ""
    Trainer.from_dirs(cfg, tiny_dir / "data", tmp_path / "loud").train()
    assert asked == [False, True]


# ---- learning curve --------------------------------------------------------------------------

def visible_ticks(ax):
    lo, hi = ax.get_xlim()
    return [t for t in ax.get_xticks() if lo <= t <= hi]


def test_learning_curve_title_integer_ticks_and_a_visible_single_point():
    fig = learning_curve([{"updates": 1, "loss": 10.0}, {"updates": 1, "valid_loss": 9.5}], "run — doc2doc")
    ax = fig.axes[0]
    assert ax.get_title() == "run — doc2doc"
    ticks = visible_ticks(ax)
    assert ticks == [1.0]
    assert [line.get_marker() for line in ax.get_lines()] == ["o", "o"]     # one point: drawn as a dot
    long = [{"updates": u, "loss": 10.0 - u / 100} for u in range(5, 500, 5)]
    ax = learning_curve(long + [{"updates": 250, "valid_loss": 8.0}], "r").axes[0]
    assert all(float(t).is_integer() for t in visible_ticks(ax))
    assert ax.get_lines()[0].get_marker() in (None, "None", "")             # a long curve stays a line


def test_learning_curve_names_the_preset_mode_and_method(tmp_path):
    from docnmt.config import Config
    assert run_kind(tiny_config("doc2doc")) == "transformer_tiny (doc2doc)"
    assert run_kind(tiny_config("doc2doc").override({"method.name": "gtransformer", "data.separator": "group"})) \
        == "transformer_tiny (doc2doc, gtransformer)"
    assert run_kind(Config()) == "sent2sent"                              # no preset: mode (and method)
    cfg = Config.load("g_transformer_small")
    cfg.dump(tmp_path / "config.yaml")                                     # a run's config.yaml keeps the name
    again = Config.load(tmp_path / "config.yaml")
    assert again.preset == "g_transformer_small" and again.to_dict() == cfg.to_dict()
    assert run_kind(again).startswith("g_transformer_small (")


# ---- probe figures ---------------------------------------------------------------------------

def fake_results(acc: float) -> dict:
    by_distance = {d: acc for d in range(-20, 21) if d}
    return {"absolute": [{"layer": k, "accuracy": acc, "accuracy_pm3": acc + 0.1, "chance": 0.04, "chance_pm3": 0.2}
                         for k in (1, 2)],
            "relative": [{"layer": k, "accuracy": acc, "chance": 0.06, "by_distance": by_distance} for k in (1, 2)],
            "word_order": [{"layer": k, "accuracy": acc, "chance": 0.5, "by_distance": by_distance} for k in (1, 2)]}


def grey_levels(ax) -> set:
    return {round(line.get_ydata()[0], 4) for line in ax.get_lines()
            if line.get_color() == "grey" and line.get_linestyle() in ("--", ":")}


def legend_outside(fig, ax) -> bool:
    fig.canvas.draw()
    return ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1


def test_probe_figures_have_titles_with_updates_chance_lines_and_outer_legends():
    results = {"runs/a/model": fake_results(0.3), "b": fake_results(0.5)}
    figs = probe.figures(results, {"b": {64: 0.3, 128: 0.2}}, None,
                         {"runs/a/model": "4,000 updates", "b": "3,000 of 4,000 updates (best)"}, {64: 0.1, 128: 0.05})
    layers = figs["probe_layers.png"]
    assert "runs/a/model: 4,000 updates; b: 3,000 of 4,000 updates (best)" in \
        layers.get_suptitle().replace("\n", " ")
    absolute, relative, word_order = layers.axes
    assert grey_levels(absolute) == {0.04, 0.2} and grey_levels(relative) == {0.06} and grey_levels(word_order) == {0.5}
    labels = [t.get_text() for t in word_order.get_legend().get_texts()]
    assert {"runs/a/model", "b", "chance (most frequent class)"} <= set(labels)      # names whole
    assert legend_outside(layers, word_order)
    for name, chance in (("probe_relative_distance.png", 1 / 40), ("probe_word_order_distance.png", 0.5)):
        ax = figs[name].axes[0]
        assert grey_levels(ax) == {round(chance, 4)} and "4,000 updates" in ax.get_title().replace("\n", " ")
        assert legend_outside(figs[name], ax)
    ax = figs["probe_input_length.png"].axes[0]
    chance = [line for line in ax.get_lines() if line.get_label().startswith("chance")]
    assert [list(c.get_ydata()) for c in chance] == [[0.1, 0.05]] and "4,000 updates" in ax.get_title()


def test_models_with_other_chance_levels_get_one_line_each_in_their_colour():
    other = fake_results(0.5)
    other["word_order"] = [dict(r, chance=0.6) for r in other["word_order"]]
    ax = probe.figures({"a": fake_results(0.3), "b": other}, updates={"a": "1 updates", "b": "1 updates"})[
        "probe_layers.png"].axes[2]
    lines = {line.get_label(): (line.get_color(), line.get_ydata()[0]) for line in ax.get_lines()
             if "chance" in line.get_label()}
    models = {line.get_label(): line.get_color() for line in ax.get_lines() if line.get_label() in ("a", "b")}
    assert lines == {"a: chance (most frequent class)": (models["a"], 0.5),
                     "b: chance (most frequent class)": (models["b"], 0.6)}


def test_probe_titles_one_shared_update_count_once():
    figs = probe.figures({"a": fake_results(0.3), "b": fake_results(0.4)}, updates={"a": "7 updates", "b": "7 updates"})
    assert figs["probe_layers.png"].get_suptitle() == "Position probing of each encoder layer — 7 updates"


def test_chance_is_the_most_frequent_class_rate():
    import torch
    assert probe.chance_level(torch.tensor([0, 0, 0, 1, 9]), "absolute") == {"chance": 0.6, "chance_pm3": 0.8}
    assert probe.chance_level(torch.tensor([0, 1, 1]), "word_order") == {"chance": pytest.approx(2 / 3)}


def fake_model_dir(path, checkpoints: dict[int, bytes], weights: bytes | None):
    for u, blob in checkpoints.items():
        (path / "checkpoints" / f"u{u:08d}").mkdir(parents=True)
        (path / "checkpoints" / f"u{u:08d}" / WEIGHTS).write_bytes(blob)
        (path / "checkpoints" / f"u{u:08d}" / "state.pt").write_bytes(b"state")
    path.mkdir(parents=True, exist_ok=True)
    if weights is not None:
        (path / WEIGHTS).write_bytes(weights)
    return path


def test_update_count_of_a_model_directory(tmp_path):
    ckpts = {2000: b"w2", 4000: b"w4"}
    assert probe.updates_label(fake_model_dir(tmp_path / "last", ckpts, b"w4")) == "4,000 updates"
    assert probe.updates_label(fake_model_dir(tmp_path / "best", ckpts, b"w2")) == "2,000 of 4,000 updates (best)"
    assert probe.updates_label(fake_model_dir(tmp_path / "gone", ckpts, b"w1")) == "run of 4,000 updates"
    bare = fake_model_dir(tmp_path / "bare", {}, b"w")
    assert probe.updates_label(bare) == "updates unknown"
    (bare / "metrics.jsonl").write_text('{"updates": 5, "loss": 1}\n{"updates": 9, "valid_loss": 1}\ntorn')
    assert probe.updates_label(bare) == "run of 9 updates"


def test_model_names_tell_models_apart():
    assert probe.model_names(["runs/a/model", "runs/b/model/", "x"]) == ["a/model", "b/model", "x"]
    assert probe.model_names(["x", "x"]) == ["x", "x (2)"]


def test_probe_run_passes_update_counts_and_chance_to_the_plots(tiny_vocab, chat_docs, tmp_path, monkeypatch):
    cfg = Config.load("transformer_tiny").override({"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64,
                                                   "model.encoder_layers": 1, "model.decoder_layers": 1})
    m = tmp_path / "m"
    (m / "checkpoints" / "u00000007").mkdir(parents=True)
    tiny_vocab.save(m)
    cfg.dump(m / "config.yaml")
    save_weights(build_model(cfg, tiny_vocab), m / WEIGHTS)
    shutil.copy(m / WEIGHTS, m / "checkpoints" / "u00000007" / WEIGHTS)
    (m / "checkpoints" / "u00000007" / "state.pt").write_bytes(b"state")
    row = {"layer": 1, "accuracy": 0.5, "accuracy_pm3": 0.6, "n": 1, "chance": 0.25, "by_distance": {1: 0.5}}
    monkeypatch.setattr(probe, "probe_model", lambda tr, splits, s, max_tokens=None, tasks=("absolute", "relative",
                        "word_order"), **k: {t: [row] for t in tasks})
    drawn = {}
    monkeypatch.setattr(probe, "plot", lambda *args: drawn.update(args=args) or [])
    splits = {"train": chat_docs, "valid": chat_docs, "test": chat_docs}
    probe.run([str(m)], splits, tmp_path / "out", probe.ProbeSettings(), [16], log=lambda msg: None)
    assert drawn["args"][4:] == ({"m": "7 updates"}, {16: 0.25})
    saved = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert saved["updates"] == {"m": "7 updates"} and saved["chance_by_input_length"] == {"16": 0.25}
