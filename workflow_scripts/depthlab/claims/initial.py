"""The untrained twins' tables, read back for the claims: what the `measure_twin` jobs measured of
each model trained here before its first step (depthlab.stages.twins.stage). The claims about
models trained here set the trained value beside this one, so that an effect the initialisation
already has (LNS's 1/sqrt(l) shrinks deep updates before any training) is not read as the paper's
effect (depthlab.claims.rows.against_initialisation)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from depthlab.stages.twins.stage import TWIN_FILES


@dataclass
class InitialStatistics:
    """What the claims read of an untrained twin. `h_var` by state, `distance` d(l, l+1) by layer
    (all tokens, the CoD paper's Eq. 1), `angle_update` by successive update pair,
    `block_rel_norm` by layer; `losses` {removal key: mean validation loss} keyed as
    depthlab.claims.measures.window_means keys them ("full", "single:<l>", "angular:<n>",
    "deepest:<n>"), empty where the model was not pruned."""

    h_var: pd.Series | None = None
    distance: pd.Series | None = None
    angle_update: pd.Series | None = None
    block_rel_norm: pd.Series | None = None
    losses: dict = field(default_factory=dict)
    skip_effects: pd.DataFrame | None = None  # the skip stage's effects.csv rows (layer_future)
    # the lens_swaps job's (lens.csv, swaps.csv) frames per text set, as the trained model's
    lens_swaps: list | None = None


def _table(folder: Path, name: str) -> pd.DataFrame | None:
    path = folder / TWIN_FILES[name]
    # exact: pandas writes the shortest repr of each float and (pandas 3) parses it back exactly
    return pd.read_csv(path) if path.is_file() else None


def read_twin(folder: str | Path) -> InitialStatistics:
    """One twin's folder of a `measure_twin` job (<out>/<model>/) as the claims read it (a table
    the job did not measure stays None)."""
    folder = Path(folder)
    stats = InitialStatistics()
    states, layers, updates = (_table(folder, n) for n in ("states", "layers", "updates"))
    if states is not None:
        stats.h_var = pd.Series(states["h_var"].to_numpy(), index=states["state"].to_numpy())
    if layers is not None:
        index = layers["layer"].to_numpy()
        stats.distance = pd.Series(layers["distance"].to_numpy(), index=index)
        stats.block_rel_norm = pd.Series(layers["block_rel_norm"].to_numpy(), index=index)
    if updates is not None:
        stats.angle_update = pd.Series(updates["angle_update"].to_numpy())
    losses = folder / TWIN_FILES["losses"]
    if losses.is_file():
        stats.losses = json.loads(losses.read_text())
    stats.skip_effects = _table(folder, "skip_effects")
    lens_folder = folder / TWIN_FILES["lens_swaps"]
    if lens_folder.is_dir():
        stats.lens_swaps = [
            (
                pd.read_csv(lens_folder / index / "lens.csv"),
                pd.read_csv(lens_folder / index / "swaps.csv"),
            )
            for index in sorted((p.name for p in lens_folder.iterdir()), key=int)
        ]
    return stats
