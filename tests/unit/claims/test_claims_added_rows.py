"""The rows issue 43 added (cod_lns_best, cod_post_ln_reverse, csordas_future_effect,
liu_update_orthogonal, gromov_qa_vs_math) and the Csordás second-half size, each verdict on planted
tables; and the untrained twin, rebuilt from a model folder, against the pretraining stage's own
initial weights."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from depthlab.claims import RunData, build_claims
from depthlab.claims.initial import InitialStatistics
from depthlab.claims.verdicts import (
    INDICATIVE,
    INIT_SHOWS_IT,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    REPRODUCED,
    SIZE_NOT_REPRODUCED,
    SIZE_REPRODUCED,
)
from depthlab.stages.twins.stage import untrained_model

LAYERS = 8


def _table(data: RunData) -> pd.DataFrame:
    return build_claims(data).set_index("claim_id")


def _twin(loss: float = 8.3, distance=None, angle: float = math.pi / 2) -> InitialStatistics:
    return InitialStatistics(
        h_var=pd.Series(np.ones(LAYERS + 1)),
        distance=pd.Series(np.full(LAYERS, 0.1) if distance is None else distance),
        angle_update=pd.Series(np.full(LAYERS - 1, angle)),
        losses={"full": loss},
    )


# ---------------------------------------------------------------------------------------------
# cod_lns_best


def _schemes(losses: dict, seeds: dict) -> RunData:
    """Scheme -> base loss, each seed 0.002 apart; flat twins (every scheme 8.3 untrained)."""
    data = RunData()
    for scheme, loss in losses.items():
        members = [f"{scheme}_s{i}" for i in range(seeds[scheme])]
        data.schemes.append((scheme, members, scheme))
        for i, m in enumerate(members):
            data.trained.add(m)
            data.val_loss[m], data.unigram[m] = loss + 0.002 * i, 7.0
            data.tokens_per_param[m], data.scale[m] = 25.0, "8 layers x 32"
            data.initial[m] = _twin()
    return data


@pytest.mark.parametrize(
    "mix_ln, seeds, expected",
    [
        (5.60, 3, REPRODUCED),  # LNS 5.50 below every scheme by 0.1
        (5.40, 3, NOT_REPRODUCED),  # Mix-LN below LNS
        (5.60, 1, INDICATIVE),  # one Mix-LN seed
    ],
)
def test_lns_best_needs_every_scheme_above_lns(mix_ln, seeds, expected):
    data = _schemes(
        {"pre_ln": 5.60, "lns": 5.50, "mix_ln": mix_ln}, {"pre_ln": 3, "lns": 3, "mix_ln": seeds}
    )
    row = _table(data).loc["cod_lns_best"]
    assert row["verdict"] == expected, row["reason"]
    assert row["measured"] == pytest.approx(min(mix_ln, 5.60) - 5.50)
    assert "(mix_ln)" in row["claim"] or "(pre_ln)" in row["claim"]


def test_lns_best_before_the_papers_budget_is_not_testable():
    data = _schemes({"pre_ln": 5.6, "lns": 5.5}, {"pre_ln": 3, "lns": 3})
    data.tokens_per_param = {m: 0.2 for m in data.tokens_per_param}
    assert _table(data).loc["cod_lns_best", "verdict"] == NOT_TESTABLE


# ---------------------------------------------------------------------------------------------
# cod_post_ln_reverse


def _post_ln(deep_minus_shallow: float, trained: bool, twin_effect: float = 0.0) -> RunData:
    rng = np.random.default_rng(0)
    members = [f"post_ln_s{i}" for i in range(3)] if trained else ["minilm"]
    replicates = {}
    for m in members:
        shards = 1 if trained else 4
        replicates[m] = []
        for _ in range(shards):
            distance = pd.Series(
                np.r_[[0.2] * 4, [0.2 + deep_minus_shallow] * 4] + rng.normal(0, 0.003, LAYERS)
            )
            replicates[m].append((pd.DataFrame(), distance, "all tokens"))
    data = RunData(
        post_ln={"g": {"members": members, "trained": trained, "replicates": replicates}}
    )
    if trained:
        for m in members:
            data.trained.add(m)
            data.val_loss[m], data.unigram[m] = 5.0, 6.0
            data.initial[m] = _twin(distance=np.r_[[0.2] * 4, [0.2 + twin_effect] * 4])
    return data


@pytest.mark.parametrize("trained", [True, False])
@pytest.mark.parametrize(
    "effect, expected", [(0.1, REPRODUCED), (-0.1, NOT_REPRODUCED), (0.0, NOT_REPRODUCED)]
)
def test_post_ln_reverse(effect, expected, trained):
    row = _table(_post_ln(effect, trained)).loc["cod_post_ln_reverse:g"]
    assert row["verdict"] == expected, row["reason"]
    assert row["measured"] == pytest.approx(effect, abs=0.01)
    assert ("3 seeds" if trained else "4 document shards") in row["interval"]


def test_post_ln_reverse_the_twin_already_shows():
    row = _table(_post_ln(0.1, True, twin_effect=0.1)).loc["cod_post_ln_reverse:g"]
    assert row["verdict"] == NOT_TESTABLE and INIT_SHOWS_IT in row["reason"]


# ---------------------------------------------------------------------------------------------
# csordas_second_half size (first half > 0.15, second half < 0.05)


def _contribution_data(first: float, second: float) -> RunData:
    rng = np.random.default_rng(0)
    replicates = []
    for _ in range(4):
        values = np.r_[[first] * 4, [second] * 4] + rng.normal(0, 0.002, LAYERS)
        rows = [("block_rel_norm", l, np.nan, values[l]) for l in range(LAYERS)]
        rows += [("h_var", l, np.nan, math.exp(0.1 * l)) for l in range(LAYERS + 1)]
        frame = pd.DataFrame(rows, columns=["measure", "layer", "n", "value"])
        replicates.append((frame, pd.Series(np.full(LAYERS, 0.1)), "all tokens"))
    return RunData(pretrained={"real": replicates}, pretrained_scale={"real": "real"})


@pytest.mark.parametrize(
    "first, second, expected, size",
    [
        (0.3, 0.02, REPRODUCED, SIZE_REPRODUCED),
        (0.3, 0.10, REPRODUCED, SIZE_NOT_REPRODUCED),  # less, but not below 0.05
        (0.12, 0.02, REPRODUCED, SIZE_NOT_REPRODUCED),  # the first half below 0.15
    ],
)
def test_csordas_second_half_size(first, second, expected, size):
    row = _table(_contribution_data(first, second)).loc["csordas_second_half:real"]
    assert (row["verdict"], row["size_verdict"]) == (expected, size)
    assert row["size_measured"] == pytest.approx(min(first - 0.15, 0.05 - second), abs=0.005)


# ---------------------------------------------------------------------------------------------
# csordas_future_effect


def _effects(first: float, second: float, layers: int = 4, noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(layers):
        value = first if s < layers // 2 else second
        for l in range(layers):
            mean = value + rng.normal(0, noise) if l > s else 0.0
            rows.append(("m", "val", "layer_future", s, l, "update", mean, mean, 10))
    columns = ["model", "text_set", "variant", "skipped", "layer", "measure", "max", "mean"]
    return pd.DataFrame(rows, columns=columns + ["count"])


@pytest.mark.parametrize(
    "first, second, twin_second, expected",
    [
        (0.5, 0.01, 0.5, REPRODUCED),  # training makes the second half spare the future
        (0.5, 0.5, 0.01, NOT_REPRODUCED),  # training makes the second half matter
        (0.5, 0.01, 0.01, NOT_TESTABLE),  # the random network already spares it
    ],
)
def test_csordas_future_effect_against_the_twin(first, second, twin_second, expected):
    members = [f"p_s{i}" for i in range(3)]
    data = RunData(depth_groups={"p": members}, trained=set(members))
    for i, m in enumerate(members):
        data.skip_effects[m] = _effects(first, second, noise=0.005, seed=i)
        data.initial[m] = InitialStatistics(skip_effects=_effects(first, twin_second))
    row = _table(data).loc["csordas_future_effect:p"]
    assert row["verdict"] == expected, row["reason"]
    if expected == NOT_TESTABLE:
        assert INIT_SHOWS_IT in row["reason"]


def test_csordas_future_effect_of_one_published_document_set_has_no_interval():
    data = RunData(depth_groups={"real": ["real"]}, skip_effects={"real": _effects(0.5, 0.01)})
    row = _table(data).loc["csordas_future_effect:real"]
    assert row["verdict"] == NOT_TESTABLE and "one document set" in row["reason"]
    assert row["measured"] == pytest.approx(0.04)


# ---------------------------------------------------------------------------------------------
# liu_update_orthogonal


def _angle_frame(angle: float, rng) -> pd.DataFrame:
    values = angle + rng.normal(0, 0.005, LAYERS - 1)
    rows = [("angle_update", l, np.nan, v) for l, v in enumerate(values)]
    rows += [("h_var", l, np.nan, 1.0 + l) for l in range(LAYERS + 1)]
    rows += [("block_rel_norm", l, np.nan, 0.1) for l in range(LAYERS)]
    return pd.DataFrame(rows, columns=["measure", "layer", "n", "value"])


@pytest.mark.parametrize(
    "angle, expected",
    [(math.pi / 2 + 0.02, REPRODUCED), (1.0, NOT_REPRODUCED)],
)
def test_update_orthogonality_over_shards(angle, expected):
    rng = np.random.default_rng(0)
    data = RunData(
        pretrained={
            "real": [
                (_angle_frame(angle, rng), pd.Series(np.full(LAYERS, 0.1)), "") for _ in "abcd"
            ]
        }
    )
    row = _table(data).loc["liu_update_orthogonal:real"]
    assert row["verdict"] == expected
    assert row["measured"] == pytest.approx(angle - math.pi / 2, abs=0.01)


def test_update_orthogonality_of_a_random_network_is_not_testable():
    rng = np.random.default_rng(0)
    base, treat = ["a_s0", "a_s1", "a_s2"], ["b_s0", "b_s1", "b_s2"]
    data = RunData(cod_pairs=[("a", base, "b", treat)], trained=set(base + treat))
    for m in base + treat:
        data.measures[m] = _angle_frame(math.pi / 2, rng)
        # twins exactly as orthogonal as the trained model: training did not move it
        angles = data.measures[m].query("measure == 'angle_update'")["value"].to_numpy()
        data.initial[m] = _twin()
        data.initial[m].angle_update = pd.Series(angles)
    row = _table(data).loc["liu_update_orthogonal:a"]
    assert row["verdict"] == NOT_TESTABLE and INIT_SHOWS_IT in row["reason"]
    for m in base + treat:  # twins far from orthogonal: training made the updates orthogonal
        data.initial[m] = _twin(angle=1.0)
    row = _table(data).loc["liu_update_orthogonal:a"]
    assert row["verdict"] == REPRODUCED and row["training_moved"] == "towards the claim"


@pytest.mark.parametrize("angle", [math.pi / 2, 1.0])
def test_update_orthogonality_of_a_toy_below_the_llms_budget_is_no_test_either_way(angle):
    rng = np.random.default_rng(0)
    base, treat = ["a_s0", "a_s1", "a_s2"], ["b_s0", "b_s1", "b_s2"]
    data = RunData(cod_pairs=[("a", base, "b", treat)], trained=set(base + treat))
    for m in base + treat:
        data.measures[m] = _angle_frame(angle, rng)
        data.initial[m] = _twin(angle=1.3)
        data.tokens_per_param[m] = 25.0
    decided = _table(data).loc["liu_update_orthogonal:a", "verdict"]
    assert decided == (REPRODUCED if angle == math.pi / 2 else NOT_REPRODUCED)
    for m in base + treat:  # the default's toys: 0.22 tokens per parameter
        data.tokens_per_param[m] = 0.22
    row = _table(data).loc["liu_update_orthogonal:a"]
    assert row["verdict"] == NOT_TESTABLE and "no fair test, pass or fail" in row["reason"]


# ---------------------------------------------------------------------------------------------
# gromov_qa_vs_math


def _task_sweep(qa_drop: float, math_drop: float, layers: int = LAYERS) -> pd.DataFrame:
    rows = []
    for n in range(0, layers):
        for task, drop in (("boolq", qa_drop), ("gsm8k", math_drop)):
            score = 0.8 - drop * n / layers
            rows.append(("angular", n, n / layers, False, 5.0, task, score, 0.01))
    return pd.DataFrame(
        rows,
        columns=["strategy", "n", "fraction", "healed", "val_loss", "task", "score",
                 "score_stderr"],
    )  # fmt: skip


@pytest.mark.parametrize(
    "qa_drop, math_drop, expected",
    [(0.05, 1.0, REPRODUCED), (1.0, 0.05, NOT_REPRODUCED), (0.3, 0.3, NOT_REPRODUCED)],
)
def test_qa_holds_while_math_declines(qa_drop, math_drop, expected):
    data = RunData(
        pruning_groups={"real": ["real"]}, sweeps={"real": _task_sweep(qa_drop, math_drop)}
    )
    row = _table(data).loc["gromov_qa_vs_math:real"]
    assert row["verdict"] == expected, row["reason"]
    # mean over n = 1..4 of (math - QA) drop, each as a share of intact 0.8 - chance
    # (GSM8K 0, BoolQ 0.622): (math / 0.8 - qa / 0.178) * mean(n) / L
    assert row["measured"] == pytest.approx((math_drop / 0.8 - qa_drop / 0.178) * 2.5 / LAYERS)


def test_qa_vs_math_without_a_math_task_says_which_tasks_ran():
    sweep = _task_sweep(0.1, 0.5)
    sweep = sweep[sweep["task"] == "boolq"]
    data = RunData(pruning_groups={"real": ["real"]}, sweeps={"real": sweep})
    row = _table(data).loc["gromov_qa_vs_math:real"]
    assert row["verdict"] == NOT_TESTABLE and "scored: boolq" in row["reason"]


# ---------------------------------------------------------------------------------------------
# The untrained twin


@pytest.mark.parametrize("precision", ["fp32", "pure_bf16"])
def test_untrained_twin_is_the_pretraining_stage_initial_model(tmp_path, precision):
    from depthlab.stages.pretrain.training import TrainSettings, pretraining_model

    decl = {
        "architecture": {"hidden_size": 32, "num_layers": 3, "num_heads": 2,
                         "intermediate_size": 64},
        "norm_scheme": "lns",
        "train": {"batch_size": 4, "beta1": 0.9, "beta2": 0.95, "checkpoint_every": 32,
                  "eval_batches": 1, "eval_every": 32, "grad_clip": 1.0, "init_std": 0.02,
                  "log_every": 10, "log_spaced_evals": 0, "lr": 0.003, "micro_batch_size": None,
                  "min_lr_ratio": 0.1, "precision": precision, "seq_len": 16, "steps": 8,
                  "warmup_steps": 1, "weight_decay": 0.0},
    }  # fmt: skip
    meta = {"vocab_size": 50, "eos_id": 0, "pad_id": 0, "bos_id": None}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.json").write_text(json.dumps(meta))
    twin = untrained_model(decl, 7, tmp_path / "data")
    settings = TrainSettings.from_dict(decl["train"])
    torch.manual_seed(123)  # the twin's weights do not depend on the global generator's state
    reference, _ = pretraining_model("m", decl, settings, meta, 7, torch.device("cpu"))
    # a pure_bf16 run starts from the bf16 rounding of the initialisation: so does its twin
    assert reference.dtype == (torch.bfloat16 if precision == "pure_bf16" else torch.float32)
    for (name, a), (_, b) in zip(twin.state_dict().items(), reference.state_dict().items()):
        assert a.dtype == torch.float32 and torch.equal(a, b.float()), name
    other = untrained_model(decl, 7, tmp_path / "data")
    assert all(torch.equal(a, b) for a, b in zip(twin.parameters(), other.parameters()))


def test_updates_that_training_made_parallel_are_not_reproduced():
    rng = np.random.default_rng(0)
    base, treat = ["a_s0", "a_s1", "a_s2"], ["b_s0", "b_s1", "b_s2"]
    data = RunData(cod_pairs=[("a", base, "b", treat)], trained=set(base + treat))
    for m in base + treat:
        data.measures[m] = _angle_frame(0.5, rng)  # trained: successive updates aligned
        data.initial[m] = _twin(angle=math.pi / 2)  # untrained: orthogonal
    assert _table(data).loc["liu_update_orthogonal:a", "verdict"] == NOT_REPRODUCED
