"""The block-ranking criteria (depthlab.stages.pruning.criteria) against independent computations:
Taylor scores against autograd by hand, magnitude against a direct sum, the ppl ranking against
removing each block and measuring the calibration loss, the SLEB path against a brute-force
loop with its barrier; the "+" rule never removes a protected block; a criterion without
pruning.calibration is refused naming the key; prune_model's plan with every criterion on a
tiny run (criteria.csv, sleb_path.csv, the sets scored on the validation windows, removed_params,
the existing strategies unchanged)."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from depthlab.core.errors import ConfigError, PruningError
from depthlab.models.architectures import adapt
from depthlab.settings.block_criteria import STRATEGIES
from depthlab.settings.pruning import (
    protected_layers,
    strategy_max_n,
    validate_pruning_settings,
)
from depthlab.stages.pruning.criteria import CRITERIA as RANKED_BEFORE_VALIDATION
from depthlab.stages.pruning.criteria import (
    magnitude_scores,
    rank_blocks,
    taylor_scores,
)
from depthlab.stages.pruning.layer_removal import prune_copy
from depthlab.stages.pruning.strategies import validation_windows
from tiny_models import VOCAB
from tiny_models import llama as tiny_llama

torch.set_num_threads(1)
# the weights of a Llama block the Shortened LLaMA criteria score: every "weight", no bias
BLOCK_WEIGHTS = [
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
]


def llama(layers: int, seed: int = 0, bias: bool = True):
    # attention biases: the criteria must leave them out
    model = tiny_llama(layers, seed, initializer_range=0.2, attention_bias=bias)
    for p in model.parameters():  # norm gains away from 1, so they count like the others
        if p.dim() == 1:
            p.data.uniform_(0.5, 1.5)
    return model


def tokens(count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    table = rng.integers(0, VOCAB, size=(VOCAB, 3))
    out = [0]
    for _ in range(count - 1):
        out.append(table[out[-1], rng.integers(3)])
    return np.asarray(out, dtype=np.uint16)


def full_loss(model, windows) -> float:
    """The mean next-token loss over every position, from the model's own logits."""
    total, count = 0.0, 0
    with torch.no_grad():
        for window in windows:
            logits = model(input_ids=window[:, :-1]).logits.float()
            total += float(
                F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1), reduction="sum"
                )
            )
            count += window[:, 1:].numel()
    return total / count


def test_taylor_scores_equal_autograd_by_hand():
    model = llama(2)
    windows = validation_windows(tokens(2000), 6, 12, 2)  # 3 batches
    got, loss = taylor_scores(model, windows)
    sums = {}
    for window in windows:
        logits = model(input_ids=window[:, :-1]).logits
        batch_loss = F.cross_entropy(logits.reshape(-1, VOCAB), window[:, 1:].reshape(-1))
        params = {
            (l, name): dict(model.model.layers[l].named_parameters())[name]
            for l in range(2)
            for name in BLOCK_WEIGHTS
        }
        grads = torch.autograd.grad(batch_loss, list(params.values()))
        for key, g in zip(params, grads):
            sums[key] = sums.get(key, 0) + g.double()
    expected = [
        sum(
            float((dict(model.model.layers[l].named_parameters())[name].detach().double() * sums[(l, name)])
                  .abs().sum())
            for name in BLOCK_WEIGHTS
        )
        for l in range(2)
    ]  # fmt: skip
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert got.dtype == np.float64
    assert loss == pytest.approx(full_loss(model, windows), rel=1e-6)
    # the parameters' requires_grad is left as it was
    assert all(p.requires_grad for p in model.parameters())


def test_magnitude_equals_a_direct_sum():
    model = llama(3, seed=1)
    expected = [
        sum(
            float(
                dict(model.model.layers[l].named_parameters())[name].detach().double().abs().sum()
            )
            for name in BLOCK_WEIGHTS
        )
        for l in range(3)
    ]
    np.testing.assert_allclose(magnitude_scores(model), expected, rtol=1e-12)


def test_ppl_ranks_by_removing_each_block():
    L = 5
    model = llama(L, seed=2)
    windows = validation_windows(tokens(3000, seed=1), 6, 16, 3)
    result = rank_blocks(model, ["ppl"], list(range(1, L)), windows)
    by_hand = np.array([full_loss(prune_copy(model, (l,)), windows) for l in range(L)])
    rows = sorted(result.rows, key=lambda r: r["layer"])
    np.testing.assert_allclose([r["calibration_loss"] for r in rows], by_hand, rtol=1e-6)
    assert len(set(np.round(by_hand, 6))) == L  # a real ranking
    order = np.argsort(by_hand)
    for n in range(1, L):
        assert result.removals[("ppl", n)] == tuple(sorted(int(l) for l in order[:n]))
    assert result.calibration_loss == pytest.approx(full_loss(model, windows), rel=1e-6)
    cost = result.cost["ppl"]
    assert cost["calibration_forward_passes"] == L * len(windows) and cost["backward_passes"] == 0


def test_sleb_path_equals_brute_force_with_the_barrier():
    L = 7
    model = llama(L, seed=3)
    windows = validation_windows(tokens(3000, seed=2), 4, 16, 2)
    result = rank_blocks(model, ["sleb"], list(range(1, L)), windows)
    removed, path = (), []
    for _ in range(L // 2):
        candidates = [l for l in range(1, L - 1) if l not in removed]  # never 0 nor L-1
        losses = [full_loss(prune_copy(model, tuple(sorted(removed + (l,)))), windows)
                  for l in candidates]  # fmt: skip
        best = int(np.argmin(losses))
        removed = tuple(sorted(removed + (candidates[best],)))
        path.append((candidates[best], removed, losses[best]))
    got = [(r["layer"], r["removed"], r["loss"]) for r in result.sleb_records]
    assert [g[:2] for g in got] == [p[:2] for p in path]
    np.testing.assert_allclose([g[2] for g in got], [p[2] for p in path], rtol=1e-6)
    # sets up to half the layers, none beyond
    assert sorted(n for (s, n) in result.removals if s == "sleb") == list(range(1, L // 2 + 1))
    assert strategy_max_n("sleb", L) == L // 2 and protected_layers("sleb", L) == (0, L - 1)


def test_plus_variants_never_remove_protected_blocks():
    L = 8
    model = llama(L, seed=4)
    with torch.no_grad():  # blocks 0 and 7 become the identity: the least important by far
        for l in (0, L - 1):
            model.model.layers[l].self_attn.o_proj.weight.zero_()
            model.model.layers[l].mlp.down_proj.weight.zero_()
    windows = validation_windows(tokens(2000, seed=3), 4, 12, 2)
    strategies = ["taylor", "taylor_plus", "magnitude", "magnitude_plus"]
    result = rank_blocks(model, strategies, list(range(1, L)), windows)
    assert protected_layers("taylor_plus", L) == (0, 1, 2, 3, L - 2, L - 1)
    for plain in ("taylor", "magnitude"):
        assert {0, L - 1} <= set(result.removals[(plain, 2)])  # the plain rule takes them
        plus = {n: s for (name, n), s in result.removals.items() if name == f"{plain}_plus"}
        assert sorted(plus) == [1, 2]  # L - 6 removable blocks
        assert all(set(s) <= {4, 5} for s in plus.values())
    # a model of 4 layers has nothing a "+" rule may remove
    assert strategy_max_n("magnitude_plus", 4) == 0
    small = rank_blocks(llama(4), ["magnitude_plus"], [1, 2, 3], None)
    assert small.removals == {} and len(small.rows) == 4


def test_random_baseline_draws_nested_sets_from_the_seed():
    """The random criterion: the set of n is the first n of numpy's permutation for the job's
    seed (nested over n), needs no calibration data and no pass, and another seed draws
    another order."""
    model, L = llama(9), 9
    n_values = [1, 2, 4, 8]
    result = rank_blocks(model, ["random_blocks"], n_values, None, seed=3)
    order = np.random.default_rng(3).permutation(L)
    for n in n_values:
        assert result.removals[("random_blocks", n)] == tuple(sorted(int(l) for l in order[:n]))
    assert set(result.removals[("random_blocks", 2)]) < set(result.removals[("random_blocks", 4)])
    assert result.cost["random_blocks"] == {**result.cost["random_blocks"], "calibration_forward_passes": 0,
                                     "backward_passes": 0, "layer_calls": 0}  # fmt: skip
    ranks = {row["layer"]: row["rank"] for row in result.rows}
    assert [ranks[int(l)] for l in order] == list(range(1, L + 1))
    others = {rank_blocks(model, ["random_blocks"], [4], None, seed=s).removals[("random_blocks", 4)]
              for s in range(6)}  # fmt: skip
    assert len(others) > 1


def test_missing_calibration_is_refused_naming_the_key(pruning_spec, test_config):
    from depthlab.config import resolve

    settings = {k: v for k, v in pruning_spec.items() if k != "calibration"}
    with pytest.raises(ValueError, match=r"^pruning\.calibration: required by the strategies sleb"):
        validate_pruning_settings({**settings, "strategies": ["deepest", "sleb"]}, 4)
    validate_pruning_settings({**settings, "strategies": ["deepest", "magnitude"]}, 4)  # none
    with pytest.raises(PruningError, match=r"^pruning\.calibration: required .* taylor"):
        rank_blocks(llama(2), ["taylor"], [1], None)
    config = copy.deepcopy(test_config)
    config["pruning"].pop("calibration", None)
    config["pruning"]["strategies"] = ["angular", "deepest", "ppl"]
    with pytest.raises(ConfigError, match=r"^pruning\.calibration: required by the strategies ppl"):
        resolve(config)
    config["pruning"]["calibration"] = {"windows": 2, "seq_len": 8, "batch_size": 0}
    with pytest.raises(ConfigError, match=r"^pruning\.calibration\.batch_size"):
        resolve(config)
    # healing naming a criterion beyond the n it has sets for (lns: 4 layers)
    config["pruning"]["calibration"]["batch_size"] = 2
    config["pruning"]["strategies"] = ["angular", "deepest", "sleb"]
    config["pruning"]["healing"]["strategies"] = ["sleb"]
    config["pruning"]["healing"]["n_grid"] = [3]
    with pytest.raises(ConfigError, match=r"^pruning\.healing\.n_grid: sleb has no removal set for n = 3"):  # fmt: skip
        resolve(config)


@pytest.fixture(scope="module")
def pruning_spec(test_config):
    from depthlab.config import resolve

    (spec,) = resolve(test_config).jobs("prune_model").values()
    return spec


def test_plan_scores_every_criterion_on_the_validation_windows(tmp_path, pruning_spec):
    """prune_model's plan on a tiny 8-layer run: the criteria's sets are scored on the
    validation windows like the others, the angular / deepest / greedy sets and losses are those
    of a plan without the criteria, and the written tables hold them."""
    import json

    import pandas as pd
    from depthlab.stages.pruning.stage import PhaseClock, plan, write
    from depthlab.stages.pruning.tables import gather
    from test_lm_tasks import make_run, run_prune_spec

    run = make_run(tmp_path, train_steps=0, layers=8, documents=120)
    L = 8
    # the registry's criteria ranked before the validation sweep (Shortened LLaMA, SLEB, the
    # random baseline) against a plan with only the others (but block_influence, which reads a
    # measures.csv this run has not)
    criteria = list(RANKED_BEFORE_VALIDATION)
    others = [n for n in STRATEGIES if n not in criteria and n != "block_influence"]
    assert {"ppl", "sleb", "taylor_plus"} <= set(criteria) and "angular" in others
    spec = run_prune_spec(
        pruning_spec,
        run,
        tmp_path,
        strategies=[*others, *criteria],
        n_grid=[1, 2, 3, 5],
        greedy_max_n=2,
        calibration={"windows": 4, "seq_len": 16, "batch_size": 2},
        val={"windows": 4, "seq_len": 16, "batch_size": 2},
        lm_eval={**pruning_spec["lm_eval"], "enabled": False},
        speed={**pruning_spec["speed"], "enabled": False},
    )
    planned = plan(spec, "cpu", lambda m: None, PhaseClock())
    old = plan({**spec, "strategies": others}, "cpu", lambda m: None, PhaseClock())
    assert {k: v for k, v in planned.removals.items() if k[0] not in criteria} == old.removals
    for _key, removed in old.removals.items():
        assert planned.losses[removed] == old.losses[removed]
    got = {s for (s, n) in planned.removals if s in criteria}
    assert got == set(criteria)
    assert sorted(n for (s, n) in planned.removals if s == "sleb") == [1, 2, 3]  # L // 2 = 4
    assert sorted(n for (s, n) in planned.removals if s == "taylor_plus") == [1, 2]
    # every criterion's set is scored on the validation windows
    val = planned.windows
    for (s, _n), removed in planned.removals.items():
        if s in criteria:
            assert planned.losses[removed] == pytest.approx(
                full_loss(prune_copy(planned.model, removed), val), rel=1e-5
            )
    out = tmp_path / "measured"
    out.mkdir()
    write(out, planned, {}, None, spec, PhaseClock())
    table = pd.read_csv(out / "criteria.csv")
    assert list(table.columns[:4]) == ["criterion", "layer", "score", "calibration_loss"]
    per_layer = set(criteria) - {"sleb"}  # sleb's path is its own table
    assert set(table["criterion"]) == per_layer and len(table) == len(per_layer) * L
    sleb = pd.read_csv(out / "sleb_path.csv", keep_default_na=False)
    assert list(sleb["n"]) == [1, 2, 3, 4]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["criteria_files"] == ["criteria.csv", "sleb_path.csv"]
    assert summary["criteria_cost"]["taylor"]["backward_passes"] == 2
    assert summary["token_source"]["train"]["tokenizer"] == "run"
    gathered = tmp_path / "tables"
    gather({"measured": str(out), "heals": [], "evaluations": [], "out": str(gathered),
            "seed": 0, "model_name": "m"})  # fmt: skip
    sweep = pd.read_csv(gathered / "sweep.csv", keep_default_na=False, dtype={"removed": str})
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in adapt(planned.model).layers]
    for row in sweep.itertuples():
        removed = [int(l) for l in str(row.removed).split("-")] if row.removed != "" else []
        assert row.removed_params == sum(sizes[l] for l in removed)
    assert set(sweep["strategy"]) == {*others, *criteria}
