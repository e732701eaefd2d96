"""The scaling stage's settings: a fit's settings are `scaling.fit` overridden by its
`scaling.fits` entry (nested mappings merged), checked where the schema cannot (the exponent
bounds an interval, whose default is config/schema.yaml's; depth_offset only for the decomposed
law). An error about a fit also names the `scaling.fit` key it inherits the value from."""

from __future__ import annotations

from depthlab.core.errors import ConfigError
from depthlab.settings.defaults import default

NESTED_FIT_KEYS = ("start_grid", "bootstrap", "validation", "columns")


def set_by(fit: dict, *fields: str) -> str:
    """' (set by scaling.fit.<field>)' for the fields the fit takes from the defaults, so an
    error about a fit also names the key to edit."""
    inherited = [f"scaling.fit.{field}" for field in fields if field not in fit]
    return f" (set by {', '.join(inherited)})" if inherited else ""


def merge_fit_spec(defaults: dict, fit: dict, name: str = "<name>") -> dict:
    """`scaling.fit` defaults overridden by one `scaling.fits` entry (nested mappings merged)."""
    merged = {**defaults, **fit}
    for key in NESTED_FIT_KEYS:
        if isinstance(defaults.get(key), dict) and isinstance(fit.get(key), dict):
            merged[key] = {**defaults[key], **fit[key]}
    lo, hi = merged.get("exponent_bounds", default("scaling", "fit", "exponent_bounds"))
    if not lo < hi:
        raise ConfigError(
            f"scaling.fits.{name}.exponent_bounds: {[lo, hi]} is not an interval "
            f"(low < high); check scaling.fit.exponent_bounds too"
        )
    if merged.get("law") != "decomposed" and merged.get("depth_offset"):
        raise ConfigError(
            f"scaling.fits.{name}.depth_offset: only applies to the decomposed law, not "
            f"{merged.get('law')!r}" + set_by(fit, "depth_offset", "law")
        )
    return merged
