"""The cost of one measure_twin job (depthlab.stages.twins): the untrained twins of one shape,
one after another, each through its trained model's measures, each part costed as its stage's job
costs it (depthlab.plan.job_costs). Torch-free."""

from __future__ import annotations

from depthlab.plan.job_costs import (
    DTYPE_BYTES,
    LOSS_CHUNK,
    Phase,
    Shape,
    Work,
    _context,
    _inference_batch,
    _what,
    analysis_work,
    forward_flops,
    lens_swaps_work,
    skip_work,
)


def twin_work(name: str, spec: dict, shape: Shape) -> Work:
    """measure_twin: the untrained twin (float32, built here, nothing downloaded) through the
    trained model's measures: the analysis pass over its text set (all-token distance on), the
    full and each removal set's validation loss (the full model, each single layer, the angular
    and the deepest block at every n), the future-token skips and the tuned lens and swaps; each
    part costed as its stage's job costs it."""
    b = DTYPE_BYTES["float32"]
    parts = []
    if spec.get("analysis"):
        analysis = {**spec["analysis"], "dtype": "float32", "logit_lens": False,
                    "logit_lens_stride": 1, "all_token_distance": True}  # fmt: skip
        parts.append(analysis_work(name, analysis, shape, 0.0))
    if spec.get("lens_swaps"):
        parts.append(lens_swaps_work(name, {**spec["lens_swaps"], "dtype": "float32"}, shape, 0.0))
    if spec.get("skip"):
        skip = {**spec["skip"], "dtype": "float32", "variants": ["layer_future"], "problems": None}
        parts.append(skip_work(name, skip, shape, {}, 0.0))
    flops = sum(part.flops.get(("analysis", "float32"), 0.0) for part in parts)
    phases = [phase for part in parts for phase in part.phases]
    if spec.get("val"):
        val = spec["val"]
        seq = _context(val["seq_len"], shape)
        sets = 1 + (shape.num_layers + 2 * len(spec["n_values"]) if spec["removals"] else 0)
        flops += sets * val["windows"] * seq * forward_flops(shape, seq)
        rows = val["batch_size"] * seq
        phases.append(
            Phase(
                "validation losses",
                split={"weights": shape.parameters * b},
                fixed={"batch": _inference_batch(shape, rows, b), "loss logits": LOSS_CHUNK * 12},
            )
        )
    return Work(
        flops={("analysis", "float32"): flops},
        phases=phases or [Phase("build", split={"weights": shape.parameters * b}, fixed={})],
        weights=shape.parameters * b,
        weights_what=_what(name, shape, "float32"),
        host=shape.parameters * 4,  # built on the host in float32 first
        disk=0.0,
    )


def twins_work(names, specs: dict, shapes) -> Work:
    """measure_twin: the twins of one shape (`specs`: {model: its twin}), measured one after
    another in one process: their work adds up, the memory is the largest twin's."""
    works = [twin_work(name, specs[name], shape) for name, shape in zip(names, shapes)]
    flops: dict = {}
    for work in works:
        for key, value in work.flops.items():
            flops[key] = flops.get(key, 0.0) + value
    largest = max(works, key=lambda work: work.weights)
    return Work(
        flops=flops,
        phases=[phase for work in works for phase in work.phases],
        weights=largest.weights,
        weights_what=largest.weights_what,
        host=max(work.host for work in works),
        disk=0.0,
    )
