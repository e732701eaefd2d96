"""Loss curves of pretraining runs: norm schemes side by side, and the depth x width sweep."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402


def read_training_runs(model_dirs) -> pd.DataFrame:
    """One tidy frame of every run's train_log.csv, labelled from its provenance."""
    frames = []
    for model_dir in map(Path, model_dirs):
        log_path, prov_path = model_dir / "train_log.csv", model_dir / "provenance.json"
        for path in (log_path, prov_path):
            if not path.exists():
                raise FileNotFoundError(f"{path}: missing; is {model_dir} a pretrain output?")
        declared = json.loads(prov_path.read_text())["config"]
        log = pd.read_csv(log_path)
        arch = declared["architecture"]
        log = log.assign(model=declared["model_name"], norm_scheme=declared["norm_scheme"],
                         depth=arch["num_layers"], width=arch["hidden_size"],
                         sweep=declared.get("sweep") or "")
        frames.append(log)
    return pd.concat(frames, ignore_index=True)


def plot_loss_curves(runs: pd.DataFrame):
    """Left: val loss per norm scheme (CoD Table 1 / Fig. 5 setting); right: the sweep by depth."""
    val = runs[runs["split"] == "val"]
    schemes = val[val["sweep"] == ""]
    sweep = val[val["sweep"] != ""]
    panels = [p for p in (schemes, sweep) if len(p)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if panel is schemes:
            sns.lineplot(panel, x="tokens", y="loss", hue="model", marker="o", ax=ax)
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
        f"{m} {v:.3f}" for m, v in zip(final["model"], final["loss"]) if m in set(schemes["model"]))
    fig.text(0.01, -0.04, caption, fontsize=8, wrap=True)
    fig.tight_layout()
    return fig
