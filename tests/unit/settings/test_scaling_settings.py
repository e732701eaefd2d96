"""The scaling stage's settings (depthlab.settings.scaling): a fit is `scaling.fit` overridden by
its entry, nested mappings merged; an error names the fit's key and the inherited one."""

from __future__ import annotations

import pytest
from depthlab.core.errors import ConfigError
from depthlab.settings.scaling import merge_fit_spec

DEFAULTS = {"law": "decomposed", "bootstrap": {"samples": 10, "seed": 1}, "exponent_bounds": [0, 3]}


def test_an_entry_overrides_the_defaults_and_merges_nested_mappings():
    merged = merge_fit_spec(DEFAULTS, {"bootstrap": {"samples": 5}, "depth_offset": 1}, "f")
    assert merged == {
        "law": "decomposed",
        "bootstrap": {"samples": 5, "seed": 1},
        "exponent_bounds": [0, 3],
        "depth_offset": 1,
    }


def test_bad_fits_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^scaling\.fits\.f\.exponent_bounds: \[3, 1\] is not"):
        merge_fit_spec(DEFAULTS, {"exponent_bounds": [3, 1]}, "f")
    # the schema's default bounds [0.0, 5.0] apply where neither sets any
    assert "exponent_bounds" not in merge_fit_spec({"law": "reference"}, {}, "f")
    with pytest.raises(
        ConfigError,
        match=r"^scaling\.fits\.f\.depth_offset: only applies to the decomposed law, not "
        r"'reference' \(set by scaling\.fit\.depth_offset\)",
    ):
        merge_fit_spec({**DEFAULTS, "depth_offset": 1}, {"law": "reference"}, "f")
