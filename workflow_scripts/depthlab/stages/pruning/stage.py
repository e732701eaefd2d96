"""The prune_model stage of one model: strategies and losses, lm-eval, healing, speed.

`run(spec, device, log)` reads as the stage's phases, one function each:

  plan      load the model, the analysis' angular-distance matrix (and per-layer cos_adjacent for
            block_influence) and the validation windows; the removal set of every (strategy, n)
            and the validation loss of every set (LossSweep); the greedy path stops at
            greedy_max_n when set (no greedy set beyond: lm-eval scores greedy where it has a
            set, healing and speed may not name greedy beyond the cap: rejected at config time)
  evaluate  lm-eval of the full model, of the sets of lm_eval.n_grid and of single layers
  heal      LoRA / QLoRA on a pruned copy of each set of healing.n_grid, its loss and lm-eval
  speed     measured throughput of the exported sets of speed.n_grid against the full model
  write     the tables, summary.json and provenance.json into the output

The choices made on these measurements are jobs of their own that read the tables back
(depthlab.stages.pruning.strategies: auto depth in choose_depth, the export of its choices in export_pruned), so a
tolerance or an export reruns them alone, never this stage.

This is the one module that imports the strategies (depthlab.stages.pruning.strategies), healing, the lm-eval tasks
and the speed measurement together; each of them imports depthlab.stages.pruning.layer_removal, none imports
this module or another of them.

Validation loss: every val loss of the stage (the sweep, single layers, healed variants) is
the mean next-token cross-entropy over the scored positions of the validation windows: the last
val.loss_tokens target positions of each window (null: all seq_len), the earlier ones run
through the model as context only (depthlab.stages.pruning.layer_removal.head_losses, the one place).

window_losses.csv (long format; columns removed, strategy, n, healed, window, loss): the loss
per validation window of the full model (strategy `full`, n 0, removed ""), of every
single-layer removal (strategy `single`, n 1) and of every (strategy, n) set of sweep.csv (its
`removed` label; a set two strategies share is listed under each, with equal losses), healed
False; then every healed variant (healed True). `window` numbers the
val.windows windows 0..W-1 in the order of their start in the val ids (summary.json's
window_losses.window_starts); `loss` is the mean over the window's scored positions, and every
window scores as many, so the plain mean over windows is the set's val_loss in sweep.csv. The
windows are evenly spaced stretches of the held-out documents' text: resampling windows with
replacement (the same resample for every set, pairing each set with the full model window by
window for delta_loss) gives a bootstrap interval for the documents' sampling variance. Windows
are independent samples only as far as they do not overlap (window_losses.windows_overlap) and
a document spanning two windows couples them. Read `removed` with keep_default_na=False (the
full model's label is empty).

Token ids: a model pretrained here (model_kind pretrain) reads the run's val.bin / train.bin; any
other model reads the same documents re-encoded by its own tokenizer (depthlab.data.model_tokens, at
most retokenize.val_tokens / train_tokens ids), recorded in summary.json's token_source.

The spec keys and output files are listed in workflow_scripts/prune_model.py; the spec is the
one depthlab.config resolves (every key the schema requires is indexed, none given a second
default here; the optional greedy_max_n and val.loss_tokens reach the spec only when the config
sets them, absent meaning null as in the schema).

Size: the stage reads plan -> evaluate -> heal -> speed -> write, one function each;
the engines are in pruning, layer_removal, healing, lm_tasks and speed.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from torch import nn

from depthlab.core.atomic_files import atomic_path, write_dataframe, write_json
from depthlab.core.errors import PruningError
from depthlab.core.placement import spec_placement
from depthlab.core.provenance import Provenance
from depthlab.data.model_tokens import model_tokens
from depthlab.models.architectures import adapt, load_model, load_tokenizer
from depthlab.plan.stage_settings import HealSettings, grid, validate_pruning_settings
from depthlab.stages.pruning.healing import heal
from depthlab.stages.pruning.layer_removal import model_losses, prune_copy
from depthlab.stages.pruning.lm_tasks import TaskEvaluator, check_task_folder
from depthlab.stages.pruning.speed import measure_exports
from depthlab.stages.pruning.strategies import (
    LossSweep,
    angular_removal,
    block_choice_table,
    block_influence_removal,
    block_influence_table,
    check_prunable,
    deepest_removal,
    greedy_path,
    greedy_steps,
    read_cos_adjacent,
    read_distance_matrix,
    validation_windows,
    window_starts,
)

SWEEP_COLUMNS = [
    "model",
    "strategy",
    "n",
    "fraction",
    "removed",
    "healed",
    "val_loss",
    "val_ppl",
    "delta_loss",
    "task",
    "acc",
    "acc_stderr",
    "acc_norm",
    "acc_norm_stderr",
    "score",
    "score_stderr",
    "score_metric",
    "samples",
]


# --------------------------------------------------------------------------- settings


# --------------------------------------------------------------------------- table rows


def removed_label(removed: Sequence[int]) -> str:
    """Removed layers as text for tables: "3-4-5" ("" for none)."""
    return "-".join(str(l) for l in removed)


def perplexity(loss: float) -> float:
    return float(math.exp(loss)) if loss < 700 else float("inf")


def _task_rows(base: dict, task_rows: list[dict] | None) -> list[dict]:
    if not task_rows:
        return [
            {
                **base,
                "task": "",
                "acc": np.nan,
                "acc_stderr": np.nan,
                "acc_norm": np.nan,
                "acc_norm_stderr": np.nan,
                "score": np.nan,
                "score_stderr": np.nan,
                "score_metric": "",
                "samples": 0,
            }
        ]
    return [{**base, **row} for row in task_rows]


def healing_events_folder(out: str | Path):
    """Where healing writes its TensorBoard curves while the job runs: a temporary folder beside
    the job's output (removed when the job fails), copied to `<out>/tensorboard/` with the rest
    of the output (one subfolder per healed variant, `<strategy>_n<n>`)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=f".{out.name}.tensorboard-", dir=out.parent)


class PhaseClock:
    """Seconds per phase: each lap adds the time since the previous lap to its phase."""

    def __init__(self):
        self.started = time.perf_counter()
        self.last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self.last, 3)
        self.last = now

    def wall(self) -> float:
        return round(time.perf_counter() - self.started, 3)


# --------------------------------------------------------------------------- the phases


@dataclass
class Plan:
    """The loaded model and the removal sets of every strategy with their validation losses."""

    name: str
    model: nn.Module
    tokenizer: object
    num_layers: int
    distance: np.ndarray
    cos_adjacent: np.ndarray | None  # per layer, for block_influence (None when not used)
    n_values: list[int]
    windows: list
    sweep: LossSweep
    removals: dict[tuple[str, int], tuple[int, ...]]  # (strategy, n) -> removed layers
    greedy_records: list[dict]
    singles: list[tuple[int]]
    losses: dict[tuple[int, ...], float]  # removed layers -> validation loss
    provenance: Provenance
    token_source: dict  # per split: which tokenizer made the ids (depthlab.data.model_tokens)
    window_starts: list[int]  # first token of each validation window in the val ids

    @property
    def base_loss(self) -> float:
        return self.losses[()]

    def variant_row(
        self, strategy: str, n: int, removed: tuple[int, ...], healed: bool, loss: float
    ) -> dict:
        """The sweep table's columns of one variant before its task columns."""
        return {
            "model": self.name,
            "strategy": strategy,
            "n": n,
            "fraction": n / self.num_layers,
            "removed": removed_label(removed),
            "healed": healed,
            "val_loss": loss,
            "val_ppl": perplexity(loss),
            "delta_loss": loss - self.base_loss,
        }


@dataclass
class Evaluation:
    evaluator: TaskEvaluator | None
    task_results: dict[tuple[int, ...], list[dict]]  # removed layers -> lm-eval rows
    rows: list[dict]  # the unhealed variants' sweep rows


@dataclass
class Healing:
    rows: list[dict]  # the healed variants' sweep rows
    records: list[dict]  # healing.csv
    events: tempfile.TemporaryDirectory | None
    # (strategy, n, removed) -> the healed variant's loss per validation window
    window_losses: dict = field(default_factory=dict)


def split_tokens(spec: dict, tokenizer, split: str) -> tuple[np.ndarray, dict]:
    """A split's token ids for the spec's model: the run's own ids for a model pretrained here,
    the run's documents re-encoded by the model's tokenizer for any other (kind hf, gguf: the
    run's ids belong to another vocabulary), capped by retokenize.<split>_tokens."""
    if spec["model_kind"] == "pretrain":
        return model_tokens(spec["data"], split)
    caps = spec.get("retokenize")
    if not isinstance(caps, dict) or f"{split}_tokens" not in caps:
        raise PruningError(
            f"retokenize.{split}_tokens: required for a model of kind '{spec['model_kind']}' "
            f"(it reads the run's documents re-encoded by its own tokenizer)"
        )
    return model_tokens(spec["data"], split, tokenizer, caps[f"{split}_tokens"])


def _analysis_inputs(spec: dict) -> tuple[Path, Path | None]:
    """The analysis stage's angular-distance matrix and (block_influence only) its measures.csv;
    PruningError naming the one that is missing."""
    distance_path = Path(spec["analysis"]) / "angular_distance_last.csv"
    if not distance_path.is_file():
        raise PruningError(
            f"analysis: {distance_path} does not exist (run the analysis stage on this model first)"
        )
    measures_path = None
    if "block_influence" in spec["strategies"]:
        measures_path = Path(spec["analysis"]) / "measures.csv"
        if not measures_path.is_file():
            raise PruningError(
                f"analysis: {measures_path} does not exist (block_influence reads its "
                f"cos_adjacent rows; run the analysis stage on this model first)"
            )
    return distance_path, measures_path


def _load_prunable(spec: dict, device: str) -> tuple:
    """(model, tokenizer, number of layers) of the spec's model, checked prunable and against
    the pruning settings."""
    model = load_model(
        spec["model"],
        dtype=spec["dtype"],
        device=device,
        revision=spec["revision"],
        **spec_placement(spec),
    )
    tokenizer = load_tokenizer(spec["model"], revision=spec["revision"])
    adapter = adapt(model)
    check_prunable(adapter, name=spec["model_name"], where="pruning.models")
    validate_pruning_settings(spec, adapter.num_layers)
    return model, tokenizer, adapter.num_layers


def _analysis_tables(distance_path: Path, measures_path: Path | None, L: int) -> tuple:
    """(angular-distance matrix, per-layer cos_adjacent or None), checked against L layers."""
    distance = read_distance_matrix(distance_path)
    if distance.shape[0] != L + 1:
        raise PruningError(
            f"{distance_path}: a {distance.shape[0]}x{distance.shape[0]} matrix "
            f"for a model of {L} layers (expected {L + 1}x{L + 1})"
        )
    cos_adjacent = read_cos_adjacent(measures_path, L) if measures_path is not None else None
    return distance, cos_adjacent


def _removal_sets(
    spec: dict, n_values: list[int], L: int, distance, cos_adjacent, sweep: LossSweep, log
) -> tuple[dict, list[dict]]:
    """(removal set per (strategy, n), greedy path records). Greedy grows one layer at a time up
    to the largest n (or pruning.greedy_max_n): no greedy set beyond."""
    removals: dict[tuple[str, int], tuple[int, ...]] = {}
    for strategy in spec["strategies"]:
        for n in n_values:
            if strategy == "angular":
                removals[("angular", n)] = angular_removal(distance, n)
            elif strategy == "deepest":
                removals[("deepest", n)] = deepest_removal(L, n)
            elif strategy == "block_influence":
                removals[("block_influence", n)] = block_influence_removal(cos_adjacent, n)
    greedy_records = []
    if "greedy" in spec["strategies"]:
        greedy_records = greedy_path(
            sweep.losses, L, greedy_steps(n_values, spec.get("greedy_max_n")), log=log
        )
        for record in greedy_records:
            if record["n"] in n_values:
                removals[("greedy", record["n"])] = record["removed"]
    return removals, greedy_records


def plan(spec: dict, device: str, log, clock: PhaseClock) -> Plan:
    """Load the model and its inputs (phase `load`), then the removal set of every strategy and
    n and the validation loss of each, single layers included (phase `loss_sweep`)."""
    name = spec["model_name"]
    distance_path, measures_path = _analysis_inputs(spec)
    lm_settings = spec["lm_eval"]
    if lm_settings["enabled"] and spec["tasks"] is not None:
        check_task_folder(spec["tasks"], lm_settings["tasks"], "pruning.tasks")
    provenance = Provenance(
        "pruning",
        config=spec,
        seed=spec["seed"],
        inputs=[
            p
            for p in (spec["model"], distance_path, measures_path, spec["data"], spec["tasks"])
            if p is not None
        ],
    )
    model, tokenizer, L = _load_prunable(spec, device)
    distance, cos_adjacent = _analysis_tables(distance_path, measures_path, L)
    n_values = grid(spec["n_grid"], L)
    val = spec["val"]
    val_tokens, val_source = split_tokens(spec, tokenizer, "val")
    windows = validation_windows(val_tokens, val["windows"], val["seq_len"], val["batch_size"])
    starts = window_starts(len(val_tokens), val["windows"], val["seq_len"])
    log(f"[{name}] validation ids: {val_source}")
    sweep = LossSweep(model, windows, loss_tokens=val.get("loss_tokens"))
    clock.lap("load")

    removals, greedy_records = _removal_sets(
        spec, n_values, L, distance, cos_adjacent, sweep, lambda m: log(f"[{name}] {m}")
    )
    singles = [(l,) for l in range(L)]
    sets = [()] + singles + list(removals.values())
    losses = dict(zip(sets, sweep.losses(sets)))
    clock.lap("loss_sweep")
    log(
        f"[{name}] {L} layers, full-model val loss {losses[()]:.4f}; {len(sweep.memo)} removal "
        f"sets, {sweep.layer_calls} layer calls over {len(windows)} batches"
    )
    return Plan(
        name=name,
        model=model,
        tokenizer=tokenizer,
        num_layers=L,
        distance=distance,
        cos_adjacent=cos_adjacent,
        n_values=n_values,
        windows=windows,
        sweep=sweep,
        removals=removals,
        greedy_records=greedy_records,
        singles=singles,
        losses=losses,
        provenance=provenance,
        token_source={"val": val_source},
        window_starts=[int(start) for start in starts],
    )


def evaluate(planned: Plan, spec: dict, log) -> Evaluation:
    """lm-eval of the full model and of the planned sets of lm_eval.n_grid (and of every single
    layer with lm_eval.single_layer), each through the pruned view of the one loaded model;
    the unhealed variants' sweep rows."""
    lm_settings = spec["lm_eval"]
    evaluator = None
    task_results: dict[tuple[int, ...], list[dict]] = {}
    if lm_settings["enabled"]:
        evaluator = TaskEvaluator(
            planned.model,
            planned.tokenizer,
            spec["tasks"],
            lm_settings["tasks"],
            batch_size=lm_settings["batch_size"],
            datasets_cache=spec["datasets_cache"],
            bootstrap_iters=lm_settings["bootstrap_iters"],
            seed=spec["seed"],
            harness_tasks=lm_settings.get("harness_tasks"),
        )
        task_n = (
            set(grid(lm_settings["n_grid"], planned.num_layers, "pruning.lm_eval.n_grid"))
            if lm_settings["n_grid"] is not None
            else set(planned.n_values)
        )
        wanted = [()] + [r for (s, n), r in planned.removals.items() if n in task_n]
        if lm_settings["single_layer"]:
            wanted += planned.singles
        for removed in wanted:
            if removed not in task_results:
                task_results[removed] = evaluator.evaluate(removed)
        log(
            f"[{planned.name}] lm-eval on {len(task_results)} variants: full model "
            + ", ".join(
                f"{r['task']} acc {r['acc']:.3f} ± {r['acc_stderr']:.3f}" for r in task_results[()]
            )
        )

    rows = []
    for strategy in spec["strategies"]:
        for n, removed in [(0, ())] + [
            (n, planned.removals[(strategy, n)])
            for n in planned.n_values
            if (strategy, n) in planned.removals
        ]:
            rows += _task_rows(
                planned.variant_row(strategy, n, removed, False, planned.losses[removed]),
                task_results.get(removed),
            )
    return Evaluation(evaluator=evaluator, task_results=task_results, rows=rows)


def heal_variants(planned: Plan, evaluated: Evaluation, spec: dict, device: str, log) -> Healing:
    """Heal a pruned copy of each planned set of healing.strategies x healing.n_grid; the healed
    model's validation loss and lm-eval rows."""
    healing = spec["healing"]
    rows, records, events, per_window = [], [], None, {}
    if not healing["enabled"]:
        return Healing(rows=rows, records=records, events=events)
    tracking = spec["tracking"]
    name = planned.name
    settings = HealSettings.from_dict(healing)
    train_tokens, planned.token_source["train"] = split_tokens(spec, planned.tokenizer, "train")
    heal_n = grid(healing.get("n_grid"), planned.num_layers, "pruning.healing.n_grid")
    if tracking["tensorboard"]:
        events = healing_events_folder(spec["out"])
    for strategy in healing.get("strategies") or spec["strategies"]:
        for n in heal_n:
            removed = planned.removals.get((strategy, n))
            if removed is None:
                continue
            variant = f"{strategy}_n{n}"
            prefix = f"[{name}] {strategy} n={n}: "
            merged, record = heal(
                prune_copy(planned.model, removed),
                train_tokens,
                settings,
                seed=spec["seed"],
                device=device,
                log=lambda m, prefix=prefix: log(prefix + m),
                tensorboard_dir=events and Path(events.name) / variant,
                wandb=tracking["wandb"],
                run_name=f"{name}-heal-{variant}",
                run_config={
                    **spec,
                    "variant": {"strategy": strategy, "n": n, "removed": list(removed)},
                },
            )
            loss, per_window[(strategy, n, removed)] = model_losses(
                merged, planned.windows, loss_tokens=spec["val"].get("loss_tokens")
            )
            tasks = (
                evaluated.evaluator.evaluate(model=merged)
                if evaluated.evaluator is not None
                else None
            )
            rows += _task_rows(planned.variant_row(strategy, n, removed, True, loss), tasks)
            records.append(
                {
                    "strategy": strategy,
                    "n": n,
                    "removed": removed_label(removed),
                    "val_loss_unhealed": planned.losses[removed],
                    "val_loss_healed": loss,
                    **record,
                }
            )
            del merged
    return Healing(rows=rows, records=records, events=events, window_losses=per_window)


def measure_speed(planned: Plan, spec: dict, device: str, work_dir: Path) -> pd.DataFrame | None:
    """Throughput of the full model and of the exported sets of speed.strategy x speed.n_grid
    (exported to a temporary folder in `work_dir`); None when speed is off."""
    speed = spec["speed"]
    if not speed["enabled"]:
        return None
    L = planned.num_layers
    speed_n = grid(speed.get("n_grid"), L, "pruning.speed.n_grid")
    sets = {
        f"n{n}": planned.removals[(speed["strategy"], n)]
        for n in speed_n
        if (speed["strategy"], n) in planned.removals
    }
    measured = measure_exports(
        planned.model,
        sets,
        speed["batch_size"],
        speed["prompt_length"],
        speed["new_tokens"],
        speed["repeats"],
        seed=spec["seed"],
        device=device,
        dtype=spec["dtype"],
        work_dir=work_dir,
    )
    full = measured["full"]
    rows = []
    for key, result in measured.items():
        n = 0 if key == "full" else int(key[1:])
        removed = () if key == "full" else sets[key]
        rows.append(
            {
                "model": planned.name,
                "strategy": speed["strategy"],
                "n": n,
                "fraction": n / L,
                "removed": removed_label(removed),
                **result,
                "prefill_speedup": result["prefill_tokens_per_s"] / full["prefill_tokens_per_s"],
                "generation_speedup": result["generation_tokens_per_s"]
                / full["generation_tokens_per_s"],
            }
        )
    return pd.DataFrame(rows)


def _single_layer_table(planned: Plan, evaluated: Evaluation) -> pd.DataFrame:
    rows = []
    base_by_task = {r["task"]: r for r in evaluated.task_results.get((), [])}
    for (layer,) in planned.singles:
        base = {
            "model": planned.name,
            "layer": layer,
            "val_loss": planned.losses[(layer,)],
            "delta_loss": planned.losses[(layer,)] - planned.base_loss,
        }
        for row in evaluated.task_results.get((layer,)) or [{}]:
            entry = dict(base)
            if row:
                full = base_by_task[row["task"]]
                entry.update(
                    {
                        **row,
                        **{f"delta_{m}": row[m] - full[m] for m in ("acc", "acc_norm", "score")},
                    }
                )
            rows.append(entry)
    return pd.DataFrame(rows)


WINDOW_LOSS_COLUMNS = ["removed", "strategy", "n", "healed", "window", "loss"]


def window_loss_table(
    planned: Plan, strategies: Sequence[str], healed: dict | None = None
) -> pd.DataFrame:
    """window_losses.csv, long format: one row per (removal set, window) for the full model
    (strategy `full`, n 0), every single-layer removal (strategy `single`, n 1) and every
    (strategy, n) set of the sweep (a set two strategies share appears under each), healed
    False; then each healed variant's (healed True; `healed`: Healing.window_losses)."""
    named = [("full", 0, ())] + [("single", 1, removed) for removed in planned.singles]
    named += [
        (strategy, n, planned.removals[(strategy, n)])
        for strategy in strategies
        for n in planned.n_values
        if (strategy, n) in planned.removals
    ]
    per_window = planned.sweep.window_losses([removed for _, _, removed in named])
    flags = [False] * len(named)
    for key, losses in (healed or {}).items():
        named.append(key)
        per_window.append(losses)
        flags.append(True)
    count = len(per_window[0])
    return pd.DataFrame(
        {
            "removed": np.repeat([removed_label(r) for _, _, r in named], count),
            "strategy": np.repeat([s for s, _, _ in named], count),
            "n": np.repeat([n for _, n, _ in named], count),
            "healed": np.repeat(flags, count),
            "window": np.tile(np.arange(count), len(named)),
            "loss": np.concatenate(per_window),
        }
    )[WINDOW_LOSS_COLUMNS]


def write(
    out: Path,
    planned: Plan,
    evaluated: Evaluation,
    healed: Healing,
    table: pd.DataFrame,
    speed_table: pd.DataFrame | None,
    spec: dict,
    clock: PhaseClock,
) -> dict:
    """Every table and record of the stage into `out` (the output's temporary folder); returns
    the summary."""
    name, L, sweep = planned.name, planned.num_layers, planned.sweep
    if speed_table is not None:
        write_dataframe(out / "speed.csv", speed_table)
    write_dataframe(
        out / "block_choice.csv", block_choice_table(planned.distance, planned.n_values)
    )
    if planned.cos_adjacent is not None:
        write_dataframe(out / "block_influence.csv", block_influence_table(planned.cos_adjacent))
    write_dataframe(out / "single_layer.csv", _single_layer_table(planned, evaluated))
    write_dataframe(out / "sweep.csv", table)
    windows = window_loss_table(planned, spec["strategies"], healed.window_losses)
    write_dataframe(out / "window_losses.csv", windows)
    if planned.greedy_records:
        write_dataframe(
            out / "greedy_path.csv",
            pd.DataFrame(
                [
                    {
                        "n": r["n"],
                        "layer": r["layer"],
                        "removed": removed_label(r["removed"]),
                        "val_loss": r["loss"],
                    }
                    for r in planned.greedy_records
                ]
            ),
        )
    if healed.records:
        write_dataframe(out / "healing.csv", pd.DataFrame(healed.records))
    if healed.events is not None:
        shutil.copytree(healed.events.name, out / "tensorboard")
        healed.events.cleanup()
    summary = {
        "model": name,
        "num_layers": L,
        "val_loss": planned.base_loss,
        "val_tokens": sweep.tokens,
        "val_loss_tokens": spec["val"].get("loss_tokens"),
        "val_scored_tokens": sweep.scored_tokens,
        "window_losses": {
            "file": "window_losses.csv",
            "windows": sweep.windows,
            "scored_positions_per_window": sweep.scored_tokens // sweep.windows,
            "removal_sets": int(windows["removed"].nunique()),
            "window_starts": planned.window_starts,
            "windows_overlap": bool(
                np.any(np.diff(planned.window_starts) < spec["val"]["seq_len"] + 1)
            ),
        },
        "greedy_max_n": spec.get("greedy_max_n"),
        "greedy_steps": len(planned.greedy_records),
        "token_source": planned.token_source,
        "removal_sets": len(sweep.memo),
        "layer_calls": sweep.layer_calls,
        "layer_calls_without_reuse": sum((L - len(k)) * len(planned.windows) for k in sweep.memo),
        "lm_eval_variants": len(evaluated.task_results),
        "tasks_full_model": evaluated.task_results.get((), []),
        "healed_variants": len(healed.records),
        "phase_seconds": clock.seconds,
        "wall_s": clock.wall(),
    }
    write_json(out / "summary.json", summary)
    planned.provenance.extra["summary"] = summary
    planned.provenance.write(out / "provenance.json")
    return summary


def run(spec: dict, device: str = "cpu", log=print) -> dict:
    """The prune_model job: every table of the spec's model into spec["out"] (see
    workflow_scripts/prune_model.py for the keys and outputs). Returns the summary."""
    clock = PhaseClock()
    planned = plan(spec, device, log, clock)
    evaluated = evaluate(planned, spec, log)
    clock.lap("lm_eval")
    healed = heal_variants(planned, evaluated, spec, device, log)
    clock.lap("healing")
    table = pd.DataFrame(evaluated.rows + healed.rows)[SWEEP_COLUMNS]
    with atomic_path(Path(spec["out"]), is_dir=True) as tmp:
        speed_table = measure_speed(planned, spec, device, tmp)
        clock.lap("speed")
        return write(tmp, planned, evaluated, healed, table, speed_table, spec, clock)
