"""Models larger than one GPU: a model loaded with a device map that splits its decoder layers
over several devices gives the numbers of the same model on one device, in every stage that
reads it (analysis, pruning losses and layer removal, lm-eval, healing, skip interventions).

No GPU here: the split is over the devices this machine has, "cpu" and "disk" (accelerate offloads
the "disk" layers to files and its hooks load them in for every forward pass, the same hooks
that move each layer's inputs to its GPU in a multi-GPU dispatch). Every test first checks that
the dispatch really happened (several targets in hf_device_map, weights on `meta`)."""

import json

import numpy as np
import pytest
import torch
from depthlab.core import placement
from depthlab.core.errors import DeviceError, PruningError
from depthlab.models.architectures import adapt, load_model
from depthlab.settings.training import HealSettings
from depthlab.stages.analysis.stage import run as run_analysis
from depthlab.stages.depth_use.interventions import SkipSettings, skip_effects
from depthlab.stages.model_job import load
from depthlab.stages.pruning.healing import heal
from depthlab.stages.pruning.layer_removal import (
    export_pruned,
    model_losses,
    prune_copy,
    pruned_view,
)
from depthlab.stages.pruning.pruned_tasks import TaskEvaluator
from depthlab.stages.pruning.strategies import LossSweep, validation_windows
from depthlab.stages.residual_stream import iter_token_batches
from requirements_helpers import require_pinned
from test_lm_tasks import make_run

torch.set_num_threads(1)
LAYERS = 4
# Layers 1 and 3 and the final norm on disk, the rest in memory: every layer boundary crosses
# from one target to the other, and the readout (norm on disk, head in memory) does too.
SPLIT = {
    "model.embed_tokens": "cpu",
    "model.rotary_emb": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.layers.2": "cpu",
    "model.layers.3": "disk",
    "model.norm": "disk",
    "lm_head": "cpu",
}
# The embedding on disk too: the model's first weight sits on `meta`, so inputs must go to the
# embedding's execution device, not to the first weight's device.
EMBEDDING_ON_DISK = {**SPLIT, "model.embed_tokens": "disk"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("shard"), train_steps=40, layers=LAYERS)
    run["whole"] = load_model(str(run["model"]))
    run["sharded"] = load_model(str(run["model"]), device_map=SPLIT)
    run["embedding_on_disk"] = load_model(str(run["model"]), device_map=EMBEDDING_ON_DISK)
    run["windows"] = validation_windows(
        np.fromfile(run["data"] / "val.bin", dtype=np.uint16), 12, 32, 4
    )
    return run


def assert_dispatched(model):
    """The model runs through accelerate's hooks, part of it offloaded: not a one-device model."""
    targets = set(model.hf_device_map.values())
    assert targets == {"cpu", "disk"}, model.hf_device_map
    assert placement.is_dispatched(model)
    assert placement.has_offloaded_weights(model)
    assert model.model.layers[1].self_attn.q_proj.weight.device.type == "meta"
    assert model.model.layers[0].self_attn.q_proj.weight.device.type == "cpu"
    assert placement.input_device(model) == torch.device("cpu")


def text_batches(run, batch_size=5):
    return iter_token_batches(
        run["val_texts"][:20], run["tokenizer"], max_length=32, batch_size=batch_size
    )


# --------------------------------------------------------------------------- the setting


def test_auto_shards_only_a_cuda_job_that_sees_several_gpus():
    assert placement.sharding("cuda", "auto", gpu_count=2) == "balanced"
    assert placement.sharding("cuda", "auto", gpu_count=1) is None
    assert placement.sharding("cpu", "auto", gpu_count=4) is None
    assert placement.sharding("cuda:1", "auto", gpu_count=4) is None  # one GPU named
    assert placement.sharding("cuda", "single", gpu_count=8) is None
    assert placement.sharding("cpu", "sequential", gpu_count=0) == "sequential"
    assert placement.sharding("cuda", {"": 0}, gpu_count=2) == {"": 0}


def test_auto_keeps_a_model_that_fits_the_first_gpu_on_one_device(run):
    """On a job with two GPUs, auto shards only a model larger than the first GPU's budget: a
    model that fits is loaded exactly as on one GPU (the budget is given, so no GPU is asked)."""
    from transformers import AutoModelForCausalLM

    config = run["whole"].config
    size = sum(p.numel() * p.element_size() for p in run["whole"].parameters())
    args = (AutoModelForCausalLM, config, torch.float32, "cuda")
    fits = {0: size + 1024, 1: size + 1024}
    assert placement.plan_device_map(*args, "auto", fits, "tiny", gpu_count=2) is None
    assert placement.plan_device_map(*args, "auto", {0: "1GiB"}, "tiny", gpu_count=2) is None
    # too large for GPU 0: balanced over the GPUs, none of which exists here, so it cannot fit
    with pytest.raises(DeviceError, match="^tiny: .* do not fit"):
        placement.plan_device_map(*args, "auto", {0: size // 2, 1: size // 2}, "tiny", gpu_count=2)


def test_placement_keys_of_a_spec_are_checked_and_named():
    assert placement.spec_placement({}) == {"device_map": "auto", "max_memory": None}
    # JSON spells GPU indices as strings
    assert placement.spec_placement(
        {"device_map": {"model.layers.0": "1", "lm_head": "disk"}, "max_memory": {"0": "70GiB"}}
    ) == {"device_map": {"model.layers.0": 1, "lm_head": "disk"}, "max_memory": {0: "70GiB"}}
    for spec, key in (
        ({"device_map": "everywhere"}, "spec.device_map"),
        ({"device_map": {"lm_head": "tpu"}}, "spec.device_map.lm_head"),
        ({"device_map": {}}, "spec.device_map"),
        ({"max_memory": {"0": "lots"}}, "spec.max_memory.0"),
        ({"max_memory": {"gpu": 10}}, "spec.max_memory.gpu"),
        ({"max_memory": {"cpu": -1}}, "spec.max_memory.cpu"),
    ):
        with pytest.raises(DeviceError, match=f"^{key}: "):
            placement.spec_placement(spec)


def test_a_model_larger_than_its_budget_stops_before_loading(run):
    with pytest.raises(DeviceError) as error:
        load_model(str(run["model"]), device_map="sequential", max_memory={"cpu": 20_000})
    message = str(error.value)
    assert message.startswith(str(run["model"])) and "do not fit" in message
    assert "disk" in message and "max_memory" in message


def test_a_strategy_with_a_budget_splits_whole_layers(run):
    """`sequential` over a memory budget that holds the embedding and about two layers: the
    other layers go to disk, each decoder layer whole on one target."""
    model = run["whole"]
    size = lambda module: sum(p.numel() * p.element_size() for p in module.parameters())  # noqa: E731
    budget = size(model.model.embed_tokens) + int(2.5 * size(model.model.layers[0]))
    sharded = load_model(
        str(run["model"]), device_map="sequential", max_memory={"cpu": budget, "disk": "1GB"}
    )
    layer_targets = {
        name: target
        for name, target in sharded.hf_device_map.items()
        if name.startswith("model.layers")
    }
    assert set(layer_targets.values()) == {"cpu", "disk"}, sharded.hf_device_map
    assert all(name.count(".") <= 2 for name in layer_targets), "a decoder layer was split"
    batch = next(iter(text_batches(run)))
    with torch.inference_mode():
        expected = model(**batch).logits
        assert torch.allclose(sharded(**batch).logits, expected, rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- the stages


def test_analysis_stage_on_a_sharded_model_equals_one_device(run, tmp_path):
    texts = run["data"] / "val.jsonl"
    spec = {
        "model_name": "tiny",
        "model_path": str(run["model"]),
        "dtype": "float32",
        "revision": None,
        "text_set": "val",
        "texts": {"source": "jsonl", "path": str(texts), "input": str(texts)},
        "text_field": "text",
        "max_samples": 16,
        "max_tokens": None,
        "max_length": 32,
        "batch_size": 5,
        "logit_lens": True,
        "logit_lens_stride": 1,
        "all_token_distance": True,
        "add_special_tokens": False,
        "device": "cpu",
    }
    run_analysis({**spec, "out": str(tmp_path / "one")}, device="cpu")
    # the spec's device_map reaches the loader (as JSON: a hand run's --spec)
    sharded_spec = json.loads(json.dumps({**spec, "device_map": EMBEDDING_ON_DISK}))
    adapter, _ = load(
        spec["model_path"],
        None,
        "float32",
        "cpu",
        tokenizer=False,
        **placement.spec_placement(sharded_spec),
    )
    assert_dispatched(adapter.model)
    assert next(adapter.model.parameters()).device.type == "meta"
    run_analysis({**sharded_spec, "out": str(tmp_path / "sharded")}, device="cpu")

    import pandas as pd

    for name in ("measures.csv", "angular_distance_last.csv", "angular_distance_all.csv"):
        one = pd.read_csv(tmp_path / "one" / name)
        sharded = pd.read_csv(tmp_path / "sharded" / name)
        assert one.shape == sharded.shape and one.shape[0] > LAYERS
        numeric = one.select_dtypes("number").columns
        assert (one.drop(columns=numeric) == sharded.drop(columns=numeric)).all().all()
        np.testing.assert_allclose(sharded[numeric], one[numeric], rtol=1e-6, atol=1e-9)
    measures = pd.read_csv(tmp_path / "sharded" / "measures.csv")
    assert {"angular_distance_last", "logit_lens_kl"} <= set(measures["measure"])
    summary = json.loads((tmp_path / "sharded" / "summary.json").read_text())
    assert summary["logit_lens"] is True and summary["tokens"] > 100


def test_pruning_losses_and_removed_layers_on_a_sharded_model(run):
    whole = run["whole"]
    assert_dispatched(run["sharded"])
    sets = [(), (1,), (2,), (1, 2), (0, 3), (1, 2, 3)]
    expected = LossSweep(whole, run["windows"]).losses(sets)
    got = LossSweep(run["sharded"], run["windows"]).losses(sets)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert len({round(x, 4) for x in expected}) == len(sets)  # every removal changes the loss
    # the pruned view and a pruned copy of the sharded model: the same loss per window
    sharded = run["embedding_on_disk"]
    assert_dispatched(sharded)
    with pruned_view(sharded, (1, 2)) as view:
        assert view.config.num_hidden_layers == LAYERS - 2
        view_loss, view_windows = model_losses(view, run["windows"])
    assert len(sharded.model.layers) == LAYERS  # restored
    copy_loss, _ = model_losses(prune_copy(sharded, (1, 2)), run["windows"])
    whole_loss, whole_windows = model_losses(prune_copy(whole, (1, 2)), run["windows"])
    assert view_loss == pytest.approx(whole_loss, rel=1e-6)
    assert copy_loss == pytest.approx(whole_loss, rel=1e-6)
    np.testing.assert_allclose(view_windows, whole_windows, rtol=1e-6)
    assert whole_loss == pytest.approx(expected[3], rel=1e-6)


def test_export_of_a_sharded_model_reads_its_offloaded_weights(run, tmp_path):
    export_pruned(run["embedding_on_disk"], (1,), tmp_path / "sharded")
    export_pruned(run["whole"], (1,), tmp_path / "whole")
    sharded, whole = load_model(str(tmp_path / "sharded")), load_model(str(tmp_path / "whole"))
    assert sharded.config.num_hidden_layers == LAYERS - 1
    for (name, a), (_, b) in zip(sharded.state_dict().items(), whole.state_dict().items()):
        assert torch.equal(a, b), name


def test_deepnorm_export_of_a_sharded_model_rescales_its_offloaded_weights(tmp_path):
    """DeepNorm's export rescales o_proj / down_proj from the state dict: offloaded weights must
    be read back first, not exported as `meta`."""
    from tiny_models import build

    build("depthlab_deepnorm").save_pretrained(tmp_path / "deepnorm")
    whole = load_model(str(tmp_path / "deepnorm"))
    size = lambda module: sum(p.numel() * p.element_size() for p in module.parameters())  # noqa: E731
    budget = size(whole.model.embed_tokens) + int(1.5 * size(whole.model.layers[0]))
    sharded = load_model(
        str(tmp_path / "deepnorm"),
        device_map="sequential",
        max_memory={"cpu": budget, "disk": "1GB"},
    )
    assert "disk" in sharded.hf_device_map.values() and placement.has_offloaded_weights(sharded)
    export_pruned(sharded, (1,), tmp_path / "sharded")
    export_pruned(whole, (1,), tmp_path / "whole")
    exported = load_model(str(tmp_path / "sharded"))
    expected = load_model(str(tmp_path / "whole"))
    assert exported.config.num_hidden_layers == expected.config.num_hidden_layers == 2
    for (name, a), (_, b) in zip(exported.state_dict().items(), expected.state_dict().items()):
        assert torch.equal(a, b), name


def test_lm_eval_on_a_sharded_model_equals_one_device_and_leaves_it_in_place(run):
    sharded = load_model(str(run["model"]), device_map=EMBEDDING_ON_DISK)
    assert next(sharded.parameters()).device.type == "meta"  # so HFLM's model.device is wrong
    device_map = dict(sharded.hf_device_map)
    evaluators = {
        name: TaskEvaluator(model, run["tokenizer"], run["tasks"], batch_size=8)
        for name, model in (("whole", run["whole"]), ("sharded", sharded))
    }
    assert evaluators["sharded"].lm.device == torch.device("cpu")
    for removed in ((), (2,)):
        expected = evaluators["whole"].evaluate(removed)
        got = evaluators["sharded"].evaluate(removed)
        assert [r["task"] for r in got] == [r["task"] for r in expected]
        for a, b in zip(got, expected):
            for key in ("samples", "acc", "acc_norm"):
                assert a[key] == pytest.approx(b[key], abs=1e-12), (removed, a, b)
    # raw log-likelihoods through HFLM, not only accuracies
    from lm_eval.api.instance import Instance

    requests = [
        Instance("loglikelihood", {}, (text[:40], text[40:80]), idx)
        for idx, text in enumerate(run["val_texts"][:6])
    ]
    scores = {
        name: [ll for ll, _ in evaluator.lm.loglikelihood(requests)]
        for name, evaluator in evaluators.items()
    }
    np.testing.assert_allclose(scores["sharded"], scores["whole"], rtol=1e-6)
    # HFLM never moved the dispatched model
    assert sharded.hf_device_map == device_map
    assert_dispatched(sharded)


def heal_settings(method, steps=3):
    return HealSettings.from_dict(
        dict(
            method=method,
            rank=4,
            alpha=8,
            dropout=0.0,
            target_modules=["gate_proj", "up_proj", "down_proj"],
            steps=steps,
            batch_size=4,
            seq_len=32,
            lr=1e-2,
            warmup_steps=1,
            min_lr_ratio=0.1,
            schedule="cosine",
            weight_decay=0.0,
        )
    )


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_healing_through_dispatch_hooks_equals_one_device(run, method):
    """peft trains and merges adapters on a dispatched model whose weights stay in place (as on
    several GPUs; offloaded weights it cannot train: next test). Here accelerate dispatches the
    model block by block onto this machine's one compute device, so every layer, the embedding
    and the head run through the same AlignDevicesHook a multi-GPU dispatch attaches."""
    if method == "qlora":
        require_pinned("bitsandbytes")
    from accelerate import dispatch_model
    from accelerate.hooks import AlignDevicesHook

    hooked = load_model(str(run["model"]))
    dispatch_model(
        hooked, device_map={name: "cpu" for name in SPLIT}, main_device="cpu", force_hooks=True
    )
    pruned = prune_copy(hooked, (1,))
    assert all(isinstance(layer._hf_hook, AlignDevicesHook) for layer in pruned.model.layers)
    assert isinstance(pruned.lm_head._hf_hook, AlignDevicesHook)
    train = np.fromfile(run["data"] / "train.bin", dtype=np.uint16)
    healed, record = heal(pruned, train, heal_settings(method), seed=0)
    expected, expected_record = heal(
        prune_copy(run["whole"], (1,)), train, heal_settings(method), seed=0
    )
    assert record["last_train_loss"] == pytest.approx(expected_record["last_train_loss"])
    unhealed = model_losses(prune_copy(run["whole"], (1,)), run["windows"])[0]
    expected_loss = model_losses(expected, run["windows"])[0]
    assert abs(expected_loss - unhealed) > 1e-3  # the merged adapters changed the model
    assert model_losses(healed, run["windows"])[0] == pytest.approx(expected_loss, rel=1e-6)
    for (name, a), (_, b) in zip(healed.state_dict().items(), expected.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7, msg=name)


def test_healing_offloaded_weights_is_refused_by_name(run):
    train = np.fromfile(run["data"] / "train.bin", dtype=np.uint16)
    for method in ("lora", "qlora"):
        with pytest.raises(PruningError, match="^pruning.healing: .*offloaded"):
            heal(prune_copy(run["sharded"], (1,)), train, heal_settings(method, 1), seed=0)


def test_skip_interventions_on_a_sharded_model_equal_one_device(run):
    settings = SkipSettings(
        variants=("layer_all", "layer_future", "attention_all", "mlp_future"),
        future_positions=2,
        future_min_position=4,
        max_rows=7,  # several chunks per batch
    )
    whole = skip_effects(adapt(run["whole"]), text_batches(run), settings)
    sharded = skip_effects(adapt(run["embedding_on_disk"]), text_batches(run), settings)
    assert_dispatched(run["embedding_on_disk"])
    assert sharded.prompts == whole.prompts == 20
    for variant in settings.variants:
        assert (sharded.counts[variant] == whole.counts[variant]).all()
        assert whole.update_max[variant][:, -1].max() > 0.01  # effects are not trivially 0
        for name in ("update_max", "update_mean", "output_max", "output_mean"):
            np.testing.assert_allclose(
                getattr(sharded, name)[variant],
                getattr(whole, name)[variant],
                rtol=1e-5,
                atol=1e-9,
                err_msg=f"{variant} {name}",
            )
