"""Config-time checks of the model stages' settings (pruning, skip interventions, linear maps;
healing's are depthlab.core.training_settings') and the names they check against. No torch or numpy here (transformers only to compare two
local checkpoints' tokenizers): the Snakefile resolves every job's spec through these checks on
each invocation, `snakemake -n` included, and importing the model code would add several seconds
to each. The stage modules import what they need from here; tests/unit/config/test_config.py checks that
resolving the shipped configs imports no torch.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from depthlab.core.errors import PruningError, check_names
from depthlab.core.training_settings import validate_healing_settings

# The strategies, which read calibration windows, their protected layers and largest n: the
# criteria registry (re-exported for the checks below and their callers).
from depthlab.plan.block_criteria import (  # noqa: F401
    CALIBRATED_STRATEGIES,
    CRITERIA,
    STRATEGIES,
    protected_layers,
)
from depthlab.plan.block_criteria import max_n as strategy_max_n

# --------------------------------------------------------------------------- pruning


def grid(n_grid: Sequence[int] | None, num_layers: int, key: str = "pruning.n_grid") -> list[int]:
    """The configured block sizes (null: every n from 1 to L-1), checked against L."""
    if n_grid is None:
        return list(range(1, num_layers))
    values = sorted({int(n) for n in n_grid})
    for n in values:
        if not 1 <= n < num_layers:
            raise PruningError(
                f"{key}: block size {n} is outside 1..{num_layers - 1} for a "
                f"model of {num_layers} layers"
            )
    return values


# --------------------------------------------------------------------------- pruning_stage


RETOKENIZE_KEYS = ("val_tokens", "train_tokens")
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
    (the choices made on the measurements: validate_auto_depth_settings)."""
    if num_layers < 2:
        raise PruningError(f"{where}: a model of {num_layers} layer(s) has no layer to remove")
    strategies = settings["strategies"]
    check_names(strategies, STRATEGIES, f"{where}.strategies", "strategy", PruningError)
    _check_grid(settings["n_grid"], num_layers, f"{where}.n_grid")
    _positive_ints(settings["val"], ("windows", "seq_len", "batch_size"), f"{where}.val")
    check_loss_tokens(settings["val"], f"{where}.val.loss_tokens", f"{where}.val.seq_len")
    for key, value in (settings.get("retokenize") or {}).items():  # absent: a pretrain model
        if key not in RETOKENIZE_KEYS:
            raise PruningError(
                f"{where}.retokenize.{key}: unknown key (known: {', '.join(RETOKENIZE_KEYS)})"
            )
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
        validate_healing_settings(healing, f"{where}.healing")
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


# --------------------------------------------------------------------------- interventions


KINDS = ("layer", "attention", "mlp")


SCOPES = ("all", "future")


VARIANTS = tuple(f"{kind}_{scope}" for kind in KINDS for scope in SCOPES)


def parse_variant(name: str, where: str = "variants") -> tuple[str, str]:
    """`<kind>_<scope>` -> (kind, scope); ValueError naming `where` for an unknown one."""
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(
            f"{where}: unknown intervention kind {name!r} (known: {', '.join(VARIANTS)})"
        )
    kind, scope = name.rsplit("_", 1)
    return kind, scope


def check_layer_indices(layers, num_layers: int, where: str = "layers") -> None:
    """Every index an int in [0, num_layers); ValueError naming `where` otherwise."""
    for index in layers:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise ValueError(f"{where}: layer index {index!r} is not an integer")
        if not 0 <= int(index) < num_layers:
            raise ValueError(
                f"{where}: layer index {index} is out of range for a model with "
                f"{num_layers} layers (0..{num_layers - 1})"
            )


def validate_intervention_settings(
    spec: dict, num_layers: int | None = None, where: str = "depth_use.skip"
) -> None:
    """Config-time check of a skip-intervention settings dict (keys as SkipSettings, plus an
    optional `depth_score_variant`); raises ValueError whose message starts with the key."""
    variants = spec.get("variants")
    if not isinstance(variants, (list, tuple)) or not variants:
        raise ValueError(f"{where}.variants: a non-empty list of {', '.join(VARIANTS)}")
    for name in variants:
        parse_variant(name, f"{where}.variants")
    if len(set(variants)) != len(variants):
        twice = sorted({v for v in variants if list(variants).count(v) > 1})
        raise ValueError(f"{where}.variants: listed more than once: {', '.join(twice)}")
    for key, low in (
        ("no_skip_front", 0),
        ("future_positions", 1),
        ("future_min_position", 1),
        ("max_rows", 1),
    ):
        value = spec.get(key)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
            raise ValueError(f"{where}.{key}: an integer >= {low} (got {value!r})")
    layers = spec.get("layers")
    if layers is not None:
        if not isinstance(layers, (list, tuple)) or not layers:
            raise ValueError(f"{where}.layers: null (every layer) or a non-empty list of indices")
        if num_layers is not None:
            check_layer_indices(layers, num_layers, f"{where}.layers")
        else:
            for index in layers:
                if isinstance(index, bool) or not isinstance(index, numbers.Integral) or index < 0:
                    raise ValueError(
                        f"{where}.layers: layer index {index!r} is not an integer >= 0"
                    )
    score_variant = spec.get("depth_score_variant")
    if score_variant is not None:
        kind, scope = parse_variant(score_variant, f"{where}.depth_score_variant")
        if scope != "all":
            raise ValueError(
                f"{where}.depth_score_variant: {score_variant!r} intervenes only "
                f"before a sampled position; the depth score needs an '_all' "
                f"variant (the effect at the answer positions)"
            )


# --------------------------------------------------------------------------- linear_maps


def validate_linear_map_settings(spec: dict, where: str = "depth_use.linear_maps") -> None:
    """Config-time check of what the schema cannot say about the linear-map settings (it owns
    every type, range and enum): finite ridge strengths and fractions that leave documents to
    fit on. ValueError naming the key."""
    if not all(math.isfinite(a) for a in spec["alphas"]):
        raise ValueError(f"{where}.alphas: ridge strengths must be finite")
    if spec["val_fraction"] + spec["test_fraction"] >= 1:
        raise ValueError(
            f"{where}.test_fraction: val_fraction + test_fraction must leave documents to fit on"
        )


def tokenizer_difference(a, b) -> str | None:
    """How two loaded tokenizers differ in the ids they give (vocabulary, bos/eos id), or None
    when they map every token to the same id."""
    if a.get_vocab() != b.get_vocab():
        return f"different tokenizers (vocabularies of {len(a)} and {len(b)} tokens differ)"
    for attr in ("bos_token_id", "eos_token_id"):
        if getattr(a, attr) != getattr(b, attr):
            return f"different {attr}"
    return None


def check_same_tokenizer(path_a: str, path_b: str, where: str = "depth_use.linear_maps") -> None:
    """Raise ValueError (naming `where`) unless the two checkpoints' tokenizers map every token
    to the same id (same vocabulary and special tokens); reads only tokenizer files."""
    from depthlab.models.architectures import load_tokenizer

    try:
        a, b = load_tokenizer(path_a), load_tokenizer(path_b)
    except (OSError, ValueError) as error:
        raise ValueError(f"{where}: cannot load a tokenizer to compare ({error})") from None
    difference = tokenizer_difference(a, b)
    if difference is None:
        return
    if difference.startswith("different tokenizers"):
        raise ValueError(
            f"{where}: models {path_a} and {path_b} have {difference}; a linear map "
            f"between their states position by position needs the same tokens "
            f"(alignment: word_ends pairs the ends of words instead)"
        )
    raise ValueError(f"{where}: models {path_a} and {path_b} have {difference}")
