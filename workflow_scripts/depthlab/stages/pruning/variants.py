"""The pruning stage's per-variant jobs: heal_pruned heals one (strategy, n) set of a model,
evaluate_pruned runs lm-eval on one removal set. Each depends only on the model and the removal
set prune_model chose (its measured.json), so a cluster runs them side by side, each within its
own time limit; gather_pruning builds the stage's tables from their parts
(depthlab.stages.pruning.tables).

A healed variant's numbers are those of one job healing every variant in turn: healing seeds
itself (depthlab.stages.pruning.healing.heal), the pruned copy starts from the loaded weights,
and the validation windows and lm-eval settings are the same.
"""

from __future__ import annotations

import time
from pathlib import Path

from depthlab.core.atomic_files import atomic_path, write_json
from depthlab.core.errors import PruningError
from depthlab.core.placement import spec_placement
from depthlab.core.provenance import Provenance
from depthlab.models.architectures import adapt, load_model, load_tokenizer
from depthlab.settings.training import HealSettings
from depthlab.stages.pruning.healing import heal
from depthlab.stages.pruning.layer_removal import model_losses, prune_copy
from depthlab.stages.pruning.stage import split_tokens, task_evaluator
from depthlab.stages.pruning.strategies import validation_windows
from depthlab.stages.pruning.tables import HEAL_FILE, TASKS_FILE, Measured, rows_to_json


def _load(spec: dict, device: str, measured: Measured) -> tuple:
    """(model, tokenizer) of the spec's model, which must have the depth prune_model measured."""
    model = load_model(
        spec["model"],
        dtype=spec["dtype"],
        device=device,
        revision=spec["revision"],
        **spec_placement(spec),
    )
    layers = adapt(model).num_layers
    if layers != measured.num_layers:
        raise PruningError(
            f"model: {spec['model']} has {layers} layers, prune_model measured "
            f"{measured.num_layers} (rerun prune_model on this model)"
        )
    return model, load_tokenizer(spec["model"], revision=spec["revision"])


def _provenance(spec: dict) -> Provenance:
    inputs = [spec["model"], spec["measured"], spec.get("data"), spec.get("tasks")]
    return Provenance(
        "pruning", config=spec, seed=spec["seed"], inputs=[p for p in inputs if p is not None]
    )


def heal_variant(spec: dict, device: str = "cpu", log=print) -> dict:
    """The heal_pruned job: heal the (strategy, n) set prune_model chose, then its validation
    loss per window and (lm_eval.enabled) its lm-eval rows, into spec["out"]/heal.json."""
    start = time.perf_counter()
    provenance = _provenance(spec)
    measured = Measured.read(spec["measured"])
    strategy, n = spec["strategy"], spec["n"]
    variant = f"{strategy}_n{n}"
    removed = measured.variant_set(variant)
    model, tokenizer = _load(spec, device, measured)
    train_tokens, train_source = split_tokens(spec, tokenizer, "train")
    val = spec["val"]
    val_tokens, _ = split_tokens(spec, tokenizer, "val")
    windows = validation_windows(val_tokens, val["windows"], val["seq_len"], val["batch_size"])
    tracking = spec["tracking"]
    prefix = f"[{measured.name}] {strategy} n={n} ({spec['healing']['method']}): "
    settings = HealSettings.from_dict(spec["healing"])
    with atomic_path(Path(spec["out"]), is_dir=True) as out:
        merged, record = heal(
            prune_copy(model, removed),
            train_tokens,
            settings,
            seed=spec["seed"],
            device=device,
            log=lambda message: log(prefix + message),
            tensorboard_dir=out / "tensorboard" if tracking["tensorboard"] else None,
            wandb=tracking["wandb"],
            run_name=f"{measured.name}-heal-{Path(spec['out']).name}",
            run_config={**spec, "variant": {"strategy": strategy, "n": n, "removed": removed}},
        )
        loss, per_window = model_losses(merged, windows, loss_tokens=val.get("loss_tokens"))
        tasks = None
        if spec["lm_eval"]["enabled"]:
            tasks = task_evaluator(model, tokenizer, spec).evaluate(model=merged)
        part = {
            "strategy": strategy,
            "n": n,
            "method": settings.method,
            "removed": list(removed),
            "loss": float(loss),
            "window_losses": [float(x) for x in per_window],
            "record": rows_to_json([record]),
            "tasks": rows_to_json(tasks),
            "token_source": train_source,
            "seconds": round(time.perf_counter() - start, 3),
        }
        log(f"{prefix}healed val loss {loss:.4f} (unhealed {measured.losses[removed]:.4f})")
        write_json(out / HEAL_FILE, part)
        provenance.write(out / "provenance.json")
    return part


def evaluate_variant(spec: dict, device: str = "cpu", log=print) -> dict:
    """The evaluate_pruned job: lm-eval of the removal set spec["variant"] names (`full`,
    `single<l>` or `<strategy>_n<n>`) into spec["out"]/tasks.json."""
    start = time.perf_counter()
    provenance = _provenance(spec)
    measured = Measured.read(spec["measured"])
    removed = measured.variant_set(spec["variant"])
    model, tokenizer = _load(spec, device, measured)
    rows = task_evaluator(model, tokenizer, spec).evaluate(removed)
    part = {
        "variant": spec["variant"],
        "removed": list(removed),
        "rows": rows_to_json(rows),
        "seconds": round(time.perf_counter() - start, 3),
    }
    log(
        f"[{measured.name}] lm-eval of {spec['variant']}: "
        + ", ".join(f"{r['task']} acc {r['acc']:.3f} ± {r['acc_stderr']:.3f}" for r in rows)
    )
    with atomic_path(Path(spec["out"]), is_dir=True) as out:
        write_json(out / TASKS_FILE, part)
        provenance.write(out / "provenance.json")
    return part


def export_job(spec: dict) -> list[dict]:
    """The export_pruned job: the auto-depth choices of spec["export"] as HF folders in
    spec["out"] (atomically, with exports.json and provenance.json); returns the exports."""
    from depthlab.stages.pruning.strategies import (
        export_choices,
        read_auto_depth,
        read_measurements,
        removal_sets,
    )

    sweep_path = Path(spec["pruning"]) / "sweep.csv"
    choices_path = Path(spec["auto_depth"]) / "auto_depth.json"
    provenance = Provenance(
        "pruning.export", config=spec, inputs=[spec["model"], sweep_path, choices_path]
    )
    sweep, _ = read_measurements(spec["pruning"])
    record = read_auto_depth(spec["auto_depth"])
    model = load_model(spec["model"], dtype=spec["dtype"], device="cpu", revision=spec["revision"])
    tokenizer = load_tokenizer(spec["model"], revision=spec["revision"])
    with atomic_path(Path(spec["out"]), is_dir=True) as tmp:
        exports = export_choices(
            model,
            tokenizer,
            record,
            removal_sets(sweep),
            spec["export"],
            tmp,
            spec["model"],
            revision=spec["revision"],
        )
        write_json(tmp / "exports.json", {"model": spec["model_name"], "exports": exports})
        provenance.write(tmp / "provenance.json")
    return exports
