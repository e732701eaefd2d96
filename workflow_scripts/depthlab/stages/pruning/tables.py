"""The pruning stage's tables, built from what its jobs measured (torch-free: the gathering job
writes them without loading a model).

The stage runs as several jobs (depthlab.stages.pruning.stage's module docstring): prune_model
measures the removal sets and their losses into `measured.json`; heal_pruned heals one variant
and evaluate_pruned runs lm-eval on one removal set, each into a part folder of its own; the
gather_pruning job builds sweep.csv, single_layer.csv, window_losses.csv and healing.csv from
them (`gather`), in the order one job doing all of it would have used, and copies the rest.

measured.json (written by prune_model; `removed` is a list of layers, [] for the full model):
  model, num_layers, strategies, n_values
  removals        [{strategy, n, removed}] every (strategy, n) set, in the stage's order
  singles         the layers removed one at a time
  layer_params    the number of parameters of each decoder layer (sweep.csv's removed_params)
  losses          [{removed, loss}] the validation loss of the full model, every single layer
                  and every set
  window_losses   [{strategy, n, removed, losses}] the loss per validation window of the full
                  model (strategy full), single layers (single) and every (strategy, n) set
  task_results    [{removed, rows}] lm-eval rows of the sets prune_model scored itself (none when
                  each set is its own evaluate_pruned job)
A heal part's heal.json: {strategy, n, method, removed, loss, window_losses, record, tasks,
token_source, seconds} (a part written before `method` existed has it in its record only); an
evaluation part's tasks.json: {variant, removed, rows, seconds}.

Healing methods (pruning.healing.methods): sweep.csv holds the healed rows of the first method
(the method of the first heal part: the config resolver lists the first method's parts first),
so its readers (auto depth, figures) see one healed curve as before; healing.csv,
healing_sweep.csv (sweep.csv's columns plus `method`, every method's healed rows) and
window_losses.csv (column `method`: "" for unhealed sets) hold every method's.

Floats cross the jobs in JSON, which writes a float's shortest exact repr: the gathered tables
hold the very values the measuring jobs computed.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from depthlab.core.atomic_files import atomic_path, write_dataframe, write_json
from depthlab.core.errors import PruningError
from depthlab.core.provenance import Provenance

MEASURED_FILE = "measured.json"
HEAL_FILE = "heal.json"
TASKS_FILE = "tasks.json"

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
    "removed_params",
]
WINDOW_LOSS_COLUMNS = ["removed", "strategy", "n", "healed", "window", "loss", "method"]
# what gather_pruning writes itself; every other file of prune_model's folder is copied
GATHERED_FILES = {
    MEASURED_FILE,
    "sweep.csv",
    "single_layer.csv",
    "window_losses.csv",
    "healing.csv",
    "healing_sweep.csv",
    "summary.json",
    "provenance.json",
}


def removed_label(removed: Sequence[int]) -> str:
    """Removed layers as text for tables: "3-4-5" ("" for none)."""
    return "-".join(str(l) for l in removed)


def perplexity(loss: float) -> float:
    return float(math.exp(loss)) if loss < 700 else float("inf")


def task_rows(base: dict, rows: list[dict] | None) -> list[dict]:
    """A variant's sweep rows: one per lm-eval task, or one with empty task columns."""
    if not rows:
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
    return [{**base, **row} for row in rows]


class Measured:
    """measured.json read back: removal sets, losses and in-job lm-eval rows by removal set."""

    def __init__(self, record: dict):
        self.record = record
        self.name = record["model"]
        self.num_layers = record["num_layers"]
        self.strategies = record["strategies"]
        self.n_values = record["n_values"]
        self.removals = {(r["strategy"], r["n"]): tuple(r["removed"]) for r in record["removals"]}
        self.singles = [(layer,) for layer in record["singles"]]
        self.layer_params = record.get("layer_params")  # absent: written before it was recorded
        self.losses = {tuple(r["removed"]): r["loss"] for r in record["losses"]}
        self.task_results = {
            tuple(r["removed"]): rows_from_json(r["rows"]) for r in record["task_results"]
        }

    @classmethod
    def read(cls, folder: str | Path) -> Measured:
        return cls(read_part(Path(folder) / MEASURED_FILE, "prune_model"))

    @property
    def base_loss(self) -> float:
        return self.losses[()]

    def variant_set(self, variant: str) -> tuple[int, ...]:
        """The removal set a variant name denotes: `full`, `single<l>` or `<strategy>_n<n>`."""
        if variant == "full":
            return ()
        if variant.startswith("single"):
            return (int(variant.removeprefix("single")),)
        strategy, _, n = variant.rpartition("_n")
        removed = self.removals.get((strategy, int(n)))
        if removed is None:
            raise PruningError(
                f"{variant}: prune_model of '{self.name}' measured no {strategy} set of n = {n}"
            )
        return removed

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
            "removed_params": self.removed_params(removed),
        }

    def removed_params(self, removed: tuple[int, ...]) -> float:
        """The number of parameters of the removed layers (NaN without layer_params)."""
        if self.layer_params is None:
            return np.nan
        return int(sum(self.layer_params[layer] for layer in removed))

    def unhealed_sets(self, strategy: str) -> list[tuple[int, tuple[int, ...]]]:
        """(n, removed) of one strategy's rows: the full model (n 0), then every measured n."""
        return [(0, ())] + [
            (n, self.removals[(strategy, n)])
            for n in self.n_values
            if (strategy, n) in self.removals
        ]


def rows_to_json(rows: list[dict] | None) -> dict | None:
    """Rows as {columns, values}: write_json sorts keys and writes NaN as null, so the column
    order and the NaNs travel explicitly (rows_from_json restores both)."""
    if rows is None:
        return None
    columns = list(rows[0]) if rows else []
    return {"columns": columns, "values": [[row[c] for c in columns] for row in rows]}


def rows_from_json(table: dict | None) -> list[dict] | None:
    if table is None:
        return None
    return [
        {c: float("nan") if v is None else v for c, v in zip(table["columns"], values)}
        for values in table["values"]
    ]


def read_part(path: Path, job: str) -> dict:
    if not path.is_file():
        raise PruningError(f"{path} does not exist (run the {job} job first)")
    return json.loads(path.read_text())


def part_method(part: dict) -> str:
    """The healing method of a heal part (its record's for a part written before the key)."""
    return part.get("method") or rows_from_json(part["record"])[0]["method"]


def first_method_heals(heals: list[dict]) -> list[dict]:
    """The heal parts of the first healing method (the method of the first part)."""
    return [p for p in heals if part_method(p) == part_method(heals[0])] if heals else []


def healing_sweep_table(measured: Measured, heals: list[dict]) -> pd.DataFrame:
    """healing_sweep.csv: sweep.csv's rows of every healed variant of every method, with the
    method as the last column."""
    rows = []
    for part in heals:
        removed = tuple(part["removed"])
        base = measured.variant_row(part["strategy"], part["n"], removed, True, part["loss"])
        rows += [
            {**row, "method": part_method(part)}
            for row in task_rows(base, rows_from_json(part["tasks"]))
        ]
    return pd.DataFrame(rows)[[*SWEEP_COLUMNS, "method"]]


def sweep_table(measured: Measured, task_results: dict, heals: list[dict]) -> pd.DataFrame:
    """sweep.csv: every strategy's unhealed rows (the full model first), then the healed ones."""
    rows = []
    for strategy in measured.strategies:
        for n, removed in measured.unhealed_sets(strategy):
            base = measured.variant_row(strategy, n, removed, False, measured.losses[removed])
            rows += task_rows(base, task_results.get(removed))
    for part in heals:
        removed = tuple(part["removed"])
        base = measured.variant_row(part["strategy"], part["n"], removed, True, part["loss"])
        rows += task_rows(base, rows_from_json(part["tasks"]))
    return pd.DataFrame(rows)[SWEEP_COLUMNS]


def single_layer_table(measured: Measured, task_results: dict) -> pd.DataFrame:
    rows = []
    base_by_task = {r["task"]: r for r in task_results.get((), [])}
    for (layer,) in measured.singles:
        base = {
            "model": measured.name,
            "layer": layer,
            "val_loss": measured.losses[(layer,)],
            "delta_loss": measured.losses[(layer,)] - measured.base_loss,
        }
        for row in task_results.get((layer,)) or [{}]:
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


def window_loss_table(measured: Measured, heals: list[dict]) -> pd.DataFrame:
    """window_losses.csv, long format: one row per (removal set, window) for the full model
    (strategy `full`, n 0), every single-layer removal (strategy `single`, n 1) and every
    (strategy, n) set of the sweep (a set two strategies share appears under each), healed
    False, method ""; then each healed variant's (healed True, its healing method)."""
    named = [(r["strategy"], r["n"], tuple(r["removed"])) for r in measured.record["window_losses"]]
    per_window = [
        np.asarray(r["losses"], dtype=np.float64) for r in measured.record["window_losses"]
    ]
    flags = [False] * len(named)
    methods = [""] * len(named)
    for part in heals:
        named.append((part["strategy"], part["n"], tuple(part["removed"])))
        per_window.append(np.asarray(part["window_losses"], dtype=np.float64))
        flags.append(True)
        methods.append(part_method(part))
    count = len(per_window[0])
    return pd.DataFrame(
        {
            "removed": np.repeat([removed_label(r) for _, _, r in named], count),
            "strategy": np.repeat([s for s, _, _ in named], count),
            "n": np.repeat([n for _, n, _ in named], count),
            "healed": np.repeat(flags, count),
            "window": np.tile(np.arange(count), len(named)),
            "loss": np.concatenate(per_window),
            "method": np.repeat(methods, count),
        }
    )[WINDOW_LOSS_COLUMNS]


def healing_table(measured: Measured, heals: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "strategy": part["strategy"],
                "n": part["n"],
                "removed": removed_label(part["removed"]),
                "val_loss_unhealed": measured.losses[tuple(part["removed"])],
                "val_loss_healed": part["loss"],
                **rows_from_json(part["record"])[0],
            }
            for part in heals
        ]
    )


def gathered_task_results(measured: Measured, evaluations: list[dict]) -> dict:
    """lm-eval rows by removal set: prune_model's own, then each evaluation part's (a set two
    variants share keeps the first rows: the evaluations are deterministic)."""
    results = dict(measured.task_results)
    for part in evaluations:
        results.setdefault(tuple(part["removed"]), rows_from_json(part["rows"]))
    return results


def gather(spec: dict) -> dict:
    """The gather_pruning job: the tables of prune_model's folder (spec `measured`), the heal
    parts (spec `heals`, in the order of their rows) and the evaluation parts (spec
    `evaluations`) into spec `out`, atomically. Returns the summary."""
    measured_folder = Path(spec["measured"])
    measured = Measured.read(measured_folder)
    heals = [read_part(Path(folder) / HEAL_FILE, "heal_pruned") for folder in spec["heals"]]
    evaluations = [
        read_part(Path(folder) / TASKS_FILE, "evaluate_pruned") for folder in spec["evaluations"]
    ]
    task_results = gathered_task_results(measured, evaluations)
    summary = json.loads((measured_folder / "summary.json").read_text())
    if heals:
        summary["token_source"]["train"] = heals[0]["token_source"]
    phases = summary["phase_seconds"]
    if evaluations:
        phases["lm_eval"] = round(
            phases.get("lm_eval", 0.0) + sum(p["seconds"] for p in evaluations), 3
        )
    if heals:
        phases["healing"] = round(phases.get("healing", 0.0) + sum(p["seconds"] for p in heals), 3)
    summary.update(
        {
            "lm_eval_variants": len(task_results),
            "tasks_full_model": task_results.get((), []),
            "healed_variants": len(heals),
            "phase_seconds": phases,
            "wall_s": round(sum(phases.values()), 3),
            "jobs": {"evaluations": len(evaluations), "heals": len(heals)},
        }
    )
    with atomic_path(Path(spec["out"]), is_dir=True) as out:
        for path in sorted(measured_folder.iterdir()):
            if path.name in GATHERED_FILES:
                continue
            if path.is_dir():
                shutil.copytree(path, out / path.name)
            else:
                shutil.copy2(path, out / path.name)
        write_dataframe(out / "single_layer.csv", single_layer_table(measured, task_results))
        write_dataframe(
            out / "sweep.csv", sweep_table(measured, task_results, first_method_heals(heals))
        )
        write_dataframe(out / "window_losses.csv", window_loss_table(measured, heals))
        if heals:
            write_dataframe(out / "healing.csv", healing_table(measured, heals))
            write_dataframe(out / "healing_sweep.csv", healing_sweep_table(measured, heals))
        for folder in spec["heals"]:
            events = Path(folder) / "tensorboard"
            if events.is_dir():
                shutil.copytree(events, out / "tensorboard" / Path(folder).name)
        write_json(out / "summary.json", summary)
        provenance = Provenance(
            "pruning",
            config=spec,
            seed=measured.record.get("seed"),
            inputs=[measured_folder, *spec["heals"], *spec["evaluations"]],
        )
        provenance.extra["summary"] = summary
        provenance.write(out / "provenance.json")
    return summary
