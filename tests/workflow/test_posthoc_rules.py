"""The choices made after measuring in the pruning stage, as their own jobs: choose_depth (auto
depth) and export_pruned (its pruned models) read prune_model's tables back, so their settings are
not in prune_model's spec; and the one-line-per-key description of a changed spec that the
workflow logs while it plans (depthlab.config.spec_changes). The plans on a finished run are in
tests/workflow/test_rerun.py."""

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from depthlab.config import load_config, resolve
from depthlab.config.spec_changes import recorded_spec, spec_change_lines
from depthlab.core.atomic_files import write_dataframe
from depthlab.stages.pruning.strategies import (
    auto_depth_choices,
    auto_depth_record,
    read_measurements,
    removal_sets,
)
from script_runs import run_stage_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "workflow_scripts"
CONFIGS = ROOT / "config"


# ------------------------------------------------------------------ spec changes


def test_each_changed_key_is_one_line():
    old = {
        "auto_depth": {"tolerances": {"val_loss": 0.5, "mean_acc": 0.05}},
        "export": [{"strategy": "angular", "metric": "val_loss"}],
        "metric": "acc",
        "n_grid": [1, 2, 3],
        "seed": 1,
        "gone": True,
    }
    new = copy.deepcopy(old)
    new["auto_depth"]["tolerances"]["val_loss"] = 0.6
    new["export"][0]["strategy"] = "greedy"
    new["n_grid"] = [1, 2]  # another length: the whole list
    new["seed"] = 1.0  # another JSON text, so another spec
    del new["gone"]
    new["added"] = None
    assert spec_change_lines("choose_depth[lns]", old, new) == [
        "choose_depth[lns]: added (absent) -> null",
        "choose_depth[lns]: auto_depth.tolerances.val_loss 0.5 -> 0.6",
        'choose_depth[lns]: export[0].strategy "angular" -> "greedy"',
        "choose_depth[lns]: gone true -> (absent)",
        "choose_depth[lns]: n_grid [1,2,3] -> [1,2]",
        "choose_depth[lns]: seed 1 -> 1.0",
    ]
    assert spec_change_lines("x", old, copy.deepcopy(old)) == []
    (line,) = spec_change_lines("x", {"texts": ["a" * 200]}, {"texts": ["b" * 200]})
    assert line.startswith('x: texts[0] "aaa') and len(line) < 140 and "..." in line


def test_the_recorded_spec_is_read_from_snakemakes_params_record():
    """Snakemake records each param as its serialiser writes it; the spec is the JSON object."""
    from snakemake.persistence import PersistenceBase

    spec = {"auto_depth": {"tolerances": {"val_loss": 0.5}}, "out": "results/x/auto_depth/m"}
    serialise = PersistenceBase._serialize_param_builtin
    params = [
        serialise(None, value)
        for value in ("workflow_scripts/choose_depth.py", "3f2a9c", json.dumps(spec))
    ]
    assert recorded_spec(sorted(params)) == spec
    assert recorded_spec(params[:2]) is None
    assert recorded_spec(None) is None
    assert recorded_spec(["'{not json'", "<unrepresentable>"]) is None


# ------------------------------------------------------------------ config: which job gets what


@pytest.mark.parametrize("name", ["test.yaml", "default.yaml", "cpu_study.yaml"])
def test_a_choice_changes_the_cheap_jobs_spec_only(name):
    """Tolerances, the export list and lm_eval.metric never reach prune_model's spec; each change
    shows as exactly one key of the job that uses it."""
    config = load_config(CONFIGS / name)
    before = resolve(config)
    changed = copy.deepcopy(config)
    tolerances = changed["pruning"]["auto_depth"]["tolerances"]
    tolerances["val_loss"] = tolerances["val_loss"] + 0.25
    changed["pruning"]["lm_eval"]["metric"] = "acc_norm"
    changed["pruning"]["export"] = [{"strategy": "deepest", "metric": "val_loss"}]
    after = resolve(changed)
    assert before.jobs("prune_model") == after.jobs("prune_model")
    for spec in after.jobs("prune_model").values():
        assert not {"auto_depth", "export"} & set(spec) and "metric" not in spec["lm_eval"]
    old_tolerance = config["pruning"]["auto_depth"]["tolerances"]["val_loss"]
    for model, spec in after.jobs("choose_depth").items():
        assert spec_change_lines(
            f"choose_depth[{model}]", before.jobs("choose_depth")[model], spec
        ) == [
            f"choose_depth[{model}]: auto_depth.tolerances.val_loss {old_tolerance} -> "
            f"{old_tolerance + 0.25}",
            f'choose_depth[{model}]: metric "acc" -> "acc_norm"',
        ]
    assert set(after.jobs("export_pruned")) == set(after.jobs("prune_model"))
    for model, spec in after.jobs("export_pruned").items():
        assert spec["export"] == changed["pruning"]["export"]
        inputs = after.inputs["export_pruned"][model]
        assert inputs["pruning"] == [spec["pruning"]] == [after.paths.pruning(model)]
        assert inputs["auto_depth"] == [spec["auto_depth"]] == [after.paths.auto_depth(model)]


def test_no_export_job_without_export_items_and_bad_items_are_named():
    config = load_config(CONFIGS / "test.yaml")
    assert config["pruning"]["export"] == []
    resolved = resolve(config)
    assert resolved.jobs("export_pruned") == {}
    assert set(resolved.jobs("choose_depth")) == set(resolved.jobs("prune_model"))
    from depthlab.core.errors import ConfigError

    config["pruning"]["export"] = [{"strategy": "angular", "metric": "mean_acc"}]
    with pytest.raises(ConfigError, match=r"^pruning\.export\[0\]\.metric: 'mean_acc' has no"):
        resolve(config)
    config["pruning"]["export"] = [{"strategy": "block_influence", "metric": "val_loss"}]
    with pytest.raises(ConfigError, match=r"^pruning\.export\[0\]\.strategy: 'block_influence'"):
        resolve(config)


# ------------------------------------------------------------------ the two scripts


def hand_made_measurements(folder: Path, num_layers: int = 4, greedy_max_n=None) -> pd.DataFrame:
    """A prune_model output folder with sweep.csv and summary.json as the stage writes them:
    three strategies, an lm-eval task on every variant, one healed variant; random losses whose
    decimal text does not round-trip through a plain float parse."""
    rng = np.random.default_rng(0)
    removed = {
        "angular": lambda n: "-".join(str(l) for l in range(1, 1 + n)),
        "deepest": lambda n: "-".join(str(l) for l in range(num_layers - 1 - n, num_layers - 1)),
        "greedy": lambda n: "-".join(str(l) for l in sorted([2, 0, 1][:n])),
    }
    rows = []
    for strategy, label in removed.items():
        top = min(num_layers - 1, greedy_max_n or num_layers) if strategy == "greedy" else 3
        for healed in (False, True):
            for n in range(0, top + 1):
                if healed and (strategy != "angular" or n != 2):
                    continue
                loss = 3.0 + 0.3 * n + rng.random() * 0.1 - (0.4 if healed else 0.0)
                rows.append(
                    {
                        "model": "m",
                        "strategy": strategy,
                        "n": n,
                        "fraction": n / num_layers,
                        "removed": label(n) if n else "",
                        "healed": healed,
                        "val_loss": loss,
                        "task": "t",
                        "acc": 0.9 - 0.1 * n + rng.random() * 0.01,
                    }
                )
    sweep = pd.DataFrame(rows)
    folder.mkdir(parents=True)
    write_dataframe(folder / "sweep.csv", sweep)
    summary = {"model": "m", "num_layers": num_layers, "greedy_max_n": greedy_max_n}
    (folder / "summary.json").write_text(json.dumps(summary))
    return sweep


run_script = run_stage_script


def test_measurements_read_back_exactly_as_written(tmp_path):
    sweep = hand_made_measurements(tmp_path / "pruning")
    read, summary = read_measurements(tmp_path / "pruning")
    assert summary["num_layers"] == 4
    assert np.array_equal(read["val_loss"].to_numpy(), sweep["val_loss"].to_numpy())
    assert list(read["removed"]) == list(sweep["removed"])  # "" and "1" stay text
    assert removal_sets(read)[("angular", 2)] == (1, 2)
    assert removal_sets(read)[("deepest", 1)] == (2,)
    assert ("angular", 0) not in removal_sets(read)


def test_choose_depth_writes_the_choices_of_the_measured_tables(tmp_path):
    pruning = tmp_path / "pruning" / "m"
    sweep = hand_made_measurements(pruning, greedy_max_n=2)
    out = tmp_path / "auto_depth" / "m"
    spec = {
        "model_name": "m",
        "pruning": str(pruning),
        "auto_depth": {"tolerances": {"val_loss": 0.65, "t": 0.15}},
        "metric": "acc",
        "out": str(out),
    }
    result = run_script("choose_depth.py", spec)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((out / "auto_depth.json").read_text())
    # the in-memory table gives the same choices as the one read back (no rounding on the way)
    expected = auto_depth_choices(sweep, spec["auto_depth"]["tolerances"], "acc")
    assert [{k: c[k] for k in expected[0]} for c in record["choices"]] == expected
    assert record == json.loads(
        json.dumps(
            auto_depth_record(
                sweep,
                json.loads((pruning / "summary.json").read_text()),
                spec["auto_depth"]["tolerances"],
                "acc",
            )
        )
    )
    by_key = {(c["strategy"], c["healed"], c["metric"]): c for c in record["choices"]}
    assert by_key[("angular", False, "val_loss")]["n"] == 2  # 3.0 + 0.6 + noise, then +0.9
    assert by_key[("angular", True, "val_loss")]["n"] == 2  # the healed curve: n = 2 only
    assert by_key[("deepest", False, "t")]["n"] == 1  # acc falls 0.1 per layer
    greedy = by_key[("greedy", False, "val_loss")]
    assert greedy["curve_end_n"] == 2 and greedy["at_curve_end"]  # greedy_max_n cut the path
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["config"] == spec and provenance["rule"] == "choose_depth"
    assert set(provenance["inputs"]) == {str(pruning / "sweep.csv"), str(pruning / "summary.json")}

    # bad input: a missing table is named, and the choices already made stay as they were
    (pruning / "sweep.csv").unlink()
    before = (out / "auto_depth.json").read_bytes()
    result = run_script("choose_depth.py", spec)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"pruning: {pruning / 'sweep.csv'} does not exist" in result.stderr
    assert (out / "auto_depth.json").read_bytes() == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]  # no temporary left behind


def tiny_llama(folder: Path, num_layers: int = 4):
    import torch
    from tiny_models import byte_level_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = byte_level_tokenizer(["the deeper layers of a language model"] * 4, 300)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def test_export_pruned_writes_the_chosen_model(tmp_path):
    import torch
    from depthlab.stages.pruning.layer_removal import pruned_view
    from transformers import AutoModelForCausalLM

    original = tiny_llama(tmp_path / "model")
    pruning = tmp_path / "pruning" / "m"
    hand_made_measurements(pruning)
    chosen = tmp_path / "auto_depth" / "m"
    result = run_script(
        "choose_depth.py",
        {
            "model_name": "m",
            "pruning": str(pruning),
            "auto_depth": {"tolerances": {"val_loss": 0.65, "t": 0.001}},
            "metric": "acc",
            "out": str(chosen),
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "pruned_models" / "m"
    spec = {
        "model_name": "m",
        "model": str(tmp_path / "model"),
        "revision": None,
        "dtype": "float32",
        "pruning": str(pruning),
        "auto_depth": str(chosen),
        "export": [
            {"strategy": "angular", "metric": "val_loss"},
            {"strategy": "deepest", "metric": "t"},
        ],
        "out": str(out),
    }
    result = run_script("export_pruned.py", spec)
    assert result.returncode == 0, result.stderr[-3000:]
    exports = json.loads((out / "exports.json").read_text())["exports"]
    angular, deepest = exports
    assert (angular["n"], angular["removed"], angular["folder"]) == (
        2,
        [1, 2],
        "angular_val_loss_n2",
    )
    # acc drops 0.1 at n = 1, beyond the 0.001 tolerance: nothing to export, and it says why
    assert deepest["folder"] is None and deepest["n"] == 0 and "tolerance" in deepest["note"]
    exported = AutoModelForCausalLM.from_pretrained(out / angular["folder"]).eval()
    assert exported.config.num_hidden_layers == 2
    ids = torch.randint(
        0, original.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad(), pruned_view(original, [1, 2]) as view:
        expected = view(ids).logits
    assert torch.equal(exported(ids).logits, expected)
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["config"] == spec and provenance["rule"] == "export_pruned"

    # bad input: choices made on another model (a layer count that differs) are named, and the
    # exports already written stay
    record = json.loads((chosen / "auto_depth.json").read_text())
    (chosen / "auto_depth.json").write_text(json.dumps({**record, "num_layers": 6}))
    before = (out / "exports.json").read_bytes()
    result = run_script("export_pruned.py", spec)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"model: {tmp_path / 'model'} has 4 layers" in result.stderr
    assert (out / "exports.json").read_bytes() == before
    # and a missing choice file is named
    result = run_script("export_pruned.py", {**spec, "auto_depth": str(tmp_path / "nowhere")})
    assert result.returncode == 2
    assert f"auto_depth: {tmp_path / 'nowhere' / 'auto_depth.json'} does not exist" in result.stderr
