"""The tuned lens and the layer swaps (`lens_swaps`): one job per model, its lens trained on the
train split of the data it reads, evaluated with its swaps on analysis text sets; and one
`plot_lens_swaps` job per model that draws its figure from those tables (a redraw trains no
lens)."""

from __future__ import annotations

from pathlib import Path

from depthlab.config.models import (
    ModelOverrides,
    data_folder,
    declared_models,
    has_lm_head,
    model_location,
    reads_special_tokens,
)
from depthlab.config.resolved import Resolved
from depthlab.config.stages.analysis import text_set_texts
from depthlab.core.errors import ConfigError

LENS_SWAPS_KEYS = ("text_sets", "max_samples", "max_length", "batch_size", "stride", "tuned_lens")


def resolve_lens_swaps(resolved: Resolved, base_dir: Path) -> None:
    section = resolved.config.get("lens_swaps")
    if not section:
        return
    analysis = resolved.config.get("analysis") or {}
    if not analysis:
        raise ConfigError(
            "lens_swaps: it is evaluated on analysis text sets, but analysis is off; switch "
            "lens_swaps off too (lens_swaps: null)"
        )
    known = analysis.get("text_sets") or {}
    names = declared_models(resolved, section["models"], "lens_swaps.models")
    overrides = ModelOverrides(
        resolved, "lens_swaps", section.get("per_model") or {}, names, "lens_swaps.models"
    )
    fmt = resolved.config["figures"]["format"]
    for name in names:
        if not has_lm_head(resolved, name):
            raise ConfigError(
                f"lens_swaps.models: '{name}' has no LM head (a lens reads the model's own "
                f"head; swaps are scored by its next-token loss)"
            )
        model = resolved.models[name]
        chosen = {**section, **overrides.of(name)}
        if "tuned_lens" in overrides.of(name):  # a partial override keeps the other defaults
            chosen["tuned_lens"] = {**section["tuned_lens"], **overrides.of(name)["tuned_lens"]}
        lens = chosen["tuned_lens"]
        if lens["batch_tokens"] > lens["train_tokens"]:
            raise ConfigError(
                f"{overrides.key(name, 'tuned_lens', 'batch_tokens')}: {lens['batch_tokens']} "
                f"tokens per step exceed the {lens['train_tokens']} train tokens "
                f"({overrides.key(name, 'tuned_lens', 'train_tokens')})"
            )
        text_sets = {}
        for text_set in chosen["text_sets"]:
            if text_set not in known:
                raise ConfigError(
                    f"{overrides.key(name, 'text_sets')}: '{text_set}' is not a text set of "
                    f"analysis.text_sets"
                )
            text_sets[text_set] = text_set_texts(
                resolved, text_set, base_dir, "lens_swaps.text_sets", model=name
            )
        fields = {known[t].get("text_field", analysis["text_field"]) for t in text_sets}
        if len(fields) > 1:
            raise ConfigError(
                f"{overrides.key(name, 'text_sets')}: the text sets read different text fields "
                f"({', '.join(sorted(fields))}); list text sets of one field"
            )
        train_data = data_folder(resolved, name) or resolved.paths.data
        out = resolved.paths.lens_swaps(name)
        figure = resolved.paths.figure(f"lens_swaps/{name}", fmt)
        resolved.add(
            "lens_swaps",
            name,
            {
                "model_name": name,
                "model_path": model_location(resolved, name),
                "dtype": model.get("dtype", "float32"),
                "revision": model.get("revision"),
                "train_data": train_data,
                "text_sets": text_sets,
                "text_field": fields.pop(),
                **{k: chosen[k] for k in LENS_SWAPS_KEYS if k not in ("text_sets", "tuned_lens")},
                "tuned_lens": dict(lens),
                "add_special_tokens": reads_special_tokens(model),
                "seed": model.get("seed", resolved.config["seed"]),
                "device": section["device"],
                "out": out,
            },
            outputs=[out],
            wildcards={"model": name},
            inputs={
                "model": resolved.model_inputs(name),
                "data": [train_data],
                "texts": sorted({t["input"] for t in text_sets.values() if t["input"]}),
            },
        )
        resolved.add(
            "plot_lens_swaps",
            name,
            {
                "model_name": name,
                "lens_swaps": out,
                "text_sets": list(text_sets),
                "figure": figure,
            },
            outputs=[figure],
            wildcards={"model": name},
            inputs={"lens_swaps": [out]},
        )
