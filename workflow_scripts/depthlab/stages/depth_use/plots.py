"""Figures of the depth-use stage in the layout of Csordás et al. 2025 ("Do Language Models Use
Their Depth Efficiently?"):

  skip_effects     per model: one heatmap per variant, skipped layer (rows) x affected layer
                   (columns), colour = relative change of the later layer's update (max over
                   positions and prompts, the paper's aggregate; the mean is in effects.csv), as
                   the paper's layer-skipping figures (all tokens / future tokens)
  output_effect    per model: bars of the output change ||p - p'||_2 per skipped layer, per
                   variant (max and mean), as the paper's output-effect panels
  depth_score      depth score vs difficulty level with bootstrap intervals and the accuracy per
                   level, as the paper's depth-score figures (MATH levels, MQuAKE hops)
  linear_maps      per model pair: relative error of the affine map from source layer i (rows) to
                   target layer j (columns), the line of equal relative depth and the best target
                   layer per source layer, as the paper's Qwen 2.5 1.5B -> 14B linear-map figure

Figure titles name what was measured and the paper figure they follow (by content; the figure
numbers differ between the paper's arXiv versions).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PAPER = "Csordás et al. 2025"
# What a difficulty level is in each problem family (figure titles name what was measured).
FAMILY_LEVELS = {
    "arithmetic": "synthetic arithmetic: operations",
    "hops": "synthetic k-hop lookups: hops",
    "lookup": "synthetic lookups: keys",
    "math": "MATH: levels",
    "mquake": "MQuAKE: hops",
}
FIGURES = ("skip_effects", "output_effect", "depth_score", "linear_maps")
VARIANT_LABELS = {
    "layer_all": "layer skipped, effect on the same tokens",
    "layer_future": "layer skipped at earlier tokens, effect on future tokens",
    "attention_all": "attention zeroed, same tokens",
    "attention_future": "attention zeroed at earlier tokens, future tokens",
    "mlp_all": "MLP zeroed, same tokens",
    "mlp_future": "MLP zeroed at earlier tokens, future tokens",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _titled(fig, title: str, fontsize: int):
    """The figure with its suptitle, laid out."""
    fig.suptitle(title, fontsize=fontsize)
    fig.tight_layout()
    return fig


def _integer_ticks(ax, axes="xy", most: int = 6):
    """Integer layer ticks, at most `most` + 1 per axis: matplotlib's default of 10 ran a
    30-layer model's two-digit labels together under a 3.6-inch panel."""
    from matplotlib.ticker import MaxNLocator

    for name in axes:
        getattr(ax, f"{name}axis").set_major_locator(MaxNLocator(nbins=most, integer=True))


def read_skip_results(folders):
    """(effects, summaries, accuracy or None, depth scores or None) of skip_interventions.py
    output folders."""
    import pandas as pd

    effects, summaries, accuracy, scores = [], {}, [], []
    for folder in map(Path, folders):
        effects.append(pd.read_csv(folder / "effects.csv"))
        summary = json.loads((folder / "summary.json").read_text())
        summaries[summary["model"]] = summary
        if (folder / "depth_score.csv").is_file():
            accuracy.append(pd.read_csv(folder / "accuracy.csv"))
            scores.append(pd.read_csv(folder / "depth_score.csv"))
    if not effects:
        raise ValueError("no skip_interventions folders given")
    return (
        pd.concat(effects, ignore_index=True),
        summaries,
        pd.concat(accuracy, ignore_index=True) if accuracy else None,
        pd.concat(scores, ignore_index=True) if scores else None,
    )


def read_linear_maps(folders):
    import pandas as pd

    frames, summaries = [], {}
    for folder in map(Path, folders):
        frames.append(pd.read_csv(folder / "relative_error.csv"))
        summary = json.loads((folder / "summary.json").read_text())
        summaries[summary["pair"]] = summary
    return (pd.concat(frames, ignore_index=True) if frames else None), summaries


def effect_matrix(effects, model: str, variant: str, aggregate: str = "max") -> np.ndarray | None:
    """(skipped layers, L) matrix of one model and variant; rows of unskipped layers are NaN.
    None when the model's job did not measure the variant (depth_use.skip.per_model variants)."""
    rows = effects[
        (effects["model"] == model)
        & (effects["variant"] == variant)
        & (effects["measure"] == "update")
    ]
    if rows.empty:
        return None
    L = int(rows["layer"].max()) + 1
    matrix = np.full((L, L), np.nan)
    matrix[rows["skipped"].to_numpy(), rows["layer"].to_numpy()] = rows[aggregate].to_numpy()
    return matrix


def plot_skip_effects(effects, summaries, aggregate: str = "max"):
    plt = _pyplot()
    models = list(summaries)
    variants = [v for v in VARIANT_LABELS if v in set(effects["variant"])]
    from matplotlib.colors import Normalize

    fig, axes = plt.subplots(
        len(models),
        len(variants),
        squeeze=False,
        figsize=(3.6 * len(variants) + 0.6, 3.2 * len(models)),
    )
    matrices = {
        (model, variant): effect_matrix(effects, model, variant, aggregate)
        for model in models
        for variant in variants
    }
    # One colour scale for every model and variant, 0 to 1 (a change as large as the update
    # itself); a few huge ratios would otherwise wash out every other cell, so larger values
    # saturate and the title gives the largest.
    norm = Normalize(vmin=0.0, vmax=1.0)
    largest = max(
        (np.nanmax(m) for m in matrices.values() if m is not None and np.isfinite(m).any()),
        default=float("nan"),
    )
    for row, model in enumerate(models):
        for col, variant in enumerate(variants):
            ax = axes[row, col]
            matrix = matrices[model, variant]
            if matrix is None:
                ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
                ax.set_title(f"{model}\n{VARIANT_LABELS[variant]}", fontsize=8)
                ax.set_axis_off()
                continue
            image = ax.imshow(
                matrix, norm=norm, cmap="viridis", interpolation="nearest", origin="upper"
            )
            ax.set_xlabel("affected layer l")
            ax.set_ylabel("skipped layer s")
            _integer_ticks(ax)
            ax.set_title(f"{model}\n{VARIANT_LABELS[variant]}", fontsize=8)
            fig.colorbar(
                image,
                ax=ax,
                fraction=0.046,
                pad=0.04,
                extend="max",
                label=r"$\|\Delta_l-\Delta'_l\|/\|\Delta_l\|$" + f" ({aggregate})",
            )
    return _titled(
        fig,
        f"Relative change of later layers' updates when one layer / sublayer is skipped "
        f"({aggregate} over positions and prompts) - after {PAPER}, layer-skipping "
        f"figures\none colour scale 0 to 1 for all panels, larger values saturate "
        f"(largest {largest:.3g})",
        fontsize=10,
    )


def plot_output_effect(effects, summaries):
    plt = _pyplot()
    models = list(summaries)
    variants = [v for v in VARIANT_LABELS if v in set(effects["variant"])]
    fig, axes = plt.subplots(len(models), 2, squeeze=False, figsize=(11, 3.0 * len(models)))
    width = 0.8 / max(len(variants), 1)
    for row, model in enumerate(models):
        subset = effects[(effects["model"] == model) & (effects["measure"] == "output")]
        for col, aggregate in enumerate(("max", "mean")):
            ax = axes[row, col]
            if subset[aggregate].isna().all():
                ax.text(
                    0.5,
                    0.5,
                    "no LM head: no output distribution",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
            for index, variant in enumerate(variants):
                rows = subset[subset["variant"] == variant].sort_values("skipped")
                ax.bar(
                    rows["skipped"] + (index - (len(variants) - 1) / 2) * width,
                    rows[aggregate],
                    width=width,
                    label=variant,
                )
            _integer_ticks(ax, "x")
            ax.set_xlabel("skipped layer s")
            ax.set_ylabel(r"$\|p-p'\|_2$ " + f"({aggregate})")
            ax.set_title(
                f"{model}: output change, {aggregate} over positions and prompts", fontsize=9
            )
            ax.legend(fontsize=7)
    return _titled(
        fig,
        f"Change of the output distribution when one layer / sublayer is skipped - "
        f"after {PAPER}, output-effect panels of the layer-skipping figures",
        fontsize=10,
    )


def plot_depth_score(scores, accuracy, summaries):
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    if scores is None or scores.empty:
        for ax in axes:
            ax.text(
                0.5,
                0.5,
                "no problem set was scored",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
        return fig
    for (model, family), rows in scores.groupby(["model", "family"], sort=True):
        rows = rows.sort_values("level")
        L = summaries.get(model, {}).get("architecture", {}).get("num_layers")
        scale = (L - 1) if L and L > 1 else 1
        axes[0].errorbar(
            rows["level"],
            rows["depth_score"] / scale,
            yerr=[
                (rows["depth_score"] - rows["ci_low"]) / scale,
                (rows["ci_high"] - rows["depth_score"]) / scale,
            ],
            marker="o",
            capsize=3,
            label=f"{model} / {family}",
        )
        axes[0].fill_between(
            rows["level"], rows["ci_low"] / scale, rows["ci_high"] / scale, alpha=0.2
        )
    for ax in axes:
        _integer_ticks(ax, "x")
    axes[0].set_xlabel("difficulty level")
    axes[0].set_ylabel("depth score / (L - 1)")
    axes[0].set_title(
        "depth score of the output effect at the answer positions\n"
        r"$\sum_l l\,e_l / \sum_l e_l$, bootstrap interval over problems",
        fontsize=9,
    )
    axes[0].legend(fontsize=7)
    for (model, family), rows in accuracy.groupby(["model", "family"], sort=True):
        rows = rows.sort_values("level")
        (line,) = axes[1].plot(
            rows["level"], rows["accuracy"], marker="o", label=f"{model} / {family}"
        )
        axes[1].plot(rows["level"], rows["chance"], ls=":", color=line.get_color())
    axes[1].set_ylim(0, 1.05)
    axes[1].set_xlabel("difficulty level")
    axes[1].set_ylabel("greedy accuracy (dotted: chance)")
    axes[1].set_title(
        "accuracy per level (a model that fails the easiest level makes the "
        "depth score meaningless)",
        fontsize=9,
    )
    axes[1].legend(fontsize=7)
    measured = ", ".join(FAMILY_LEVELS.get(f, f) for f in sorted(accuracy["family"].unique()))
    return _titled(
        fig,
        f"Depth score vs problem difficulty ({measured}) - layout of {PAPER}'s depth-score "
        "figures (MATH levels, MQuAKE hops)",
        fontsize=10,
    )


def plot_linear_maps(frame, summaries):
    plt = _pyplot()
    pairs = list(summaries)
    if not pairs:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.text(0.5, 0.5, "no linear-map pair declared", ha="center", va="center")
        return fig
    from depthlab.core.figure_style import shared_norm

    fig, axes = plt.subplots(1, len(pairs), squeeze=False, figsize=(6.2 * len(pairs), 4.2))
    matrices, columns = {}, {}
    for pair in pairs:
        summary = summaries[pair]
        column = "centred_error" if summary.get("error") == "centred" else "relative_error"
        rows = frame[frame["pair"] == pair]
        matrix = np.full((summary["source_layers"] + 1, summary["target_layers"] + 1), np.nan)
        matrix[rows["source_layer"].to_numpy(), rows["target_layer"].to_numpy()] = rows[
            column
        ].to_numpy()
        matrices[pair], columns[pair] = matrix, column
    norm = shared_norm(matrices.values())  # one scale across pairs
    for ax, pair in zip(axes.flat, pairs):
        summary, column, matrix = summaries[pair], columns[pair], matrices[pair]
        L_a, L_b = summary["source_layers"], summary["target_layers"]
        image = ax.imshow(
            matrix,
            aspect="auto",
            cmap="viridis_r",
            interpolation="nearest",
            origin="upper",
            norm=norm,
        )
        sources = np.arange(L_a + 1)
        ax.plot(
            sources * L_b / max(L_a, 1),
            sources,
            color="white",
            ls="--",
            label="equal relative depth",
        )
        best = np.nanargmin(matrix, axis=1)
        ax.plot(best, sources, "r*", markersize=9, label="best target layer")
        _integer_ticks(ax)
        ax.set_xlabel(f"target layer j ({summary['target']}, L={L_b})")
        # on two lines: one would reach past the short panel into the title above it
        ax.set_ylabel(f"source layer i\n({summary['source']}, L={L_a})")
        what = (
            r"$\|\hat y-y\|/\|y-\bar y\|$" if column == "centred_error" else r"$\|\hat y-y\|/\|y\|$"
        )
        equal = np.round(sources * L_b / max(L_a, 1)).astype(int)
        ax.set_title(
            f"{pair}: held-out {what} of the affine map $h^a_i \\to h^b_j$\n"
            f"({summary['tokens']['test']} test tokens; best target within one layer "
            f"of equal relative depth for {int((abs(best - equal) <= 1).sum())} of "
            f"{len(sources)} source layers)",
            fontsize=9,
        )
        ax.legend(fontsize=7, loc="lower right")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=column.replace("_", " "))
    return _titled(
        fig,
        f"Linear maps from a shallow to a deep model's residual stream - after {PAPER}, "
        f"linear-map figure (Qwen 2.5 1.5B -> 14B)",
        fontsize=10,
    )


def plot_all(skip_folders, linear_map_folders) -> dict:
    effects, summaries, accuracy, scores = read_skip_results(skip_folders)
    frame, pair_summaries = read_linear_maps(linear_map_folders)
    return {
        "skip_effects": plot_skip_effects(effects, summaries),
        "output_effect": plot_output_effect(effects, summaries),
        "depth_score": plot_depth_score(scores, accuracy, summaries),
        "linear_maps": plot_linear_maps(frame, pair_summaries),
    }
