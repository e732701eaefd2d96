"""The claims table (depthlab.claims): which outputs test which claim."""

from __future__ import annotations

from depthlab.config.models import (
    corpus_models,
    data_folder,
    has_lm_head,
    model_layers,
    seed_groups,
)
from depthlab.config.resolved import Resolved
from depthlab.config.stages.depth_use import seeded_pairs
from depthlab.config.stages.finetune import finetune_claim_inputs
from depthlab.config.stages.twins import add_twin_jobs, twin_sources
from depthlab.settings.defaults import default


def resolve_claims(resolved: Resolved) -> None:
    """The claims table (depthlab.claims): which outputs test which claim. Pre-LN and LNS seed
    groups trained on the corpus outside sweeps are compared when their architecture and
    training match; every pruned, depth-scored and linearly mapped model, every fit and the toy
    fit contribute their own claims."""
    sources = _claim_sources(resolved)
    if not any(
        sources[key]
        for key in (
            "cod_pairs",
            "pretrained",
            "pruned",
            "scored",
            "maps",
            "fits",
            "toy",
            "finetune",
            "lens_swaps",
        )
    ):
        return
    sources["initial"] = add_twin_jobs(resolved, sources["initial"])
    spec = _claims_spec(resolved, sources)
    resolved.add(
        "make_claims",
        "claims",
        spec,
        outputs=[spec["out_csv"], spec["out_md"]],
        inputs=_claims_inputs(resolved, spec, sources),
    )


def _claim_sources(resolved: Resolved) -> dict:
    """Every output the claims read, by kind, and the pretrain models whose folders they read."""
    paths, models = resolved.paths, resolved.models
    cod_pairs = _cod_pairs(resolved)
    analysis = resolved.config.get("analysis") or {}
    text_set = (resolved.config.get("pruning") or {}).get(
        "text_set", next(iter(analysis.get("text_sets") or {}), None)
    )
    cod_members = [m for pair in cod_pairs for m in pair[1] + pair[3]]
    analysed = {
        m: paths.analysis(text_set, m)
        for m in cod_members
        if f"{text_set}/{m}" in resolved.jobs("analyse_model")
    }
    pretrained = _pretrained_models(resolved, text_set)
    pruned = {m: paths.pruning(m) for m in resolved.jobs("prune_model")}
    scored = {
        m: spec["out"]
        for m, spec in resolved.jobs("skip_interventions").items()
        if spec["problems"]
    }
    maps = {pair: paths.linear_map(pair) for pair in resolved.jobs("linear_maps")}
    map_groups = _map_groups(resolved) if maps else {}
    map_ends = [
        e
        for spec in resolved.jobs("linear_maps").values()
        for e in (spec["source_name"], spec["target_name"])
    ]
    finetune = finetune_claim_inputs(resolved)
    finetune_members = [m for pair in finetune.get("pairs", []) for m in pair[1] + pair[3]]
    lens_swaps = {
        m: [f"{spec['out']}/{t}" for t in spec["text_sets"]]
        for m, spec in resolved.jobs("lens_swaps").items()
    }
    read = [
        m
        for m in dict.fromkeys(
            cod_members
            + list(pruned)
            + list(scored)
            + map_ends
            + finetune_members
            + list(lens_swaps)
        )
        if models[m]["kind"] == "pretrain"
    ]
    schemes = _scheme_groups(resolved, cod_pairs)
    scheme_members = [m for _, members, _ in schemes for m in members]
    analysed.update(
        {
            m: paths.analysis(text_set, m)
            for m in scheme_members
            if f"{text_set}/{m}" in resolved.jobs("analyse_model")
        }
    )
    read = list(dict.fromkeys(read + [m for m in scheme_members if m not in read]))
    return {
        "cod_pairs": cod_pairs,
        "schemes": schemes,
        "post_ln": _post_ln_models(resolved, text_set, schemes),
        "initial": twin_sources(resolved, text_set, cod_pairs, schemes, pruned),
        "analysed": analysed,
        "pretrained": pretrained,
        "pruned": pruned,
        "scored": scored,
        "maps": maps,
        "map_groups": map_groups,
        "finetune": finetune,
        "read": read,
        "fits": _fits(resolved),
        "toy": resolved.jobs("fit_toy").get("toy"),
        "lens_swaps": lens_swaps,
    }


def _cod_pairs(resolved: Resolved) -> list:
    """[base, members, treatment, members] for each Pre-LN and LNS seed group trained here on
    the corpus outside sweeps whose architecture and training match."""
    models, groups = resolved.models, seed_groups(resolved)

    def scheme_groups(scheme):
        return [
            g
            for g, members in groups.items()
            if all(
                models[m]["kind"] == "pretrain"
                and models[m].get("norm_scheme") == scheme
                and "sweep" not in models[m]
                and m in corpus_models(resolved)
                for m in members
            )
        ]

    return [
        [base, groups[base], treat, groups[treat]]
        for base in scheme_groups("pre_ln")
        for treat in scheme_groups("lns")
        if all(
            models[groups[base][0]][k] == models[groups[treat][0]][k]
            for k in ("architecture", "train")
        )
    ]


def _scheme_groups(resolved: Resolved, cod_pairs: list) -> list:
    """[scheme group, members, norm scheme] of every norm scheme trained here on the corpus outside sweeps with
    the architecture (up to its scheme's own keys, e.g. mix_ln_post_fraction) and training of
    the first Pre-LN / LNS pair: the schemes cod_lns_best compares LNS with."""
    if not cod_pairs:
        return []
    models, groups = resolved.models, seed_groups(resolved)
    reference = models[cod_pairs[0][1][0]]
    shape = ("hidden_size", "num_layers", "num_heads", "intermediate_size")

    def same_shape(m):
        arch = models[m].get("architecture") or {}
        return all(arch.get(k) == reference["architecture"].get(k) for k in shape) and models[
            m
        ].get("train") == reference.get("train")

    return [
        [group, members, models[members[0]]["norm_scheme"]]
        for group, members in groups.items()
        if all(
            models[m]["kind"] == "pretrain"
            and "sweep" not in models[m]
            and m in corpus_models(resolved)
            and models[m].get("norm_scheme")
            and same_shape(m)
            for m in members
        )
    ]


def _post_ln_models(resolved: Resolved, text_set: str | None, schemes: list) -> dict:
    """{group: {members, analysis folders, trained}} of the Post-LN models the run analyses: the
    post_ln scheme trained here (its seeds) and published encoders without LM head (BERT-style
    Post-LN, e.g. MiniLM: their document shards when the text sets shard them)."""
    analysis = resolved.config.get("analysis") or {}
    sharded = [t for t, s in (analysis.get("text_sets") or {}).items() if "shard" in s]
    jobs, models = resolved.jobs("analyse_model"), resolved.models
    found = {}
    for group, members, scheme in schemes:
        if scheme == "post_ln" and all(f"{text_set}/{m}" in jobs for m in members):
            found[group] = {
                "members": members,
                "analysis": {m: [resolved.paths.analysis(text_set, m)] for m in members},
                "trained": True,
            }
    for name, model in models.items():
        if model["kind"] == "pretrain" or has_lm_head(resolved, name):
            continue
        sets = [t for t in sharded if f"{t}/{name}" in jobs] or [
            t for t in [text_set] if t and f"{t}/{name}" in jobs
        ]
        if sets:
            found[name] = {
                "members": [name],
                "analysis": {name: [resolved.paths.analysis(t, name) for t in sets]},
                "trained": False,
            }
    return found


def _healing_runs(resolved: Resolved) -> dict:
    """{pruned model: {healing method: {tokens, lr, runs}}} of its heal_pruned jobs: healing
    trains a model here (its runs are its seeds), and continued pretraining is judged by the
    tokens it read."""
    runs = {}
    for spec in resolved.jobs("heal_pruned").values():
        healing = spec["healing"]
        method = healing.get("method", "lora")
        entry = runs.setdefault(spec["model_name"], {}).setdefault(
            method,
            {
                "tokens": healing["steps"] * healing["batch_size"] * healing["seq_len"],
                "lr": healing["lr"],
                "runs": 1,  # one healing seed per (strategy, n): the pruning stage's seed
            },
        )
        entry["tokens"] = max(
            entry["tokens"], healing["steps"] * healing["batch_size"] * healing["seq_len"]
        )
    return runs


def _map_groups(resolved: Resolved) -> dict:
    """{configured pair: its (seeded) linear-map pairs}."""
    map_groups = {}
    for key, pair, _ in seeded_pairs(
        resolved, resolved.config["depth_use"]["linear_maps"]["pairs"]
    ):
        map_groups.setdefault(key.rsplit(".", 1)[1], []).append(pair)
    return map_groups


def _fits(resolved: Resolved) -> dict:
    """{fit: its output and the exponent bounds it is checked against} for every scaling fit."""
    sweep = (resolved.config.get("sweeps") or {}).get(
        (resolved.config.get("scaling") or {}).get("sweep")
    )
    return {
        name: {
            "fit": spec["out_json"],
            "exponent_bounds": list(
                spec["fit"].get("exponent_bounds", default("scaling", "fit", "exponent_bounds"))
            ),
            # a fit of the project's own sweep is about models trained here: seeds gate it
            **(
                {"trained_here": True, "seeds": len(sweep.get("seeds") or [0])}
                if spec["fit"]["source"] == "sweep" and sweep is not None
                else {}
            ),
        }
        for name, spec in resolved.jobs("fit_scaling").items()
    }


def _claims_spec(resolved: Resolved, sources: dict) -> dict:
    """make_claims' spec: the sources with the pretrain models' folders, the seed groups, the
    bootstrap and the table's outputs."""
    paths, models, config = resolved.paths, resolved.models, resolved.config
    read, toy, finetune = sources["read"], sources["toy"], sources["finetune"]

    def group_of(name):
        return models[name].get("seed_group", name)

    bootstrap = ((config.get("depth_use") or {}).get("depth_score") or {}).get(
        "bootstrap", {"resamples": 1000}
    )
    return {
        "run_name": config["run_name"],
        "models": {m: {"dir": paths.model(m), "data": data_folder(resolved, m)} for m in read},
        "data": sorted({data_folder(resolved, m) for m in read}),
        "cod_pairs": sources["cod_pairs"],
        "schemes": sources["schemes"],
        "post_ln": sources["post_ln"],
        "initial": sources["initial"],
        "healing": _healing_runs(resolved),
        "analysis": sources["analysed"],
        "pretrained": sources["pretrained"],
        "pruning": sources["pruned"],
        "pruning_groups": _grouped(sources["pruned"], group_of),
        "depth_score": sources["scored"],
        "depth_groups": _grouped(sources["scored"], group_of),
        "linear_maps": sources["maps"],
        "map_groups": sources["map_groups"],
        "fits": sources["fits"],
        "toy": {"fit": toy["out_json"], "exponent_bounds": toy["exponent_bounds"]} if toy else None,
        # only with the stage on: a config without it keeps its claims spec (no rerun)
        **({"finetune": finetune} if finetune else {}),
        # only with the stage on: a config without it keeps its claims spec (no rerun)
        **(
            {
                "lens_swaps": {
                    "folders": sources["lens_swaps"],
                    "groups": _grouped(sources["lens_swaps"], group_of),
                }
            }
            if sources["lens_swaps"]
            else {}
        ),
        "bootstrap": {"resamples": bootstrap["resamples"], "seed": config["seed"]},
        "out_csv": paths.claims("csv"),
        "out_md": paths.claims("md"),
    }


def _claims_inputs(resolved: Resolved, spec: dict, sources: dict) -> dict:
    """The folders and files make_claims reads."""
    paths, toy = resolved.paths, sources["toy"]
    folders = (
        [paths.model(m) for m in sources["read"]]
        + spec["data"]
        + list(sources["analysed"].values())
        + [d for model in sources["pretrained"].values() for d in model["analysis"]]
        + [
            d
            for group in sources["post_ln"].values()
            for folders in group["analysis"].values()
            for d in folders
            if d not in sources["analysed"].values()
        ]
        + list(sources["pruned"].values())
        + list(sources["scored"].values())
        + list(sources["maps"].values())
        + list(sources["finetune"].get("scores", {}).values())
        + list(dict.fromkeys(spec["out"] for spec in resolved.jobs("lens_swaps").values()))
        + list(dict.fromkeys(spec["out"] for spec in resolved.jobs("measure_twin").values()))
    )
    files = [fit["fit"] for fit in sources["fits"].values()] + ([toy["out_json"]] if toy else [])
    return {"folders": folders, "files": files}


def _pretrained_models(resolved: Resolved, text_set: str | None) -> dict:
    """{model: {analysis: folders, scale}} for each analysed causal LM not trained here: its
    analyses on the sharded text sets (analysis.text_sets.<name>.shard), one per shard, whose
    spread the claims read as the documents' sampling variance; without shards, its analysis on
    the pruning text set alone."""
    analysis = resolved.config.get("analysis") or {}
    sharded = [t for t, s in (analysis.get("text_sets") or {}).items() if "shard" in s]
    jobs = resolved.jobs("analyse_model")
    pretrained = {}
    for name, model in resolved.models.items():
        if model["kind"] == "pretrain" or not has_lm_head(resolved, name):
            continue
        sets = [t for t in sharded if f"{t}/{name}" in jobs] or [
            t for t in [text_set] if t and f"{t}/{name}" in jobs
        ]
        if not sets:
            continue
        layers = model_layers(resolved, name, "claims")
        pretrained[name] = {
            "analysis": [resolved.paths.analysis(t, name) for t in sets],
            "scale": f"{name} (pretrained, {layers or '?'} layers)",
        }
    return pretrained


def _grouped(names, group_of) -> dict:
    """{seed group: its members among `names`}."""
    grouped = {}
    for name in names:
        grouped.setdefault(group_of(name), []).append(name)
    return grouped
