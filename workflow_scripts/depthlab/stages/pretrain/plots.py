"""Figures of the pretrain stage: loss curves of the norm schemes and of the depth x width sweep."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402


def plot_loss_curves(runs: pd.DataFrame, facts: dict | None = None):
    """Left: val loss per norm-scheme model (fixed scheme colours, depthlab.core.figure_style); right:
    the sweep runs, colour by depth and line style by width. Seed replicates of one model are
    drawn as their mean with the range as a band. `runs`: pretrain_runs.read_training_runs."""
    from depthlab.core import figure_style as style

    val = runs[runs["split"] == "val"].copy()
    facts = style.model_facts(list(dict.fromkeys(val["model"])), facts)
    val["base"] = val["model"].map(lambda m: facts[m]["base"])
    counts = style.seed_counts(facts)
    schemes = val[val["sweep"] == ""]
    sweep = val[val["sweep"] != ""]
    panels = [p for p in (schemes, sweep) if len(p)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.4), squeeze=False)
    colours = style.colours(facts)
    for ax, panel in zip(axes[0], panels):
        seeded = max(counts[b] for b in panel["base"].unique()) > 1
        band = " (mean of seeds, band: range)" if seeded else ""
        if panel is schemes:
            sns.lineplot(
                panel,
                x="tokens",
                y="loss",
                hue="base",
                style="base",  # equal curves (post_ln, deepnorm at the unigram loss) stay visible
                markers=True,
                dashes=True,
                palette=colours,
                errorbar=style.SEED_BAND,
                ax=ax,
            )
            ax.set_title("Norm schemes: validation loss" + band, fontsize=10)
            legend_title = "model"
        else:
            depth_colours = {
                facts[m]["depth"]: colours[facts[m]["base"]] for m in panel["model"].unique()
            }
            sns.lineplot(
                panel,
                x="tokens",
                y="loss",
                hue="depth",
                style="width",
                marker="o",
                palette=depth_colours,
                errorbar=style.SEED_BAND,
                ax=ax,
            )
            ax.set_title("Depth x width sweep: validation loss" + band, fontsize=10)
            legend_title = None
        if ax.get_legend() is not None:
            ax.get_legend().set_title(legend_title)
        ax.set_xscale("log")
        ax.set_xlabel("training tokens D")
        ax.set_ylabel("validation loss (nats/token)")
    final = (
        val.sort_values("step")
        .groupby("model")
        .tail(1)
        .groupby("base", sort=False)["loss"]
        .agg(["mean", "min", "max", "count"])
    )
    final = final.reindex([b for b in dict.fromkeys(schemes["base"]) if b in final.index])
    fig.suptitle(
        "final validation loss: "
        + ", ".join(
            f"{base} {row['mean']:.3f}"
            + (
                f" [{row['min']:.3f}, {row['max']:.3f}] over {int(row['count'])} seeds"
                if row["count"] > 1
                else ""
            )
            for base, row in final.iterrows()
        ),
        fontsize=9,
    )
    fig.tight_layout()
    return fig
