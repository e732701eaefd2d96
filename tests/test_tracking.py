"""Progress output (bar on a terminal, plain lines in a log), TensorBoard event files, and the
per-layer statistics of pretraining."""

import copy
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from depthlab.config import load_config, resolve
from depthlab.data import load_tokens, prepare_corpus, read_meta
from depthlab.models import build_model, make_config
from depthlab.tracking import Progress
from depthlab.training import (TrainSettings, language_model_loss, pretrain, train_batch,
                               validation_batches)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def test_config():
    return load_config(ROOT / "config" / "test.yaml")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, test_config):
    out = tmp_path_factory.mktemp("data") / "data"
    prepare_corpus(test_config["data"], out, seed=0)
    return out


def tiny_model(test_config, norm_scheme="pre_ln", **train) -> dict:
    config = copy.deepcopy(test_config)
    for stage in ("pruning", "depth_use", "analysis", "scaling", "sweeps"):
        config.pop(stage, None)
    config["models"] = {"tiny": {"kind": "pretrain", "norm_scheme": norm_scheme, "architecture": {
        "hidden_size": 16, "num_layers": 3, "num_heads": 2, "intermediate_size": 32}}}
    config["pretrain"].update({"seq_len": 16, "batch_size": 4, "log_every": 1, **train})
    return resolve(config).models["tiny"]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_prints_plain_lines_in_a_log_and_a_bar_on_a_terminal():
    log = io.StringIO()
    progress = Progress(10, "m", every=4, file=log)
    for step in range(10):
        progress.update(1, loss=float(step), lr=3e-3)
    progress.close()
    assert "\r" not in log.getvalue()
    assert log.getvalue().splitlines() == ["[m] step 4/10 loss 3.000 lr 3.00e-03",
                                           "[m] step 8/10 loss 7.000 lr 3.00e-03",
                                           "[m] step 10/10 loss 9.000 lr 3.00e-03"]
    # a resumed run counts from its step; without `every` about 20 lines per run
    log = io.StringIO()
    progress = Progress(100, "m", initial=50, file=log)
    for _ in range(50):
        progress.update(1)
    assert log.getvalue().splitlines()[0] == "[m] step 55/100"
    assert len(log.getvalue().splitlines()) == 10

    terminal = Terminal()
    progress = Progress(10, "m", file=terminal)
    for _ in range(10):
        progress.update(1, loss=1.0)
    progress.close()
    assert "\r" in terminal.getvalue() and "10/10" in terminal.getvalue()

    quiet = io.StringIO()
    Progress(10, "m", enabled=False, file=quiet).update(10)
    assert quiet.getvalue() == ""


def scalars(folder: Path, tag: str) -> dict:
    events = EventAccumulator(str(folder))
    events.Reload()
    return {event.step: event.value for event in events.Scalars(tag)}


def test_tensorboard_events_hold_the_train_log_losses_and_live_in_the_model_folder(
        tmp_path, test_config, data_dir):
    model = tiny_model(test_config, steps=8, eval_every=4, checkpoint_every=2)
    pretrain("tiny", model, data_dir, tmp_path / "out", tmp_path / "state", seed=0, threads=1,
             progress=False, tracking={"tensorboard": True})
    log = pd.read_csv(tmp_path / "out" / "train_log.csv")
    events = tmp_path / "out" / "tensorboard"
    for split, tag in (("train", "loss/train"), ("val", "loss/val")):
        rows = log[log.split == split]
        logged = scalars(events, tag)
        assert sorted(logged) == rows.step.tolist()
        # event files store float32
        np.testing.assert_allclose([logged[s] for s in rows.step], rows.loss, rtol=1e-6)
    assert not (tmp_path / "state" / "tensorboard").exists()  # moved with the checkpoint

    stats = pd.read_csv(tmp_path / "out" / "layer_stats.csv")
    final = stats[stats.step == 8].sort_values("layer")
    logged = scalars(events, "output_variance/layer_02")
    assert logged[8] == pytest.approx(final.output_variance.iloc[2], rel=1e-6)


def test_no_event_files_when_tensorboard_is_off(tmp_path, test_config, data_dir):
    model = tiny_model(test_config, steps=2, eval_every=2)
    pretrain("tiny", model, data_dir, tmp_path / "out", tmp_path / "state", seed=0, threads=1,
             progress=False, tracking={"tensorboard": False})
    assert not (tmp_path / "out" / "tensorboard").exists()
    assert not (tmp_path / "state" / "tensorboard").exists()


def reference_variances(model, batches) -> list[float]:
    """Variance of every element of each layer's output, the last one before the final norm,
    from output_hidden_states (whose last entry is after the final norm, so it is hooked)."""
    before_norm = []
    handle = model.model.norm.register_forward_pre_hook(
        lambda module, args: before_norm.append(args[0].double()))
    outputs = [[] for _ in model.model.layers]
    with torch.no_grad():
        for batch in batches:
            hidden = model(input_ids=batch[:, :-1], output_hidden_states=True).hidden_states
            for layer in range(len(outputs) - 1):
                outputs[layer].append(hidden[layer + 1].double())
    handle.remove()
    outputs[-1] = before_norm
    return [torch.cat([h.flatten() for h in layer]).var(unbiased=False).item()
            for layer in outputs]


def test_layer_stats_match_an_independent_computation(tmp_path, test_config, data_dir):
    decl = tiny_model(test_config, steps=3, eval_every=1, log_spaced_evals=0)
    pretrain("tiny", decl, data_dir, tmp_path / "out", tmp_path / "state", seed=3, threads=1,
             progress=False)
    stats = pd.read_csv(tmp_path / "out" / "layer_stats.csv")
    assert stats.step.unique().tolist() == [0, 1, 2, 3]
    assert stats[stats.step == 0].grad_norm.isna().all()

    settings = TrainSettings.from_dict(decl["train"])
    meta = read_meta(data_dir)
    config = make_config(decl["architecture"], decl["norm_scheme"],
                         vocab_size=meta["vocab_size"], max_positions=settings.seq_len,
                         init_std=settings.init_std)
    initial = build_model(config, 3).eval()
    batches = validation_batches(load_tokens(data_dir, "val"), settings)
    np.testing.assert_allclose(stats[stats.step == 0].sort_values("layer").output_variance,
                               reference_variances(initial, batches), rtol=1e-9)

    # step 1's gradient: batch 0 at the initial weights
    window = train_batch(load_tokens(data_dir, "train"), 0, 3, settings.batch_size,
                         settings.seq_len)
    initial.train()
    language_model_loss(initial, window, None).backward()
    layer_norms = [torch.cat([p.grad.flatten() for p in layer.parameters()]).norm().item()
                   for layer in initial.model.layers]
    total = torch.cat([p.grad.flatten() for p in initial.parameters()]).norm().item()
    first = stats[stats.step == 1].sort_values("layer")
    np.testing.assert_allclose(first.grad_norm, layer_norms, rtol=1e-5)
    np.testing.assert_allclose(first.total_grad_norm, total, rtol=1e-5)

    # the last evaluation, against the exported checkpoint
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    np.testing.assert_allclose(stats[stats.step == 3].sort_values("layer").output_variance,
                               reference_variances(trained, batches), rtol=1e-6)
    assert math.isfinite(stats.output_variance.sum())


def test_healing_logs_progress_lines_and_tensorboard_losses(tmp_path, data_dir):
    from depthlab.healing import HealSettings, heal

    settings = HealSettings.from_dict({
        "method": "lora", "rank": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["down_proj"],
        "steps": 8, "batch_size": 2, "seq_len": 8, "lr": 1e-3, "warmup_steps": 1,
        "min_lr_ratio": 0.1, "schedule": "cosine", "weight_decay": 0.0})
    config = make_config({"hidden_size": 16, "num_layers": 2, "num_heads": 2,
                          "intermediate_size": 32}, "pre_ln",
                         vocab_size=read_meta(data_dir)["vocab_size"], max_positions=16,
                         init_std=0.02)
    lines = []
    _, record = heal(build_model(config, 0), load_tokens(data_dir, "train"), settings, seed=0,
                     log=lines.append, tensorboard_dir=tmp_path / "tb")
    progress = [line for line in lines if line.startswith("[healing] step")]
    assert [line.split()[2] for line in progress] == ["2/8", "4/8", "6/8", "8/8"]
    logged = scalars(tmp_path / "tb", "heal/loss")
    assert sorted(logged) == list(range(1, 9))
    assert logged[1] == pytest.approx(record["first_train_loss"], rel=1e-6)
    assert float(progress[-1].split()[4]) == pytest.approx(logged[8], abs=5e-4)
