"""gromov_deep_block (Gromov et al.: the angular choice of n layers lies deep) on planted
distance matrices of a published LM's document shards: the verdict flips with where the closest
block sits, and the position agrees with the pruning stage's own block choice."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from depthlab.claims import RunData, build_claims
from depthlab.claims.verdicts import NOT_REPRODUCED, REPRODUCED
from depthlab.stages.pruning.blocks import angular_block_choice
from test_claims import _measures_frame

LAYERS = 8


def _matrix(deep: bool, dip: bool) -> np.ndarray:
    """d(x^l, x^(l+n)) growing with n; falling with l (deep: the final block excepted, it is
    far) or rising with l (shallow); `dip` makes d(5, 6) the smallest one-layer distance."""
    d = np.zeros((LAYERS + 1, LAYERS + 1))
    for l in range(LAYERS + 1):
        for n in range(1, LAYERS + 1 - l):
            tilt = 1 - 0.5 * l / LAYERS if deep else 0.5 + 0.5 * l / LAYERS
            d[l, l + n] = 0.1 * n * tilt + (0.3 if deep and l + n == LAYERS else 0.0)
    if dip:
        d[5, 6] -= 0.01
    return d


def _frame(matrix: np.ndarray, rng) -> pd.DataFrame:
    """A measures.csv frame with the last-token distances of `matrix` (and the measures the
    other published-LM rows read)."""
    frame = _measures_frame(LAYERS, 0.3, [0.5] * LAYERS, rng)
    rows = [
        ("angular_distance_last", l, float(n), matrix[l, l + n])
        for l in range(LAYERS)
        for n in range(1, LAYERS + 1 - l)
    ]
    return pd.concat([frame, pd.DataFrame(rows, columns=frame.columns)], ignore_index=True)


def _data(deep: bool) -> tuple[RunData, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    matrices = [_matrix(deep, dip=shard == 1) for shard in range(4)]
    replicates = [(_frame(m, rng), pd.Series(np.full(LAYERS, 0.1)), "last token") for m in matrices]
    return RunData(pretrained={"real": replicates}, pretrained_scale={"real": "real"}), matrices


def _reference(matrix: np.ndarray) -> float:
    """The mean position by the pruning stage's own angular_block_choice over n = 1 .. L / 2."""
    return float(
        np.mean(
            [angular_block_choice(matrix, n)[0] / (LAYERS - n) for n in range(1, LAYERS // 2 + 1)]
        )
    )


@pytest.mark.parametrize("deep, expected", [(True, REPRODUCED), (False, NOT_REPRODUCED)])
def test_deep_block_follows_where_the_closest_block_sits(deep, expected):
    data, matrices = _data(deep)
    row = build_claims(data).set_index("claim_id").loc["gromov_deep_block:real"]
    assert row["verdict"] == expected, row["reason"]
    positions = [_reference(m) for m in matrices]
    assert row["measured"] == pytest.approx(np.mean(positions))
    assert row["seeds"] == 1 and "4 document shards" in row["interval"]
    if deep:
        # the final block (ending at the last layer) is far: l* = L - 1 - n, and the dip moves
        # shard 1's one-layer block from 6 to 5
        assert positions[0] == pytest.approx(np.mean([(7 - n) / (8 - n) for n in range(1, 5)]))
        assert positions[1] < positions[0]
    else:
        assert positions == [0.0, 0.0, 0.0, 0.0]


def test_deep_block_needs_the_last_token_distances():
    data, _ = _data(True)
    data.pretrained["real"] = [
        (f[f["measure"] != "angular_distance_last"], d, t) for f, d, t in data.pretrained["real"]
    ]
    assert not build_claims(data)["claim_id"].str.startswith("gromov_deep_block").any()
