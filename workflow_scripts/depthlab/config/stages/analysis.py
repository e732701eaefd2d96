"""Analysis: one analyse_model job per text set and model, one figure job per text set; where a
text set's documents come from (shared with the depth-use stage)."""

from __future__ import annotations

from pathlib import Path

from depthlab.config.models import (
    ModelOverrides,
    data_folder,
    declared_models,
    figure_facts,
    local_file,
    model_location,
    reads_special_tokens,
)
from depthlab.config.resolved import Resolved
from depthlab.core.errors import ConfigError

ANALYSIS_TEXT_KEYS = (
    "text_field",
    "max_samples",
    "max_tokens",
    "max_length",
    "all_token_distance",
    "logit_lens",
    "batch_size",
)


ANALYSIS_FIGURES = ("angular_distance", "variance_growth", "contributions", "logit_lens", "angles")


def resolve_analysis(resolved: Resolved, base_dir: Path) -> None:
    analysis = resolved.config.get("analysis")
    if not analysis:
        return
    paths = resolved.paths
    default_names = declared_models(resolved, analysis["models"], "analysis.models")
    text_set_names = {
        text_set: declared_models(resolved, spec["models"], f"analysis.text_sets.{text_set}.models")
        if "models" in spec
        else default_names
        for text_set, spec in analysis["text_sets"].items()
    }
    overrides = ModelOverrides(
        resolved,
        "analysis",
        analysis.get("per_model") or {},
        [name for names in text_set_names.values() for name in names],
        "analysis.models or a text set's models",
    )
    fmt = resolved.config["figures"]["format"]
    for text_set, spec in analysis["text_sets"].items():
        names = text_set_names[text_set]
        texts = text_set_texts(resolved, text_set, base_dir, "analysis.text_sets")
        for name in names:
            # the stage's defaults, then the model's per_model, then the text set's own keys
            chosen = {**analysis, **overrides.of(name), **spec}
            settings = {k: chosen[k] for k in ANALYSIS_TEXT_KEYS}
            model = resolved.models[name]
            out = paths.analysis(text_set, name)
            resolved.add(
                "analyse_model",
                f"{text_set}/{name}",
                {
                    "model_name": name,
                    "model_path": model_location(resolved, name),
                    "dtype": model.get("dtype", "float32"),
                    "revision": model.get("revision"),
                    "text_set": text_set,
                    "texts": texts,
                    **settings,
                    "logit_lens_stride": chosen["logit_lens_stride"],
                    "add_special_tokens": reads_special_tokens(model),
                    "device": analysis["device"],
                    "out": out,
                },
                outputs=[out],
                wildcards={"text_set": text_set, "model": name},
                inputs={
                    "model": resolved.model_inputs(name),
                    "texts": [texts["input"]] if texts["input"] else [],
                },
            )
        if "shard" in spec:  # a replicate for the claims' intervals: the full set has figures
            continue
        figures = {
            figure: paths.figure(f"analysis/{text_set}/{figure}", fmt)
            for figure in ANALYSIS_FIGURES
        }
        resolved.add(
            "plot_analysis",
            text_set,
            {
                "analyses": [paths.analysis(text_set, name) for name in names],
                "out_dir": f"{paths.root}/figures/analysis/{text_set}",
                "format": fmt,
                "figures": figures,
                "facts": figure_facts(resolved, names),
            },
            outputs=list(figures.values()),
        )


def text_set_texts(
    resolved: Resolved, text_set: str, base_dir: Path, key: str, model: str | None = None
) -> dict:
    """Where a text set's documents come from: {source: jsonl, path, input} or {source:
    hf_dataset, name, config_name, split, input: None}. `val` is the held-out split of the data
    folder `model` trained on (the run's corpus for every other model)."""
    if (
        text_set == "val"
        and (resolved.config.get("analysis") or {})
        .get("text_sets", {})
        .get("val", {"source": "val"})["source"]
        == "val"
    ):
        folder = (data_folder(resolved, model) if model else None) or resolved.paths.data
        return {"source": "jsonl", "path": f"{folder}/val.jsonl", "input": folder}
    spec = ((resolved.config.get("analysis") or {}).get("text_sets") or {}).get(text_set)
    if spec is None:
        raise ConfigError(f"{key}: '{text_set}' is not a text set of analysis.text_sets")
    texts = _text_source(resolved, text_set, spec, base_dir)
    if "shard" in spec:  # joins the spec only when given: unsharded specs stay as they were
        shard = spec["shard"]
        if shard["index"] >= shard["count"]:
            raise ConfigError(
                f"analysis.text_sets.{text_set}.shard.index: {shard['index']} is not below "
                f"shard.count {shard['count']}"
            )
        texts["shard"] = [shard["index"], shard["count"]]
    return texts


def _text_source(resolved: Resolved, text_set: str, spec: dict, base_dir: Path) -> dict:
    if spec["source"] == "val":
        return {
            "source": "jsonl",
            "path": f"{resolved.paths.data}/val.jsonl",
            "input": resolved.paths.data,
        }
    if spec["source"] == "jsonl":
        local = local_file(spec["path"], base_dir, f"analysis.text_sets.{text_set}.path")
        return {"source": "jsonl", "path": local, "input": local}
    # a pinned revision joins the spec only when given: unpinned specs stay as they were
    pinned = {"revision": spec["revision"]} if spec.get("revision") else {}
    return {
        "source": "hf_dataset",
        "name": spec["name"],
        "config_name": spec.get("config_name"),
        "split": spec["split"],
        **pinned,
        "input": None,
    }
