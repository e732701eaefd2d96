"""The prune_model stage of one model: strategies and losses, lm-eval, speed.

`run(spec, device, log)` reads as the stage's phases, one function each:

  plan      load the model, the analysis' angular-distance matrix (and per-layer cos_adjacent for
            block_influence), the calibration windows of the train split (pruning.calibration,
            for the block-ranking criteria: depthlab.stages.pruning.criteria, run first, their
            sweep freed before the validation sweep) and the validation windows; the removal
            set of every (strategy, n) and the validation loss of every set (LossSweep), the
            criteria's sets included (one yardstick for all); the greedy path stops at
            greedy_max_n when set (no greedy set beyond: lm-eval scores greedy where it has a
            set, healing and speed may not name greedy beyond the cap: rejected at config time)
  sublayer  with pruning.sublayer: the iterative sub-layer (attention / MLP) removal path,
            ranked on the calibration windows and scored on the validation windows
            (depthlab.stages.pruning.sublayers), measured only, never exported
  evaluate  lm-eval of the full model, of the sets of lm_eval.n_grid and of single layers
            (unless lm_eval.per_set_jobs: then each set is an evaluate_pruned job)
  speed     measured throughput of the exported sets of speed.n_grid against the full model
  write     measured.json, the block choice, Block Influence, greedy, criteria, SLEB path,
            sub-layer and speed tables, summary.json and provenance.json into the output

Healing is one heal_pruned job per (strategy, n) (depthlab.stages.pruning.variants), so a
cluster heals the variants side by side; gather_pruning builds sweep.csv, single_layer.csv,
window_losses.csv and healing.csv from this job's measured.json and those parts
(depthlab.stages.pruning.tables). The choices made on these measurements are jobs of their own
that read the tables back (depthlab.stages.pruning.strategies: auto depth in choose_depth, the
export of its choices in export_pruned), so a tolerance or an export reruns them alone.

Validation loss: every val loss of the stage (the sweep, single layers, healed variants) is
the mean next-token cross-entropy over the scored positions of the validation windows: the last
val.loss_tokens target positions of each window (null: all seq_len), the earlier ones run
through the model as context only (depthlab.stages.pruning.layer_removal.head_losses, the one place).

window_losses.csv (long format; columns removed, strategy, n, healed, window, loss, method): the
loss per validation window of the full model (strategy `full`, n 0, removed ""), of every
single-layer removal (strategy `single`, n 1) and of every (strategy, n) set of sweep.csv (its
`removed` label; a set two strategies share is listed under each, with equal losses), healed
False, method ""; then every healed variant (healed True, method its healing method). `window`
numbers the val.windows windows 0..W-1 in the order of their start in the val ids (summary.json's
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
"""

from __future__ import annotations

import time
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
from depthlab.settings.block_criteria import CRITERIA as BLOCK_CRITERIA
from depthlab.settings.pruning import CALIBRATED_STRATEGIES, grid, validate_pruning_settings
from depthlab.stages.lm_tasks import check_task_folder
from depthlab.stages.pruning.blocks import block_choice_table
from depthlab.stages.pruning.criteria import (
    CriteriaResult,
    Ranking,
    layer_parameters,
    rank_blocks,
    ranking_function,
)
from depthlab.stages.pruning.pruned_tasks import TaskEvaluator
from depthlab.stages.pruning.speed import measure_exports
from depthlab.stages.pruning.strategies import (
    LossSweep,
    block_influence_table,
    check_prunable,
    read_cos_adjacent,
    read_distance_matrix,
    validation_windows,
    window_starts,
)
from depthlab.stages.pruning.sublayers import (
    decoder_params,
    layer_params,
    sublayer_path,
    sublayer_table,
)
from depthlab.stages.pruning.tables import MEASURED_FILE, removed_label, rows_to_json


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
    # the block-ranking criteria (depthlab.stages.pruning.criteria) and the layers' sizes
    criteria: CriteriaResult = field(default_factory=CriteriaResult)
    layer_params: list[int] = field(default_factory=list)
    sublayer_records: list[dict] = field(default_factory=list)  # pruning.sublayer's path

    @property
    def base_loss(self) -> float:
        return self.losses[()]


def task_evaluator(model: nn.Module, tokenizer, spec: dict) -> TaskEvaluator:
    """lm-eval on the spec's tasks (its lm_eval settings) for `model` and its pruned views."""
    return TaskEvaluator.from_spec(model, tokenizer, spec)


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


def calibration_windows(spec: dict, tokenizer) -> tuple[list | None, dict | None]:
    """(pruning.calibration's batches of windows of the train split, their token source), drawn
    as the validation windows are from val; (None, None) when neither a strategy nor the
    sub-layer search reads them."""
    calibration = spec.get("calibration")
    readers = set(spec["strategies"]) & set(CALIBRATED_STRATEGIES) or sublayer_enabled(spec)
    if calibration is None or not readers:
        return None, None
    tokens, source = split_tokens(spec, tokenizer, "train")
    windows = validation_windows(
        tokens, calibration["windows"], calibration["seq_len"], calibration["batch_size"]
    )
    return windows, source


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
    """(removal set per (strategy, n), greedy path records) of the strategies that read the
    analysis tables, then of those that read the validation sweep (the criteria's sets come
    from rank_blocks, before the sweep)."""
    ranking = Ranking(
        None, L, n_values, distance=distance, cos_adjacent=cos_adjacent, sweep=sweep,
        greedy_max_n=spec.get("greedy_max_n"), log=log,
    )  # fmt: skip
    for reads in ("analysis", "validation"):
        for name in spec["strategies"]:
            if BLOCK_CRITERIA[name].reads == reads:
                ranking_function(name)(ranking, name)
    return ranking.result.removals, ranking.result.greedy_records


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
    from depthlab.core.tracking import heartbeat

    with heartbeat(f"[{name}] loading the model", log):  # one library call: a line every ~10 s
        model, tokenizer, L = _load_prunable(spec, device)
    distance, cos_adjacent = _analysis_tables(distance_path, measures_path, L)
    n_values = grid(spec["n_grid"], L)
    val = spec["val"]
    val_tokens, val_source = split_tokens(spec, tokenizer, "val")
    windows = validation_windows(val_tokens, val["windows"], val["seq_len"], val["batch_size"])
    starts = window_starts(len(val_tokens), val["windows"], val["seq_len"])
    log(f"[{name}] validation ids: {val_source}")
    token_source = {"val": val_source}
    calibration, train_source = calibration_windows(spec, tokenizer)
    if train_source is not None:
        token_source["train"] = train_source
    # the criteria first: their calibration sweep is freed before the validation sweep's cache
    criteria = rank_blocks(model, spec["strategies"], n_values, calibration,
                           lambda m: log(f"[{name}] {m}"), seed=spec["seed"])  # fmt: skip
    sweep = LossSweep(model, windows, loss_tokens=val.get("loss_tokens"))
    clock.lap("load")

    removals, greedy_records = _removal_sets(
        spec, n_values, L, distance, cos_adjacent, sweep, lambda m: log(f"[{name}] {m}")
    )
    removals.update(criteria.removals)
    singles = [(l,) for l in range(L)]
    sets = [()] + singles + list(removals.values())
    losses = dict(zip(sets, sweep.losses(sets, log=lambda m: log(f"[{name}] {m}"))))
    clock.lap("loss_sweep")
    log(
        f"[{name}] {L} layers, full-model val loss {losses[()]:.4f}; {len(sweep.memo)} removal "
        f"sets, {sweep.layer_calls} layer calls over {len(windows)} batches"
    )
    sublayer_records = sublayer_search(
        spec, model, windows, calibration, lambda m: log(f"[{name}] {m}")
    )
    if sublayer_records:
        clock.lap("sublayer")
    return Plan(
        sublayer_records=sublayer_records,
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
        token_source=token_source,
        window_starts=[int(start) for start in starts],
        criteria=criteria,
        layer_params=layer_parameters(model),
    )


def sublayer_search(
    spec: dict, model: nn.Module, windows: list, calibration: list | None, log
) -> list[dict]:
    """pruning.sublayer: the iterative sub-layer removal path (depthlab.stages.pruning.sublayers),
    ranked on the calibration windows and scored on the validation windows (ranked on the
    validation windows when the job has no calibration windows); [] when absent or disabled."""
    if not sublayer_enabled(spec):
        return []
    return sublayer_path(
        model,
        windows if calibration is None else calibration,
        spec["sublayer"]["max_units"],
        loss_tokens=spec["val"].get("loss_tokens"),
        log=log,
        score_windows=None if calibration is None else windows,
    )


def sublayer_enabled(spec: dict) -> bool:
    return bool((spec.get("sublayer") or {}).get("enabled"))


def sublayer_summary(planned: Plan) -> dict | None:
    """summary.json's sublayer entry: the file, the steps and the parameter counts a layer-level
    removal compares with (each layer's, the decoder's)."""
    if not planned.sublayer_records:
        return None
    return {
        "file": "sublayer_path.csv",
        "steps": len(planned.sublayer_records),
        "decoder_params": decoder_params(planned.model),
        "layer_params": [layer_params(planned.model, l) for l in range(planned.num_layers)],
        "seconds_per_step": round(
            float(np.mean([r["seconds"] for r in planned.sublayer_records])), 3
        ),
        "exported": False,
    }


def evaluate(planned: Plan, spec: dict, log) -> dict[tuple[int, ...], list[dict]]:
    """lm-eval of the full model and of the planned sets of lm_eval.n_grid (and of every single
    layer with lm_eval.single_layer), each through the pruned view of the one loaded model:
    {removed layers: lm-eval rows}. Nothing when lm-eval is off or each set is an
    evaluate_pruned job of its own (lm_eval.per_set_jobs)."""
    lm_settings = spec["lm_eval"]
    task_results: dict[tuple[int, ...], list[dict]] = {}
    if not lm_settings["enabled"] or lm_settings.get("per_set_jobs"):
        return task_results
    from depthlab.core.tracking import ProgressLog

    evaluator = task_evaluator(planned.model, planned.tokenizer, spec)
    wanted = evaluated_sets(planned, lm_settings)
    progress = ProgressLog(f"[{planned.name}] lm-eval", len(wanted), log, unit="variants")
    for removed in wanted:
        if removed not in task_results:
            task_results[removed] = evaluator.evaluate(removed)
        progress.step()
    log(
        f"[{planned.name}] lm-eval on {len(task_results)} variants: full model "
        + ", ".join(
            f"{r['task']} acc {r['acc']:.3f} ± {r['acc_stderr']:.3f}" for r in task_results[()]
        )
    )
    return task_results


def evaluated_sets(planned: Plan, lm_settings: dict) -> list[tuple[int, ...]]:
    """The removal sets lm-eval scores, in order: the full model, the sets of lm_eval.n_grid,
    then (lm_eval.single_layer) every single layer; a set may repeat."""
    task_n = (
        set(grid(lm_settings["n_grid"], planned.num_layers, "pruning.lm_eval.n_grid"))
        if lm_settings["n_grid"] is not None
        else set(planned.n_values)
    )
    wanted = [()] + [r for (s, n), r in planned.removals.items() if n in task_n]
    if lm_settings["single_layer"]:
        wanted += planned.singles
    return wanted


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
                "ideal_speedup": L / (L - n),
            }
        )
    return pd.DataFrame(rows)


def measured_record(planned: Plan, spec: dict, task_results: dict) -> dict:
    """measured.json: what the gathering job builds the tables from
    (depthlab.stages.pruning.tables)."""
    named = [("full", 0, ())] + [("single", 1, removed) for removed in planned.singles]
    named += [
        (strategy, n, planned.removals[(strategy, n)])
        for strategy in spec["strategies"]
        for n in planned.n_values
        if (strategy, n) in planned.removals
    ]
    per_window = planned.sweep.window_losses([removed for _, _, removed in named])
    return {
        "model": planned.name,
        "seed": spec["seed"],
        "num_layers": planned.num_layers,
        "strategies": list(spec["strategies"]),
        "n_values": planned.n_values,
        "removals": [
            {"strategy": s, "n": n, "removed": list(r)} for (s, n), r in planned.removals.items()
        ],
        "singles": [layer for (layer,) in planned.singles],
        "layer_params": planned.layer_params,
        "losses": [
            {"removed": list(removed), "loss": float(loss)}
            for removed, loss in planned.losses.items()
        ],
        "window_losses": [
            {"strategy": s, "n": n, "removed": list(r), "losses": [float(x) for x in losses]}
            for (s, n, r), losses in zip(named, per_window)
        ],
        "task_results": [
            {"removed": list(removed), "rows": rows_to_json(rows)}
            for removed, rows in task_results.items()
        ],
    }


def write(
    out: Path,
    planned: Plan,
    task_results: dict,
    speed_table: pd.DataFrame | None,
    spec: dict,
    clock: PhaseClock,
) -> dict:
    """Every record of the stage into `out` (the output's temporary folder): measured.json, the
    block choice, Block Influence, greedy path and speed tables, summary.json and provenance;
    returns the summary (the gathering job completes it with the heal and evaluation parts)."""
    name, L, sweep = planned.name, planned.num_layers, planned.sweep
    if speed_table is not None:
        write_dataframe(out / "speed.csv", speed_table)
    write_dataframe(
        out / "block_choice.csv", block_choice_table(planned.distance, planned.n_values)
    )
    if planned.cos_adjacent is not None:
        write_dataframe(out / "block_influence.csv", block_influence_table(planned.cos_adjacent))
    measured = measured_record(planned, spec, task_results)
    write_json(out / MEASURED_FILE, measured)
    if planned.greedy_records:
        write_dataframe(out / "greedy_path.csv", path_table(planned.greedy_records, "val_loss"))
    criteria = planned.criteria
    if criteria.rows:
        write_dataframe(out / "criteria.csv", criteria.table())
    if criteria.sleb_records:
        write_dataframe(
            out / "sleb_path.csv", path_table(criteria.sleb_records, "calibration_loss")
        )
    if planned.sublayer_records:
        write_dataframe(out / "sublayer_path.csv", sublayer_table(planned.sublayer_records))
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
            "removal_sets": len({tuple(r["removed"]) for r in measured["window_losses"]}),
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
        "lm_eval_variants": len(task_results),
        "tasks_full_model": task_results.get((), []),
        "healed_variants": 0,
        "phase_seconds": clock.seconds,
        "wall_s": clock.wall(),
    }
    summary.update(criteria_summary(planned, spec))
    if planned.sublayer_records:
        summary["sublayer"] = sublayer_summary(planned)
    write_json(out / "summary.json", summary)
    planned.provenance.extra["summary"] = summary
    planned.provenance.write(out / "provenance.json")
    return summary


def path_table(records: list[dict], loss_column: str) -> pd.DataFrame:
    """greedy_path.csv / sleb_path.csv: one row per step (n, layer, removed, the loss)."""
    return pd.DataFrame(
        [
            {
                "n": r["n"],
                "layer": r["layer"],
                "removed": removed_label(r["removed"]),
                loss_column: r["loss"],
            }
            for r in records
        ]
    )


def criteria_summary(planned: Plan, spec: dict) -> dict:
    """summary.json's part on the block-ranking criteria: their files, the calibration windows
    and each criterion's cost (calibration forward / backward passes, layer calls, seconds)."""
    criteria = planned.criteria
    if not criteria.rows and not criteria.sleb_records:
        return {}
    files = ["criteria.csv"] + (["sleb_path.csv"] if criteria.sleb_records else [])
    return {
        "criteria_files": files,
        "calibration": {**(spec.get("calibration") or {}), "loss": criteria.calibration_loss},
        "criteria_cost": criteria.cost,
        "sleb_steps": len(criteria.sleb_records),
    }


def run(spec: dict, device: str = "cpu", log=print) -> dict:
    """The prune_model job: the measurements of the spec's model into spec["out"] (see
    workflow_scripts/prune_model.py for the keys and outputs). Returns the summary."""
    clock = PhaseClock()
    planned = plan(spec, device, log, clock)
    task_results = evaluate(planned, spec, log)
    clock.lap("lm_eval")
    with atomic_path(Path(spec["out"]), is_dir=True) as tmp:
        speed_table = measure_speed(planned, spec, device, tmp)
        clock.lap("speed")
        return write(tmp, planned, task_results, speed_table, spec, clock)
