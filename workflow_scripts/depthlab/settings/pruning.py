"""The pruning stage's settings (`pruning:` and each prune_model spec): the one rule for a
block-size grid, the checks the schema cannot make (every grid against the model's depth, the
greedy cap against the grids, the criteria's calibration windows and largest n, scored positions
against the window, healing's and speed's choice of sets, the sub-layer search against the depth,
the export's strategies and metrics, and the settings a per_model override must complete) and the
re-encoding caps' defaults (read from config/schema.yaml). Every value's type, range and enum is
the schema's: a spec is built from a validated config. The criteria themselves are
declared in depthlab.settings.block_criteria. Healing's training settings are checked by
depthlab.settings.training.validate_healing_settings, which the resolver calls beside
validate_pruning_settings.

Torch-free: the Snakefile resolves every job's spec through these checks on each invocation,
`snakemake -n` included (tests/unit/config/test_config.py checks that resolving the shipped
configs imports no torch).
"""

from __future__ import annotations

from collections.abc import Sequence

from depthlab.core.errors import PruningError

# The strategies, which read calibration windows, their protected layers and largest n: the
# criteria registry (re-exported for the checks below and their callers).
from depthlab.settings.block_criteria import (  # noqa: F401
    CALIBRATED_STRATEGIES,
    CRITERIA,
    STRATEGIES,
    protected_layers,
)
from depthlab.settings.block_criteria import max_n as strategy_max_n
from depthlab.settings.defaults import defaults


def block_sizes(n_grid: Sequence[int] | None, num_layers: int) -> list[int]:
    """The one rule for a block-size grid: null is every n from 1 to L-1, a list its distinct
    sizes in order (unchecked: the resource planner prices specs `grid` has checked)."""
    if n_grid is None:
        return list(range(1, num_layers))
    return sorted({int(n) for n in n_grid})


def grid(n_grid: Sequence[int] | None, num_layers: int, key: str = "pruning.n_grid") -> list[int]:
    """The configured block sizes (block_sizes), checked against L."""
    values = block_sizes(n_grid, num_layers)
    for n in values:
        if not 1 <= n < num_layers:
            raise PruningError(
                f"{key}: block size {n} is outside 1..{num_layers - 1} for a "
                f"model of {num_layers} layers"
            )
    return values


def retokenize_caps(retokenize: dict | None) -> dict:
    """pruning.retokenize with the schema's default for each cap the config omits (the schema
    gives every cap one: its keys are the caps there are)."""
    return {**defaults("pruning", "retokenize"), **(retokenize or {})}


NO_HEALING = {"enabled": False}


def _check_grid(values, num_layers: int, key: str) -> None:
    """Every block size of a grid (null: every n) below the model's depth (the schema: a
    non-empty list of integers >= 1)."""
    for n in values or ():
        if n >= num_layers:
            raise PruningError(
                f"{key}: block size {n} >= the model's {num_layers} layers "
                f"(at most {num_layers - 1} can be removed)"
            )


def _present(section: dict, keys: Sequence[str], where: str) -> None:
    """The keys a section enabled by a per_model override (or given there alone) must still
    set: the schema requires them of pruning.<section>, where that section is whole, but cannot
    see the merge of the stage's section with a model's override."""
    for key in keys:
        if section.get(key) is None:
            raise PruningError(
                f"{where}.{key}: missing (set it in {where} or in the model's per_model override)"
            )


def check_loss_tokens(
    val: dict, key: str = "pruning.val.loss_tokens", seq_len_key: str = "pruning.val.seq_len"
) -> None:
    """val.loss_tokens (absent or null: every position scored; the schema: an integer >= 1) is
    at most val.seq_len; `key` and `seq_len_key` name the keys that set them (a per_model
    override's where one applies)."""
    loss_tokens = val.get("loss_tokens")
    if loss_tokens is not None and loss_tokens > val["seq_len"]:
        raise PruningError(
            f"{key}: {loss_tokens} scored positions per window exceed the window's "
            f"{val['seq_len']} target positions ({seq_len_key})"
        )


def _check_greedy_cap(settings: dict, num_layers: int, where: str) -> None:
    """pruning.greedy_max_n (a cap above the grid's largest n changes nothing) only with the
    greedy strategy; healing and speed must not name a greedy set beyond it (lm-eval's grid
    applies to every strategy: greedy is scored where it has a set)."""
    cap = settings.get("greedy_max_n")
    if cap is None:
        return
    if "greedy" not in settings["strategies"]:
        raise PruningError(
            f"{where}.greedy_max_n: has no effect without greedy in {where}.strategies"
        )
    pruned = set(grid(settings["n_grid"], num_layers, f"{where}.n_grid"))
    # a prune_model spec has no healing section (healing is heal_pruned's): nothing to check
    healing, speed = settings.get("healing", NO_HEALING), settings["speed"]
    uses = []
    if healing["enabled"] and "greedy" in (healing.get("strategies") or settings["strategies"]):
        uses.append(("healing", healing.get("n_grid")))
    if speed["enabled"] and speed.get("strategy") == "greedy":
        uses.append(("speed", speed.get("n_grid")))
    for section, values in uses:
        beyond = sorted(
            n
            for n in grid(values, num_layers, f"{where}.{section}.n_grid")
            if n in pruned and n > cap
        )
        if beyond:
            raise PruningError(
                f"{where}.{section}.n_grid: greedy has no removal set for n = "
                f"{', '.join(map(str, beyond))} (the greedy path stops at {where}.greedy_max_n = "
                f"{cap}); list block sizes <= {cap}, raise the cap, or leave greedy out of "
                f"{where}.{section}" + ("" if section == "speed" else ".strategies")
            )


def validate_pruning_settings(settings: dict, num_layers: int, where: str = "pruning") -> None:
    """Config-time check of a pruning section (the settings part of a prune_model spec, schema
    defaults applied) against a model of `num_layers` layers; raises ValueError naming the key.
    Checks every block-size grid against L, the greedy cap, the scored positions against the
    window, healing's strategies and speed's settings (the choices made on the measurements:
    validate_auto_depth_settings; the training settings of healing:
    depthlab.settings.training.validate_healing_settings)."""
    if num_layers < 2:
        raise PruningError(f"{where}: a model of {num_layers} layer(s) has no layer to remove")
    strategies = settings["strategies"]
    _check_grid(settings["n_grid"], num_layers, f"{where}.n_grid")
    check_loss_tokens(settings["val"], f"{where}.val.loss_tokens", f"{where}.val.seq_len")
    lm_eval = settings["lm_eval"]
    if lm_eval["enabled"]:
        _check_grid(lm_eval["n_grid"], num_layers, f"{where}.lm_eval.n_grid")
    healing = settings.get("healing", NO_HEALING)
    if healing["enabled"]:
        for strategy in healing.get("strategies") or []:
            if strategy not in strategies:
                raise PruningError(
                    f"{where}.healing.strategies: '{strategy}' is not one of "
                    f"{where}.strategies ({', '.join(strategies)})"
                )
        _check_grid(healing.get("n_grid"), num_layers, f"{where}.healing.n_grid")
    speed = settings["speed"]
    if speed["enabled"]:
        if speed.get("strategy") not in strategies:
            raise PruningError(
                f"{where}.speed.strategy: '{speed.get('strategy')}' is not one of "
                f"{where}.strategies"
            )
        _check_grid(speed.get("n_grid"), num_layers, f"{where}.speed.n_grid")
        _present(speed, ("batch_size", "prompt_length", "new_tokens", "repeats"), f"{where}.speed")
    _check_greedy_cap(settings, num_layers, where)
    check_criteria_settings(settings, num_layers, where)
    check_sublayer_settings(settings.get("sublayer"), num_layers, f"{where}.sublayer")


def check_criteria_settings(settings: dict, num_layers: int, where: str = "pruning") -> None:
    """The block-ranking criteria's settings: pruning.calibration ({windows, seq_len,
    batch_size}) is required by the criteria that read it (CALIBRATED_STRATEGIES);
    healing and speed must not name a criterion at an n it has no set for (strategy_max_n)."""
    calibrated = [s for s in settings["strategies"] if s in CALIBRATED_STRATEGIES]
    calibration = settings.get("calibration")
    if calibrated and calibration is None:
        raise PruningError(
            f"{where}.calibration: required by the strategies {', '.join(calibrated)} (their "
            f"blocks are ranked on calibration windows of the train split: give "
            f"{{windows, seq_len, batch_size}})"
        )
    if calibration is not None:
        _present(calibration, ("windows", "seq_len", "batch_size"), f"{where}.calibration")
    pruned = set(grid(settings["n_grid"], num_layers, f"{where}.n_grid"))
    healing, speed = settings.get("healing", NO_HEALING), settings["speed"]
    uses = []
    if healing["enabled"]:
        for strategy in healing.get("strategies") or settings["strategies"]:
            uses.append(("healing", strategy, healing.get("n_grid")))
    if speed["enabled"]:
        uses.append(("speed", speed.get("strategy"), speed.get("n_grid")))
    for section, strategy, values in uses:
        cap = strategy_max_n(strategy, num_layers)
        if strategy not in STRATEGIES or cap == num_layers - 1:
            continue
        beyond = sorted(
            n
            for n in grid(values, num_layers, f"{where}.{section}.n_grid")
            if n in pruned and n > cap
        )
        if beyond:
            kept = protected_layers(strategy, num_layers)
            raise PruningError(
                f"{where}.{section}.n_grid: {strategy} has no removal set for n = "
                f"{', '.join(map(str, beyond))} in a model of {num_layers} layers (it never "
                f"removes layers {', '.join(map(str, kept))}"
                + (", nor more than half the layers" if CRITERIA[strategy].max_fraction else "")
                + f"; at most n = {cap})"
            )


def check_sublayer_settings(sublayer, num_layers: int, where: str = "pruning.sublayer") -> None:
    """pruning.sublayer (absent or null: no sub-layer search): {enabled, max_units}, max_units
    at most 2L-1 when enabled (each layer has an attention and an MLP unit; one unit stays).
    Both keys are checked present: a per_model override may give one where the stage has no
    sublayer section."""
    if sublayer is None:
        return
    _present(sublayer, ("enabled",), where)
    if not sublayer["enabled"]:
        return
    units = sublayer.get("max_units")
    if units is None or units >= 2 * num_layers:
        raise PruningError(
            f"{where}.max_units: an integer in 1..{2 * num_layers - 1} for a model of "
            f"{num_layers} layers ({2 * num_layers} attention and MLP units, one kept; "
            f"got {units!r})"
        )


def validate_auto_depth_settings(settings: dict, where: str = "pruning") -> None:
    """Config-time check of the choices a pruning section makes on its measurements: every
    export item a measured strategy and a metric with an auto-depth tolerance; raises
    ValueError naming the key."""
    tolerances = settings["auto_depth"].get("tolerances", {})
    for index, item in enumerate(settings["export"]):
        if item["strategy"] not in settings["strategies"]:
            raise PruningError(
                f"{where}.export[{index}].strategy: '{item['strategy']}' is "
                f"not one of {where}.strategies"
            )
        if item["metric"] not in tolerances:
            raise PruningError(
                f"{where}.export[{index}].metric: '{item['metric']}' has no "
                f"tolerance in {where}.auto_depth.tolerances"
            )
