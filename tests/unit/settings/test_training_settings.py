"""The training settings family: pretraining, fine-tuning and healing settings extend one base,
read by one from_dict whose errors are one line naming the offending key under the run's config
section, in the error type each stage's jobs report; one schedule for all three. (An unknown
schedule or method is config/schema.yaml's to refuse: test_schema_owned_checks.py.)"""

import math

import pytest
from depthlab.core.errors import ConfigError, PruningError
from depthlab.settings.training import (
    HealSettings,
    RunSettings,
    TrainingSettings,
    lr_multiplier,
)
from depthlab.stages.finetune.data import FinetuneError
from depthlab.stages.finetune.finetuning import FinetuneSettings
from depthlab.stages.pretrain.settings import TrainSettings

COMMON = dict(steps=20, batch_size=4, seq_len=16, lr=1e-3, warmup_steps=4, min_lr_ratio=0.1,
              weight_decay=0.0)  # fmt: skip
RUN = dict(beta1=0.9, beta2=0.95, grad_clip=1.0, eval_every=5, log_every=1, checkpoint_every=5,
           precision="fp32")  # fmt: skip
FAMILIES = {
    TrainSettings: (
        {
            **COMMON,
            **RUN,
            "log_spaced_evals": 0,
            "eval_batches": 1,
            "init_std": 0.02,
            "micro_batch_size": None,
        },
        "train",
        ConfigError,
    ),
    FinetuneSettings: (
        {**COMMON, **RUN, "method": "full", "train_on_prompt": False},
        "finetune.train",
        FinetuneError,
    ),
    HealSettings: (
        {
            **COMMON,
            "schedule": "cosine",
            "method": "lora",
            "rank": 4,
            "alpha": 8,
            "dropout": 0.0,
            "target_modules": ["down_proj"],
        },
        "pruning.healing",
        PruningError,
    ),
}


def test_every_family_extends_the_base_and_reads_its_own_section():
    assert issubclass(TrainSettings, RunSettings) and issubclass(FinetuneSettings, RunSettings)
    assert issubclass(RunSettings, TrainingSettings) and issubclass(HealSettings, TrainingSettings)
    for family, (values, _, _) in FAMILIES.items():
        settings = family.from_dict({**values, "enabled": True})  # other keys are the schema's
        assert (settings.steps, settings.lr, settings.tokens_per_step) == (20, 1e-3, 64), family
        assert settings.schedule == "cosine"
    heal = HealSettings.from_dict(FAMILIES[HealSettings][0])
    assert heal.target_modules == ("down_proj",)
    # healing's loop: every step logged, no clipping, no resumable state
    assert (heal.log_every, heal.grad_clip, heal.checkpoint_every) == (1, None, None)


@pytest.mark.parametrize("family", list(FAMILIES), ids=lambda f: f.__name__)
@pytest.mark.parametrize("key", ["steps", "lr", "weight_decay", "seq_len"])
def test_a_missing_setting_is_named_under_its_section(family, key):
    values, section, error = FAMILIES[family]
    with pytest.raises(error) as raised:
        family.from_dict({k: v for k, v in values.items() if k != key})
    message = str(raised.value)
    assert message.startswith(f"{section}.{key}: missing ") and "\n" not in message, message


def test_a_missing_family_setting_and_a_given_section_are_named():
    values, _, _ = FAMILIES[FinetuneSettings]
    with pytest.raises(FinetuneError, match=r"^finetune\.train\.train_on_prompt: missing"):
        FinetuneSettings.from_dict({k: v for k, v in values.items() if k != "train_on_prompt"})
    values, _, _ = FAMILIES[HealSettings]
    with pytest.raises(PruningError, match=r"^pruning\.per_model\.x\.healing\.schedule: missing"):
        HealSettings.from_dict(
            {k: v for k, v in values.items() if k != "schedule"}, "pruning.per_model.x.healing"
        )


def test_one_schedule_for_every_family():
    """Warmup (step + 1) / warmup_steps, then cosine from 1 to min_lr_ratio at the last step,
    or constant 1; the same numbers whichever family asks."""
    by_family = {}
    for family, (values, _, _) in FAMILIES.items():
        settings = family.from_dict(values)
        by_family[family] = [lr_multiplier(s, settings) for s in range(21)]
    first = by_family[TrainSettings]
    assert all(curve == first for curve in by_family.values())
    assert first[:4] == [0.25, 0.5, 0.75, 1.0]
    assert first[12] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert first[20] == pytest.approx(0.1)
    constant = HealSettings.from_dict({**FAMILIES[HealSettings][0], "schedule": "constant"})
    assert [lr_multiplier(s, constant) for s in range(21)] == first[:4] + [1.0] * 17
