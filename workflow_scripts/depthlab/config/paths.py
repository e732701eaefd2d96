"""Names that become folders or wildcards, and every path a run writes (`RunPaths`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from depthlab.core.errors import ConfigError

# A name that becomes a folder or wildcard: no separators, no `..`, no shell metacharacters.
# `\Z`, not `$`: `$` also matches before a trailing newline ("abc\n" would name a folder "abc⏎").
SAFE_NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")


def check_name(name, key: str) -> str:
    if not isinstance(name, str) or not SAFE_NAME.match(name):
        raise ConfigError(
            f"{key}: {name!r} is not a safe name (letters, digits, _ . -, at most "
            f"100 characters; no '..', separators or shell characters)"
        )
    return name


@dataclass(frozen=True)
class RunPaths:
    """Every path a run writes, spelled once; names may be wildcard templates like "{model}"."""

    run_name: str

    @property
    def root(self) -> str:
        return f"results/{self.run_name}"

    @property
    def data(self) -> str:
        return f"{self.root}/data"

    def model(self, name: str) -> str:
        return f"{self.root}/models/{name}"

    def train_state(self, name: str) -> str:
        return f"{self.root}/train_state/{name}"

    def analysis(self, text_set: str, model: str) -> str:
        return f"{self.root}/analysis/{text_set}/{model}"

    def twins(self, group: str) -> str:
        """One measure_twin job's untrained twins (`group`: their shape and data set)."""
        return f"{self.root}/twins/{group}"

    def twin(self, group: str, model: str) -> str:
        """One model's untrained twin, in its measure_twin job's folder."""
        return f"{self.twins(group)}/{model}"

    def lens_swaps(self, model: str) -> str:
        return f"{self.root}/lens_swaps/{model}"

    @property
    def sweep_points(self) -> str:
        return f"{self.root}/scaling/sweep_points.csv"

    def fit(self, name: str) -> str:
        return f"{self.root}/scaling/{name}/fit.json"

    def fit_samples(self, name: str) -> str:
        return f"{self.root}/scaling/{name}/bootstrap.csv"

    def toy_run(self, kind: str, index) -> str:
        return f"{self.root}/toy/{kind}/T{index}"

    @property
    def toy_fit(self) -> str:
        return f"{self.root}/toy/fit.json"

    @property
    def problems(self) -> str:
        return f"{self.root}/depth_use/problems"

    def skip(self, model: str) -> str:
        return f"{self.root}/depth_use/skip/{model}"

    def linear_map(self, pair: str) -> str:
        return f"{self.root}/depth_use/linear_maps/{pair}"

    @property
    def lm_tasks(self) -> str:
        return f"{self.root}/pruning/tasks"

    def pruning(self, model: str) -> str:
        return f"{self.root}/pruning/{model}"

    def pruning_measured(self, model: str) -> str:
        """prune_model's measurements, from which gather_pruning writes pruning(model)."""
        return f"{self.root}/pruning_jobs/{model}/measured"

    def pruning_heal(self, model: str, variant: str) -> str:
        return f"{self.root}/pruning_jobs/{model}/heal/{variant}"

    def pruning_evaluation(self, model: str, variant: str) -> str:
        return f"{self.root}/pruning_jobs/{model}/lm_eval/{variant}"

    def datasets_cache(self, model: str) -> str:
        return f"{self.root}/pruning/.datasets_cache/{model}"

    def auto_depth(self, model: str) -> str:
        return f"{self.root}/auto_depth/{model}"

    def pruned_models(self, model: str) -> str:
        return f"{self.root}/pruned_models/{model}"

    def figure(self, name: str, fmt: str) -> str:
        return f"{self.root}/figures/{name}.{fmt}"

    def claims(self, suffix: str) -> str:
        return f"{self.root}/claims.{suffix}"

    def log(self, family: str, job: str) -> str:
        return f"{self.root}/logs/{family}/{job}.log"

    def benchmark(self, family: str, job: str) -> str:
        return f"{self.root}/benchmarks/{family}/{job}.tsv"

    def contains(self, path: str) -> bool:
        """Whether `path` (relative to the working directory) stays inside results/<run>/."""
        normal = os.path.normpath(path)
        return normal == self.root or normal.startswith(self.root + os.sep)


def sweep_model_name(sweep: str, depth: int, width: int) -> str:
    return f"{sweep}_l{depth}_m{width}"


def seed_model_name(name: str, seed: int) -> str:
    return f"{name}_s{seed}"
