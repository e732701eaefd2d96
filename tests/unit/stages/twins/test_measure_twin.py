"""The measure_twin job: the twin's tables, written and read back (depthlab.claims.initial), are
exactly what the stages' engines measure of the untrained model directly."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from depthlab.claims.initial import read_twin
from depthlab.config import resolve
from depthlab.core.errors import DataError
from depthlab.stages.twins.stage import TWIN_FILES, run, untrained_model


def _local(value, data_dir):
    """The resolved spec's results/test/data paths pointed at the fixture's data folder."""
    if isinstance(value, dict):
        return {k: _local(v, data_dir) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("results/test/data"):
        return str(data_dir) + value[len("results/test/data") :]
    return value


def _job_of(model: str, config: dict) -> dict:
    """The measure_twin job that measures `model`'s twin."""
    (spec,) = [s for s in resolve(config).jobs("measure_twin").values() if model in s["twins"]]
    return spec


@pytest.fixture(scope="module")
def job(tmp_path_factory, data_dir, test_config):
    """The test config's pre_ln twin, run with a second twin of the same declaration (seed 1)
    beside it, as one job measures the twins of one shape."""
    spec = _local(_job_of("pre_ln", test_config), data_dir)
    first = {**spec["twins"]["pre_ln"], "tokenizer": str(data_dir / "tokenizer"),
             "removals": True, "n_values": [1, 2]}  # fmt: skip
    second = {**first, "model_name": "pre_ln_seed1", "seed": 1, "lens_swaps": None}
    spec.update(twins={"pre_ln": first, "pre_ln_seed1": second},
                out=str(tmp_path_factory.mktemp("twins") / "pre_ln"))  # fmt: skip
    written = run(spec, log=lambda message: None)
    return spec, written


@pytest.fixture(scope="module")
def twin(job):
    spec, written = job
    return spec["twins"]["pre_ln"], written["pre_ln"], read_twin(Path(spec["out"], "pre_ln"))


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


def test_twin_lens_and_provenance(job, twin):
    spec, written, stats = twin
    assert written["lens_swaps"] == len(spec["lens_swaps"]["text_sets"]) == len(stats.lens_swaps)
    lens, swaps = stats.lens_swaps[0]
    assert len(lens) and len(swaps)
    assert stats.skip_effects is None  # the trained model has no skip job: no table
    out = Path(job[0]["out"])
    record = json.loads((out / "provenance.json").read_text())
    assert list(record["config"]["twins"]) == ["pre_ln", "pre_ln_seed1"]
    assert not (out / "pre_ln" / TWIN_FILES["skip_effects"]).exists()


def test_each_member_of_a_group_is_its_own_seeds_twin(job, twin):
    """The second twin of the job is seed 1's model, measured alone: not the first one's."""
    from depthlab.data.model_tokens import model_tokens
    from depthlab.stages.pruning.layer_removal import model_loss
    from depthlab.stages.pruning.strategies import validation_windows

    spec, written = job
    second = spec["twins"]["pre_ln_seed1"]
    stats = read_twin(Path(spec["out"], "pre_ln_seed1"))
    assert stats.lens_swaps is None and written["pre_ln_seed1"]["lens_swaps"] == 0
    model = untrained_model(second["declaration"], 1, second["data"])
    val = second["val"]
    tokens, _ = model_tokens(second["data"], "val")
    windows = validation_windows(tokens, val["windows"], val["seq_len"], val["batch_size"])
    assert stats.losses["full"] == model_loss(model, windows)
    assert stats.losses["full"] != twin[2].losses["full"]


def test_a_failed_twin_leaves_no_folder(tmp_path, job):
    spec, _ = job
    broken = {**spec["twins"]["pre_ln_seed1"], "data": str(tmp_path / "missing")}
    out = tmp_path / "twins"
    with pytest.raises(DataError, match="no meta.json"):
        run({**spec, "twins": {**spec["twins"], "broken": broken}, "out": str(out)},
            log=lambda message: None)  # fmt: skip
    assert not out.exists()


def test_a_pure_bf16_twin_is_rounded(data_dir, test_config):
    spec = _job_of("pre_ln", test_config)["twins"]["pre_ln"]
    declaration = {**spec["declaration"], "train": {**spec["declaration"]["train"],
                                                    "precision": "pure_bf16"}}  # fmt: skip
    rounded = untrained_model(declaration, spec["seed"], data_dir)
    plain = untrained_model(spec["declaration"], spec["seed"], data_dir)
    for a, b in zip(rounded.parameters(), plain.parameters()):
        assert torch.equal(a, b.to(torch.bfloat16).float())
    assert any(not torch.equal(a, b) for a, b in zip(rounded.parameters(), plain.parameters()))
