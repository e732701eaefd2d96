"""The contiguous blocks the angular and deepest strategies remove (Gromov et al. 2024): torch-free,
so the claims read the pruning stage's own angular choice without loading torch.

  angular  the block [l*, l*+n) with l* = argmin_l d(x^l, x^{l+n}), d the analysis stage's
           (L+1) x (L+1) last-token angular distance matrix (ties: the smallest l)
  deepest  the n deepest layers except the last: [L-1-n, L-1) (the paper's baseline)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from depthlab.core.errors import PruningError


def angular_block_choice(distance: np.ndarray, n: int) -> tuple[int, float]:
    """(l*, d): the block [l*, l*+n) minimising d(x^l, x^{l+n}) (the smallest l on ties)."""
    num_layers = distance.shape[0] - 1
    if not 1 <= n < num_layers:
        raise PruningError(f"block size {n} is outside 1..{num_layers - 1}")
    candidates = [distance[l, l + n] for l in range(num_layers - n + 1)]
    best = int(np.argmin(candidates))  # the first minimum
    return best, float(candidates[best])


def block_choice_table(distance: np.ndarray, n_values: Sequence[int]):
    """The paper's "optimal block" curve: one row (n, l*, d) per block size."""
    import pandas as pd

    rows = [(n, *angular_block_choice(distance, n)) for n in n_values]
    return pd.DataFrame(rows, columns=["n", "l_star", "distance"])


def angular_removal(distance: np.ndarray, n: int) -> tuple[int, ...]:
    start, _ = angular_block_choice(distance, n)
    return tuple(range(start, start + n))


def deepest_removal(num_layers: int, n: int) -> tuple[int, ...]:
    """The n deepest layers except the last one: [L-1-n, L-1)."""
    if not 1 <= n < num_layers:
        raise PruningError(f"block size {n} is outside 1..{num_layers - 1}")
    return tuple(range(num_layers - 1 - n, num_layers - 1))
