"""The toy model's settings (depthlab.settings.toy): the temperature grid, and the checks the
schema cannot make, each naming its key; omitted keys take the schema's defaults."""

from __future__ import annotations

import numpy as np
import pytest
from depthlab.core.errors import ConfigError
from depthlab.settings.toy import checked_protocol, exponent_bounds, temperature_grid

TOY = {"fit_form": "power", "student_depths": [1, 2], "width": 8}


def test_a_range_is_log_spaced_and_a_list_kept():
    grid = temperature_grid({"min": 0.01, "max": 1.0, "count": 3})
    np.testing.assert_allclose(grid, [0.01, 0.1, 1.0])
    assert temperature_grid([0.1, 1]) == [0.1, 1.0]
    with pytest.raises(ConfigError, match=r"^toy\.temperatures: min 2 must not exceed max 1"):
        temperature_grid({"min": 2, "max": 1, "count": 3})
    with pytest.raises(ConfigError, match=r"^toy\.temperatures: 3 temperatures between equal"):
        temperature_grid({"min": 1, "max": 1, "count": 3})


def test_checks_name_the_key_and_omitted_keys_take_the_schemas_defaults():
    assert exponent_bounds(TOY) == [0.0, 10.0] and checked_protocol(TOY) == "embedding"
    assert exponent_bounds({**TOY, "exponent_bounds": [1, 2]}) == [1, 2]
    with pytest.raises(ConfigError, match=r"^toy\.exponent_bounds: \[2, 1\] is not an interval"):
        exponent_bounds({**TOY, "exponent_bounds": [2, 1]})
    with pytest.raises(ConfigError, match=r"^toy\.student_depths: the power_offset form"):
        checked_protocol({**TOY, "fit_form": "power_offset"})
    assert checked_protocol({**TOY, "protocol": "released", "input_size": 8}) == "released"
    with pytest.raises(ConfigError, match=r"^toy\.input_size: 4 must equal toy\.width \(8\)"):
        checked_protocol({**TOY, "protocol": "released", "input_size": 4})
