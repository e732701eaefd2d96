"""The depth-use stage's settings (depthlab.settings.depth_use): the skip interventions' and the
linear maps' checks name the key they refuse (the variants' names and the counts' ranges are the
schema's: test_schema_owned_checks.py); two checkpoints' tokenizers are compared from their
files."""

from __future__ import annotations

import pytest
from depthlab.settings.depth_use import (
    VARIANTS,
    check_same_tokenizer,
    parse_variant,
    validate_intervention_settings,
    validate_linear_map_settings,
)


def test_variants_are_every_kind_and_scope():
    assert VARIANTS == (
        "layer_all", "layer_future", "attention_all", "attention_future", "mlp_all", "mlp_future",
    )  # fmt: skip
    assert parse_variant("attention_future") == ("attention", "future")
    with pytest.raises(ValueError, match=r"^k: unknown intervention kind 'neuron_all'"):
        parse_variant("neuron_all", "k")


def test_settings_are_validated_naming_the_key():
    good = dict(
        variants=["layer_all"],
        layers=None,
        no_skip_front=1,
        future_positions=4,
        future_min_position=8,
        max_rows=64,
        depth_score_variant="layer_all",
    )
    validate_intervention_settings(good, num_layers=4)
    validate_intervention_settings({**good, "layers": [0, 3]}, num_layers=4)
    with pytest.raises(ValueError, match=r"depth_use\.skip\.layers: layer index 4 is out of range"):
        validate_intervention_settings({**good, "layers": [0, 4]}, num_layers=4)


def test_linear_map_settings_are_validated_naming_the_key():
    good = dict(
        alphas=[0.0, 1e-3],
        val_fraction=0.1,
        test_fraction=0.2,
        max_memory_mb=256,
        max_length=64,
        batch_size=16,
        skip_first=1,
        max_documents=None,
    )
    validate_linear_map_settings(good)
    with pytest.raises(ValueError, match=r"depth_use\.linear_maps\.test_fraction"):
        validate_linear_map_settings({**good, "val_fraction": 0.5, "test_fraction": 0.5})


def test_different_tokenizers_are_rejected(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    for name, words in (("a", ["x", "y", "z"]), ("b", ["x", "y", "w"]), ("c", ["x", "y", "z"])):
        tokenizer = Tokenizer(
            models.WordLevel({w: i for i, w in enumerate(["<eos>", *words])}, unk_token="<eos>")
        )
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer, eos_token="<eos>", pad_token="<eos>"
        ).save_pretrained(tmp_path / name)
    check_same_tokenizer(str(tmp_path / "a"), str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"depth_use\.linear_maps: .* different tokenizers"):
        check_same_tokenizer(str(tmp_path / "a"), str(tmp_path / "b"))
