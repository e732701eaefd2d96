"""The pruning stage's settings (`pruning:` and each prune_model spec): the one rule for a
block-size grid, the checks the schema cannot make (every grid against the model's depth, the
greedy cap, the criteria's calibration windows and largest n, validation windows, re-encoding
caps, lm-eval, healing's choice of sets, speed, the sub-layer search, the auto-depth choices) and
the re-encoding caps' defaults (read from config/schema.yaml). The criteria themselves are
declared in depthlab.settings.block_criteria. Healing's training settings are checked by
depthlab.settings.training.validate_healing_settings, which the resolver calls beside
validate_pruning_settings.

Torch-free: the Snakefile resolves every job's spec through these checks on each invocation,
`snakemake -n` included (tests/unit/config/test_config.py checks that resolving the shipped
configs imports no torch).
"""

from __future__ import annotations

from collections.abc import Sequence

from depthlab.core.errors import PruningError, check_names

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
    if values is None:
        return
    if not isinstance(values, (list, tuple)) or not values:
        raise PruningError(f"{key}: a non-empty list of block sizes, or null for 1..L-1")
    for n in values:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise PruningError(f"{key}: block size {n!r} must be an integer >= 1")
        if n >= num_layers:
            raise PruningError(
                f"{key}: block size {n} >= the model's {num_layers} layers "
                f"(at most {num_layers - 1} can be removed)"
            )


def _positive_ints(section: dict, keys: Sequence[str], where: str) -> None:
    for key in keys:
        value = section.get(key)  # a missing optional key is reported like a bad value
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PruningError(f"{where}.{key}: must be an integer >= 1 (got {value!r})")


def check_loss_tokens(
    val: dict, key: str = "pruning.val.loss_tokens", seq_len_key: str = "pruning.val.seq_len"
) -> None:
    """val.loss_tokens (absent or null: every position scored) is an integer in 1..val.seq_len;
    `key` and `seq_len_key` name the keys that set them (a per_model override's where one
    applies)."""
    loss_tokens = val.get("loss_tokens")
    if loss_tokens is None:
        return
    if not isinstance(loss_tokens, int) or isinstance(loss_tokens, bool) or loss_tokens < 1:
        raise PruningError(f"{key}: an integer >= 1 or null (got {loss_tokens!r})")
    if loss_tokens > val["seq_len"]:
        raise PruningError(
            f"{key}: {loss_tokens} scored positions per window exceed the window's "
            f"{val['seq_len']} target positions ({seq_len_key})"
        )


def _check_greedy_cap(settings: dict, num_layers: int, where: str) -> None:
    """pruning.greedy_max_n: an integer >= 1 (a cap above the grid's largest n changes
    nothing), only with the greedy strategy; healing and speed must not name a greedy set
    beyond it (lm-eval's grid applies to every strategy: greedy is scored where it has a set)."""
    cap = settings.get("greedy_max_n")
    if cap is None:
        return
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise PruningError(f"{where}.greedy_max_n: an integer >= 1 or null (got {cap!r})")
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
    Checks the strategies, every block-size grid (1 <= n < L), the greedy cap, validation
    windows and their scored positions, the re-encoding caps, lm-eval, healing and speed keys
    (the choices made on the measurements: validate_auto_depth_settings; the training settings
    of healing: depthlab.settings.training.validate_healing_settings)."""
    if num_layers < 2:
        raise PruningError(f"{where}: a model of {num_layers} layer(s) has no layer to remove")
    strategies = settings["strategies"]
    check_names(strategies, STRATEGIES, f"{where}.strategies", "strategy", PruningError)
    _check_grid(settings["n_grid"], num_layers, f"{where}.n_grid")
    _positive_ints(settings["val"], ("windows", "seq_len", "batch_size"), f"{where}.val")
    check_loss_tokens(settings["val"], f"{where}.val.loss_tokens", f"{where}.val.seq_len")
    caps = tuple(retokenize_caps(None))
    for key, value in (settings.get("retokenize") or {}).items():  # absent: a pretrain model
        if key not in caps:
            raise PruningError(f"{where}.retokenize.{key}: unknown key (known: {', '.join(caps)})")
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise PruningError(f"{where}.retokenize.{key}: an integer >= 1 or null (got {value!r})")
    lm_eval = settings["lm_eval"]
    if lm_eval["enabled"]:
        _check_grid(lm_eval["n_grid"], num_layers, f"{where}.lm_eval.n_grid")
        _positive_ints(lm_eval, ("batch_size",), f"{where}.lm_eval")
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
        _positive_ints(
            speed, ("batch_size", "prompt_length", "new_tokens", "repeats"), f"{where}.speed"
        )
    _check_greedy_cap(settings, num_layers, where)
    check_criteria_settings(settings, num_layers, where)
    check_sublayer_settings(settings.get("sublayer"), num_layers, f"{where}.sublayer")


def check_criteria_settings(settings: dict, num_layers: int, where: str = "pruning") -> None:
    """The block-ranking criteria's settings: pruning.calibration ({windows, seq_len,
    batch_size}, integers >= 1) is required by the criteria that read it (CALIBRATED_STRATEGIES);
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
        _positive_ints(calibration, ("windows", "seq_len", "batch_size"), f"{where}.calibration")
        if calibration["seq_len"] < 2:
            raise PruningError(f"{where}.calibration.seq_len: must be >= 2")
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
    an integer in 1..2L-1 when enabled (each layer has an attention and an MLP unit; one unit
    stays)."""
    if sublayer is None:
        return
    if not isinstance(sublayer, dict):
        raise PruningError(f"{where}: a mapping {{enabled, max_units}} (got {sublayer!r})")
    unknown = sorted(set(sublayer) - {"enabled", "max_units"})
    if unknown:
        raise PruningError(f"{where}.{unknown[0]}: unknown key (known: enabled, max_units)")
    if not isinstance(sublayer.get("enabled"), bool):
        raise PruningError(f"{where}.enabled: true or false (got {sublayer.get('enabled')!r})")
    if not sublayer["enabled"]:
        return
    units = sublayer.get("max_units")
    if not isinstance(units, int) or isinstance(units, bool) or not 1 <= units < 2 * num_layers:
        raise PruningError(
            f"{where}.max_units: an integer in 1..{2 * num_layers - 1} for a model of "
            f"{num_layers} layers ({2 * num_layers} attention and MLP units, one kept; "
            f"got {units!r})"
        )


def validate_auto_depth_settings(settings: dict, where: str = "pruning") -> None:
    """Config-time check of the choices a pruning section makes on its measurements: the
    auto-depth tolerances, lm_eval.metric (of mean_acc and task tolerances) and every export
    item (a measured strategy, a metric with a tolerance); raises ValueError naming the key."""
    if settings["lm_eval"]["metric"] not in ("acc", "acc_norm", "score"):
        raise PruningError(
            f"{where}.lm_eval.metric: acc, acc_norm or score "
            f"(got {settings['lm_eval']['metric']!r})"
        )
    tolerances = settings["auto_depth"].get("tolerances", {})
    for metric, tolerance in tolerances.items():
        if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or tolerance < 0:
            raise PruningError(f"{where}.auto_depth.tolerances.{metric}: must be a number >= 0")
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
