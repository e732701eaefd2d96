"""Layer pruning: the LM task set, one prune_model job per model (the measurements), the choices
made on them (choose_depth: auto depth; export_pruned: its chosen models), and the figures."""

from __future__ import annotations

from pathlib import Path

from ...errors import ConfigError
from ..load import merge
from ..models import (
    ModelOverrides,
    check_positions,
    corpus_models,
    declared_models,
    has_lm_head,
    model_layers,
    model_location,
)
from ..resolved import Resolved, library_check, require_resources
from .pretrain import tracking_settings

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
    from ...lm_tasks import MAX_TOKENS_PER_WORD, validate_task_names, validate_task_settings
    from ...stage_settings import (
        check_loss_tokens,
        validate_auto_depth_settings,
        validate_pruning_settings,
    )

    paths, config = resolved.paths, resolved.config
    require_resources(config, "pruning")
    tasks = pruning["tasks"]
    library_check(validate_task_settings, tasks, "pruning.tasks")
    lm_eval = pruning["lm_eval"]
    if lm_eval["enabled"]:
        library_check(
            validate_task_names, lm_eval["tasks"], tasks["kinds"], "pruning.lm_eval.tasks"
        )
    library_check(validate_auto_depth_settings, pruning, "pruning")
    names = declared_models(resolved, pruning["models"], "pruning.models")
    text_set = pruning["text_set"]
    analysis_jobs = resolved.jobs("analyse_model")
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
            "seed": config["seed"],
        },
        outputs=[paths.lm_tasks],
    )
    shared = {key: pruning[key] for key in PRUNING_SETTINGS}
    shared["lm_eval"] = {k: v for k, v in lm_eval.items() if k != "metric"}
    # optional: omitted means null (config/schema.yaml), no greedy cap; val.loss_tokens likewise
    # (every position scored). Passed only when given, so a config without them keeps its specs.
    if "greedy_max_n" in pruning:
        shared["greedy_max_n"] = pruning["greedy_max_n"]
    shared["retokenize"] = {**RETOKENIZE_DEFAULT, **(pruning.get("retokenize") or {})}
    if lm_eval["n_grid"] == "inherit":  # the job gets the grid itself (null: every n)
        shared["lm_eval"]["n_grid"] = pruning["n_grid"]
    overrides = ModelOverrides(
        resolved, "pruning", pruning.get("per_model") or {}, names, "pruning.models"
    )
    for index, name in enumerate(names):
        key = f"pruning.models[{index}]"
        settings = merge(shared, overrides.of(name))
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
            library_check(validate_pruning_settings, settings, layers, "pruning")
        if f"{text_set}/{name}" not in analysis_jobs:
            raise ConfigError(
                f"{key}: the angular block choice needs the analysis of '{name}' "
                f"on text set '{text_set}' (pruning.text_set); add it to "
                f"analysis.models / analysis.text_sets"
            )
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
                **(
                    {"tracking": tracking_settings(config)}
                    if settings["healing"]["enabled"]
                    else {}
                ),
            },
            outputs=[out, paths.datasets_cache(name)],
            inputs={
                "model": resolved.model_inputs(name),
                "analysis": [paths.analysis(text_set, name)],
                "data": [paths.data],
                "tasks": [paths.lm_tasks],
            },
        )
        resolved.add(
            "choose_depth",
            name,
            {
                "model_name": name,
                "pruning": out,
                "auto_depth": pruning["auto_depth"],
                "metric": lm_eval["metric"],
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
    fmt = config["figures"]["format"]
    figures = {figure: paths.figure(f"pruning/{figure}", fmt) for figure in PRUNING_FIGURES}
    resolved.add(
        "plot_pruning",
        "pruning",
        {
            "prunings": {name: paths.pruning(name) for name in names},
            "labels": {name: _seeded_label(resolved.models[name], name) for name in names},
            "metric": lm_eval["metric"],
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
