"""Numbers and paths that passed validation and failed later naming no key (issue 51, points 3
and 5): each is now a ConfigError at load or resolution that names the key and the file. And
the pretraining evaluation steps are lazy: a huge `steps` allocates nothing."""

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from depthlab.config import ConfigError, apply_overrides, load_config, resolve
from depthlab.models.checkpoint_files import resolve_model_path
from depthlab.settings.training import StepSet
from depthlab.stages.pretrain.settings import evaluation_steps

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "config" / "default.yaml"


def refused(tmp_path, overlay: str) -> str:
    """The first line of the ConfigError that config/default.yaml plus `overlay` gives."""
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay + "\n")
    with pytest.raises(ConfigError) as error:
        resolve(load_config(DEFAULT, path), ROOT)
    return str(error.value).splitlines()[0]


@pytest.mark.parametrize(
    ("overlay", "key", "problem"),
    [
        ("pretrain: {lr: .nan}", "pretrain.lr", ".nan is not a finite number"),
        ("pretrain: {lr: .inf}", "pretrain.lr", ".inf is not a finite number"),
        ("pretrain: {lr: -.inf}", "pretrain.lr", "-.inf is not a finite number"),
        ("finetune: {train: {lr: .nan}}", "finetune.train.lr", ".nan is not a finite number"),
        ("finetune: {train: {lr: .inf}}", "finetune.train.lr", ".inf is not a finite number"),
        (
            "pruning: {auto_depth: {tolerances: {val_loss: .nan}}}",
            "pruning.auto_depth.tolerances.val_loss",
            ".nan is not a finite number",
        ),
        ("seed: 18446744073709551616", "seed", "does not fit in 64 bits"),
        ("seed: 4294967296", "seed", "greater than the maximum of 4294967295"),
        ("seed: -1", "seed", "less than the minimum of 0"),
        ("pretrain: {steps: 1000000000000}", "pretrain.steps", "greater than the maximum"),
        (
            "models: {mine: {kind: hf, path: 'pkg:../../etc/x'}}",
            "models.mine.path",
            "'..' is not a package name",
        ),
        (
            "models: {mine: {kind: hf, path: 'pkg:json/../../../etc'}}",
            "models.mine.path",
            "a relative path inside it, without '..'",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and ":" in value else None,
)
def test_a_hostile_value_is_refused_naming_the_key_and_the_file(tmp_path, overlay, key, problem):
    line = refused(tmp_path, overlay)
    assert line.startswith(f"{key}: "), line
    assert problem in line, line
    assert f"(in {tmp_path / 'overlay.yaml'}:1)" in line, line


def test_the_line_of_a_nested_value_is_named(tmp_path):
    line = refused(tmp_path, "pretrain:\n  steps: 16\n  lr: .nan")
    assert line.startswith("pretrain.lr: .nan is not a finite number"), line
    assert line.endswith(f"(in {tmp_path / 'overlay.yaml'}:3)"), line


def test_a_hostile_override_names_the_key_on_the_command_line():
    config = load_config(DEFAULT)
    with pytest.raises(ConfigError, match=r"^pretrain\.lr: \.nan is not a finite .* --config"):
        apply_overrides(config, {"pretrain.lr": ".nan"})
    with pytest.raises(ConfigError, match=r"^seed: 18446744073709551616 does not fit in 64 bits"):
        apply_overrides(config, {"seed": "18446744073709551616"})
    # a schema error of an override: the key, and the command line as its source
    with pytest.raises(
        ConfigError, match=r"^pretrain\.steps: 1000000000000 is greater .* \(in --config\)$"
    ):
        resolve(apply_overrides(config, {"pretrain.steps": "1000000000000"}), ROOT)


def test_a_value_changed_in_memory_names_no_file():
    """A config edited after loading (as tests and tools do) must not blame the file."""
    config = load_config(DEFAULT)
    config["pretrain"]["steps"] = 10**12
    with pytest.raises(ConfigError, match=r"^pretrain\.steps: 1000000000000 is greater .*\d$"):
        resolve(config, ROOT)
    config = dict(load_config(DEFAULT))  # a plain dict: no file known, the key still named
    config["pretrain"] = {**config["pretrain"], "lr": float("nan")}
    with pytest.raises(ConfigError, match=r"^pretrain\.lr: \.nan is not a finite number"):
        resolve(config, ROOT)


@pytest.mark.parametrize("path", ["pkg:../x", "pkg:/etc", "pkg:json/../..", "pkg:json//etc",
                                  "pkg:json/~root", "pkg:", "pkg:json/a/../../b"])  # fmt: skip
def test_a_pkg_path_that_could_leave_its_package_is_refused_before_importing(path):
    with pytest.raises(FileNotFoundError, match="model path"):
        resolve_model_path(path)


# ---- evaluation steps


def listed_evaluation_steps(steps: int, every: int, log_spaced: int) -> list[int]:
    """The evaluation steps as the code listed them before (a set of every step number)."""
    chosen = set(range(every, steps + 1, every))
    chosen.add(steps)
    if log_spaced:
        first = max(1, steps // 64)
        chosen.update(int(s) for s in np.unique(np.round(np.geomspace(first, steps, log_spaced))))
    return sorted(chosen)


class Settings:
    def __init__(self, steps, eval_every, log_spaced_evals):
        self.steps, self.eval_every, self.log_spaced_evals = steps, eval_every, log_spaced_evals


@pytest.mark.parametrize(
    ("steps", "every", "log_spaced"),
    [(16, 8, 4), (20, 8, 0), (100, 50, 5), (1, 1, 3), (7, 10, 0), (3000, 250, 12),
     (4882, 250, 16), (10_000, 1000, 30), (60, 30, 0), (1234, 7, 64)],
)  # fmt: skip
def test_evaluation_steps_equal_the_listed_ones(steps, every, log_spaced):
    expected = listed_evaluation_steps(steps, every, log_spaced)
    lazy = evaluation_steps(Settings(steps, every, log_spaced))
    assert list(lazy) == expected
    assert len(lazy) == len(expected)
    members = set(expected)
    assert [s for s in range(-1, steps + 3) if s in lazy] == [s for s in range(-1, steps + 3)
                                                              if s in members]  # fmt: skip


def test_evaluation_steps_of_a_long_run_take_no_memory():
    """Before: a set of every step (1e12 steps grew the job to 8.6 GB in 32 s; the 2e6 steps
    here took ~100 MB)."""
    tracemalloc.start()
    try:
        lazy = evaluation_steps(Settings(2 * 10**6, 1, 16))
        assert 2 * 10**6 in lazy and 1 in lazy and 0 not in lazy
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak
    huge = evaluation_steps(Settings(10**12, 1, 16))
    assert 10**12 in huge and 10**12 + 1 not in huge and len(huge) == 10**12


def test_the_fine_tuning_step_set_equals_its_old_list():
    for steps, every in [(3, 1), (10, 3), (100, 7), (5, 10)]:
        old = [s for s in range(1, steps + 1) if s % every == 0 or s == steps]
        assert list(StepSet(steps, every)) == old and len(StepSet(steps, every)) == len(old)
