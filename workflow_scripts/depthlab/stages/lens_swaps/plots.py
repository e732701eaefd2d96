"""The `lens_swaps` job's figure, one per model, drawn by its own job (`plot_lens_swaps`) from the
tables the lens job wrote, so redrawing it never retrains a lens: (a) KL(p_L || lens) per state
for the logit lens and the tuned lens, (b) top-1 agreement of both lenses with the final
prediction, (c) the share of the intact model's next-token top-1 accuracy kept by each swap
(l, l+1) and deletion of l, with the agreement with the intact model's prediction dashed.
Several text sets (document shards): their mean, their range as a band."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# each text set's tables in a lens_swaps folder: the job (depthlab.stages.lens_swaps.stage) writes
# them, the figure's job reads them
LENS_TABLE, SWAPS_TABLE = "lens.csv", "swaps.csv"


def table_files(folder: str, text_sets) -> list[Path]:
    """The lens and swaps tables of `text_sets` in a lens_swaps folder, in text-set order."""
    return [Path(folder) / t / name for t in text_sets for name in (LENS_TABLE, SWAPS_TABLE)]


def read_tables(folder: str, text_sets) -> dict:
    """{text_set: (lens frame, swaps frame)} of a lens_swaps folder; raises FileNotFoundError
    naming a missing table."""
    import pandas as pd

    files = table_files(folder, text_sets)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"lens_swaps tables missing (run the lens_swaps job): {missing}")
    frames = [pd.read_csv(f) for f in files]
    return {t: (frames[2 * i], frames[2 * i + 1]) for i, t in enumerate(text_sets)}


def _band(ax, x, values, label, colour, style="-"):
    values = np.asarray(values, dtype=float)  # (text sets, points)
    ax.plot(x, values.mean(0), style, color=colour, label=label, marker=".", markersize=3)
    if values.shape[0] > 1:
        ax.fill_between(x, values.min(0), values.max(0), color=colour, alpha=0.2, lw=0)


def plot_lens_swaps(frames: dict, model: str, path: str) -> None:
    """frames: {text_set: (lens.csv frame, swaps.csv frame)}; written to `path` atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depthlab.core.atomic_files import save_figure

    lens = [f[0] for f in frames.values()]
    swaps = [f[1] for f in frames.values()]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), layout="constrained")
    colours = {"logit": "tab:blue", "tuned": "tab:orange", "swap": "tab:green", "delete": "tab:red"}
    for ax, measure, ylabel in (
        (axes[0], "kl", r"KL$(p_L \,\|\, $lens$(h_l))$ [nats]"),
        (axes[1], "top1_agreement", "top-1 agreement with $p_L$"),
    ):
        for name in ("logit", "tuned"):
            rows = [f[(f["lens"] == name) & (f["measure"] == measure)] for f in lens]
            if measure == "kl":  # the output's own KL is 0: off a log axis
                rows = [r[r["layer"] < r["layer"].max()] for r in rows]
            if any(r.empty for r in rows):
                continue
            x = rows[0]["layer"].to_numpy()
            _band(ax, x, [r["value"].to_numpy() for r in rows], f"{name} lens", colours[name])
        ax.set_xlabel("state l (input of layer l; L = output)")
        ax.set_ylabel(ylabel)
        if measure == "kl":  # the embedding's KL dwarfs the rest
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    ax = axes[2]
    for kind, label in (("swap", "swap l, l+1"), ("delete", "delete l")):
        rows = [f[f["kind"] == kind] for f in swaps]
        x = rows[0]["layer"].to_numpy()
        _band(ax, x, [r["kept_accuracy"].to_numpy() for r in rows], label, colours[kind])
        _band(ax, x, [r["agreement"].to_numpy() for r in rows], f"{label}: agreement",
              colours[kind], "--")  # fmt: skip
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("layer l")
    ax.set_ylabel("accuracy kept (solid) / agreement (dashed)")
    ax.legend(fontsize=7)
    shards = f"; mean over {len(frames)} text sets, range shaded" if len(frames) > 1 else ""
    fig.suptitle(f"{model}: tuned vs logit lens, layer swaps and deletions{shards}")
    save_figure(path, fig)
    plt.close(fig)
