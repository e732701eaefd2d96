"""The toy model's settings (`toy:`): the temperature grid (a list, or `count` values log-spaced
in [min, max]) and the checks the schema cannot make, with the defaults of the optional keys read
from config/schema.yaml."""

from __future__ import annotations

from depthlab.core.errors import ConfigError
from depthlab.settings.defaults import default


def temperature_grid(spec, key: str = "toy.temperatures") -> list[float]:
    """A list of temperatures, or {min, max, count}: `count` values log-spaced in [min, max]."""
    if isinstance(spec, dict):
        if spec["min"] > spec["max"]:  # both > 0: the schema
            raise ConfigError(f"{key}: min {spec['min']} must not exceed max {spec['max']}")
        if spec["count"] > 1 and spec["min"] == spec["max"]:
            raise ConfigError(f"{key}: {spec['count']} temperatures between equal bounds")
        import numpy as np

        return [float(t) for t in np.geomspace(spec["min"], spec["max"], spec["count"])]
    return [float(t) for t in spec]


def exponent_bounds(toy: dict) -> list:
    """toy.exponent_bounds (the schema's default when omitted), checked to be an interval."""
    lo, hi = toy.get("exponent_bounds", default("toy", "exponent_bounds"))
    if not lo < hi:
        raise ConfigError(f"toy.exponent_bounds: {[lo, hi]} is not an interval (low < high)")
    return [lo, hi]


def checked_protocol(toy: dict) -> str:
    """toy.protocol (the schema's default when omitted), checked against the fit form's depths
    and the input size the protocol allows."""
    if toy["fit_form"] == "power_offset" and len(toy["student_depths"]) < 3:
        raise ConfigError("toy.student_depths: the power_offset form needs at least 3 depths")
    protocol = toy.get("protocol", default("toy", "protocol"))
    if protocol != "embedding" and toy.get("input_size") not in (None, toy["width"]):
        raise ConfigError(
            f"toy.input_size: {toy['input_size']} must equal toy.width "
            f"({toy['width']}) or be null in the {protocol} protocol (the inputs "
            f"are rmsnorm-ed Gaussians of dimension width)"
        )
    return protocol
