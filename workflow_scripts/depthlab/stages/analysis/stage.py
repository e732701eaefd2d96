"""The analysis stage (`analyse_model` job): one streamed pass of one model over a text set,
every hidden-state measure of the four papers (depthlab.stages.analysis.measures), written into the spec's `out`
folder: measures.csv, angular_distance_last.csv, angular_distance_all.csv (with
all_token_distance), summary.json and provenance.json. The spec keys and the outputs are
documented in workflow_scripts/analyse_model.py.
"""

from __future__ import annotations

import time

from depthlab.core.placement import spec_placement
from depthlab.stages.model_job import (
    clamp_max_length,
    load,
    log_stderr,
    provenance_inputs,
    text_batches,
)


def run(spec: dict, device: str = "cpu", log=log_stderr) -> dict:
    """Run one `analyse_model` job on `device`; returns its summary (also in summary.json).
    log: notes (the max_length cut, fewer documents than max_samples)."""
    import pandas as pd

    from depthlab.core.atomic_files import atomic_path, write_dataframe, write_json
    from depthlab.core.provenance import Provenance
    from depthlab.stages.analysis.measures import analyse

    provenance = Provenance(
        "analysis", config=spec, inputs=provenance_inputs(spec["texts"], [spec["model_path"]])
    )
    adapter, tokenizer = load(
        spec["model_path"], spec["revision"], spec["dtype"], device, **spec_placement(spec)
    )
    max_length = clamp_max_length(spec["max_length"], [adapter], log)
    batches = text_batches(
        spec, tokenizer, max_length, max_samples=spec["max_samples"], max_tokens=spec["max_tokens"]
    )
    if spec["max_samples"]:  # a long pass says how far it is (its batch count: at most this)
        from depthlab.core.tracking import ProgressLog, counted

        total = -(-spec["max_samples"] // spec["batch_size"])
        what = f"[{spec['model_name']}] analysis pass"
        batches = counted(batches, ProgressLog(what, total, log, unit="batches (at most)"))
    start = time.perf_counter()
    result = analyse(
        adapter,
        batches,
        logit_lens=spec["logit_lens"],
        all_token_distance=spec["all_token_distance"],
        logit_lens_stride=spec["logit_lens_stride"],
    )
    seconds = time.perf_counter() - start
    if result.samples < spec["max_samples"] and spec["max_tokens"] is None:
        log(
            f"note: max_samples is {spec['max_samples']} but the text set has only "
            f"{result.samples} usable documents; used {result.samples}"
        )

    summary = {
        "model": spec["model_name"],
        "text_set": spec["text_set"],
        "samples": result.samples,
        "samples_requested": spec["max_samples"],
        "tokens": result.tokens,
        "logit_lens": bool(spec["logit_lens"] and adapter.has_lm_head),
        "logit_lens_tokens": result.logit_lens_tokens,
        "all_token_distance": spec["all_token_distance"],
        "max_length": max_length,
        "pass_seconds": round(seconds, 3),
        "tokens_per_second": round(result.tokens / seconds, 1),
        "architecture": adapter.describe(),
        "notes": result.notes,
    }
    layers = [str(i) for i in range(result.num_layers + 1)]
    with atomic_path(spec["out"], is_dir=True) as out:
        write_dataframe(
            out / "measures.csv",
            result.to_frame(model=spec["model_name"], text_set=spec["text_set"]),
        )
        write_dataframe(
            out / "angular_distance_last.csv",
            pd.DataFrame(result.angular_distance_last, columns=layers)
            .rename_axis("layer")
            .reset_index(),
        )
        if result.angular_distance_all is not None:
            write_dataframe(
                out / "angular_distance_all.csv",
                pd.DataFrame(result.angular_distance_all, columns=layers)
                .rename_axis("layer")
                .reset_index(),
            )
        write_json(out / "summary.json", summary)
        provenance.extra["summary"] = summary
        provenance.write(out / "provenance.json")
    return summary
