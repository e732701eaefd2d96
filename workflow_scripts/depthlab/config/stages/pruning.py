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
from depthlab.config.resolved import Resolved, library_check, require_resources
from depthlab.config.stages.pretrain import tracking_settings
from depthlab.core.errors import ConfigError

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
# pruning.retokenize when the config omits it (config/schema.yaml states the same default)
RETOKENIZE_DEFAULT = {"val_tokens": 1_000_000, "train_tokens": 1_000_000}


def resolve_pruning(resolved: Resolved, base_dir: Path) -> None:
    pruning = resolved.config.get("pruning")
    if not pruning:
        return
    _check_pruning_section(resolved.config, pruning)
    names = declared_models(resolved, pruning["models"], "pruning.models")
    _add_lm_tasks(resolved, pruning["tasks"])
    shared = _shared_settings(pruning)
    overrides = ModelOverrides(
        resolved, "pruning", pruning.get("per_model") or {}, names, "pruning.models"
    )
    for index, name in enumerate(names):
        key = f"pruning.models[{index}]"
        settings = _model_settings(shared, overrides.of(name))
        _check_pruned_model(resolved, name, key, settings, overrides)
        _add_model_jobs(resolved, name, settings)
    _add_pruning_figures(resolved, names)


def _check_pruning_section(config: dict, pruning: dict) -> None:
    """The checks of the section as a whole: its resources, task set and auto-depth choice."""
    from depthlab.plan.stage_settings import validate_auto_depth_settings
    from depthlab.stages.pruning.lm_tasks import validate_task_names, validate_task_settings

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
    shared["retokenize"] = {**RETOKENIZE_DEFAULT, **(pruning.get("retokenize") or {})}
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
    from depthlab.plan.stage_settings import check_loss_tokens, validate_pruning_settings

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
        except ValueError as error:
            raise ConfigError(_overridden_key(str(error), name, overrides)) from None
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
    from depthlab.stages.pruning.lm_tasks import MAX_TOKENS_PER_WORD

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


def _add_model_jobs(resolved: Resolved, name: str, settings: dict) -> None:
    """One model's jobs: prune_model (the measurements), choose_depth and, when the config
    exports, export_pruned."""
    out = _add_prune_model(resolved, name, settings)
    _add_choice_jobs(resolved, name, settings, out)


def _add_prune_model(resolved: Resolved, name: str, settings: dict) -> str:
    """prune_model: the measurements; returns its folder."""
    paths, config = resolved.paths, resolved.config
    text_set = config["pruning"]["text_set"]
    model = resolved.models[name]
    out = paths.pruning(name)
    if model["kind"] == "pretrain":
        # it reads the run's own ids: the re-encoding caps cannot change its job
        settings = {k: v for k, v in settings.items() if k != "retokenize"}
    resolved.add(
        "prune_model",
        name,
        {
            "model_name": name,
            "model_kind": model["kind"],
            "model": model_location(resolved, name),
            "analysis": paths.analysis(text_set, name),
            "data": paths.data,
            "tasks": paths.lm_tasks,
            "datasets_cache": paths.datasets_cache(name),
            "out": out,
            "seed": config["seed"],
            **settings,
            "revision": model.get("revision"),
            "dtype": model.get("dtype", settings["dtype"]),
            # healing's curves; without healing the tracking settings cannot change the job
            **({"tracking": tracking_settings(config)} if settings["healing"]["enabled"] else {}),
        },
        outputs=[out, paths.datasets_cache(name)],
        inputs={
            "model": resolved.model_inputs(name),
            "analysis": [paths.analysis(text_set, name)],
            "data": [paths.data],
            "tasks": [paths.lm_tasks],
        },
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
