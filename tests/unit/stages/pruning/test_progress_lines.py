"""The pruning job's long loops say how far they are (issue 51: SmolLM2's prune_model ran 85 s
with 3 log lines): the loss sweep counts the sets it scored on each batch, with an ETA."""

import numpy as np
from depthlab.core import tracking
from depthlab.stages.pruning.strategies import LossSweep, validation_windows
from tiny_models import VOCAB, llama


def test_the_loss_sweep_logs_its_progress_and_its_losses_do_not_change(monkeypatch):
    rng = np.random.default_rng(0)
    windows = validation_windows(rng.integers(0, VOCAB, 2000).astype(np.uint16), 4, 16, 2)
    model = llama()
    sets = [(), (0,), (1,), (0, 1)]
    quiet = LossSweep(model, windows).losses(sets)
    monkeypatch.setattr(tracking, "EVERY_S", 0.0)  # a line at every leaf of the walk
    lines = []
    logged = LossSweep(model, windows).losses(sets, log=lines.append)
    assert logged == quiet
    total = len(sets) * len(windows)  # 4 sets on 2 batches
    assert lines[-1].startswith(f"loss sweep {total}/{total} set-batches, done in ")
    counts = [int(line.split()[2].split("/")[0]) for line in lines]
    assert counts == sorted(counts) and counts[-1] == total and len(counts) > 2
    assert all("elapsed, ETA" in line for line in lines[:-1])
    # memoised sets: nothing left to do, no lines
    lines.clear()
    LossSweep(model, windows).losses([], log=lines.append)
    assert lines == []
