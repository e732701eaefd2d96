"""The untrained twins (`measure_twin` jobs, depthlab.stages.twins): which models trained here
the claims compare with their initialisation, and what each twin is measured on. The claims
resolver asks for them (a twin exists for a claim), so the twins are planned, sized and cached
like every other model job, and make_claims only reads their tables."""

from __future__ import annotations

from depthlab.config.models import corpus_models, data_folder, training_data
from depthlab.config.resolved import Resolved

# What the twin reads of the trained model's jobs: the same documents, windows and settings
ANALYSIS_KEYS = ("texts", "text_field", "batch_size", "add_special_tokens", "max_samples",
                 "max_length", "max_tokens")  # fmt: skip
SKIP_KEYS = ("texts", "text_field", "batch_size", "add_special_tokens", "max_samples",
             "max_length", "layers", "no_skip_front", "future_positions", "future_min_position",
             "max_rows", "seed")  # fmt: skip
LENS_KEYS = ("train_data", "text_sets", "text_field", "max_samples", "max_length", "batch_size",
             "stride", "tuned_lens", "add_special_tokens", "seed")  # fmt: skip
# What the initial weights depend on (a change of steps or lr keeps the twin)
DECLARATION_TRAIN_KEYS = ("seq_len", "init_std", "precision")


def twin_sources(
    resolved: Resolved, text_set: str | None, cod_pairs: list, schemes: list, pruned: dict
) -> dict:
    """{model: what its untrained twin is measured on} for every model trained here that a claim
    compares with its initialisation: the analyse_model job's text set (its spec) and, for a
    pruned model, the prune_model job's validation windows with the block sizes of the claims'
    range (n = 1 .. L // 2); its skip_interventions job's future-token skips; its lens_swaps
    job. A model trained on the problems (not the corpus) has its skips alone."""
    members = [m for pair in cod_pairs for m in pair[1] + pair[3]]
    members += [m for _, group, _ in schemes for m in group]
    members += [m for m in pruned if resolved.models[m]["kind"] == "pretrain"]
    skips = {
        m: spec
        for m, spec in resolved.jobs("skip_interventions").items()
        if spec["problems"] and "layer_future" in spec["variants"]
        and resolved.models[m]["kind"] == "pretrain"
    }  # fmt: skip
    members += list(skips)
    analyses, prunes = resolved.jobs("analyse_model"), resolved.jobs("prune_model")
    lens_jobs = {m: spec for m, spec in resolved.jobs("lens_swaps").items()
                 if resolved.models[m]["kind"] == "pretrain"}  # fmt: skip
    members += list(lens_jobs)
    default_val = (resolved.config.get("pruning") or {}).get("val")
    twins = {}
    for m in dict.fromkeys(members):
        if resolved.models[m]["kind"] != "pretrain":
            continue
        if m in skips and m not in corpus_models(resolved):  # trained on the problems
            twins[m] = {"analysis": None, "val": None, "removals": False, "n_values": [],
                        "skip": {k: skips[m][k] for k in SKIP_KEYS}, "lens_swaps": None,
                        "sources": [("skip_interventions", m)]}  # fmt: skip
            continue
        if m not in corpus_models(resolved):
            continue
        job = analyses.get(f"{text_set}/{m}")
        layers = resolved.models[m]["architecture"]["num_layers"]
        twins[m] = {
            "analysis": {k: job[k] for k in ANALYSIS_KEYS} if job else None,
            # a model not pruned is scored on the pruning stage's default windows (its full
            # loss only: cod_val_loss, cod_lns_best)
            "val": (
                {k: (prunes[m]["val"] if m in prunes else default_val)[k]
                 for k in ("windows", "seq_len", "batch_size")}
                if m in prunes or default_val
                else None
            ),
            "removals": m in prunes,
            "n_values": list(range(1, layers // 2 + 1)) if m in prunes else [],
            "skip": None,
            "lens_swaps": {k: lens_jobs[m][k] for k in LENS_KEYS} if m in lens_jobs else None,
            "sources": [("analyse_model", f"{text_set}/{m}")] * bool(job)
            + [("lens_swaps", m)] * (m in lens_jobs),
        }  # fmt: skip
    return twins


def twin_group(model: dict) -> str:
    """The measure_twin job of a model's twin: one per shape and data set
    (<data>_l<layers>_h<width>). The twins of one shape differ only in norm scheme and seed, so
    one process measures them one after another: a toy twin's measures take a fraction of the
    job's torch start-up, and a large model's twins still get a job per size."""
    architecture = model["architecture"]
    return f"{training_data(model)}_l{architecture['num_layers']}_h{architecture['hidden_size']}"


def add_twin_jobs(resolved: Resolved, twins: dict) -> dict:
    """The measure_twin jobs of `twins` (twin_sources), one per twin_group; {model: its twin's
    folder}."""
    paths, config = resolved.paths, resolved.config
    groups: dict[str, dict] = {}
    for m, twin in twins.items():
        model = resolved.models[m]
        group = twin_group(model)
        job = groups.setdefault(group, {"twins": {}, "inputs": {}})
        inputs = job["inputs"]
        for key, values in _twin_inputs(resolved, m, twin.pop("sources")).items():
            inputs[key] = list(dict.fromkeys(inputs.get(key, []) + values))
        job["twins"][m] = {
            "model_name": m,
            "declaration": {
                "architecture": model["architecture"],
                "norm_scheme": model["norm_scheme"],
                "train": {k: model["train"][k] for k in DECLARATION_TRAIN_KEYS},
            },
            "seed": model.get("seed", config["seed"]),
            "data": data_folder(resolved, m),
            "tokenizer": paths.model(m),  # the trained model's own tokenizer, as its jobs read
            **twin,
        }
    folders = {}
    for group, job in groups.items():
        spec = {
            "group": group,
            "twins": job["twins"],
            "device": (config.get("analysis") or {}).get("device", "auto"),
            "out": paths.twins(group),
        }
        resolved.add("measure_twin", group, spec, outputs=[paths.twins(group)],
                     inputs=job["inputs"], wildcards={"group": group})  # fmt: skip
        folders.update({m: paths.twin(group, m) for m in job["twins"]})
    return folders


def _twin_inputs(resolved: Resolved, m: str, sources: list) -> dict:
    """What one twin reads: its data and trained model folders (the tokenizer) and the text
    files the trained model's jobs read (`sources`: [(family, job)])."""
    paths = resolved.paths
    inputs = {"data": [data_folder(resolved, m)], "model": [paths.model(m)]}
    for family, job in sources:
        for key, values in resolved.inputs[family][job].items():
            values = [v for v in values if v != paths.model(m)]
            if values:
                inputs[f"{family}_{key}"] = values
    return inputs
