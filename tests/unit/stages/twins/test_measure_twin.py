"""The measure_twin job: the twin's tables, written and read back (depthlab.claims.initial), are
exactly what the stages' engines measure of the untrained model directly."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from depthlab.claims.initial import read_twin
from depthlab.config import resolve
from depthlab.stages.twins.measure import TWIN_FILES, run, untrained_model


def _local(value, data_dir):
    """The resolved spec's results/test/data paths pointed at the fixture's data folder."""
    if isinstance(value, dict):
        return {k: _local(v, data_dir) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("results/test/data"):
        return str(data_dir) + value[len("results/test/data") :]
    return value


@pytest.fixture(scope="module")
def twin(tmp_path_factory, data_dir, test_config):
    spec = resolve(test_config).jobs("measure_twin")["pre_ln"]
    spec = _local(spec, data_dir)
    spec.update(
        tokenizer=str(data_dir / "tokenizer"),
        removals=True,
        n_values=[1, 2],
        out=str(tmp_path_factory.mktemp("twin") / "pre_ln"),
    )
    written = run(spec, log=lambda message: None)
    return spec, written, read_twin(spec["out"])


def test_twin_tables_are_the_engines_measures_of_the_initial_model(twin):
    from depthlab.data.model_tokens import model_tokens
    from depthlab.models.architectures import adapt
    from depthlab.models.loading import load_tokenizer
    from depthlab.stages.analysis.measures import analyse
    from depthlab.stages.model_job import text_batches
    from depthlab.stages.pruning.layer_removal import model_loss, pruned_view
    from depthlab.stages.pruning.strategies import validation_windows

    spec, written, stats = twin
    model = untrained_model(spec["declaration"], spec["seed"], spec["data"])
    analysis = spec["analysis"]
    batches = text_batches(analysis, load_tokenizer(spec["tokenizer"]), analysis["max_length"],
                           max_samples=analysis["max_samples"])  # fmt: skip
    result = analyse(adapt(model), batches, logit_lens=False, all_token_distance=True)
    layers = result.num_layers
    # exact: the tables carry every digit of the float64 measures
    assert np.array_equal(stats.h_var.to_numpy(), np.asarray(result.per_state["h_var"]))
    assert list(stats.h_var.index) == list(range(layers + 1))
    distance = [result.angular_distance_all[l, l + 1] for l in range(layers)]
    assert np.array_equal(stats.distance.to_numpy(), np.asarray(distance))
    assert np.array_equal(stats.angle_update.to_numpy(), result.per_update["angle_update"])
    val = spec["val"]
    tokens, _ = model_tokens(spec["data"], "val")
    windows = validation_windows(tokens, val["windows"], val["seq_len"], val["batch_size"])
    assert stats.losses["full"] == model_loss(model, windows)
    with pruned_view(model, (1,)) as view:
        assert stats.losses["single:1"] == model_loss(view, windows)
    assert set(stats.losses) == {"full", *(f"single:{l}" for l in range(layers)),
                                 "angular:1", "angular:2", "deepest:1", "deepest:2"}  # fmt: skip
    assert written["losses"] == len(stats.losses)


def test_twin_lens_and_provenance(twin):
    spec, written, stats = twin
    assert written["lens_swaps"] == len(spec["lens_swaps"]["text_sets"]) == len(stats.lens_swaps)
    lens, swaps = stats.lens_swaps[0]
    assert len(lens) and len(swaps)
    assert stats.skip_effects is None  # the trained model has no skip job: no table
    record = json.loads((Path(spec["out"]) / "provenance.json").read_text())
    assert record["config"]["model_name"] == "pre_ln"
    assert not (Path(spec["out"]) / TWIN_FILES["skip_effects"]).exists()


def test_a_pure_bf16_twin_is_rounded(data_dir, test_config):
    spec = resolve(test_config).jobs("measure_twin")["pre_ln"]
    declaration = {**spec["declaration"], "train": {**spec["declaration"]["train"],
                                                    "precision": "pure_bf16"}}  # fmt: skip
    rounded = untrained_model(declaration, spec["seed"], data_dir)
    plain = untrained_model(spec["declaration"], spec["seed"], data_dir)
    for a, b in zip(rounded.parameters(), plain.parameters()):
        assert torch.equal(a, b.to(torch.bfloat16).float())
    assert any(not torch.equal(a, b) for a, b in zip(rounded.parameters(), plain.parameters()))
