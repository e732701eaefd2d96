"""Figures of the pretrain stage: loss curves of the norm schemes and of the depth x width sweep."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402


def plot_loss_curves(runs: pd.DataFrame):
    """Left: val loss per run outside any sweep, one line per label (CoD Table 1 / Fig. 5
    setting); right: the sweep runs by depth and width. `runs`: runs.read_training_runs."""
    val = runs[runs["split"] == "val"]
    schemes = val[val["sweep"] == ""]
    sweep = val[val["sweep"] != ""]
    panels = [p for p in (schemes, sweep) if len(p)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if panel is schemes:
            sns.lineplot(panel, x="tokens", y="loss", hue="label", marker="o", ax=ax)
            ax.get_legend().set_title("model")
            ax.set_title("Norm schemes: validation loss (Curse of Depth, Table 1 setting)")
        else:
            sns.lineplot(panel, x="tokens", y="loss", hue="depth", style="width", marker="o",
                         palette="viridis", ax=ax)
            ax.set_title("Depth x width sweep: validation loss (Liu et al., Fig. 1 setting)")
        ax.set_xscale("log")
        ax.set_xlabel("training tokens D")
        ax.set_ylabel("validation loss (nats/token)")
    final = val.sort_values("step").groupby("model").tail(1)
    caption = "final val loss: " + ", ".join(
        f"{label} {v:.3f}" for m, label, v in zip(final["model"], final["label"], final["loss"])
        if m in set(schemes["model"]))
    fig.text(0.01, -0.04, caption, fontsize=8, wrap=True)
    fig.tight_layout()
    return fig
