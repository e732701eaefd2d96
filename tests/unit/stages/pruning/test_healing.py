"""Healing: LoRA and QLoRA on a pruned model, trained on the run's train split, lower its
validation loss; the adapters are merged into an ordinary full-precision model (no LoRA or 4-bit
module left) that scores like any unhealed variant; bad settings are named."""

import numpy as np
import pytest
import torch
from depthlab.core.errors import PruningError
from depthlab.plan.stage_settings import HealSettings, validate_healing_settings
from depthlab.stages.pruning.healing import _schedule, heal
from depthlab.stages.pruning.layer_removal import model_loss, prune_copy
from depthlab.stages.pruning.lm_tasks import TaskEvaluator
from depthlab.stages.pruning.strategies import validation_windows
from requirements_helpers import require_pinned
from test_lm_tasks import make_run

torch.set_num_threads(1)
REMOVED = (1, 2)


def settings(**overrides):
    values = dict(
        method="lora",
        rank=4,
        alpha=8,
        dropout=0.0,
        target_modules=["gate_proj", "up_proj", "down_proj"],
        steps=30,
        batch_size=8,
        seq_len=32,
        lr=1e-2,
        warmup_steps=3,
        min_lr_ratio=0.1,
        schedule="cosine",
        weight_decay=0.0,
    )
    values.update(overrides)
    return values


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("heal"), train_steps=80)
    run["train"] = np.fromfile(run["data"] / "train.bin", dtype=np.uint16)
    run["windows"] = validation_windows(
        np.fromfile(run["data"] / "val.bin", dtype=np.uint16), 16, 32, 8
    )
    return run


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_healing_lowers_validation_loss(run, method):
    if method == "qlora":
        require_pinned("bitsandbytes")
    model, windows = run["trained"], run["windows"]
    full = model_loss(prune_copy(model, ()), windows)
    unhealed = model_loss(prune_copy(model, REMOVED), windows)
    assert unhealed > full + 0.05  # the removal hurts
    merged, record = heal(
        prune_copy(model, REMOVED),
        run["train"],
        HealSettings.from_dict(settings(method=method)),
        seed=0,
    )
    healed = model_loss(merged, windows)
    assert healed < unhealed - 0.05, (full, unhealed, healed)
    assert record["trainable_parameters"] > 0 and record["method"] == method
    # merged: an ordinary model, full precision, no adapter or 4-bit module left
    names = {type(m).__name__ for m in merged.modules()}
    assert not any("lora" in n.lower() or "4bit" in n.lower() for n in names), names
    assert all(p.dtype == torch.float32 for p in merged.parameters())
    assert merged.config.num_hidden_layers == run["num_layers"] - len(REMOVED)
    # the base model is untouched by healing its pruned copy
    assert model_loss(prune_copy(model, ()), windows) == full


def test_healed_model_is_evaluated_like_unhealed_variants(run):
    merged, _ = heal(
        prune_copy(run["trained"], REMOVED),
        run["train"],
        HealSettings.from_dict(settings(steps=5)),
        seed=0,
    )
    evaluator = TaskEvaluator(
        run["trained"],
        run["tokenizer"],
        run["tasks"],
        batch_size=32,
        datasets_cache=run["tasks"].parent / "cache",
        bootstrap_iters=10,
    )
    rows = evaluator.evaluate(model=merged)
    assert [r["task"] for r in rows] == ["depthlab_word_order", "depthlab_continuation"]
    assert all(0 <= r["acc"] <= 1 and r["samples"] == 48 for r in rows)


def test_schedule_warmup_then_cosine_to_the_floor():
    schedule = _schedule(HealSettings.from_dict(settings(steps=20, warmup_steps=4)))
    assert [schedule(s) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert schedule(20) == pytest.approx(0.1)
    assert all(schedule(s) >= schedule(s + 1) for s in range(4, 20))
    constant = _schedule(HealSettings.from_dict(settings(schedule="constant", warmup_steps=0)))
    assert {constant(s) for s in range(10)} == {1.0}


def test_bad_healing_settings_are_named(run):
    validate_healing_settings(settings())
    for key, value, message in (
        ("method", "dora", r"healing\.method: unknown method"),
        ("schedule", "linear", r"healing\.schedule: unknown"),
        ("rank", 0, r"healing\.rank: must be"),
        ("dropout", 1.5, r"healing\.dropout"),
    ):
        with pytest.raises(PruningError, match=message):
            validate_healing_settings(settings(**{key: value}))
    with pytest.raises(PruningError, match=r"healing\.steps: missing"):
        validate_healing_settings({k: v for k, v in settings().items() if k != "steps"})
    with pytest.raises(PruningError, match=r"target_modules: \['w1'\] are not modules"):
        heal(
            prune_copy(run["trained"], REMOVED),
            run["train"],
            HealSettings.from_dict(settings(target_modules=["w1"])),
            seed=0,
        )
    with pytest.raises(PruningError, match=r"healing\.seq_len: 128 exceeds"):
        heal(
            prune_copy(run["trained"], REMOVED),
            run["train"],
            HealSettings.from_dict(settings(seq_len=128)),
            seed=0,
        )


@pytest.mark.parametrize(
    "memory",
    [{"micro_batch_size": 3}, {"gradient_checkpointing": True}],
    ids=["micro_batches", "gradient_checkpointing"],
)
def test_memory_settings_heal_to_the_same_model(run, memory):
    """Micro-batches of 3 rows (8 = 3 + 3 + 2: unequal chunks, weighted by their targets) and
    recomputed activations give the one-pass model, to float32 rounding."""
    reference, _ = heal(
        prune_copy(run["trained"], REMOVED),
        run["train"],
        HealSettings.from_dict(settings(steps=6)),
        seed=0,
    )
    healed, _ = heal(
        prune_copy(run["trained"], REMOVED),
        run["train"],
        HealSettings.from_dict(settings(steps=6, **memory)),
        seed=0,
    )
    moved = 0.0
    for (name, a), (_, b) in zip(
        reference.state_dict().items(), healed.state_dict().items(), strict=True
    ):
        assert torch.allclose(a, b, atol=2e-5), (name, (a - b).abs().max())
        moved = max(
            moved, float((a - prune_copy(run["trained"], REMOVED).state_dict()[name]).abs().max())
        )
    assert moved > 1e-3, "healing changed nothing: the comparison would be vacuous"
    assert not healed.is_activation_checkpointing


def test_a_bad_micro_batch_size_is_named():
    with pytest.raises(PruningError, match=r"healing\.micro_batch_size: must be an integer >= 1"):
        validate_healing_settings(settings(micro_batch_size=0))
