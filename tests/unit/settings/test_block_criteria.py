"""The block-ranking criteria registry (depthlab.settings.block_criteria): the stage's table of
ranking functions names exactly its criteria, the schema's enum, prune_model.py's help and the
figures' colours come from it, and each criterion's declared cost model counts the passes its
ranking function runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from depthlab.config.load import schema_document
from depthlab.settings import block_criteria
from depthlab.settings.block_criteria import CRITERIA, READS, STRATEGIES

REPO = Path(__file__).resolve().parents[3]


def test_the_stage_ranks_exactly_the_declared_criteria():
    """The settings layer (below the stages) declares the names; the stage maps each to the
    function it imports: both tables name the same criteria."""
    from depthlab.stages.pruning.criteria import RANKING_FUNCTIONS

    assert list(RANKING_FUNCTIONS) == list(STRATEGIES)
    for name, criterion in CRITERIA.items():
        assert criterion.name == name and criterion.reads in READS
        assert callable(RANKING_FUNCTIONS[name])


def test_the_schema_the_help_and_the_colours_come_from_the_registry():
    from depthlab.stages.pruning.plots import STRATEGY_COLORS
    from matplotlib.colors import to_hex

    assert schema_document()["definitions"]["strategy"]["enum"] == list(STRATEGIES)
    assert {n: to_hex(c) for n, c in STRATEGY_COLORS.items()} == {
        n: to_hex(c.colour) for n, c in CRITERIA.items()
    }
    assert len({to_hex(c) for c in STRATEGY_COLORS.values()}) == len(STRATEGIES)
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow_scripts")}
    result = subprocess.run(
        [sys.executable, str(REPO / "workflow_scripts" / "prune_model.py"), "--help"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    listing = result.stdout.split(block_criteria.help_text().splitlines()[0])[1]
    listed = [line.split()[0] for line in listing.splitlines()[1 : len(STRATEGIES) + 1]]
    assert listed == list(STRATEGIES)


def test_the_protected_layers_and_largest_n_follow_the_declaration():
    assert block_criteria.protected_layers("taylor_plus", 12) == (0, 1, 2, 3, 10, 11)
    assert block_criteria.protected_layers("sleb", 12) == (0, 11)
    assert block_criteria.protected_layers("angular", 12) == ()
    assert block_criteria.max_n("sleb", 13) == 6 and block_criteria.max_n("ppl", 13) == 12
    assert block_criteria.max_n("magnitude_plus", 6) == 0


@pytest.mark.parametrize("name", [n for n, c in CRITERIA.items() if c.reads != "analysis"])
def test_the_declared_cost_counts_the_passes_the_ranking_runs(name):
    """The planner's cost model (calibration sets, a gradient pass) against the passes the
    ranking function counts when run alone on a tiny model (a set on a batch is one pass)."""
    import torch
    import transformers as tf
    from depthlab.stages.pruning.criteria import rank_blocks
    from depthlab.stages.pruning.strategies import validation_windows

    if CRITERIA[name].reads == "validation":
        pytest.skip("greedy's cost is the validation sweep's (job_costs.pruning_work)")
    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=40, hidden_size=16, num_hidden_layers=7,
                            num_attention_heads=2, intermediate_size=24)  # fmt: skip
    model = tf.LlamaForCausalLM(config).eval()
    import numpy as np

    windows = validation_windows(np.arange(400, dtype=np.uint16) % 40, 4, 8, 2)
    n_values = [1, 2, 3, 5]
    result = rank_blocks(model, [name], n_values, windows)
    cost = result.cost[name]
    criterion = CRITERIA[name]
    sets = criterion.calibration_sets(7, n_values) if criterion.calibration_sets else 0
    assert cost["calibration_forward_passes"] == (sets or criterion.gradient_pass) * len(windows)
    assert cost["backward_passes"] == criterion.gradient_pass * len(windows)
