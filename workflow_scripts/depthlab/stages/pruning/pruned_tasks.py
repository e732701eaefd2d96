"""The pruning stage's lm-eval scorer: the shared one (depthlab.stages.lm_tasks.TaskEvaluator) on
the base model seen without some of its layers (layer_removal.pruned_view: the same module
objects, no copy), so one loaded base model serves every removal set."""

from __future__ import annotations

from collections.abc import Sequence

from depthlab.stages import lm_tasks
from depthlab.stages.pruning.layer_removal import pruned_view


class TaskEvaluator(lm_tasks.TaskEvaluator):
    """lm-eval on the tasks of one folder, for one base model and any number of removal sets."""

    def evaluate(self, removed: Sequence[int] = (), model=None) -> list[dict]:
        """Rows (task, samples, acc, acc_stderr, acc_norm, acc_norm_stderr) for the base model
        without `removed`, or for another `model` (e.g. a healed copy) without them."""
        with pruned_view(self.model if model is None else model, removed):
            return super().evaluate(model)
