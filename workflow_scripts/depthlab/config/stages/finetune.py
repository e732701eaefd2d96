"""Supervised fine-tuning (Curse of Depth Sec. 5): the data job, one finetune_model job per parent
and fine-tuning seed, one evaluate_finetuned job per parent (the parent and its fine-tuned models
on the same tasks), and the before / after figure."""

from __future__ import annotations

from depthlab.config.models import check_positions, declared_models, has_lm_head, model_location
from depthlab.config.resolved import Resolved, library_check, require_resources
from depthlab.config.stages.pretrain import tracking_settings
from depthlab.core.errors import ConfigError

FINETUNE_SETTINGS_KEYS = (
    "method",
    "steps",
    "batch_size",
    "seq_len",
    "lr",
    "min_lr_ratio",
    "warmup_steps",
    "weight_decay",
    "beta1",
    "beta2",
    "grad_clip",
    "eval_every",
    "log_every",
    "checkpoint_every",
    "precision",
    "train_on_prompt",
)


def finetune_root(resolved: Resolved) -> str:
    return f"{resolved.paths.root}/finetune"


def finetune_data_dir(resolved: Resolved) -> str:
    return f"{finetune_root(resolved)}/data"


def finetuned_model_dir(resolved: Resolved, name: str) -> str:
    return f"{resolved.paths.root}/finetuned/{name}"


def finetune_state_dir(resolved: Resolved, name: str) -> str:
    return f"{finetune_root(resolved)}/train_state/{name}"


def finetune_eval_dir(resolved: Resolved, parent: str) -> str:
    return f"{finetune_root(resolved)}/eval/{parent}"


def finetuned_name(parent: str, seed: int) -> str:
    return f"{parent}_ft_s{seed}"


def resolve_finetune(resolved: Resolved) -> None:
    settings = resolved.config.get("finetune")
    if not settings or not settings["models"]:
        return
    require_resources(resolved.config, "finetune")
    train = settings["train"]
    if train["method"] == "lora" and not settings.get("lora"):
        raise ConfigError("finetune.lora: required with finetune.train.method lora")
    tasks_dir = _check_finetune_data(resolved, settings)
    names = _finetuned_parents(resolved, settings)
    data_dir = _add_finetune_data(resolved, settings["data"])
    train_spec = {key: train[key] for key in FINETUNE_SETTINGS_KEYS}
    train_spec["lora"] = settings.get("lora") if train["method"] == "lora" else None
    progress_every = tracking_settings(resolved.config)["progress_every"]
    labels = {}
    for parent in names:
        labels[parent] = resolved.models[parent].get("norm_scheme", parent)
        finetuned = _add_finetuned_models(resolved, parent, train_spec, progress_every, data_dir)
        _add_evaluation(resolved, parent, finetuned, tasks_dir, data_dir)
    _add_finetune_figure(resolved, names, labels)


def _check_finetune_data(resolved: Resolved, settings: dict) -> str | None:
    """The data source's checks; returns the offline task folder the evaluation reads (None for
    a hf_dataset source, which builds none)."""
    data, lm_eval = settings["data"], settings["lm_eval"]
    if data["source"] == "tasks":
        _check_task_data(data["tasks"], lm_eval, settings["train"])
        return finetune_data_dir(resolved)
    if not lm_eval["harness_tasks"]:
        raise ConfigError(
            "finetune.lm_eval.harness_tasks: name lm-eval tasks to score on (a hf_dataset source "
            "builds no offline tasks)"
        )
    return None


def _check_task_data(tasks: dict, lm_eval: dict, train: dict) -> None:
    """The task source's settings, its task names and its longest task against train.seq_len."""
    from depthlab.settings.lm_tasks import (
        MAX_TOKENS_PER_WORD,
        validate_task_names,
        validate_task_settings,
    )

    # the schema checks the values of train_examples / eval_examples, here one per kind
    # (validate_task_settings would name its own `examples` key); the rest as
    # build_lm_tasks does
    for field in ("train_examples", "eval_examples"):
        for kind in tasks["kinds"]:
            if kind not in tasks[field]:
                raise ConfigError(
                    f"finetune.data.tasks.{field}.{kind}: required for each task of "
                    f"finetune.data.tasks.kinds"
                )
    library_check(
        validate_task_settings,
        {**tasks, "examples": tasks["train_examples"]},
        "finetune.data.tasks",
    )
    library_check(validate_task_names, lm_eval["tasks"], tasks["kinds"], "finetune.lm_eval.tasks")
    widest = max(tasks["kinds"], key=lambda kind: tasks["words"][kind])
    longest = tasks["context_tokens"] + MAX_TOKENS_PER_WORD * tasks["words"][widest]
    if longest > train["seq_len"]:
        raise ConfigError(
            f"finetune.train.seq_len: {train['seq_len']} tokens cannot hold "
            f"finetune.data.tasks.context_tokens {tasks['context_tokens']} plus a choice of up "
            f"to {longest - tasks['context_tokens']} tokens (the choice: "
            f"finetune.data.tasks.words.{widest}, {tasks['words'][widest]} words)"
        )


def _finetuned_parents(resolved: Resolved, settings: dict) -> list:
    """The declared parents, each a causal LM that holds train.seq_len positions."""
    names = declared_models(resolved, settings["models"], "finetune.models")
    for index, name in enumerate(names):
        if not has_lm_head(resolved, name):
            raise ConfigError(
                f"finetune.models[{index}]: model '{name}' has no LM head (a bare encoder); "
                f"supervised fine-tuning trains and scores a causal LM"
            )
        check_positions(resolved, name, settings["train"]["seq_len"], "finetune.train.seq_len")
    return names


def _add_finetune_data(resolved: Resolved, data: dict) -> str:
    """build_finetune_data; returns its folder."""
    paths = resolved.paths
    data_dir = finetune_data_dir(resolved)
    resolved.add(
        "build_finetune_data",
        "data",
        {
            "source": data["source"],
            "data": paths.data,
            "tasks": data.get("tasks") if data["source"] == "tasks" else None,
            "hf_dataset": data.get("hf_dataset") if data["source"] == "hf_dataset" else None,
            "seed": resolved.config["seed"],
            "out": data_dir,
        },
        outputs=[data_dir],
        inputs={"data": [paths.data] if data["source"] == "tasks" else []},
    )
    return data_dir


def _add_finetuned_models(
    resolved: Resolved, parent: str, train_spec: dict, progress_every: int, data_dir: str
) -> dict:
    """One finetune_model job per fine-tuning seed of `parent`; returns {name: {path, seed}}."""
    settings = resolved.config["finetune"]
    model = resolved.models[parent]
    finetuned = {}
    for seed in settings["seeds"]:
        name = finetuned_name(parent, seed)
        if name in resolved.models:
            raise ConfigError(
                f"finetune.models: fine-tuned model name '{name}' is also a declared model"
            )
        out = finetuned_model_dir(resolved, name)
        resolved.add(
            "finetune_model",
            name,
            {
                "model_name": name,
                "parent_name": parent,
                "parent": model_location(resolved, parent),
                "revision": model.get("revision"),
                "data": data_dir,
                "train": train_spec,
                "seed": seed,
                "device": settings["device"],
                "progress_every": progress_every,
                "out": out,
                "state_dir": finetune_state_dir(resolved, name),
            },
            outputs=[out, finetune_state_dir(resolved, name)],
            inputs={"parent": resolved.model_inputs(parent), "data": [data_dir]},
        )
        finetuned[name] = {"path": out, "seed": seed}
    return finetuned


def _add_evaluation(
    resolved: Resolved, parent: str, finetuned: dict, tasks_dir: str | None, data_dir: str
) -> None:
    """evaluate_finetuned: the parent and its fine-tuned models on the same tasks."""
    settings = resolved.config["finetune"]
    model = resolved.models[parent]
    out = finetune_eval_dir(resolved, parent)
    resolved.add(
        "evaluate_finetuned",
        parent,
        {
            "parent_name": parent,
            "parent": model_location(resolved, parent),
            "revision": model.get("revision"),
            "finetuned": finetuned,
            "tasks": tasks_dir,
            "lm_eval": settings["lm_eval"],
            "datasets_cache": f"{finetune_root(resolved)}/.datasets_cache/{parent}",
            "dtype": settings["dtype"],
            "device": settings["device"],
            "seed": resolved.config["seed"],
            "out": out,
        },
        outputs=[out],
        inputs={
            "parent": resolved.model_inputs(parent),
            "finetuned": [entry["path"] for entry in finetuned.values()],
            "data": [data_dir],
        },
    )


def _add_finetune_figure(resolved: Resolved, names: list, labels: dict) -> None:
    """plot_finetuning: every parent's scores before and after."""
    config = resolved.config
    figure = resolved.paths.figure("finetuning", config["figures"]["format"])
    resolved.add(
        "plot_finetuning",
        "finetuning",
        {
            "scores": [finetune_eval_dir(resolved, parent) for parent in names],
            "labels": labels,
            "run_name": config["run_name"],
            "out": figure,
        },
        outputs=[figure],
    )


def finetune_claim_inputs(resolved: Resolved) -> dict:
    """What the claims table reads of this stage: Pre-LN / LNS seed groups of fine-tuned parents
    with the same architecture and pretraining, paired as [base, members, treatment, members],
    and every parent's evaluate_finetuned folder."""
    from depthlab.config.models import seed_groups

    evaluated = resolved.jobs("evaluate_finetuned")
    if not evaluated:
        return {}
    models = resolved.models

    def groups_of(scheme):
        return [
            (group, members)
            for group, members in seed_groups(resolved).items()
            if members
            and all(
                m in evaluated
                and models[m]["kind"] == "pretrain"
                and models[m].get("norm_scheme") == scheme
                for m in members
            )
        ]

    pairs = [
        [base, base_members, treat, treat_members]
        for base, base_members in groups_of("pre_ln")
        for treat, treat_members in groups_of("lns")
        if len(base_members) == len(treat_members)
        and all(
            models[base_members[0]][key] == models[treat_members[0]][key]
            for key in ("architecture", "train")
        )
    ]
    return {
        "pairs": pairs,
        "scores": {parent: finetune_eval_dir(resolved, parent) for parent in evaluated},
    }
