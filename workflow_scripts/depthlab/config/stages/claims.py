"""The claims table (depthlab.claims): which outputs test which claim."""

from __future__ import annotations

from ..models import corpus_models, data_folder, has_lm_head, model_layers, seed_groups
from ..resolved import Resolved
from .depth_use import seeded_pairs
from .finetune import finetune_claim_inputs
from .scaling import DEFAULT_EXPONENT_BOUNDS


def resolve_claims(resolved: Resolved) -> None:
    """The claims table (depthlab.claims): which outputs test which claim. Pre-LN and LNS seed
    groups trained on the corpus outside sweeps are compared when their architecture and
    training match; every pruned, depth-scored and linearly mapped model, every fit and the toy
    fit contribute their own claims."""
    paths, models, groups = resolved.paths, resolved.models, seed_groups(resolved)

    def group_of(name):
        return models[name].get("seed_group", name)

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

    cod_pairs = [
        [base, groups[base], treat, groups[treat]]
        for base in scheme_groups("pre_ln")
        for treat in scheme_groups("lns")
        if all(
            models[groups[base][0]][k] == models[groups[treat][0]][k]
            for k in ("architecture", "train")
        )
    ]
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
    map_groups = {}
    if maps:
        for key, pair, _ in seeded_pairs(
            resolved, resolved.config["depth_use"]["linear_maps"]["pairs"]
        ):
            map_groups.setdefault(key.rsplit(".", 1)[1], []).append(pair)
    map_ends = [
        e
        for spec in resolved.jobs("linear_maps").values()
        for e in (spec["source_name"], spec["target_name"])
    ]
    finetune = finetune_claim_inputs(resolved)
    finetune_members = [m for pair in finetune.get("pairs", []) for m in pair[1] + pair[3]]
    read = [
        m
        for m in dict.fromkeys(
            cod_members + list(pruned) + list(scored) + map_ends + finetune_members
        )
        if models[m]["kind"] == "pretrain"
    ]
    sweep = (resolved.config.get("sweeps") or {}).get(
        (resolved.config.get("scaling") or {}).get("sweep")
    )
    fits = {
        name: {
            "fit": spec["out_json"],
            "exponent_bounds": list(spec["fit"].get("exponent_bounds", DEFAULT_EXPONENT_BOUNDS)),
            # a fit of the project's own sweep is about models trained here: seeds gate it
            **(
                {"trained_here": True, "seeds": len(sweep.get("seeds") or [0])}
                if spec["fit"]["source"] == "sweep" and sweep is not None
                else {}
            ),
        }
        for name, spec in resolved.jobs("fit_scaling").items()
    }
    toy = resolved.jobs("fit_toy").get("toy")
    if not (cod_pairs or pretrained or pruned or scored or maps or fits or toy or finetune):
        return
    bootstrap = ((resolved.config.get("depth_use") or {}).get("depth_score") or {}).get(
        "bootstrap", {"resamples": 1000}
    )
    spec = {
        "run_name": resolved.config["run_name"],
        "models": {m: {"dir": paths.model(m), "data": data_folder(resolved, m)} for m in read},
        "data": sorted({data_folder(resolved, m) for m in read}),
        "cod_pairs": cod_pairs,
        "analysis": analysed,
        "pretrained": pretrained,
        "pruning": pruned,
        "pruning_groups": _grouped(pruned, group_of),
        "depth_score": scored,
        "depth_groups": _grouped(scored, group_of),
        "linear_maps": maps,
        "map_groups": map_groups,
        "fits": fits,
        "toy": {"fit": toy["out_json"], "exponent_bounds": toy["exponent_bounds"]} if toy else None,
        # only with the stage on: a config without it keeps its claims spec (no rerun)
        **({"finetune": finetune} if finetune else {}),
        "bootstrap": {"resamples": bootstrap["resamples"], "seed": resolved.config["seed"]},
        "out_csv": paths.claims("csv"),
        "out_md": paths.claims("md"),
    }
    folders = (
        [paths.model(m) for m in read]
        + spec["data"]
        + list(analysed.values())
        + [d for model in pretrained.values() for d in model["analysis"]]
        + list(pruned.values())
        + list(scored.values())
        + list(maps.values())
        + list(finetune.get("scores", {}).values())
    )
    files = [fit["fit"] for fit in fits.values()] + ([toy["out_json"]] if toy else [])
    resolved.add(
        "make_claims",
        "claims",
        spec,
        outputs=[spec["out_csv"], spec["out_md"]],
        inputs={"folders": folders, "files": files},
    )


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
