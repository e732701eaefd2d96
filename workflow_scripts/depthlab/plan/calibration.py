"""The plan priced from measurement: a config overlay written from the `gpu_check.json` that
workflow_scripts/gpu_check.py writes on one GPU node.

gpu_check measures the GPU's dense matmul rates (bf16, fp32 without TF32, fp64) and, per job
family (job_costs.UTILISATION_FAMILIES), the FLOP rate the project's code reaches, counted with
the plan's own FLOP model. The overlay sets `cluster.gpu` to that GPU: its name and memory, the
measured rates as its peaks, each family's rate over the measured bf16 peak as its utilisation,
and `source` (GPU, driver, CUDA, torch, date, commit). Merged after the config it calibrates
(`plan.py CONFIG OVERLAY`; `snakemake --configfile CONFIG OVERLAY -- all`, no `=` after
--configfile, which would make OVERLAY a target), it keeps that config's
`per_node` and `sizing`. Torch-free."""

from __future__ import annotations

import json
import math
from pathlib import Path

from depthlab.core.errors import ConfigError
from depthlab.plan.job_costs import UTILISATION_FAMILIES

OVERLAY_HEADER = "# Written by workflow_scripts/plan.py --calibrate"
PEAK_KEYS = ("bf16_tflops", "fp32_tflops", "fp64_tflops")


def _number(check: dict, path: str, where: str, upper: float | None = None) -> float:
    value = check
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ConfigError(f"{where}: no `{path}` (not a gpu_check.py result?)")
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: `{path}` is {value!r}, not a number")
    if value <= 0 or (upper is not None and value > upper):
        bound = f"in (0, {upper:g}]" if upper is not None else "above 0"
        raise ConfigError(f"{where}: `{path}` is {value!r}, not {bound}")
    return float(value)


def read_gpu_check(path: str | Path) -> dict:
    """gpu_check.json, checked: a GPU run with the measured peaks and at least one family's
    share (ConfigError naming the file and key otherwise)."""
    path = Path(path)
    try:
        check = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"--calibrate: {path} does not exist") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"--calibrate: {path} is not JSON ({error})") from None
    if not isinstance(check, dict):
        raise ConfigError(f"--calibrate: {path} is not a gpu_check.py result")
    device = check.get("device") or {}
    if device.get("type") != "cuda":
        raise ConfigError(
            f"--calibrate: {path} was measured without a GPU (device "
            f"{device.get('type', 'unknown')}, tiny shapes): its shares say nothing about a "
            f"cluster's GPUs; run workflow_scripts/gpu_check.py on a GPU node and calibrate with "
            f"that gpu_check.json"
        )
    for key in ("name", "memory_gb"):
        if not device.get(key):
            raise ConfigError(f"--calibrate: {path}: no `device.{key}`")
    _number(check, "device.memory_gb", str(path))
    for key in PEAK_KEYS:
        _number(check, f"peaks.{key}", str(path))
    measured = measured_families(check)
    if not measured:
        raise ConfigError(
            f"--calibrate: {path} measured no job family's share (`utilisation` has none of "
            f"{', '.join(UTILISATION_FAMILIES)})"
        )
    for family in measured:
        _number(check, f"utilisation.{family}", str(path), upper=1.0)
    return check


def measured_families(check: dict) -> list[str]:
    """The families whose share the check measured (a row its time budget cut is missing)."""
    shares = check.get("utilisation") or {}
    return [
        f for f in UTILISATION_FAMILIES if isinstance(shares, dict) and shares.get(f) is not None
    ]


def config_share(gpu: dict, family: str) -> float:
    """The calibrated config's share for `family` (one number is every family's)."""
    value = gpu["utilisation"]
    return float(value[family] if isinstance(value, dict) else value)


def source_line(check: dict, origin: str, kept: list | tuple = ()) -> str:
    """Where the calibrated values come from, in one line (`kept`: families whose share the
    check did not measure, kept from the calibrated config)."""
    device, versions = check["device"], check.get("versions") or {}
    parts = [f"driver {device['driver']}" if device.get("driver") else ""]
    parts += [f"CUDA {versions['cuda']}" if versions.get("cuda") else ""]
    parts += [f"torch {versions['torch']}" if versions.get("torch") else ""]
    details = ", ".join(p for p in parts if p)
    return (
        f"measured by workflow_scripts/gpu_check.py on one {device['name']}"
        f"{f' ({details})' if details else ''}, {check.get('date', 'undated')}, commit "
        f"{check.get('commit', 'unknown')} ({origin}): peaks = its measured dense matmul rates, "
        f"utilisation = each family's measured FLOP rate over the bf16 one"
        + (
            f", except {', '.join(kept)}: not measured, the calibrated config's share"
            if kept
            else ""
        )
    )


def _significant(value: float, digits: int = 4) -> float:
    return float(f"{float(value):.{digits}g}")


def calibrated_gpu(check: dict, origin: str, config_gpu: dict) -> dict:
    """The `cluster.gpu` keys gpu_check measured (per_node is the cluster's, not measured); a
    family the check did not measure keeps `config_gpu`'s share, and `source` names it."""
    peaks = check["peaks"]
    measured = measured_families(check)
    kept = [f for f in UTILISATION_FAMILIES if f not in measured]
    return {
        "name": check["device"]["name"],
        "memory_gb": _significant(check["device"]["memory_gb"]),
        **{key: _significant(peaks[key]) for key in PEAK_KEYS},
        "utilisation": {
            family: round(float(check["utilisation"][family]), 4)
            if family in measured
            else config_share(config_gpu, family)
            for family in UTILISATION_FAMILIES
        },
        "source": source_line(check, origin, kept),
    }


def overlay_text(gpu: dict, origin: str) -> str:
    """The overlay file: a header saying what wrote it, then `cluster.gpu` (block YAML)."""
    import yaml

    body = yaml.safe_dump({"cluster": {"gpu": gpu}}, sort_keys=False, width=100)
    return (
        f"{OVERLAY_HEADER} {origin}: the GPU gpu_check.py measured, its\n"
        "# measured peaks and each job family's measured share of the bf16 peak. Merge it after the\n"
        "# config it calibrates: plan.py CONFIG THIS_FILE; snakemake --configfile CONFIG THIS_FILE --\n"
        "# all. That config keeps its cluster.gpu.per_node and sizing. Rewritten by each --calibrate.\n"
        f"{body}"
    )


def check_target(target: str | Path, configs: list) -> Path:
    """The overlay's path, refused when it is one of `configs` or an existing file --calibrate
    did not write (a config would be overwritten)."""
    target = Path(target)
    if any(target.resolve() == Path(c).resolve() for c in configs):
        raise ConfigError(f"--write: {target} is a config being calibrated; name a new file")
    if target.exists() and not target.read_text().startswith(OVERLAY_HEADER):
        raise ConfigError(
            f"--write: {target} exists and was not written by --calibrate; name a new file"
        )
    return target


def calibration(check_path: str | Path, config: dict, configs: list) -> dict:
    """The overlay's `cluster.gpu` from `check_path`, for `config` (merged from the files
    `configs`); refused for a config that plans no GPU (the overlay could not complete it)."""
    if not (config.get("cluster") or {}).get("gpu"):
        raise ConfigError(
            f"--calibrate: {' '.join(map(str, configs))} has no cluster.gpu, so it plans no "
            f"GPU (config/paper.yaml has one): nothing to calibrate"
        )
    return calibrated_gpu(read_gpu_check(check_path), str(check_path), config["cluster"]["gpu"])


def write_overlay(target: Path, gpu: dict, check_path: str | Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(overlay_text(gpu, str(check_path)))
