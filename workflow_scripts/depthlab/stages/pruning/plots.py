"""Figures of the pruning stage, from prune_model.py output folders.

  delta_p   Curse of Depth Fig. 2 layout: the change in validation loss and in task accuracy when
            the single layer l is removed, one column per model (Pre-LN beside LNS)
  sweep     Gromov et al. Fig. 1/2 layout: validation loss and task accuracy vs the fraction of
            layers removed, one line per strategy, unhealed solid and healed dashed, accuracy
            with lm-eval's standard error as error bars and the chance level dotted
  speedup   measured prefill and generation throughput of the exported pruned models relative
            to the full model vs the fraction removed, beside the ideal L / (L - n)

Titles say what was measured on which models; they name the paper figure whose layout they
follow, not a claim that the paper's result was reproduced.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from depthlab.core.paper_values import PAPER_VALUES
from depthlab.settings.block_criteria import CRITERIA

STRATEGY_COLORS = {name: c.colour for name, c in CRITERIA.items()}  # declared with each


def read_prunings(folders: dict[str, str]) -> dict[str, pd.DataFrame]:
    """{table: frame over every model} for sweep, single_layer, speed, block_choice."""
    tables: dict[str, list[pd.DataFrame]] = {
        "sweep": [],
        "single_layer": [],
        "speed": [],
        "block_choice": [],
    }
    for model, folder in folders.items():
        for name in tables:
            path = Path(folder) / f"{name}.csv"
            if not path.is_file():
                if name in ("sweep", "single_layer"):
                    raise FileNotFoundError(f"prunings.{model}: {path} does not exist")
                continue
            frame = pd.read_csv(path, keep_default_na=True)
            frame["model"] = model
            tables[name].append(frame)
    return {k: pd.concat(v, ignore_index=True) if v else pd.DataFrame() for k, v in tables.items()}


def _tasks(frame: pd.DataFrame) -> list[str]:
    if "task" not in frame:
        return []
    return sorted(t for t in frame["task"].dropna().unique() if t)


def label_colours(labels: dict[str, str]) -> dict[str, tuple]:
    """{model: colour}: the fixed norm-scheme colour when the label starts with a scheme name
    (labels are `<scheme>` or `<scheme> s<seed>`), grey otherwise."""
    from depthlab.core.figure_style import scheme_colours

    schemes = scheme_colours()
    return {
        model: schemes.get(label.split()[0], (0.5, 0.5, 0.5)) for model, label in labels.items()
    }


def _largest_delta(single: pd.DataFrame, model: str, label: str) -> str:
    losses = single[single["model"] == model].drop_duplicates("layer")
    if losses.empty:
        return f"{label} none"
    worst = losses.loc[losses["delta_loss"].idxmax()]
    return f"{label} layer {int(worst['layer'])} ({worst['delta_loss']:+.2f})"


def plot_delta_p(single: pd.DataFrame, labels: dict[str, str], metric: str, run_name: str):
    """One column per model, one row per measure; each row shares its y axis so the models'
    bars compare directly."""
    import matplotlib.pyplot as plt

    models = list(labels)
    tasks = _tasks(single)
    rows = 1 + len(tasks)
    colours = label_colours(labels)
    fig, axes = plt.subplots(
        rows,
        len(models),
        figsize=(4.2 * len(models), 2.8 * rows),
        squeeze=False,
        sharex="col",
        sharey="row",
    )
    for column, model in enumerate(models):
        frame = single[single["model"] == model]
        losses = frame.drop_duplicates("layer").sort_values("layer")
        ax = axes[0, column]
        ax.bar(losses["layer"], losses["delta_loss"], color=colours[model])
        ax.axhline(0, color="black", lw=0.6)
        ax.set_title(labels[model])
        ax.set_ylabel(r"$\Delta$ val loss" if column == 0 else "")
        for row, task in enumerate(tasks, start=1):
            ax = axes[row, column]
            one = frame[frame["task"] == task].sort_values("layer")
            if not one.empty:
                ax.bar(
                    one["layer"],
                    one[f"delta_{metric}"],
                    color=colours[model],
                    alpha=0.7,
                    yerr=one[f"{metric}_stderr"],
                    capsize=2,
                    ecolor="gray",
                )
            ax.axhline(0, color="black", lw=0.6)
            ax.set_ylabel(f"$\\Delta$ {metric}\n{task}" if column == 0 else "")
        axes[-1, column].set_xlabel("removed layer l")
    fig.suptitle(
        f"Layout of Curse of Depth Fig. 2 (per-layer ablation $\\Delta P(l)$): change in "
        f"validation loss and lm-eval {metric} when only layer l is removed, measured "
        f"on the {run_name} run's models, no fine-tuning\n(error bars: lm-eval standard "
        f"error of the pruned model's {metric}; largest loss increase: "
        + ", ".join(_largest_delta(single, model, labels[model]) for model in models)
        + ")",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def plot_sweep(
    sweep: pd.DataFrame,
    labels: dict[str, str],
    metric: str,
    run_name: str,
    chance: float | None = None,
):
    import matplotlib.pyplot as plt

    robust = PAPER_VALUES["gromov_robust_fraction"]
    models = list(labels)
    tasks = _tasks(sweep)
    columns = 1 + len(tasks)
    # Each panel its own y-axis: the models' losses differ by far more than the effect of
    # removing a block on one of them (toy models near 6-7 beside a pretrained LM near 3).
    # Constrained layout keeps the two-line title clear of the top row.
    fig, axes = plt.subplots(
        len(models),
        columns,
        figsize=(4.0 * columns, 3.0 * len(models) + 0.6),
        squeeze=False,
        layout="constrained",
    )
    for row, model in enumerate(models):
        frame = sweep[sweep["model"] == model]
        for column, task in enumerate(tasks, start=1):
            if frame[frame["task"] == task][metric].notna().any():
                continue
            axes[row, column].text(
                0.5,
                0.5,
                f"{task}: not measured\nfor {labels[model]}",
                ha="center",
                va="center",
                transform=axes[row, column].transAxes,
                fontsize=8,
                color="dimgray",
            )
        for strategy in sorted(frame["strategy"].unique()):
            color = STRATEGY_COLORS.get(strategy, None)
            for healed, style in ((False, "-"), (True, "--")):
                part = frame[(frame["strategy"] == strategy) & (frame["healed"] == healed)]
                if part.empty:
                    continue
                label = f"{strategy}{' healed' if healed else ''}"
                losses = part.drop_duplicates("n").sort_values("fraction")
                axes[row, 0].plot(
                    losses["fraction"],
                    losses["val_loss"],
                    style,
                    marker="o",
                    ms=3,
                    color=color,
                    label=label,
                )
                for column, task in enumerate(tasks, start=1):
                    one = part[part["task"] == task].sort_values("fraction")
                    if one.empty:
                        continue
                    axes[row, column].errorbar(
                        one["fraction"],
                        one[metric],
                        yerr=one[f"{metric}_stderr"],
                        fmt=style,
                        marker="o",
                        ms=3,
                        capsize=2,
                        color=color,
                        label=label,
                    )
        axes[row, 0].set_ylabel(f"{labels[model]}\nval loss")
        for column, task in enumerate(tasks, start=1):
            if chance:
                axes[row, column].axhline(chance, color="gray", ls=":", label="chance")
            axes[row, column].axvline(
                robust.value, color="gray", ls="--", lw=0.8, label="Gromov et al.: QA holds to here"
            )
            axes[row, column].set_ylabel(f"{metric} ({task})")
        for ax in axes[row]:
            ax.set_xlabel("fraction of layers removed")
        axes[row, 0].legend(fontsize=7)
    fig.suptitle(
        f"Layout of Gromov et al. Fig. 1/2: validation loss and lm-eval {metric} vs "
        f"fraction of layers removed, per strategy, unhealed (solid) and healed "
        f"(dashed), measured on the {run_name} run's models\n(error bars: lm-eval "
        f"standard error; dotted: chance; dashed: {robust.paper}, up to about half of the "
        f"layers removed with little QA loss on pretrained LLMs)",
        fontsize=9,
    )
    return fig


def plot_speedup(speed: pd.DataFrame, labels: dict[str, str], run_name: str):
    import matplotlib.pyplot as plt

    if speed.empty:
        # an axis with only the ideal curve read as a measurement ("none removal")
        fig = plt.figure(figsize=(5.5, 1.6))
        fig.text(
            0.5,
            0.5,
            f"speed-up not measured in the {run_name} run\n(no pruned model's speed table has"
            " a row: see pruning.speed)",
            ha="center",
            va="center",
        )
        return fig
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), squeeze=False)
    colours = label_colours(labels)
    for ax, kind in zip(axes[0], ("prefill", "generation")):
        for model in labels:
            frame = speed[speed["model"] == model].sort_values("fraction")
            if frame.empty:
                continue
            value = frame[f"{kind}_speedup"]
            # the rounds' spread (speed.speedups); tables written before it have none
            low = frame.get(f"{kind}_speedup_low", value)
            high = frame.get(f"{kind}_speedup_high", value)
            ax.errorbar(
                frame["fraction"],
                value,
                # clipped at 0: a single round's range is the value, up to rounding
                yerr=np.clip([value - low, high - value], 0, None),
                marker="o",
                capsize=3,
                color=colours[model],
                label=labels[model],
            )
        # the ideal up to a little past the largest fraction measured, not to the axis' 10x
        largest = speed["fraction"].max()
        grid = np.linspace(0, min(0.9, largest + 0.1), 50)
        ax.plot(grid, 1 / (1 - grid), ":", color="gray", label="ideal L/(L-n)")
        ax.set_xlabel("fraction of layers removed")
        ax.set_ylabel(f"{kind} speed-up, pruned / full\n(median of rounds; bars: range)")
        ax.set_title(kind)
        ax.legend(fontsize=7)
    strategies = ", ".join(sorted(speed["strategy"].unique()))
    fig.suptitle(
        f"Measured speed-up of exported pruned models vs the full model ({strategies} "
        f"removal; Gromov et al. report none)\n{run_name} run, measured on this machine",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def plot_all(
    folders: dict[str, str],
    labels: dict[str, str],
    metric: str,
    run_name: str,
    chance: float | None = None,
) -> dict:
    tables = read_prunings(folders)
    figures = {
        "delta_p": plot_delta_p(tables["single_layer"], labels, metric, run_name),
        "sweep": plot_sweep(tables["sweep"], labels, metric, run_name, chance),
        "speedup": plot_speedup(tables["speed"], labels, run_name),
    }
    return figures
