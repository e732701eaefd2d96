"""The untrained-twin stage (`measure_twin` job): a model trained here rebuilt as it was before its
first step (the same architecture, norm scheme and seed through the pretraining stage's
construction, depthlab.models.decoders.build_model; in the precision it trains in) and measured
with the stages' own engines on the trained model's own inputs, so the claims can set the trained
value beside the initialisation's (depthlab.claims.rows.against_initialisation).

No training: one forward pass over the analysis stage's documents (the same text set, tokens and
batches as the trained model's analysis), the pruning stage's validation windows for every removal
set (full model, each single layer, the angular and the deepest block at every n of the claims'
range; its loss sweep, as the trained model's are scored), the skip stage's future-token skips on
its texts, and the tuned lens and layer swaps (the lens's few Adam steps train a probe, not the
model). A 12 x 64 twin's measures take 0.5 to 8 s on one CPU thread; torch's start-up, about 3 s,
is paid once per job.

Composes the analysis, pruning, depth_use and lens_swaps engines: the one stage package that
imports its siblings (pyproject.toml's import contract). One job measures the twins of one shape
and data set (depthlab.config.stages.twins.twin_group): each twin's tables, as TWIN_FILES names
them, go into <out>/<model>/, with the job's provenance.json in <out>, all written at once.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

# The twin's tables (depthlab.claims.initial reads them back): per state, per layer, per update
# pair; the removal sets' mean validation losses; the skip stage's layer_future effects; the lens
# and swaps frames per text set, in lens_swaps/<index>/.
TWIN_FILES = {
    "states": "states.csv",  # state, h_var
    "layers": "layers.csv",  # layer, distance (d(l, l+1), all tokens), block_rel_norm
    "updates": "updates.csv",  # pair, angle_update
    "losses": "losses.json",  # {removal key: mean validation loss}
    "skip_effects": "skip_effects.csv",  # effects.csv rows of the layer_future variant
    "lens_swaps": "lens_swaps",  # <index>/lens.csv, <index>/swaps.csv per text set
}


def untrained_model(declaration: dict, seed: int, data_folder: str):
    """The model pretraining starts from: the declaration's architecture, norm scheme, init_std
    and seq_len with the data's meta.json, through the pretraining stage's construction
    (make_config + build_model), in the precision it trains in: a pure_bf16 run starts from the
    bf16 rounding of the float32 initialisation, so the twin's weights are rounded to bf16 too
    (and measured in float32, as the trained model is). `auto` never trains in pure bf16."""
    import torch

    from depthlab.data.tokens import read_meta
    from depthlab.models.decoders import build_model, make_config

    meta = read_meta(data_folder)
    config = make_config(
        declaration["architecture"],
        declaration["norm_scheme"],
        vocab_size=meta["vocab_size"],
        max_positions=declaration["train"]["seq_len"],
        init_std=declaration["train"]["init_std"],
        bos_token_id=meta.get("bos_id"),
        eos_token_id=meta.get("eos_id"),
        pad_token_id=meta.get("pad_id"),
    )
    model = build_model(config, int(seed)).eval()
    if declaration["train"].get("precision") == "pure_bf16":
        model = model.to(torch.bfloat16).to(torch.float32)
    return model


def _analysis_tables(model, tokenizer, analysis: dict) -> tuple[dict, np.ndarray]:
    """The analysis stage's measures of `model` on the text set of the trained model's analysis
    (`analysis`: that job's spec), all-token distance on; and the last-token distance matrix
    (Gromov's block choice)."""
    from depthlab.models.architectures import adapt
    from depthlab.stages.analysis.measures import analyse
    from depthlab.stages.model_job import text_batches

    batches = text_batches(
        analysis,
        tokenizer,
        analysis["max_length"],
        max_samples=analysis["max_samples"],
        max_tokens=analysis.get("max_tokens"),
    )
    result = analyse(adapt(model), batches, logit_lens=False, all_token_distance=True)
    matrix = result.angular_distance_all
    layers = range(result.num_layers)
    tables = {
        "states": pd.DataFrame(
            {"state": range(result.num_layers + 1), "h_var": result.per_state["h_var"]}
        ),
        "layers": pd.DataFrame(
            {
                "layer": layers,
                "distance": [matrix[l, l + 1] for l in layers],
                "block_rel_norm": result.per_layer["block_rel_norm"],
            }
        ),
        "updates": pd.DataFrame(
            {
                "pair": range(len(result.per_update["angle_update"])),
                "angle_update": result.per_update["angle_update"],
            }
        ),
    }
    return tables, result.angular_distance_last


def _removal_losses(
    model, windows, distance_last: np.ndarray | None, n_values, removals: bool = True
) -> dict:
    """Mean validation loss of the full model and (removals) every single-layer removal and the
    angular and deepest blocks at each n (the pruning stage's strategies on the twin's own
    last-token distance matrix), through the pruning stage's own loss sweep (LossSweep: the
    states below a removed layer computed once, bit for bit model_loss of each pruned view)."""
    from depthlab.stages.pruning.blocks import angular_removal, deepest_removal
    from depthlab.stages.pruning.strategies import LossSweep

    sweep = LossSweep(model, windows)
    num_layers = sweep.num_layers
    sets = {"full": ()}
    if removals:
        sets.update({f"single:{l}": (l,) for l in range(num_layers)})
    for n in n_values if removals and distance_last is not None else []:
        sets[f"angular:{n}"] = angular_removal(distance_last, n)
        sets[f"deepest:{n}"] = deepest_removal(num_layers, n)
    return dict(zip(sets, sweep.losses(list(sets.values()))))


def _skip_effects(model, tokenizer, skip: dict) -> pd.DataFrame:
    """The skip stage's layer_future effects of `model` on the trained model's skip job's texts
    (`skip`: that job's spec), as effects.csv rows."""
    from depthlab.models.architectures import adapt
    from depthlab.stages.depth_use.interventions import SkipSettings, skip_effects
    from depthlab.stages.model_job import text_batches

    settings = SkipSettings.from_spec({**skip, "variants": ["layer_future"]}, where="skip")
    batches = text_batches(skip, tokenizer, skip["max_length"], max_samples=skip["max_samples"])
    return skip_effects(adapt(model), batches, settings).to_frame()


def _lens_swaps_frames(model, tokenizer, job: dict) -> list:
    """The lens_swaps job's measurement of `model` with the trained model's job spec (`job`):
    the tuned lens trained on the same train-split tokens, then the lens and the swaps on each
    text set; [(lens frame, swaps frame)] per text set."""
    from depthlab.models.architectures import adapt
    from depthlab.stages.lens_swaps.stage import lens_and_swaps

    *_, evaluations, _ = lens_and_swaps(adapt(model), tokenizer, job, job["max_length"], log=None)
    return [(lens.frame(), swaps.result().frame()) for lens, swaps in evaluations.values()]


def measure(twin: dict, device: str = "cpu"):
    """One model's untrained twin (`twin`: one entry of the job's `twins`, spec keys:
    workflow_scripts/measure_twin.py), measured on `device`: (tables, losses or None, lens and
    swaps frames per text set). The twin is built on the CPU, as pretraining builds it (the
    CPU generator draws its weights), then moved."""
    import torch

    from depthlab.data.model_tokens import model_tokens
    from depthlab.models.loading import load_tokenizer
    from depthlab.stages.pruning.strategies import validation_windows

    torch.manual_seed(0)  # nothing below draws, but a stray draw would not move the twin's weights
    model = untrained_model(twin["declaration"], twin["seed"], twin["data"]).to(device)
    tokenizer = load_tokenizer(twin["tokenizer"])
    tables, losses, frames, distance_last = {}, None, [], None
    if twin["analysis"]:
        analysis, distance_last = _analysis_tables(model, tokenizer, twin["analysis"])
        tables.update(analysis)
    if twin["lens_swaps"]:
        frames = _lens_swaps_frames(model, tokenizer, twin["lens_swaps"])
    if twin["skip"]:
        tables["skip_effects"] = _skip_effects(model, tokenizer, twin["skip"])
    if twin["val"]:
        val = twin["val"]
        tokens, _ = model_tokens(twin["data"], "val")
        windows = validation_windows(tokens, val["windows"], val["seq_len"], val["batch_size"])
        losses = _removal_losses(model, windows, distance_last, twin["n_values"], twin["removals"])
    return tables, losses, frames


def _write_twin(folder, tables: dict, losses: dict | None, frames: list) -> None:
    from depthlab.core.atomic_files import write_dataframe, write_json

    folder.mkdir(parents=True)
    for name, frame in tables.items():
        write_dataframe(folder / TWIN_FILES[name], frame)
    if losses is not None:
        write_json(folder / TWIN_FILES["losses"], losses)
    for index, (lens, swaps) in enumerate(frames):
        lens_folder = folder / TWIN_FILES["lens_swaps"] / str(index)
        lens_folder.mkdir(parents=True)
        write_dataframe(lens_folder / "lens.csv", lens)
        write_dataframe(lens_folder / "swaps.csv", swaps)


def run(spec: dict, device: str = "cpu", log=print) -> dict:
    """One `measure_twin` job: the twins of one shape and data set (spec keys:
    workflow_scripts/measure_twin.py), one after another in one process (the torch and
    transformers start-up, not the measures, is most of a toy twin's time). Writes each twin's
    tables into <out>/<model>/ and the job's provenance.json, all at once (atomically: a failed
    twin leaves no folder); returns {model: {table: rows}}."""
    from depthlab.core.atomic_files import atomic_path
    from depthlab.core.provenance import Provenance

    twins = spec["twins"]
    provenance = Provenance(
        "twins",
        config=spec,
        inputs=list(dict.fromkeys(p for t in twins.values() for p in (t["data"], t["tokenizer"]))),
    )  # each twin's seed is in its entry of the config
    measured, written = {}, {}
    for name, twin in twins.items():
        tables, losses, frames = measure(twin, device)
        measured[name] = tables, losses, frames
        written[name] = {table: len(frame) for table, frame in tables.items()}
        written[name].update({"losses": len(losses or {}), "lens_swaps": len(frames)})
        log(json.dumps({"model": name, **written[name]}))
    with atomic_path(spec["out"], is_dir=True) as out:
        for name, (tables, losses, frames) in measured.items():
            _write_twin(out / name, tables, losses, frames)
        provenance.write(out / "provenance.json")
    return written
