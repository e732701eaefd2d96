"""What the claims read from a run (RunData), which files that is, and reading them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from depthlab.claims.measures import (
    final_val_loss,
    next_layer_distance,
    unigram_entropy,
)
from depthlab.core.model_types import NORM_PLACEMENTS, norm_placement

# ---------------------------------------------------------------------------------------------
# The run's data and the claims


@dataclass
class RunData:
    """What the claims read from a run, keyed by (expanded) model name.

    cod_pairs: (baseline group, its members, treatment group, its members) of Pre-LN vs LNS
    models of the same architecture and training; groups: {base name: members} for every stage
    below (members: `<name>_s<seed>` when the config seeds the model, else [name])."""

    cod_pairs: list = field(default_factory=list)
    trained: set = field(default_factory=set)  # models trained here (seeds matter)
    task_trained: set = field(default_factory=set)  # trained here on the depth problems
    val_loss: dict = field(default_factory=dict)  # final validation loss
    tokens_per_param: dict = field(default_factory=dict)  # training tokens / non-embedding params
    unigram: dict = field(default_factory=dict)  # unigram entropy of the model's val split
    scale: dict = field(default_factory=dict)  # "12 layers x 128, 262k tokens"
    h_var: dict = field(default_factory=dict)  # Series by state l
    measures: dict = field(default_factory=dict)  # analysis measures.csv frames
    distance: dict = field(default_factory=dict)  # d(l, l+1) Series by layer l
    distance_tokens: dict = field(default_factory=dict)  # "all tokens" | "last token"
    single_layer: dict = field(default_factory=dict)  # single_layer.csv frames
    pruning_groups: dict = field(default_factory=dict)  # {group: members} of pruned models
    sweeps: dict = field(default_factory=dict)  # pruning sweep.csv frames
    depth_groups: dict = field(default_factory=dict)  # {group: members} of scored models
    problem_effects: dict = field(default_factory=dict)
    skip_effects: dict = field(default_factory=dict)  # skip stage effects.csv frames
    accuracy: dict = field(default_factory=dict)
    bootstrap: dict = field(default_factory=lambda: {"resamples": 1000, "seed": 0})
    map_groups: dict = field(default_factory=dict)  # {config pair: [expanded pairs]}
    map_errors: dict = field(default_factory=dict)  # relative_error.csv frames by pair
    map_ends: dict = field(default_factory=dict)  # pair -> (source, target, target layers)
    fits: dict = field(default_factory=dict)  # name -> (fit.json dict, bounds)
    # fits of the project's own sweep (models trained here) -> the sweep's seeds per point;
    # a fit not named here is of published points
    fit_seeds: dict = field(default_factory=dict)
    toy_fit: dict | None = None
    toy_bounds: tuple | None = None
    # pretrained LMs (not trained here): per model, its analysis replicates (one per document
    # shard) as (measures.csv frame, d(l, l+1) Series, "all tokens" | "last token")
    pretrained: dict = field(default_factory=dict)
    pretrained_scale: dict = field(default_factory=dict)
    # where each published LM's norms sit (core.model_types.NORM_PLACEMENTS; None: unknown)
    pretrained_placement: dict = field(default_factory=dict)
    window_losses: dict = field(default_factory=dict)  # pruning window_losses.csv frames
    # supervised fine-tuning: (base group, members, treatment group, members) of Pre-LN vs LNS
    # parents, and each parent's evaluate_finetuned scores.csv frame
    finetune_pairs: list = field(default_factory=list)
    finetune_scores: dict = field(default_factory=dict)
    # tuned lens and layer swaps: per model, (lens.csv, swaps.csv) frames per text set; groups:
    # {seed group: members} (a published LM: itself, its text sets the document shards)
    lens_swaps: dict = field(default_factory=dict)
    lens_groups: dict = field(default_factory=dict)
    # untrained twins (depthlab.claims.initial.InitialStatistics) of the models trained here,
    # by model; a claim about a model without one says so
    initial: dict = field(default_factory=dict)
    # every norm scheme trained here at the CoD pair's shape: [(group, members, norm scheme)]
    schemes: list = field(default_factory=list)
    # Post-LN models: {group: {"members", "trained", "replicates": {member: [analysis
    # replicates as `pretrained` holds them]}}}
    post_ln: dict = field(default_factory=dict)
    # healing runs per pruned model: {method: {tokens, lr, runs}} (healing trains here)
    healing: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Reading a run


def input_files(spec: dict) -> list[str]:
    """Every file `read_run_data(spec)` reads (for provenance)."""
    files = []
    for model in spec["models"].values():
        files += [f"{model['dir']}/train_log.csv", f"{model['dir']}/config.json"]
    files += [f"{d}/{f}" for d in spec["data"] for f in ("meta.json", "val.bin")]
    analysis_folders = list(spec["analysis"].values()) + [
        d for model in spec.get("pretrained", {}).values() for d in model["analysis"]
    ]
    analysis_folders += [
        d
        for group in (spec.get("post_ln") or {}).values()
        for folders in group["analysis"].values()
        for d in folders
    ]
    for folder in (spec.get("initial") or {}).values():
        files.append(f"{folder}/provenance.json")
    for d in dict.fromkeys(analysis_folders):
        files.append(f"{d}/measures.csv")
        if Path(f"{d}/angular_distance_all.csv").exists():
            files.append(f"{d}/angular_distance_all.csv")
    for folder in spec["pruning"].values():
        files += [f"{folder}/sweep.csv", f"{folder}/single_layer.csv"]
        if Path(f"{folder}/window_losses.csv").exists():
            files.append(f"{folder}/window_losses.csv")
    for folder in spec["depth_score"].values():
        files += [f"{folder}/problem_effects.csv", f"{folder}/accuracy.csv"]
    for folder in spec["linear_maps"].values():
        files += [f"{folder}/relative_error.csv", f"{folder}/summary.json"]
    files += [
        f"{folder}/scores.csv" for folder in spec.get("finetune", {}).get("scores", {}).values()
    ]
    for folders in (spec.get("lens_swaps") or {}).get("folders", {}).values():
        files += [f"{d}/{name}" for d in folders for name in ("lens.csv", "swaps.csv")]
    files += [fit["fit"] for fit in spec["fits"].values()]
    if spec.get("toy"):
        files.append(spec["toy"]["fit"])
    return files


def _scale_text(run) -> str:
    tokens = int(run.log["tokens"].max())
    shown = f"{tokens / 1e6:.3g}M" if tokens >= 1e6 else f"{tokens / 1e3:.3g}k"
    return f"{run.depth} layers x {run.width}, {shown} tokens"


def _read_analysis(folder) -> tuple[pd.DataFrame, pd.Series, str]:
    """An analysis folder's measures.csv, its d(l, l+1) and which tokens that distance is over
    (all tokens, the paper's Eq. 1, when the folder has that matrix; else the last token)."""
    measures = pd.read_csv(f"{folder}/measures.csv")
    all_tokens = Path(folder, "angular_distance_all.csv")
    if all_tokens.exists():
        return measures, next_layer_distance(pd.read_csv(all_tokens)), "all tokens"
    distance = measures[(measures["measure"] == "angular_distance_last") & (measures["n"] == 1)]
    return measures, distance.set_index("layer")["value"], "last token"


def _norm_placement(folder) -> str | None:
    """Where the analysed model's norms sit (core.model_types), from the model_type its analysis
    summary records; None when unknown."""
    summary = Path(folder, "summary.json")
    if not summary.exists():
        return None
    architecture = json.loads(summary.read_text()).get("architecture") or {}
    return norm_placement(architecture.get("model_type"))


def read_run_data(spec: dict) -> RunData:
    """Read every table the claims need (the `make_claims` spec names the files). Every model in
    spec["models"] was trained here; one whose data folder holds the depth problems
    (problems.jsonl) was trained on the task."""
    from depthlab.data.prepare import load_tokens
    from depthlab.data.pretrain_runs import read_run

    data = RunData(
        cod_pairs=[tuple(p) for p in spec["cod_pairs"]],
        pruning_groups=spec["pruning_groups"],
        depth_groups=spec["depth_groups"],
        map_groups=spec["map_groups"],
        bootstrap=spec["bootstrap"],
    )
    unigram = {folder: unigram_entropy(load_tokens(folder, "val")) for folder in spec["data"]}
    for name, model in spec["models"].items():
        run = read_run(model["dir"])
        data.trained.add(name)
        if Path(model["data"], "problems.jsonl").exists():
            data.task_trained.add(name)
        data.val_loss[name] = final_val_loss(run.log)
        data.unigram[name] = unigram[model["data"]]
        data.scale[name] = _scale_text(run)
        if run.non_embedding_params:
            data.tokens_per_param[name] = float(run.log["tokens"].max()) / run.non_embedding_params
    if spec.get("initial"):
        from depthlab.claims.initial import read_twin

        data.initial = {name: read_twin(folder) for name, folder in spec["initial"].items()}
    data.schemes = [tuple(s) for s in spec.get("schemes", [])]
    data.healing = spec.get("healing") or {}
    for group, entry in (spec.get("post_ln") or {}).items():
        data.post_ln[group] = {
            "members": entry["members"],
            "trained": entry["trained"],
            "replicates": {
                m: [_read_analysis(d) for d in folders] for m, folders in entry["analysis"].items()
            },
        }
    for name, folder in spec["analysis"].items():
        measures, distance, tokens = _read_analysis(folder)
        data.measures[name] = measures
        data.h_var[name] = measures[measures["measure"] == "h_var"].set_index("layer")["value"]
        data.distance[name], data.distance_tokens[name] = distance, tokens
    for name, model in spec.get("pretrained", {}).items():
        data.pretrained[name] = [_read_analysis(folder) for folder in model["analysis"]]
        data.pretrained_scale[name] = model["scale"]
        placement = _norm_placement(model["analysis"][0])
        data.pretrained_placement[name] = placement
        if placement not in (None, "pre"):
            data.pretrained_scale[name] += f"; {NORM_PLACEMENTS[placement]}"
    for name, folder in spec["pruning"].items():
        data.sweeps[name] = pd.read_csv(f"{folder}/sweep.csv")
        data.single_layer[name] = pd.read_csv(f"{folder}/single_layer.csv")
        windows = Path(folder, "window_losses.csv")
        if windows.exists():
            data.window_losses[name] = pd.read_csv(windows, keep_default_na=False)
    for name, folder in spec["depth_score"].items():
        data.problem_effects[name] = pd.read_csv(f"{folder}/problem_effects.csv")
        if Path(folder, "effects.csv").exists():
            data.skip_effects[name] = pd.read_csv(f"{folder}/effects.csv")
        data.accuracy[name] = pd.read_csv(f"{folder}/accuracy.csv")
    for pair, folder in spec["linear_maps"].items():
        data.map_errors[pair] = pd.read_csv(f"{folder}/relative_error.csv")
        summary = json.loads(Path(f"{folder}/summary.json").read_text())
        data.map_ends[pair] = (summary["source"], summary["target"], summary["target_layers"])
    for name, fit in spec["fits"].items():
        data.fits[name] = (json.loads(Path(fit["fit"]).read_text()), fit["exponent_bounds"])
        if fit.get("trained_here"):
            data.fit_seeds[name] = int(fit["seeds"])
    finetune = spec.get("finetune") or {}
    data.finetune_pairs = [tuple(p) for p in finetune.get("pairs", [])]
    for name, folder in finetune.get("scores", {}).items():
        data.finetune_scores[name] = pd.read_csv(f"{folder}/scores.csv")
    lens_swaps = spec.get("lens_swaps") or {}
    data.lens_groups = lens_swaps.get("groups", {})
    for name, folders in lens_swaps.get("folders", {}).items():
        data.lens_swaps[name] = [
            (pd.read_csv(f"{d}/lens.csv"), pd.read_csv(f"{d}/swaps.csv")) for d in folders
        ]
    if spec.get("toy"):
        data.toy_fit = json.loads(Path(spec["toy"]["fit"]).read_text())
        data.toy_bounds = tuple(spec["toy"]["exponent_bounds"])
    return data
