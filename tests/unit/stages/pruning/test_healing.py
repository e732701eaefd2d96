"""Healing: LoRA, QLoRA and continued pretraining (full) on a pruned model, trained on the run's
train split, lower its validation loss; the adapters are merged into an ordinary full-precision
model (no LoRA or 4-bit module left) that scores like any unhealed variant; full trains every
weight with AdamW, LoRA changes only its target modules, by a low-rank update; bad settings are
named."""

import numpy as np
import pytest
import torch
from depthlab.core.errors import PruningError
from depthlab.settings.training import HealSettings, lr_multiplier, validate_healing_settings
from depthlab.stages.lm_tasks import TaskEvaluator
from depthlab.stages.pruning.healing import heal
from depthlab.stages.pruning.layer_removal import model_loss, prune_copy
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


@pytest.mark.parametrize("method", ["lora", "qlora", "full"])
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
        # full: every weight moves, at a rate of its own (pruning.healing.full_lr)
        HealSettings.from_dict(
            settings(method=method, **({"lr": 1e-3} if method == "full" else {}))
        ),
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
    cosine = HealSettings.from_dict(settings(steps=20, warmup_steps=4))
    schedule = [lr_multiplier(s, cosine) for s in range(21)]
    assert schedule[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert schedule[20] == pytest.approx(0.1)
    assert all(schedule[s] >= schedule[s + 1] for s in range(4, 20))
    constant = HealSettings.from_dict(settings(schedule="constant", warmup_steps=2))
    assert [lr_multiplier(s, constant) for s in range(6)] == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]


def test_bad_healing_settings_are_named(run):
    """A missing setting and what only a model shows are named here; an unknown method or a
    value out of range is the schema's (tests/unit/settings/test_schema_owned_checks.py)."""
    validate_healing_settings(settings())
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


def _changed(healed, before) -> dict:
    """{parameter name: max |healed - before|} over the parameters of two models of one shape."""
    reference = dict(before.named_parameters())
    return {
        name: float((p.detach() - reference[name].detach()).abs().max())
        for name, p in healed.named_parameters()
    }


def test_full_healing_trains_every_weight_and_lora_only_its_targets(run):
    """full: every parameter tensor of the pruned model moves, every one counted as trained, and
    the healed model comes back frozen in eval mode; LoRA: the weights outside its target
    modules are bit for bit the pruned copy's, each target weight moved by an update of rank
    <= r (the merged B A)."""
    pruned = prune_copy(run["trained"], REMOVED)
    full, record = heal(
        prune_copy(run["trained"], REMOVED),
        run["train"],
        HealSettings.from_dict(settings(method="full", steps=3, lr=1e-3)),
        seed=0,
    )
    changed = _changed(full, pruned)
    assert changed and all(delta > 0 for delta in changed.values()), changed
    assert record["trainable_parameters"] == sum(p.numel() for p in pruned.parameters())
    assert record["method"] == "full" and record["lr"] == 1e-3
    assert not full.training and not any(p.requires_grad for p in full.parameters())
    assert [type(m).__name__ for m in full.modules()] == [
        type(m).__name__ for m in pruned.modules()
    ]
    rank = 2
    lora, record = heal(
        prune_copy(run["trained"], REMOVED),
        run["train"],
        HealSettings.from_dict(settings(steps=3, rank=rank)),
        seed=0,
    )
    targets = ("gate_proj", "up_proj", "down_proj")
    changed = _changed(lora, pruned)
    assert record["trainable_parameters"] < sum(p.numel() for p in pruned.parameters()) / 10
    untouched = {n: d for n, d in changed.items() if not any(f".{t}." in n for t in targets)}
    assert untouched and set(untouched.values()) == {0.0}, untouched
    moved = {n for n in changed if n not in untouched}
    assert moved and all(changed[n] > 0 for n in moved)
    reference = dict(pruned.named_parameters())
    for name, p in lora.named_parameters():
        if name in moved:
            update = (p.detach() - reference[name].detach()).double()
            assert int(torch.linalg.matrix_rank(update, rtol=1e-6)) <= rank, name


def test_a_full_healing_step_is_a_hand_written_adamw_step(run):
    """One step of `full` (constant lr, no warmup, weight decay) equals AdamW written out by
    hand on the same batch: the gradient of the mean next-token cross-entropy by autograd,
    m = (1 - b1) g, v = (1 - b2) g^2 after bias correction m_hat = g, v_hat = g^2, and
    p <- p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)."""
    from depthlab.stages.train_loop import train_batch

    lr, wd, seed, eps = 1e-3, 0.1, 3, 1e-8
    values = settings(method="full", steps=1, warmup_steps=0, schedule="constant", lr=lr,
                      weight_decay=wd, batch_size=4)  # fmt: skip
    healed, record = heal(
        prune_copy(run["trained"], REMOVED), run["train"], HealSettings.from_dict(values), seed
    )
    model = prune_copy(run["trained"], REMOVED)
    window = train_batch(run["train"], 0, seed, values["batch_size"], values["seq_len"])
    targets = window[:, 1:].reshape(-1)
    logits = model(input_ids=window[:, :-1].clamp(min=0)).logits
    scored = targets != -100
    log_probs = torch.log_softmax(logits.float().reshape(-1, logits.shape[-1]), -1)
    loss = -log_probs[scored].gather(1, targets[scored, None]).mean()
    assert record["first_train_loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    names = [n for n, _ in model.named_parameters()]
    grads = torch.autograd.grad(loss, [p for _, p in model.named_parameters()])
    after = dict(healed.named_parameters())
    for name, p, g in zip(names, model.parameters(), grads, strict=True):
        expected = p.detach() * (1 - lr * wd) - lr * g / (g.abs() + eps)
        assert torch.allclose(after[name].detach(), expected, atol=1e-6, rtol=1e-5), name


def test_a_non_finite_healing_loss_stops_with_the_training_loops_message(run):
    """Healing trains through TrainingLoop, whose check of the losses stops a run at the first
    NaN / inf loss, naming its step: a learning rate of 1e30 sends every weight of `full` to
    ~1e30 in its first update, so the loss of step 2 is no longer finite (a loop of its own
    would heal on and return a model of NaNs)."""
    values = settings(method="full", steps=4, lr=1e30, warmup_steps=0, schedule="constant")
    with pytest.raises(
        FloatingPointError,
        match=r"^\[healing\] loss is (nan|inf) at step 2; stopping at the check of steps 2\.\.2 "
        r"\(lower pruning\.healing\.lr\)$",
    ):
        heal(prune_copy(run["trained"], REMOVED), run["train"], HealSettings.from_dict(values), 0)
