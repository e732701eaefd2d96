"""`work:` (depthlab/config/work_size.py): the model-reading stages sized from one model's
parameter count, the keys a config writes kept, and bad sections refused naming the key."""

import json
from pathlib import Path

import pytest
from depthlab.config import ConfigError, load_config, resolve
from depthlab.config.work_size import SIZES, block_grid, size_for, size_work, sized_settings

ROOT = Path(__file__).resolve().parents[3]
OWN = ROOT / "config" / "your_model.yaml"


def test_sizes_follow_the_parameter_count():
    assert [size_for(n) for n in (1e6, 135e6, 7e9, 70e9)] == ["tiny", "small", "medium", "large"]
    assert size_for(49_999_999) == "tiny" and size_for(50_000_000) == "small"


def test_larger_sizes_read_more_and_longer_text():
    rows = [sized_settings(size, 32) for size in SIZES]
    for key in ("max_samples", "max_length"):
        values = [row["analysis"][key] for row in rows]
        assert values == sorted(values) and values[0] < values[-1], (key, values)
    windows = [row["pruning"]["val"]["windows"] for row in rows]
    assert windows == sorted(windows) and windows[0] < windows[-1]
    for row in rows:  # the scored positions fit the window
        assert row["pruning"]["val"]["loss_tokens"] <= row["pruning"]["val"]["seq_len"]


def test_block_grid_spans_up_to_half_the_depth():
    assert block_grid("tiny", 6) is None  # every n
    assert block_grid("small", 30) == [1, 2, 4, 8, 11, 15]
    assert block_grid("large", 80) == [1, 2, 10, 20, 30, 40]
    assert block_grid("small", 2) == [1]  # never the whole model


def test_the_shipped_config_is_sized_small_for_smollm2():
    """config/your_model.yaml names SmolLM2-135M by hub id: the pinned table gives its 135M
    parameters offline, so the small size fills in what the file leaves out."""
    resolved = resolve(load_config(OWN))
    analysis = resolved.jobs("analyse_model")["val/mine"]
    small = sized_settings("small", 30)
    assert analysis["max_samples"] == small["analysis"]["max_samples"]
    assert analysis["max_length"] == small["analysis"]["max_length"]
    prune = resolved.jobs("prune_model")["mine"]
    assert prune["n_grid"] == [1, 2, 4, 8, 11, 15]
    assert prune["lm_eval"]["n_grid"] == [8]  # about L/4
    assert prune["val"]["windows"] == small["pruning"]["val"]["windows"]
    assert "work" not in resolved.config
    # only the model-reading stages run: nothing is trained here
    assert not resolved.jobs("pretrain_model") and not resolved.jobs("train_toy")
    assert set(resolved.jobs("export_pruned")) == {"mine"}
    assert set(resolved.jobs("make_claims")) == {"claims"}


def test_a_key_the_config_writes_wins_over_the_size():
    config = load_config(OWN)
    config["analysis"]["max_samples"] = 7
    config["pruning"]["n_grid"] = [3]
    resolved = resolve(config)
    assert resolved.jobs("analyse_model")["val/mine"]["max_samples"] == 7
    assert resolved.jobs("prune_model")["mine"]["n_grid"] == [3]


def test_a_named_size_replaces_auto():
    config = load_config(OWN)
    config["work"]["size"] = "medium"
    resolved = resolve(config)
    medium = sized_settings("medium", 30)
    assert (
        resolved.jobs("analyse_model")["val/mine"]["max_samples"]
        == medium["analysis"]["max_samples"]
    )


def test_a_local_folder_is_sized_from_its_files(tmp_path):
    """A local folder: the parameter count from config.json (no weights file: the layout's
    count), the depth from num_hidden_layers."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
                "tie_word_embeddings": False,
            }
        )
    )
    config = {"work": {"model": "mine"}, "models": {"mine": {"kind": "hf", "path": str(folder)}}}
    config["analysis"] = {"models": ["mine"]}
    sized = size_work(config, tmp_path)
    assert (
        sized["analysis"]["max_samples"] == sized_settings("medium", 32)["analysis"]["max_samples"]
    )
    assert "work" not in sized and "work" in config  # the caller's config is left alone


def test_a_stage_set_to_null_stays_off():
    config = load_config(OWN)
    config["pruning"] = None
    sized = size_work(config, ROOT)
    assert sized["pruning"] is None
    assert (
        sized["analysis"]["max_samples"] == sized_settings("small", 30)["analysis"]["max_samples"]
    )


@pytest.mark.parametrize(
    ("work", "message"),
    [
        ({"model": "nobody"}, r"^work\.model: 'nobody' is not a declared model \(declared: mine\)"),
        ({"model": "mine", "size": "huge"}, r"^work\.size: 'huge' is not one of auto, tiny"),
        ({"size": "auto"}, r"^work: .*a mapping \{model: <a declared model>"),
        ("auto", r"^work: 'auto': a mapping"),
    ],
)
def test_a_bad_work_section_names_its_key(work, message):
    config = load_config(OWN)
    config["work"] = work
    with pytest.raises(ConfigError, match=message):
        resolve(config)


def test_a_hub_model_outside_the_pinned_table_needs_a_named_size():
    config = load_config(OWN)
    config["models"]["mine"]["path"] = "someone/unknown-model"
    with pytest.raises(ConfigError, match=r"^work\.model: the hub model 'someone/unknown-model'"):
        resolve(config)
    config["work"]["size"] = "small"
    with pytest.raises(ConfigError, match=r"^work\.model: the hub model"):
        resolve(config)  # the depth still comes from the shape: a named size needs it too


def test_the_docs_table_of_sizes_is_the_code():
    """docs/your-model.md's table of sizes: each row's bound, analysis and window sizes."""
    import re

    page = (ROOT / "docs" / "your-model.md").read_text()
    rows = re.findall(
        r"^\| `(\w+)` \| .*?`([\d.]+)([MB])`.*?\| `(\d+) x (\d+)` \| `(\d+) x (\d+)` \|", page, re.M
    )
    assert [row[0] for row in rows] == list(SIZES)
    from depthlab.config.work_size import SIZE_BOUNDS

    for (size, bound, unit, docs, length, windows, seq), (limit, _) in zip(rows, SIZE_BOUNDS):
        settings = sized_settings(size, 32)
        assert (int(docs), int(length)) == (
            settings["analysis"]["max_samples"],
            settings["analysis"]["max_length"],
        ), size
        val = settings["pruning"]["val"]
        assert (int(windows), int(seq)) == (val["windows"], val["seq_len"]), size
        scale = {"M": 1e6, "B": 1e9}[unit]
        if limit != float("inf"):
            assert float(bound) * scale == limit, size
        else:  # the last row: the previous bound and more
            assert float(bound) * scale == SIZE_BOUNDS[-2][0], size


def test_each_document_shard_reads_a_third_of_a_pass():
    """The shards whose spread gives the hidden-state claims their intervals: a third of the
    sized documents each, unless the text set says how many."""
    config = load_config(OWN)
    config["analysis"]["text_sets"]["val_3"]["max_samples"] = 5
    jobs = resolve(config).jobs("analyse_model")
    small = sized_settings("small", 30)["analysis"]["max_samples"]
    assert [jobs[f"val_{i}/mine"]["max_samples"] for i in range(4)] == [small // 3] * 3 + [5]
    assert jobs["val/mine"]["max_samples"] == small
