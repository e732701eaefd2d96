"""Pretraining: one pretrain_model job per model trained here, and the loss-curve figure; one
convert_gguf job per kind: gguf model (its HF folder sits where a pretrained model's does)."""

from __future__ import annotations

from depthlab.config.load import REPO_ROOT
from depthlab.config.models import corpus_models, data_folder, figure_facts, gguf_sources
from depthlab.config.paths import RunPaths
from depthlab.config.resolved import Resolved, require_resources
from depthlab.settings.defaults import defaults


def tracking_settings(config: dict) -> dict:
    """The `tracking:` section with the schema's defaults (TensorBoard on, progress lines every
    ~5%, no W&B); a W&B run (offline unless `mode: online`) keeps its files in the run folder."""
    settings = {**defaults("tracking"), **(config.get("tracking") or {})}
    if settings["wandb"] is not None:
        settings["wandb"] = {
            **defaults("tracking", "wandb"),
            **settings["wandb"],
            "dir": RunPaths(config["run_name"]).root,
        }
    return settings


def resolve_convert_gguf(resolved: Resolved) -> None:
    """One convert_gguf job per kind: gguf model: its GGUF file (or chunks) -> an HF folder at
    results/<run>/models/<name>/, which later stages read like a local kind: hf model."""
    paths = resolved.paths
    for name, model in resolved.models.items():
        if model["kind"] != "gguf":
            continue
        require_resources(resolved.config, "convert")
        resolved.add(
            "convert_gguf",
            name,
            {
                "model_name": name,
                "files": model["files"],
                "sha256": model["sha256"].lower(),
                "out": paths.model(name),
            },
            outputs=[paths.model(name)],
            # local files are workflow inputs (a replaced file reruns the job); pkg: files are
            # not files of this workflow (as for kind: hf models)
            inputs={
                "gguf": [
                    local
                    for source, local in zip(
                        model["files"], gguf_sources(model, REPO_ROOT, f"models.{name}.files")
                    )
                    if not source.startswith("pkg:")
                ]
            },
        )


def resolve_pretrain(resolved: Resolved) -> None:
    resolve_convert_gguf(resolved)
    paths = resolved.paths
    for name, model in resolved.models.items():
        if model["kind"] != "pretrain":
            continue
        data = data_folder(resolved, name)
        resolved.add(
            "pretrain_model",
            name,
            {
                "model_name": name,
                "model": model,
                "data": data,
                "seed": model.get("seed", resolved.config["seed"]),
                "out": paths.model(name),
                "state_dir": paths.train_state(name),
                "processes": resolved.config["resources"]["pretrain"]["processes"],
                "tracking": tracking_settings(resolved.config),
            },
            outputs=[paths.model(name), paths.train_state(name)],
            inputs={"data": [data]},
        )
    pretrained = [
        name
        for name, m in resolved.models.items()
        if m["kind"] == "pretrain" and name in corpus_models(resolved)
    ]
    if pretrained:
        fmt = resolved.config["figures"]["format"]
        resolved.add(
            "plot_loss_curves",
            "loss_curves",
            {
                "models": [paths.model(name) for name in pretrained],
                "labels": {name: resolved.models[name]["norm_scheme"] for name in pretrained},
                "sweeps": {
                    name: resolved.models[name]["sweep"]
                    for name in pretrained
                    if "sweep" in resolved.models[name]
                },
                "facts": figure_facts(resolved, pretrained),
                "out": paths.figure("loss_curves", fmt),
            },
            outputs=[paths.figure("loss_curves", fmt)],
        )
