"""Seeds: `seeds:` on a pretrain model or sweep expands it into one model per seed, every stage
reads the base name as all its seeds, and a seed decides the weights bit for bit on CPU."""

import copy
import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from depthlab.config import ConfigError, resolve, seed_groups
from depthlab.data.prepare import prepare_corpus
from depthlab.stages.pretrain.training import pretrain


def seeded(config: dict, lns=(0, 1), sweep=None) -> dict:
    config = copy.deepcopy(config)
    config["models"]["lns"]["seeds"] = list(lns)
    if sweep is not None:
        config["sweeps"]["depth_width"]["seeds"] = list(sweep)
    return config


def test_seeds_expand_into_named_models_trained_with_their_seed(test_config):
    plain = resolve(test_config)
    resolved = resolve(seeded(test_config, lns=(0, 7), sweep=(3,)))
    pretrain_jobs = resolved.jobs("pretrain_model")
    assert "lns" not in resolved.models
    assert {name: pretrain_jobs[name]["seed"] for name in ("lns_s0", "lns_s7")} == {
        "lns_s0": 0,
        "lns_s7": 7,
    }
    assert pretrain_jobs["lns_s7"]["out"] == "results/test/models/lns_s7"
    assert pretrain_jobs["depth_width_l2_m32_s3"]["seed"] == 3
    assert pretrain_jobs["depth_width_l2_m32_s3"]["model"]["sweep"] == "depth_width"
    # an unseeded model keeps its name and its exact spec
    assert pretrain_jobs["pre_ln"] == plain.jobs("pretrain_model")["pre_ln"]
    groups = seed_groups(resolved)
    assert groups["lns"] == ["lns_s0", "lns_s7"]
    assert groups["pre_ln"] == ["pre_ln"]
    assert groups["depth_width_l1_m16"] == ["depth_width_l1_m16_s3"]
    assert sum(map(len, groups.values())) == len(resolved.models)
    assert seed_groups(plain) == {name: [name] for name in plain.models}


def test_a_base_name_in_a_stage_list_means_all_its_seeds(test_config):
    config = seeded(test_config, lns=(0, 1), sweep=(4, 5))
    config["depth_use"]["skip"]["models"] = ["lns", "depth_problems"]
    config["depth_use"]["skip"]["per_model"] = {"lns": {"max_samples": 3}}
    resolved = resolve(config)
    assert list(resolved.jobs("analyse_model")) == ["val/pre_ln", "val/lns_s0", "val/lns_s1"]
    assert resolved.jobs("plot_analysis")["val"]["analyses"][1:] == [
        "results/test/analysis/val/lns_s0",
        "results/test/analysis/val/lns_s1",
    ]
    assert list(resolved.jobs("prune_model")) == ["lns_s0", "lns_s1"]
    assert resolved.jobs("plot_pruning")["pruning"]["labels"] == {
        "lns_s0": "lns s0",
        "lns_s1": "lns s1",
    }
    skip = resolved.jobs("skip_interventions")
    assert [skip[name]["max_samples"] for name in ("lns_s0", "lns_s1", "depth_problems")] == [
        3,
        3,
        8,
    ]
    # every seed of every sweep point is a scaling-fit point; pairs map seed i to seed i
    assert len(resolved.jobs("collect_sweep")["sweep_points"]["models"]) == 2 * 4
    maps = resolved.jobs("linear_maps")
    assert {pair: (spec["source_name"], spec["target_name"]) for pair, spec in maps.items()} == {
        "l1_to_l2_m32_s4": ("depth_width_l1_m32_s4", "depth_width_l2_m32_s4"),
        "l1_to_l2_m32_s5": ("depth_width_l1_m32_s5", "depth_width_l2_m32_s5"),
    }
    # loss curves keep the norm scheme as label, so the seeds of one scheme form one band
    labels = resolved.jobs("plot_loss_curves")["loss_curves"]["labels"]
    assert labels["lns_s0"] == labels["lns_s1"] == "lns"


def test_per_model_overrides_take_a_base_name_for_its_seeds_and_name_the_key(test_config):
    config = seeded(test_config, lns=(0, 1))
    # a base name covers its seeds; a seed's own entry wins over its base name's
    config["pruning"]["per_model"] = {
        "lns": {"val": {"seq_len": 16}},
        "lns_s1": {"val": {"seq_len": 8}},
    }
    jobs = resolve(config).jobs("prune_model")
    assert [jobs[name]["val"]["seq_len"] for name in ("lns_s0", "lns_s1")] == [16, 8]
    # errors name the override the user wrote, for both stages that have one
    config["depth_use"]["skip"]["models"] = ["lns", "depth_problems"]
    config["depth_use"]["skip"]["per_model"] = {"lns": {"max_length": 4096}}
    with pytest.raises(ConfigError, match=r"^depth_use\.skip\.per_model\.lns\.max_length: 4096"):
        resolve(config)
    config["depth_use"]["skip"]["per_model"] = {"ghost": {"max_samples": 3}}
    with pytest.raises(
        ConfigError, match=r"^depth_use\.skip\.per_model\.ghost: 'ghost' is not a declared"
    ):
        resolve(config)


def test_a_map_from_a_seeded_to_an_unseeded_model_pairs_each_seed(test_config):
    config = seeded(test_config)
    config["sweeps"]["depth_width"]["seeds"] = [0, 1]
    config["depth_use"]["linear_maps"]["pairs"] = {
        "one": {"source": "depth_width_l1_m32", "target": "depth_width_l2_m32_s1"}
    }
    maps = resolve(config).jobs("linear_maps")
    assert {pair: spec["source_name"] for pair, spec in maps.items()} == {
        "one_s0": "depth_width_l1_m32_s0",
        "one_s1": "depth_width_l1_m32_s1",
    }
    assert {spec["target_name"] for spec in maps.values()} == {"depth_width_l2_m32_s1"}


@pytest.mark.parametrize(
    "change, pattern",
    [
        (
            lambda c: c["models"].update(lns_s1=copy.deepcopy(c["models"]["pre_ln"])),
            r"^models\.lns\.seeds: expanded model name 'lns_s1' \(seed 1\) is already declared",
        ),
        (
            lambda c: (
                c["models"].update(depth_width_l1_m16_s2=copy.deepcopy(c["models"]["pre_ln"]))
                or c["sweeps"]["depth_width"].update(seeds=[2])
            ),
            r"^sweeps\.depth_width\.seeds: expanded model name 'depth_width_l1_m16_s2'",
        ),
        (
            lambda c: c["models"].update({"m" * 99: {**c["models"]["pre_ln"], "seeds": [0]}}),
            r"^models\.m{99}\.seeds \(expanded model name\): 'm{99}_s0' is not a safe name",
        ),
        (
            lambda c: c["models"]["lns"].update(seeds=[]),
            r"^models\.lns\.seeds: \[\] should be non-empty",
        ),
        (lambda c: c["models"]["lns"].update(seeds=[1, 1]), r"^models\.lns\.seeds: .*non-unique"),
        (
            lambda c: c["analysis"].update(models=["lns_s9"]),
            r"^analysis\.models\[0\]: 'lns_s9' is not a declared model",
        ),
        (
            lambda c: (
                c["sweeps"]["depth_width"].update(seeds=[0])
                or c["depth_use"]["linear_maps"]["pairs"].update(
                    x={"source": "depth_width_l1_m32", "target": "lns"}
                )
            ),
            r"^depth_use\.linear_maps\.pairs\.x: 'depth_width_l1_m32' and 'lns' are trained with "
            r"different seeds",
        ),
    ],
)
def test_bad_seeds_are_rejected_naming_the_key(test_config, change, pattern):
    config = seeded(test_config)
    change(config)
    with pytest.raises(ConfigError, match=pattern):
        resolve(config)


def tiny_seeded_run(config: dict, data_dir: Path, out: Path, job: str) -> tuple[str, pd.DataFrame]:
    """Pretrain one resolved job into `out`; (sha256 of its weights, its train log)."""
    spec = resolve(config).jobs("pretrain_model")[job]
    pretrain(
        spec["model_name"],
        spec["model"],
        data_dir,
        out,
        out.with_name(out.name + "_state"),
        seed=spec["seed"],
        threads=1,
        progress=False,
    )
    weights = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    return weights, pd.read_csv(out / "train_log.csv")


def test_a_seed_reproduces_bit_identically_and_two_seeds_differ(test_config, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps(
                {
                    "text": f"Document {i}: the quick brown fox jumps "
                    f"over {i % 7} lazy dogs by river {i % 5}."
                }
            )
            + "\n"
            for i in range(400)
        )
    )
    data = copy.deepcopy(test_config["data"])
    data.update(source="text_files", text_files={"paths": [str(corpus)]}, min_document_chars=16)
    data_dir = tmp_path / "data"
    prepare_corpus(data, data_dir, seed=0)
    config = copy.deepcopy(test_config)
    for stage in ("pruning", "depth_use", "analysis", "lens_swaps", "scaling", "sweeps"):
        config.pop(stage)
    config["models"] = {
        "tiny": {
            "kind": "pretrain",
            "norm_scheme": "lns",
            "seeds": [0, 1],
            "architecture": {
                "hidden_size": 16,
                "num_layers": 2,
                "num_heads": 2,
                "intermediate_size": 32,
            },
            "train": {
                "seq_len": 16,
                "steps": 6,
                "eval_every": 3,
                "log_every": 1,
                "checkpoint_every": 6,
            },
        }
    }
    first = tiny_seeded_run(config, data_dir, tmp_path / "s0_a", "tiny_s0")
    again = tiny_seeded_run(config, data_dir, tmp_path / "s0_b", "tiny_s0")
    other = tiny_seeded_run(config, data_dir, tmp_path / "s1", "tiny_s1")
    assert first[0] == again[0]
    columns = ["step", "tokens", "split", "loss", "lr"]
    pd.testing.assert_frame_equal(first[1][columns], again[1][columns])
    assert first[0] != other[0]
    assert not first[1]["loss"].equals(other[1]["loss"])
