"""Depth use: problems, skip interventions (and the depth score), linear maps, their figures."""

from __future__ import annotations

import copy
from pathlib import Path

from depthlab.config.models import (
    ModelOverrides,
    check_positions,
    data_folder,
    declared_checkpoint_folder,
    declared_models,
    local_file,
    model_layers,
    model_location,
    reads_special_tokens,
    seed_groups,
    undeclared_model,
)
from depthlab.config.paths import check_name, seed_model_name
from depthlab.config.resolved import Resolved, library_check, require_resources
from depthlab.config.stages.analysis import text_set_texts
from depthlab.core.errors import ConfigError

DEPTH_USE_FIGURES = ("skip_effects", "output_effect", "depth_score", "linear_maps")


# The skip and linear-map settings every job passes on as given (per_model may override skip's)
SKIP_SETTINGS = (
    "max_samples",
    "max_length",
    "batch_size",
    "variants",
    "layers",
    "no_skip_front",
    "future_positions",
    "future_min_position",
    "max_rows",
)
LINEAR_MAP_SETTINGS = (
    "max_documents",
    "max_length",
    "batch_size",
    "skip_first",
    "val_fraction",
    "test_fraction",
    "alphas",
    "max_memory_mb",
    "error",
)


def resolve_depth_use(resolved: Resolved, base_dir: Path) -> None:
    depth_use = resolved.config.get("depth_use")
    if not depth_use:
        return
    require_resources(resolved.config, "depth_use")
    problems = _add_problems(resolved, depth_use["problems"], base_dir)
    skip_folders = _add_skip_interventions(resolved, depth_use, bool(problems), base_dir)
    map_folders = _add_linear_maps(resolved, depth_use, base_dir)
    _add_depth_use_figures(resolved, skip_folders, map_folders)


def _add_problems(resolved: Resolved, problems: dict, base_dir: Path) -> dict:
    """make_problems, when the config asks for problems; returns the problems section as the
    job gets it (local dataset paths resolved)."""
    if not problems:
        return problems
    from depthlab.data.problem_sets import validate_problem_settings

    library_check(validate_problem_settings, problems, "depth_use.problems")
    problems = copy.deepcopy(problems)
    local_datasets = []
    for family, settings in problems["families"].items():
        dataset = settings.get("dataset") or {}
        if dataset.get("source") == "jsonl":  # a local dataset file, found as text sets are
            dataset["path"] = local_file(
                dataset["path"], base_dir, f"depth_use.problems.families.{family}.dataset.path"
            )
            local_datasets.append(dataset["path"])  # an edited file rebuilds the set
    resolved.add(
        "make_problems",
        "problems",
        {"out": resolved.paths.problems, "seed": resolved.config["seed"], **problems},
        outputs=[resolved.paths.problems],
        inputs={"datasets": local_datasets},
    )
    return problems


def _add_skip_interventions(
    resolved: Resolved, depth_use: dict, has_problems: bool, base_dir: Path
) -> list:
    """One skip_interventions job per skipped or depth-scored model; returns their folders."""
    from depthlab.settings.depth_use import validate_intervention_settings

    # a sub-section set to null is off (docs/configs.md, "Switching things off")
    skip, score = depth_use.get("skip") or {}, depth_use.get("depth_score") or {}
    skip_models = declared_models(resolved, skip.get("models", []), "depth_use.skip.models")
    score_models = declared_models(
        resolved, score.get("models", []), "depth_use.depth_score.models"
    )
    if score_models and not has_problems:
        raise ConfigError(
            "depth_use.depth_score.models: a depth score needs problems (depth_use.problems)"
        )
    if score_models and not skip:
        raise ConfigError(
            "depth_use.skip: off, but the depth score's jobs take its settings (max_length, "
            "variants, ...); give depth_use.skip with `models: []` to score without text skips, "
            "or switch the depth score off too (depth_use.depth_score: null)"
        )
    unlisted = [name for name in score_models if name not in skip_models]
    if unlisted and isinstance(skip.get("models"), list):
        resolved.notes.append(
            f"depth_use.skip.models: the depth score keeps a skip_interventions job (with "
            f"depth_use.skip's settings) for {', '.join(unlisted)}, which "
            f"depth_use.depth_score.models names"
        )
    overrides = ModelOverrides(
        resolved,
        "depth_use.skip",
        skip.get("per_model") or {},
        skip_models + score_models,
        "depth_use.skip.models or depth_use.depth_score.models",
    )
    families = _scored_families(resolved, score, score_models) if score_models else {}
    skip_folders = []
    for name in dict.fromkeys(skip_models + score_models):
        key = (
            f"depth_use.skip.models[{skip_models.index(name)}]"
            if name in skip_models
            else f"depth_use.depth_score.models[{score_models.index(name)}]"
        )
        settings = {**{k: skip[k] for k in SKIP_SETTINGS}, **overrides.of(name)}
        library_check(
            validate_intervention_settings,
            {**settings, "depth_score_variant": score.get("variant")},
            model_layers(resolved, name, key),
            "depth_use.skip",
            model=name,
        )
        check_positions(
            resolved,
            name,
            settings["max_length"],
            overrides.key(name, "max_length"),
        )
        skip_folders.append(
            _add_skip_job(resolved, name, settings, name in score_models, families, base_dir)
        )
    return skip_folders


def _scored_families(resolved: Resolved, score: dict, score_models: list) -> dict:
    """{model: the problem families its depth score reads, or None for every family}, from
    depth_use.depth_score.families (keyed by model or seeded base name), checked against the
    declared families and the scored models."""
    declared = list(resolved.config["depth_use"]["problems"]["families"])
    chosen = score.get("families") or {}
    groups = seed_groups(resolved)
    unscored = []
    for group, families in chosen.items():
        if group not in resolved.models and group not in groups:
            raise undeclared_model(resolved, f"depth_use.depth_score.families.{group}", group)
        if not set(groups.get(group, [group])) & set(score_models):
            unscored.append(group)  # an overlay narrowed the scored models: ignored, one note
        for index, family in enumerate(families):
            if family not in declared:
                raise ConfigError(
                    f"depth_use.depth_score.families.{group}[{index}]: '{family}' is not a "
                    f"family of depth_use.problems.families ({', '.join(declared)})"
                )
    if unscored:
        resolved.notes.append(
            f"depth_use.depth_score.families: the families of {', '.join(unscored)} are "
            f"ignored (not in depth_use.depth_score.models)"
        )
    return {
        name: chosen.get(name, chosen.get(resolved.models[name].get("seed_group", name)))
        for name in score_models
    }


def _add_skip_job(
    resolved: Resolved, name: str, settings: dict, scored: bool, families: dict, base_dir: Path
) -> str:
    """One model's skip_interventions job (with the depth score when `scored`); returns its
    folder."""
    paths, config = resolved.paths, resolved.config
    depth_use = config["depth_use"]
    skip, score = depth_use["skip"], depth_use.get("depth_score") or {}
    texts = text_set_texts(
        resolved, skip["text_set"], base_dir, "depth_use.skip.text_set", model=name
    )
    model = resolved.models[name]
    out = paths.skip(name)
    resolved.add(
        "skip_interventions",
        name,
        {
            "model_name": name,
            "model_path": model_location(resolved, name),
            "revision": model.get("revision"),
            "out": out,
            "texts": texts,
            "text_field": (config.get("analysis") or {}).get("text_field", "text"),
            "text_set": skip["text_set"],
            **settings,
            "seed": config["seed"],
            "problems": f"{paths.problems}/problems.jsonl" if scored else None,
            # only when chosen, so a config without depth_score.families keeps its specs
            **({"problem_families": families[name]} if families.get(name) else {}),
            "add_special_tokens": reads_special_tokens(model),
            "depth_score_variant": score.get("variant"),
            "prepend_bos": score.get("prepend_bos"),
            "bootstrap": score.get("bootstrap"),
            "dtype": model.get("dtype", depth_use["dtype"]),
            "device": depth_use["device"],
        },
        outputs=[out],
        inputs={
            "model": resolved.model_inputs(name),
            "texts": [texts["input"]] if texts["input"] else [],
            "problems": [paths.problems] if scored else [],
        },
    )
    return out


def _add_linear_maps(resolved: Resolved, depth_use: dict, base_dir: Path) -> list:
    """One linear_maps job per (seeded) pair; returns their folders."""
    from depthlab.settings.depth_use import validate_linear_map_settings

    maps = depth_use.get("linear_maps")
    if not maps:  # off
        return []
    library_check(validate_linear_map_settings, maps, "depth_use.linear_maps")
    map_folders = []
    # absent: the paper's position-by-position pairing, which needs one tokenizer
    alignment = maps.get("alignment", "positions")
    for key, pair, ends in seeded_pairs(resolved, maps["pairs"]):
        if alignment == "positions":  # auto / word_ends pair models of any two tokenizers
            check_same_tokens(resolved, ends["source"], ends["target"], key)
        for end in ("source", "target"):
            check_positions(
                resolved, ends[end], maps["max_length"], "depth_use.linear_maps.max_length"
            )
        map_folders.append(_add_linear_map_job(resolved, pair, ends, alignment, base_dir))
    return map_folders


def _add_linear_map_job(
    resolved: Resolved, pair: str, ends: dict, alignment: str, base_dir: Path
) -> str:
    """One pair's linear_maps job; returns its folder."""
    paths, config = resolved.paths, resolved.config
    depth_use = config["depth_use"]
    maps = depth_use["linear_maps"]
    texts = text_set_texts(
        resolved,
        maps["text_set"],
        base_dir,
        "depth_use.linear_maps.text_set",
        model=ends["source"],
    )
    out = paths.linear_map(pair)
    source, target = resolved.models[ends["source"]], resolved.models[ends["target"]]
    resolved.add(
        "linear_maps",
        pair,
        {
            "pair": pair,
            "source_name": ends["source"],
            "source_path": model_location(resolved, ends["source"]),
            "target_name": ends["target"],
            "target_path": model_location(resolved, ends["target"]),
            "source_revision": source.get("revision"),
            "target_revision": target.get("revision"),
            "out": out,
            "texts": texts,
            "text_field": (config.get("analysis") or {}).get("text_field", "text"),
            "add_special_tokens": reads_special_tokens(source),
            "target_add_special_tokens": reads_special_tokens(target),
            "alignment": alignment,
            **{k: maps[k] for k in LINEAR_MAP_SETTINGS},
            "dtype": depth_use["dtype"],
            "device": depth_use["device"],
        },
        outputs=[out],
        inputs={
            "models": resolved.model_inputs(ends["source"]) + resolved.model_inputs(ends["target"]),
            "texts": [texts["input"]] if texts["input"] else [],
        },
    )
    return out


def _add_depth_use_figures(resolved: Resolved, skip_folders: list, map_folders: list) -> None:
    """plot_depth_use: the figures over every skip and linear-map folder."""
    paths = resolved.paths
    fmt = resolved.config["figures"]["format"]
    figures = {figure: paths.figure(f"depth_use/{figure}", fmt) for figure in DEPTH_USE_FIGURES}
    resolved.add(
        "plot_depth_use",
        "depth_use",
        {
            "skip": skip_folders,
            "linear_maps": map_folders,
            "out_dir": f"{paths.root}/figures/depth_use",
            "format": fmt,
        },
        outputs=list(figures.values()),
    )


def seeded_pairs(resolved: Resolved, pairs: dict) -> list:
    """(config key, pair name, {source, target}) for every linear-map pair; a pair with a seeded
    end is one pair per seed, <pair>_s<seed> (seed i of the source to seed i of the target when
    both are seeded; each seed against the one model when only one end is)."""
    groups = seed_groups(resolved)
    expanded = []
    for pair, ends in pairs.items():
        key = f"depth_use.linear_maps.pairs.{pair}"
        by_seed = {}
        for end in ("source", "target"):
            name = ends[end]
            if name in resolved.models:
                by_seed[end] = {None: name}
            elif name in groups:
                by_seed[end] = {resolved.models[m]["seed"]: m for m in groups[name]}
            else:
                raise undeclared_model(resolved, f"{key}.{end}", name)
        seeded = [by_seed[end] for end in ("source", "target") if None not in by_seed[end]]
        if not seeded:
            expanded.append((key, pair, dict(ends)))
            continue
        if len(seeded) == 2 and set(seeded[0]) != set(seeded[1]):
            raise ConfigError(
                f"{key}: '{ends['source']}' and '{ends['target']}' are trained "
                f"with different seeds ({sorted(seeded[0])} vs {sorted(seeded[1])})"
            )
        for seed in seeded[0]:
            name = seed_model_name(pair, seed)
            check_name(name, f"{key} (expanded pair name)")
            if name in pairs:
                raise ConfigError(f"{key}: expanded pair name '{name}' is already a pair")
            expanded.append(
                (
                    key,
                    name,
                    {
                        end: by_seed[end].get(seed, by_seed[end].get(None))
                        for end in ("source", "target")
                    },
                )
            )
    return expanded


def check_same_tokens(resolved: Resolved, source: str, target: str, key: str) -> None:
    """Two models of a linear map must read the same token ids."""
    folders = {name: data_folder(resolved, name) for name in (source, target)}
    if all(folders.values()):
        if folders[source] != folders[target]:
            raise ConfigError(
                f"{key}: '{source}' and '{target}' are trained on different data "
                f"folders ({folders[source]}, {folders[target]}), so their tokens "
                f"differ"
            )
        return
    if any(folders.values()):
        raise ConfigError(
            f"{key}: '{source}' and '{target}' do not share a tokenizer (one is "
            f"trained here on the run's BPE, the other is a declared checkpoint)"
        )
    from depthlab.settings.depth_use import check_same_tokenizer

    locations = [declared_checkpoint_folder(resolved, n) for n in (source, target)]
    if all(locations):
        library_check(check_same_tokenizer, *locations, where=key)
