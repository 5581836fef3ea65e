"""The probe's figures (P-Transformer's Figures 1-3 and 6): accuracy per encoder layer, per
relative distance on the top layer, and absolute accuracy by input length."""
from __future__ import annotations

import textwrap
from pathlib import Path

from .report import ONE_MODEL, PER_LENGTH, models_caption
from .states import N_CLASSES


def plot(all_results: dict[str, dict], out_dir: Path, lengths: dict[str, dict[int, float]] | None = None,
         own: list[dict] | None = None, updates: dict[str, str] | None = None,
         length_chance: dict[int, float] | None = None) -> list[Path]:
    """The paper's figures as PNGs (:func:`figures`), written to ``out_dir``."""
    paths = []
    for name, fig in figures(all_results, lengths, own, updates, length_chance).items():
        paths.append(out_dir / name)
        fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
    return paths


def figures(all_results: dict[str, dict], lengths: dict[str, dict[int, float]] | None = None,
            own: list[dict] | None = None, updates: dict[str, str] | None = None,
            length_chance: dict[int, float] | None = None) -> dict:
    """The paper's figures, by file name: accuracy per layer (Figure 1), per relative distance on
    the top layer (Figures 2-3), and absolute accuracy vs input length (Figure 6): dashed, each
    model probed at every length (``lengths``); solid, one model per length (``own``, rows of
    ``{"model", "length", "accuracy"}``). Each is titled with what it probes and the models'
    training updates (``updates``: model -> :func:`updates_label`), draws the chance level as a
    dashed grey line (:func:`chance_level`, per input length ``length_chance``; per distance, a
    uniform guess 1/K: at one distance the most frequent class is always right or always wrong) and
    has its legend outside the axes."""
    names = list(dict.fromkeys([*all_results, *(lengths or {})]))
    color = {name: f"C{i % 10}" for i, name in enumerate(names)}   # one colour per model in every figure
    trained = models_caption(updates or {})
    out = {"probe_layers.png": _layers_figure(all_results, color, trained)}
    for task, what in (("relative", "relative position"), ("word_order", "word order")):
        out[f"probe_{task}_distance.png"] = _distance_figure(all_results, task, what, color, trained)
    if lengths or own:
        out["probe_input_length.png"] = _length_figure(lengths, own, length_chance, color, trained)
    return out


def _layers_figure(all_results: dict[str, dict], color: dict[str, str], trained: str):
    """Figure 1: each task's accuracy per encoder layer, one panel a task, one legend beside them."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
    fig = Figure(figsize=(14, 4.2), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (task, label) in zip(axes, [("absolute", "absolute position"), ("relative", "relative position"),
                                        ("word_order", "word order")]):
        for name, res in all_results.items():
            rows = res.get(task, [])
            ax.plot([r["layer"] for r in rows], [r["accuracy"] for r in rows], "o-", color=color[name], label=name)
            if task == "absolute":
                ax.plot([r["layer"] for r in rows], [r["accuracy_pm3"] for r in rows], "s--", alpha=0.5,
                        color=color[name], label=f"{name} ±3")
        top = {name: (res.get(task) or [{}])[-1] for name, res in all_results.items()}   # same labels every layer
        _chance_line(ax, {name: r.get("chance") for name, r in top.items()}, "chance (most frequent class)", color)
        if task == "absolute":
            _chance_line(ax, {name: r.get("chance_pm3") for name, r in top.items()},
                         "chance ±3 (most frequent 7 positions)", color, ":")
        ax.set_title(label)
        ax.set_xlabel("encoder layer")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    entries = {}                         # one legend for the three panels, beside the last
    for ax in axes:
        entries.update({lab: h for h, lab in zip(*ax.get_legend_handles_labels()) if lab not in entries})
    _legend(axes[-1], list(entries.values()), list(entries))
    fig.suptitle(wrap(f"Position probing of each encoder layer — {trained}"))
    return fig


def _distance_figure(all_results: dict[str, dict], task: str, what: str, color: dict[str, str], trained: str):
    """Figures 2-3: the top layer's accuracy per distance i − j on a pair task."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
    classes = N_CLASSES[task]
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    for name, res in all_results.items():
        if res.get(task):
            top = res[task][-1]["by_distance"]
            ax.plot([int(d) for d in top], list(top.values()), ".-", color=color[name], label=name)
    _chance_line(ax, {"": 1 / classes}, f"chance 1/{classes} (uniform guess)", color)
    ax.set_title(wrap(f"{what} accuracy per distance i − j, top encoder layer — {trained}", 80),
                 fontsize=10)
    ax.set_xlabel("i − j")
    ax.set_ylabel("test accuracy")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    _legend(ax)
    return fig


def _length_figure(lengths: dict[str, dict[int, float]] | None, own: list[dict] | None,
                   length_chance: dict[int, float] | None, color: dict[str, str], trained: str):
    """Figure 6: the top layer's absolute accuracy by input length, in either setup or both."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import ScalarFormatter
    fig = Figure(figsize=(8, 4.4), layout="constrained")
    ax = fig.subplots()
    for name, by_len in (lengths or {}).items():
        ax.plot([int(n) for n in by_len], list(by_len.values()), "o--", color=color[name],
                label=f"{name} (one model)")
    if own:
        rows = sorted(own, key=lambda r: r["length"])
        ax.plot([r["length"] for r in rows], [r["accuracy"] for r in rows], "s-", color="black",
                label="one model per length")
        for r in rows:
            ax.annotate(r["model"], (r["length"], r["accuracy"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    if length_chance:
        xs = sorted(length_chance)
        ax.plot(xs, [length_chance[n] for n in xs], "x:", lw=1, color="grey", label="chance (most frequent class)")
    setups = [f"dashed: {ONE_MODEL.split(' (')[0]}"] * bool(lengths) + [f"solid: {PER_LENGTH}"] * bool(own)
    ax.set_title(wrap(f"Top-layer absolute-position accuracy by input length — {trained}", 80) + "\n"
                 + "\n".join(setups), fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("input length (tokens)")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    _legend(ax)
    return fig


def _legend(ax, *handles_labels) -> None:
    """The legend outside the axes, on the right."""
    ax.legend(*handles_labels, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=True,
              borderaxespad=0)


def _chance_line(ax, values: dict[str, float | None], label: str, color: dict[str, str], style: str = "--") -> None:
    """One grey line when every model has the same chance level, else one per model in its
    colour (models read other inputs: a Sent2Sent model's sentences, a Doc2Doc model's documents)."""
    values = {name: round(v, 4) for name, v in values.items() if v is not None}
    if len(set(values.values())) == 1:
        v = next(iter(values.values()))
        ax.axhline(v, ls=style, lw=1, color="grey", label=label)
        ax.annotate(f"{v:.3f}", (1, v), xycoords=("axes fraction", "data"), xytext=(-2, 2),
                    textcoords="offset points", ha="right", fontsize=7, color="grey")
        return
    for name, v in values.items():
        ax.axhline(v, ls=style, lw=1, color=color[name], alpha=0.7, label=f"{name}: {label}")


def wrap(text: str, width: int = 120) -> str:
    """``text`` broken into lines of at most ``width`` characters, for titles."""
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False))
