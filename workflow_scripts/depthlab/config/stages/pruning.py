"""Layer pruning: the LM task set, one prune_model job per model (the measurements), the choices
made on them (choose_depth: auto depth; export_pruned: its chosen models), and the figures."""

from __future__ import annotations

from pathlib import Path

from depthlab.config.load import merge
from depthlab.config.models import (
    ModelOverrides,
    check_positions,
    corpus_models,
    declared_models,
    has_lm_head,
    model_layers,
    model_location,
)
from depthlab.config.resolved import Resolved, library_check, named_model, require_resources
from depthlab.config.stages.pretrain import tracking_settings
from depthlab.core.errors import ConfigError
from depthlab.settings.pruning import retokenize_caps

PRUNING_FIGURES = ("delta_p", "sweep", "speedup")


# What prune_model measures with; the choices made afterwards (auto_depth, export and
# lm_eval.metric, the metric auto depth reads) are not in its spec, so changing one reruns only
# the cheap jobs that make them.
PRUNING_SETTINGS = (
    "strategies",
    "n_grid",
    "val",
    "lm_eval",
    "healing",
    "speed",
    "device",
    "dtype",
)


def resolve_pruning(resolved: Resolved, base_dir: Path) -> None:
    pruning = resolved.config.get("pruning")
    if not pruning:
        return
    _check_pruning_section(resolved.config, pruning)
    names = declared_models(resolved, pruning["models"], "pruning.models")
    if names and not resolved.config.get("analysis"):  # its block choice reads the analysis
        raise ConfigError(
            "pruning: the angular block choice reads the analysis of each pruned model, but "
            "analysis is off; switch pruning off too (pruning: null)"
        )
    _add_lm_tasks(resolved, pruning["tasks"])
    shared = _shared_settings(pruning)
    overrides = ModelOverrides(
        resolved, "pruning", pruning.get("per_model") or {}, names, "pruning.models"
    )
    for index, name in enumerate(names):
        key = f"pruning.models[{index}]"
        settings = _model_settings(shared, overrides.of(name))
        _check_pruned_model(resolved, name, key, settings, overrides)
        _add_model_jobs(resolved, name, settings, base_dir)
    _add_pruning_figures(resolved, names)


def _check_pruning_section(config: dict, pruning: dict) -> None:
    """The checks of the section as a whole: its resources, task set and auto-depth choice."""
    from depthlab.settings.lm_tasks import validate_task_names, validate_task_settings
    from depthlab.settings.pruning import validate_auto_depth_settings

    require_resources(config, "pruning")
    tasks = pruning["tasks"]
    library_check(validate_task_settings, tasks, "pruning.tasks")
    lm_eval = pruning["lm_eval"]
    if lm_eval["enabled"]:
        library_check(
            validate_task_names, lm_eval["tasks"], tasks["kinds"], "pruning.lm_eval.tasks"
        )
    library_check(validate_auto_depth_settings, pruning, "pruning")


def _add_lm_tasks(resolved: Resolved, tasks: dict) -> None:
    """build_lm_tasks: the LM task set every pruned model is scored on."""
    paths = resolved.paths
    resolved.add(
        "build_lm_tasks",
        "tasks",
        {
            "data": paths.data,
            "tokenizer": f"{paths.data}/tokenizer",
            "out": paths.lm_tasks,
            **{
                key: tasks[key]
                for key in ("kinds", "examples", "words", "context_tokens", "max_per_document")
            },
            "seed": resolved.config["seed"],
        },
        outputs=[paths.lm_tasks],
    )


def _shared_settings(pruning: dict) -> dict:
    """The measurement settings every prune_model job starts from (before per_model)."""
    lm_eval = pruning["lm_eval"]
    shared = {key: pruning[key] for key in PRUNING_SETTINGS}
    shared["lm_eval"] = {k: v for k, v in lm_eval.items() if k != "metric"}
    # optional: omitted means null (config/schema.yaml), no greedy cap; val.loss_tokens likewise
    # (every position scored). Passed only when given, so a config without them keeps its specs.
    if "greedy_max_n" in pruning:
        shared["greedy_max_n"] = pruning["greedy_max_n"]
    # pruning.calibration likewise: only the criteria that rank on it need it
    if "calibration" in pruning:
        shared["calibration"] = pruning["calibration"]
    if "sublayer" in pruning:  # optional like greedy_max_n: absent, no sub-layer search
        shared["sublayer"] = pruning["sublayer"]
    shared["retokenize"] = retokenize_caps(pruning.get("retokenize"))
    return shared


def _model_settings(shared: dict, override: dict) -> dict:
    """One model's settings: the shared ones with its per_model override; lm-eval's `inherit`
    grid becomes the model's own n_grid (the job gets the grid itself; null: every n)."""
    settings = merge(shared, override)
    if settings["lm_eval"]["n_grid"] == "inherit":
        settings["lm_eval"] = {**settings["lm_eval"], "n_grid": settings["n_grid"]}
    return settings


def _check_pruned_model(
    resolved: Resolved, name: str, key: str, settings: dict, overrides: ModelOverrides
) -> None:
    """One pruned model's checks: an LM head, the run's corpus, positions for every sequence
    its measurements score, the grids against its depth and the analysis the angular choice
    reads."""
    from depthlab.settings.pruning import check_loss_tokens, validate_pruning_settings
    from depthlab.settings.training import validate_healing_settings

    if not has_lm_head(resolved, name):
        raise ConfigError(
            f"{key}: model '{name}' has no LM head (a bare encoder); layer "
            f"removal is scored by validation loss and lm-eval, which need one"
        )
    if name not in corpus_models(resolved):
        raise ConfigError(
            f"{key}: model '{name}' is not trained on the run's corpus, which "
            f"the validation loss and tasks are built from"
        )
    model = resolved.models[name]
    if model["kind"] == "pretrain":
        _check_task_length(resolved.config["pruning"]["tasks"], model, name)
    check_positions(
        resolved, name, settings["val"]["seq_len"], overrides.key(name, "val", "seq_len")
    )
    library_check(
        check_loss_tokens,
        settings["val"],
        overrides.key(name, "val", "loss_tokens"),
        overrides.key(name, "val", "seq_len"),
        model=name,
    )
    if "calibration" in settings:
        check_positions(
            resolved,
            name,
            settings["calibration"].get("seq_len", 0),  # absent: named by the settings check
            overrides.key(name, "calibration", "seq_len"),
        )
    if settings["healing"]["enabled"]:
        check_positions(
            resolved,
            name,
            settings["healing"].get("seq_len", 0),
            overrides.key(name, "healing", "seq_len"),
        )
    if settings["speed"]["enabled"]:
        speed = settings["speed"]
        check_positions(
            resolved,
            name,
            speed.get("prompt_length", 0) + speed.get("new_tokens", 0),
            overrides.key(name, "speed", "new_tokens"),
        )
    layers = model_layers(resolved, name, key)
    if layers is not None:
        try:
            validate_pruning_settings(settings, layers, "pruning")
            if settings["healing"]["enabled"]:
                validate_healing_settings(settings["healing"], "pruning.healing")
        except ValueError as error:
            raise ConfigError(
                named_model(_overridden_key(str(error), name, overrides), name)
            ) from None
    text_set = resolved.config["pruning"]["text_set"]
    if f"{text_set}/{name}" not in resolved.jobs("analyse_model"):
        raise ConfigError(
            f"{key}: the angular block choice needs the analysis of '{name}' "
            f"on text set '{text_set}' (pruning.text_set); add it to "
            f"analysis.models / analysis.text_sets"
        )


def _overridden_key(message: str, name: str, overrides: ModelOverrides) -> str:
    """A check's message that starts with a `pruning.<path>` key, naming instead the model's
    per_model override where one sets that path (the key the user would edit)."""
    key, colon, _ = message.partition(":")
    if not colon or not key.startswith("pruning."):
        return message
    path = [part.split("[", 1)[0] for part in key.removeprefix("pruning.").split(".")]
    if ".per_model." not in overrides.key(name, *path):
        return message
    return f"pruning.per_model.{overrides.group(name)}." + message.removeprefix("pruning.")


def _check_task_length(tasks: dict, model: dict, name: str) -> None:
    """A model trained here must hold the longest task: its context plus the widest choice."""
    from depthlab.settings.lm_tasks import MAX_TOKENS_PER_WORD

    widest = max(tasks["kinds"], key=lambda kind: tasks["words"].get(kind, 1))
    words = tasks["words"].get(widest, 1)
    longest = tasks["context_tokens"] + MAX_TOKENS_PER_WORD * words
    if longest > model["train"]["seq_len"]:
        raise ConfigError(
            f"pruning.tasks.context_tokens: {tasks['context_tokens']} context tokens plus "
            f"a choice of up to {longest - tasks['context_tokens']} tokens exceed the "
            f"{model['train']['seq_len']} positions '{name}' was trained on (the "
            f"choice: pruning.tasks.words.{widest}, {words} words)"
        )


def _add_model_jobs(resolved: Resolved, name: str, settings: dict, base_dir: Path) -> None:
    """One model's jobs: prune_model (the measurements), heal_pruned per healed variant,
    evaluate_pruned per removal set (lm_eval.per_set_jobs), gather_pruning (the tables),
    choose_depth and, when the config exports, export_pruned."""
    measured = _add_prune_model(resolved, name, settings)
    layers = _known_layers(resolved, name, settings, base_dir)
    heals = _add_heal_jobs(resolved, name, settings, measured, layers)
    evaluations = _add_evaluation_jobs(resolved, name, settings, measured, layers)
    out = _add_gather_job(resolved, name, measured, heals, evaluations)
    _add_choice_jobs(resolved, name, settings, out)


# prune_model's lm-eval keys a per-variant job reads (its grids choose which jobs exist)
VARIANT_LM_EVAL_KEYS = ("enabled", "tasks", "batch_size", "bootstrap_iters", "harness_tasks")


def _model_spec(resolved: Resolved, name: str, settings: dict) -> dict:
    """The keys every pruning job of one model shares: the model, the run's data and tasks."""
    model = resolved.models[name]
    spec = {
        "model_name": name,
        "model_kind": model["kind"],
        "model": model_location(resolved, name),
        "revision": model.get("revision"),
        "data": resolved.paths.data,
        "tasks": resolved.paths.lm_tasks,
        "seed": resolved.config["seed"],
        "device": settings["device"],
        "dtype": model.get("dtype", settings["dtype"]),
    }
    if model["kind"] != "pretrain":
        # a model pretrained here reads the run's own ids: the caps cannot change its jobs
        spec["retokenize"] = settings["retokenize"]
    return spec


def _model_inputs(resolved: Resolved, name: str, **more) -> dict:
    paths = resolved.paths
    return {
        "model": resolved.model_inputs(name),
        "data": [paths.data],
        "tasks": [paths.lm_tasks],
        **{key: [value] for key, value in more.items()},
    }


def _add_prune_model(resolved: Resolved, name: str, settings: dict) -> str:
    """prune_model: the measurements (the loss sweep, block choice, Block Influence, lm-eval
    unless per set, speed); returns its folder. Healing is not in its spec: a healing setting
    reruns the heal jobs only."""
    paths, config = resolved.paths, resolved.config
    text_set = config["pruning"]["text_set"]
    out = paths.pruning_measured(name)
    measuring = {k: v for k, v in settings.items() if k not in ("healing", "retokenize")}
    resolved.add(
        "prune_model",
        name,
        {
            **_model_spec(resolved, name, settings),
            "analysis": paths.analysis(text_set, name),
            "datasets_cache": paths.datasets_cache(name),
            "out": out,
            **measuring,
        },
        outputs=[out, paths.datasets_cache(name)],
        inputs=_model_inputs(resolved, name, analysis=paths.analysis(text_set, name)),
    )
    return out


def _known_layers(resolved: Resolved, name: str, settings: dict, base_dir: Path) -> int | None:
    """The model's depth at config time (its architecture, checkpoint, GGUF header or the hub
    table), needed to name the per-variant jobs of a grid given as null (every n)."""
    layers = model_layers(resolved, name, f"models.{name}")
    if layers is None:
        from depthlab.config.shapes import model_shape

        shape = model_shape(resolved, name, base_dir)
        layers = shape.num_layers if shape is not None else None
    return layers


def _job_grid(n_grid, layers: int | None, key: str) -> list[int]:
    from depthlab.settings.pruning import grid

    if n_grid is None and layers is None:
        raise ConfigError(
            f"{key}: null (every n) needs the model's depth, which is not known before its "
            f"download; give a list of block sizes"
        )
    return grid(n_grid, layers or max(n_grid) + 1, key)


def _measured_grid(settings: dict, layers: int | None) -> list[int] | None:
    """pruning.n_grid's block sizes (None: every n of a model whose depth is not known yet)."""
    if settings["n_grid"] is None and layers is None:
        return None
    return _job_grid(settings["n_grid"], layers, "pruning.n_grid")


def _has_set(
    strategy: str, n: int, settings: dict, n_values: list[int] | None, layers: int | None = None
) -> bool:
    """Whether prune_model measures a (strategy, n) set: n of its grid (None: every n), greedy
    up to its cap, a criterion up to the n it has a set for in a model of `layers` layers
    (strategy_max_n; a depth not known yet: assumed to exist, the job names a missing set)."""
    from depthlab.settings.pruning import strategy_max_n

    if strategy not in settings["strategies"] or (n_values is not None and n not in n_values):
        return False
    if layers is not None and n > strategy_max_n(strategy, layers):
        return False
    cap = settings.get("greedy_max_n") or (max(n_values) if n_values else n)
    return strategy != "greedy" or n <= cap


def _add_heal_jobs(
    resolved: Resolved, name: str, settings: dict, measured: str, layers: int | None
) -> list[str]:
    """heal_pruned: one job per healing method and healed (strategy, n); returns their folders
    in row order (the first method's jobs, named `<strategy>_n<n>`, then each further method's,
    `<strategy>_n<n>_<method>`)."""
    from depthlab.settings.training import healing_methods, method_settings

    healing = settings["healing"]
    if not healing["enabled"]:
        return []
    paths = resolved.paths
    n_values = _measured_grid(settings, layers)
    heal_n = _job_grid(healing.get("n_grid"), layers, "pruning.healing.n_grid")
    methods = healing_methods(healing)
    folders = []
    for method in methods:
        suffix = "" if method == methods[0] else f"_{method}"
        for strategy in healing.get("strategies") or settings["strategies"]:
            for n in heal_n:
                if not _has_set(strategy, n, settings, n_values, layers):
                    continue
                variant = f"{strategy}_n{n}{suffix}"
                folders.append(
                    _add_variant_job(
                        resolved, "heal_pruned", name, variant, settings, measured,
                        paths.pruning_heal(name, variant),
                        {
                            "strategy": strategy,
                            "n": n,
                            "val": settings["val"],
                            "healing": method_settings(healing, method),
                            "tracking": tracking_settings(resolved.config),
                        },
                    )
                )  # fmt: skip
    return folders


def _variant_lm_eval(settings: dict) -> dict:
    lm_eval = settings["lm_eval"]
    return {k: lm_eval[k] for k in VARIANT_LM_EVAL_KEYS if k in lm_eval}


def _add_evaluation_jobs(
    resolved: Resolved, name: str, settings: dict, measured: str, layers: int | None
) -> list[str]:
    """evaluate_pruned: with lm_eval.per_set_jobs, one job per removal set lm-eval scores (the
    full model, each (strategy, n) of lm_eval.n_grid, each single layer); their folders."""
    lm_eval = settings["lm_eval"]
    if not (lm_eval["enabled"] and lm_eval.get("per_set_jobs")):
        return []
    paths = resolved.paths
    n_values = _measured_grid(settings, layers)
    task_n = (
        _job_grid(settings["n_grid"], layers, "pruning.lm_eval.n_grid")
        if lm_eval["n_grid"] is None
        else _job_grid(lm_eval["n_grid"], layers, "pruning.lm_eval.n_grid")
    )
    variants = ["full"] + [
        f"{strategy}_n{n}"
        for strategy in settings["strategies"]
        for n in task_n
        if _has_set(strategy, n, settings, n_values, layers)
    ]
    if lm_eval["single_layer"]:
        if layers is None:
            raise ConfigError(
                f"pruning.lm_eval.single_layer: per-set lm-eval jobs of '{name}' need its depth, "
                f"which is not known before its download"
            )
        variants += [f"single{layer}" for layer in range(layers)]
    return [
        _add_variant_job(
            resolved, "evaluate_pruned", name, variant, settings, measured,
            paths.pruning_evaluation(name, variant), {"variant": variant},
        )
        for variant in variants
    ]  # fmt: skip


def _add_variant_job(
    resolved: Resolved,
    family: str,
    name: str,
    variant: str,
    settings: dict,
    measured: str,
    out: str,
    keys: dict,
) -> str:
    """One per-variant job of a model (heal_pruned, evaluate_pruned): the model's shared keys,
    prune_model's folder, the lm-eval settings the job reads, a datasets cache of its own (jobs
    side by side must not share one) and its `keys`; returns its folder."""
    cache = resolved.paths.datasets_cache(f"{name}.{variant}")
    resolved.add(
        family,
        f"{name}/{variant}",
        {
            **_model_spec(resolved, name, settings),
            "datasets_cache": cache,
            "measured": measured,
            "out": out,
            "lm_eval": _variant_lm_eval(settings),
            **keys,
        },
        outputs=[out, cache],
        wildcards={"model": name, "variant": variant},
        inputs=_model_inputs(resolved, name, measured=measured),
    )
    return out


def _add_gather_job(
    resolved: Resolved, name: str, measured: str, heals: list[str], evaluations: list[str]
) -> str:
    """gather_pruning: the stage's tables of one model from its jobs' parts; returns its folder."""
    out = resolved.paths.pruning(name)
    resolved.add(
        "gather_pruning",
        name,
        {
            "model_name": name,
            "measured": measured,
            "heals": heals,
            "evaluations": evaluations,
            "seed": resolved.config["seed"],
            "out": out,
        },
        outputs=[out],
        inputs={"measured": [measured], "heals": heals, "evaluations": evaluations},
    )
    return out


def _add_choice_jobs(resolved: Resolved, name: str, settings: dict, out: str) -> None:
    """choose_depth (auto depth) and, when the config exports, export_pruned: the choices made
    on the measurements in `out`."""
    paths, pruning = resolved.paths, resolved.config["pruning"]
    model = resolved.models[name]
    resolved.add(
        "choose_depth",
        name,
        {
            "model_name": name,
            "pruning": out,
            "auto_depth": pruning["auto_depth"],
            "metric": pruning["lm_eval"]["metric"],
            "out": paths.auto_depth(name),
        },
        outputs=[paths.auto_depth(name)],
        inputs={"pruning": [out]},
    )
    if pruning["export"]:
        resolved.add(
            "export_pruned",
            name,
            {
                "model_name": name,
                "model": model_location(resolved, name),
                "revision": model.get("revision"),
                "dtype": model.get("dtype", settings["dtype"]),
                "pruning": out,
                "auto_depth": paths.auto_depth(name),
                "export": pruning["export"],
                "out": paths.pruned_models(name),
            },
            outputs=[paths.pruned_models(name)],
            inputs={
                "model": resolved.model_inputs(name),
                "pruning": [out],
                "auto_depth": [paths.auto_depth(name)],
            },
        )


def _add_pruning_figures(resolved: Resolved, names: list) -> None:
    """plot_pruning: the figures over every pruned model."""
    paths, config = resolved.paths, resolved.config
    fmt = config["figures"]["format"]
    figures = {figure: paths.figure(f"pruning/{figure}", fmt) for figure in PRUNING_FIGURES}
    resolved.add(
        "plot_pruning",
        "pruning",
        {
            "prunings": {name: paths.pruning(name) for name in names},
            "labels": {name: _seeded_label(resolved.models[name], name) for name in names},
            "metric": config["pruning"]["lm_eval"]["metric"],
            "chance": 0.25,
            "run_name": config["run_name"],
            "figures": figures,
        },
        outputs=list(figures.values()),
    )


def _seeded_label(model: dict, name: str) -> str:
    """A model's legend label: its norm scheme (name for hf models), plus its seed if seeded."""
    label = model.get("norm_scheme", name)
    return f"{label} s{model['seed']}" if "seed_group" in model else label
