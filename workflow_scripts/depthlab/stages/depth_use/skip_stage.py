"""The skip-interventions stage (`skip_interventions` job): the layer-skip effect matrices of one
model over a text set (depthlab.stages.depth_use.interventions) and, with spec["problems"], its accuracy and depth
score per problem level (depthlab.stages.depth_use.problem_scoring), written into spec["out"]: effects.csv,
summary.json, with problems accuracy.csv, depth_score.csv, problem_effects.csv (and
completions.csv for boxed-graded problems), provenance.json. The spec keys and the outputs are
documented in workflow_scripts/skip_interventions.py.
"""

from __future__ import annotations

import time

from depthlab.core.errors import UserError
from depthlab.core.placement import spec_placement
from depthlab.stages.model_job import (
    clamp_max_length,
    context_length,
    load,
    log_stderr,
    provenance_inputs,
    text_batches,
)


def run(spec: dict, device: str = "cpu", log=log_stderr) -> dict:
    """Run one `skip_interventions` job on `device`; returns its summary (also in summary.json).
    log: notes, and the accuracy and depth-score tables of a problem set."""
    from depthlab.core.atomic_files import atomic_path, write_dataframe, write_json
    from depthlab.core.provenance import Provenance
    from depthlab.data.problem_sets import read_problems
    from depthlab.stages.depth_use.interventions import SkipSettings, skip_effects
    from depthlab.stages.depth_use.problem_scoring import depth_score_tables

    settings = SkipSettings.from_spec(spec, where="spec")
    inputs = provenance_inputs(
        spec["texts"], [spec["model_path"]], files=[spec["problems"]] if spec["problems"] else []
    )
    provenance = Provenance("depth_use.skip", config=spec, inputs=inputs, seed=spec["seed"])
    adapter, tokenizer = load(
        spec["model_path"], spec["revision"], spec["dtype"], device, **spec_placement(spec)
    )
    # facts of the loaded model: the resolver knows a hub model's layers and head only by name
    try:
        settings.skipped_layers(adapter.num_layers)
    except ValueError as error:
        raise UserError(f"spec.{error}") from None
    if spec["problems"] and not adapter.has_lm_head:
        raise UserError(
            f"spec.problems: {spec['model_name']} has no LM head, so it has no "
            f"output effect to score"
        )
    if spec["problems"] and spec["layers"] is not None:
        raise UserError("spec.layers: the depth score needs every layer (layers: null)")
    context = context_length(adapter, spec["max_length"])
    max_length = clamp_max_length(spec["max_length"], [adapter], log)

    clock = time.perf_counter()
    batches = text_batches(spec, tokenizer, max_length, max_samples=spec["max_samples"])
    effects = skip_effects(adapter, batches, settings)
    effect_seconds = time.perf_counter() - clock
    summary = {
        "model": spec["model_name"],
        "text_set": spec["text_set"],
        "prompts": effects.prompts,
        "rows": effects.rows,
        "max_length": max_length,
        "variants": effects.variants,
        "skipped_layers": effects.skipped_layers,
        "tokens_measured": {v: int(effects.counts[v].sum()) for v in effects.variants},
        "effect_seconds": round(effect_seconds, 3),
        "architecture": adapter.describe(),
        "notes": effects.notes,
    }

    tables = {}
    if spec["problems"]:
        clock = time.perf_counter()
        problems = read_problems(spec["problems"], "spec.problems")
        if spec.get("problem_families"):  # depth_use.depth_score.families
            problems = [p for p in problems if p["family"] in spec["problem_families"]]
        tables = depth_score_tables(
            adapter,
            tokenizer,
            problems,
            settings,
            spec["depth_score_variant"],
            batch_size=spec["batch_size"],
            max_length=context,
            prepend_bos=bool(spec["prepend_bos"]),
            bootstrap=spec["bootstrap"],
            seed=spec["seed"],
            log=lambda m: log(f"[{spec['model_name']}] {m}"),
        )
        summary.update(
            {
                "problems": len(problems),
                "depth_score_variant": spec["depth_score_variant"],
                "problem_seconds": round(time.perf_counter() - clock, 3),
                "accuracy": tables["accuracy"].to_dict(orient="records"),
                "depth_score": tables["depth_score"].to_dict(orient="records"),
            }
        )

    with atomic_path(spec["out"], is_dir=True) as out:
        write_dataframe(
            out / "effects.csv",
            effects.to_frame(model=spec["model_name"], text_set=spec["text_set"]),
        )
        for name, frame in tables.items():
            frame.insert(0, "model", spec["model_name"])
            write_dataframe(out / f"{name}.csv", frame)
        write_json(out / "summary.json", summary)
        provenance.extra["summary"] = {k: summary[k] for k in summary if k != "architecture"}
        provenance.write(out / "provenance.json")
    if "accuracy" in tables:
        log(tables["accuracy"].to_string(index=False))
        log(tables["depth_score"].to_string(index=False))
    return summary
