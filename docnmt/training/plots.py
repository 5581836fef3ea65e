"""The figures of a run: learning_curve.png (:func:`learning_curve`), titled by :func:`run_kind`,
and its method's (:func:`plot_run`)."""
from __future__ import annotations

from pathlib import Path

from .. import methods
from ..config import Config

FEW_POINTS = 30     # a training curve with at most this many points marks each


def run_kind(cfg: Config) -> str:
    """What a run trains, for titles: the preset it started from, and its mode and method."""
    kind = cfg.data.mode + ("" if cfg.method_name == "transformer" else f", {cfg.method_name}")
    return f"{cfg.preset} ({kind})" if cfg.preset else kind


def learning_curve(history: list[dict], title: str):
    """The figure of learning_curve.png: training and validation loss (bits per token) against
    updates, on integer update ticks; every validation point, and every training point of a
    short run, is marked, so a run with one point still shows it."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
    tr = [(r["updates"], r["loss"]) for r in history if "loss" in r]
    va = [(r["updates"], r["valid_loss"]) for r in history if "valid_loss" in r]
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    if tr:
        ax.plot(*zip(*tr), marker="o" if len(tr) <= FEW_POINTS else None, markersize=3, label="train loss")
    if va:
        ax.plot(*zip(*va), "o-", label="valid loss")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))    # one tick for a one-update run
    ax.set_xlabel("updates")
    ax.set_ylabel("label-smoothed loss (bits/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if tr or va:
        ax.legend()
    return fig


def plot_run(cfg: Config, progress, save_dir: Path, train_corpus) -> None:
    """learning_curve.png of a run's ``progress.history`` (:func:`learning_curve`; none without
    matplotlib), and the plots of the run's method."""
    try:
        fig = learning_curve(progress.history, f"{save_dir.name} — {run_kind(cfg)}")
    except ImportError:
        return
    fig.savefig(save_dir / "learning_curve.png", dpi=100)
    methods.training_plots(cfg, train_corpus, save_dir, progress.epoch)
