"""The untrained twin of a model trained here: the same architecture and norm scheme built from the
same seed (depthlab.models.decoders.build_model, the weights pretraining starts from, exactly),
measured with the stages' own code on the stages' own inputs. The claims about models trained here
report the trained value minus this one, so that an effect the initialisation already has (LNS's
1/sqrt(l) shrinks deep updates before any training) is not read as the paper's effect.

No training: one forward pass over the analysis stage's documents (the same text set, tokens and
batches as the trained model's analysis), the skip stage's future-token skips on its texts, the
tuned lens and layer swaps (the lens's few Adam steps train a probe, not the model) and, where the model was pruned, over the pruning stage's
validation windows once per removal set (full model, each single layer, the angular and the
deepest block at every n of the claims' range). A 12 x 64 model costs about a second."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd


@dataclass
class InitialStatistics:
    """What the claims read of an untrained twin. `h_var` by state, `distance` d(l, l+1) by layer
    (all tokens, the CoD paper's Eq. 1), `distance_last` the last-token matrix (Gromov's block
    choice), `angle_update` by successive update pair; `losses` {removal key: mean validation
    loss} keyed as depthlab.claims.measures.window_means keys them ("full", "single:<l>",
    "angular:<n>", "deepest:<n>"); empty where the model was not pruned."""

    h_var: pd.Series | None = None
    distance: pd.Series | None = None
    angle_update: pd.Series | None = None
    block_rel_norm: pd.Series | None = None
    losses: dict = field(default_factory=dict)
    skip_effects: pd.DataFrame | None = None  # the skip stage's effects.csv rows (layer_future)
    # the lens_swaps job's (lens.csv, swaps.csv) frames per text set, as the trained model's
    lens_swaps: list | None = None


def untrained_model(model_dir: str | Path, data_folder: str | Path):
    """The model pretraining started from: its provenance record's architecture, norm scheme,
    init_std, seq_len and seed with the data's meta.json, through the pretraining stage's
    construction (make_config + build_model), in the precision the model trained in: a
    pure_bf16 run starts from the bf16 rounding of the float32 initialisation, so the twin's
    weights are rounded to bf16 too (and measured in float32, as the trained model is)."""
    import torch

    from depthlab.data.tokens import read_meta
    from depthlab.models.decoders import build_model, make_config

    record = json.loads(Path(model_dir, "provenance.json").read_text())
    decl = record["config"]
    meta = read_meta(data_folder)
    config = make_config(
        decl["architecture"],
        decl["norm_scheme"],
        vocab_size=meta["vocab_size"],
        max_positions=decl["train"]["seq_len"],
        init_std=decl["train"]["init_std"],
        bos_token_id=meta.get("bos_id"),
        eos_token_id=meta.get("eos_id"),
        pad_token_id=meta.get("pad_id"),
    )
    model = build_model(config, int(record.get("seed", decl.get("seed", 0)))).eval()
    precision = decl.get("precision_used") or decl["train"].get("precision")
    if precision == "pure_bf16":
        model = model.to(torch.bfloat16).to(torch.float32)
    return model


def _analysis_statistics(model, tokenizer, analysis: dict) -> dict:
    """The analysis stage's measures of `model` on the text set of the trained model's analysis
    (`analysis`: that job's spec), all-token distance on."""
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
    return {
        "h_var": pd.Series(result.per_state["h_var"], index=range(result.num_layers + 1)),
        "distance": pd.Series([matrix[l, l + 1] for l in layers], index=layers),
        "distance_last": result.angular_distance_last,
        "angle_update": pd.Series(result.per_update["angle_update"]),
        "block_rel_norm": pd.Series(result.per_layer["block_rel_norm"], index=layers),
    }


def _removal_losses(
    model, windows, distance_last: np.ndarray | None, n_values, removals: bool = True
) -> dict:
    """Mean validation loss of the full model and (removals) every single-layer removal and the
    angular and deepest blocks at each n (the pruning stage's strategies on the twin's own last-token
    distance matrix)."""
    from depthlab.models.architectures import adapt
    from depthlab.stages.pruning.layer_removal import model_loss, pruned_view
    from depthlab.stages.pruning.strategies import angular_removal, deepest_removal

    num_layers = adapt(model).num_layers
    sets = {"full": ()}
    if removals:
        sets.update({f"single:{l}": (l,) for l in range(num_layers)})
    for n in n_values if removals and distance_last is not None else []:
        sets[f"angular:{n}"] = angular_removal(distance_last, n)
        sets[f"deepest:{n}"] = deepest_removal(num_layers, n)
    losses = {}
    for key, removed in sets.items():
        with pruned_view(model, removed) as view:
            losses[key] = model_loss(view, windows)
    return losses


def _skip_statistics(model, tokenizer, skip: dict) -> pd.DataFrame:
    """The skip stage's layer_future effects of `model` on the trained model's skip job's texts
    (`skip`: that job's spec), as effects.csv rows."""
    from depthlab.models.architectures import adapt
    from depthlab.stages.depth_use.interventions import SkipSettings, skip_effects
    from depthlab.stages.model_job import text_batches

    settings = SkipSettings.from_spec({**skip, "variants": ["layer_future"]}, where="skip")
    batches = text_batches(skip, tokenizer, skip["max_length"], max_samples=skip["max_samples"])
    return skip_effects(adapt(model), batches, settings).to_frame()


def _lens_swaps_statistics(model, tokenizer, job: dict) -> list:
    """The lens_swaps job's measurement of `model` with the trained model's job spec (`job`):
    the tuned lens trained on the same train-split tokens, then the lens and the swaps on each
    text set; [(lens frame, swaps frame)] per text set."""
    from depthlab.models.architectures import adapt
    from depthlab.stages.analysis.lens_swaps_stage import lens_and_swaps

    *_, evaluations, _ = lens_and_swaps(adapt(model), tokenizer, job, job["max_length"], log=None)
    return [(lens.frame(), swaps.result().frame()) for lens, swaps in evaluations.values()]


def initial_statistics(spec: dict) -> InitialStatistics:
    """One trained model's untrained twin, measured. spec: model (folder), data (folder),
    analysis (the trained model's analyse_model spec, or null), val ({windows, seq_len,
    batch_size} of its prune_model job, or null), removals (score the single layers and the
    blocks too, or the full model alone), n_values (block sizes), skip (its skip_interventions
    job's spec, or absent), lens_swaps (its lens_swaps job's spec, or absent)."""
    import torch

    from depthlab.data.model_tokens import model_tokens
    from depthlab.models.loading import load_tokenizer
    from depthlab.stages.pruning.strategies import validation_windows

    torch.manual_seed(0)  # nothing below draws, but a stray draw would not move the twin's weights
    model = untrained_model(spec["model"], spec["data"])
    stats = InitialStatistics()
    distance_last = None
    if spec.get("analysis"):
        tokenizer = load_tokenizer(spec["model"])
        measured = _analysis_statistics(model, tokenizer, spec["analysis"])
        distance_last = measured.pop("distance_last")
        for key, value in measured.items():
            setattr(stats, key, value)
    if spec.get("lens_swaps"):
        stats.lens_swaps = _lens_swaps_statistics(
            model, load_tokenizer(spec["model"]), spec["lens_swaps"]
        )
    if spec.get("skip"):
        stats.skip_effects = _skip_statistics(model, load_tokenizer(spec["model"]), spec["skip"])
    if spec.get("val"):
        val = spec["val"]
        tokens, _ = model_tokens(spec["data"], "val")
        windows = validation_windows(tokens, val["windows"], val["seq_len"], val["batch_size"])
        stats.losses = _removal_losses(
            model, windows, distance_last, spec.get("n_values", []), spec.get("removals", True)
        )
    return stats
