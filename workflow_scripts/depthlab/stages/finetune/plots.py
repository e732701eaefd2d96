"""Figure of the fine-tuning stage: each norm scheme's task score before and after supervised
fine-tuning (Curse of Depth, Sec. 5, its fine-tuning table as a figure)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402


def plot_finetuning(scores: pd.DataFrame, labels: dict, run_name: str):
    """Mean task score (over tasks) per parent, pretrained vs fine-tuned; the fine-tuned point
    is the mean over fine-tuning seeds with their range as a band (the parent is one model).
    `scores`: finetune_stage.read_scores; `labels`: parent -> its norm scheme or kind."""
    from depthlab.core import figure_style as style
    from depthlab.stages.finetune.scores import FINETUNED, PRETRAINED, gain_table, model_scores

    means = model_scores(scores)
    means["scheme"] = means["parent"].map(lambda p: labels.get(p, p))
    means["when"] = means["stage"].map({PRETRAINED: "before", FINETUNED: "after"})
    schemes = style.scheme_colours()
    palette = {
        labels.get(p, p): schemes.get(labels.get(p, p), colour)
        for p, colour in zip(means["parent"].unique(), sns.color_palette("tab10"))
    }
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    sns.pointplot(
        means,
        x="when",
        y="score",
        hue="scheme",
        order=["before", "after"],
        markers=["o", "s", "^", "D", "v", "P"][: means["scheme"].nunique()],
        palette=palette,
        errorbar=style.SEED_BAND,
        dodge=0.2,  # the schemes' seed ranges side by side, not on top of each other
        capsize=0.05,
        ax=ax,
    )
    tasks = ", ".join(dict.fromkeys(scores["task"]))
    seeds = int(means[means["stage"] == FINETUNED].groupby("parent").size().max())
    ax.set_xlabel("")
    ax.set_ylabel(f"mean accuracy over tasks ({tasks})", fontsize=8)
    table = gain_table(scores)
    ax.set_title(
        "Supervised fine-tuning, before vs after "
        f"(after: mean of {seeds} fine-tuning seeds, bars: range)\n"
        + "; ".join(
            f"{labels.get(r.parent, r.parent)} {r.before:.3f} -> {r.after:.3f} ({r.gain:+.3f})"
            for r in table.itertuples()
        ),
        fontsize=8,
    )
    fig.text(
        0.01,
        0.01,
        f"Curse of Depth (Sun et al. 2025), Sec. 5 fine-tuning comparison; run {run_name}",
        fontsize=7,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
