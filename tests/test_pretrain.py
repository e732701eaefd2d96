"""Pretraining: schedule, resume after SIGKILL (bit-identical), DDP parity, NaN stop, export."""

import copy
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from depthlab.config import load_config, resolve
from depthlab.data import load_tokens, prepare_corpus
from depthlab.training import (TrainSettings, evaluation_steps, lr_multiplier, pretrain,
                               validation_batches, validation_loss)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow_scripts" / "pretrain_model.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "workflow_scripts")}


@pytest.fixture(scope="module")
def test_config():
    return load_config(ROOT / "config" / "test.yaml")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, test_config):
    out = tmp_path_factory.mktemp("data") / "data"
    prepare_corpus(test_config["data"], out, seed=0)
    return out


def tiny_model(test_config, **train) -> dict:
    config = copy.deepcopy(test_config)
    for stage in ("pruning", "depth_use", "analysis", "scaling", "sweeps"):
        config.pop(stage, None)  # only the tiny model's own resolution matters here
    config["models"] = {}
    config["models"]["tiny"] = {"kind": "pretrain", "norm_scheme": "lns", "architecture": {
        "hidden_size": 16, "num_layers": 2, "num_heads": 2, "intermediate_size": 32}}
    config["pretrain"].update({"seq_len": 16, "batch_size": 4, "log_every": 1, **train})
    return resolve(config).models["tiny"]


def run_script(model, data_dir, out, state, *launcher, wait=True):
    spec = {"model_name": "tiny", "model": model, "data": str(data_dir), "seed": 0,
            "out": str(out), "state_dir": str(state)}
    command = [*launcher, str(SCRIPT), "--spec", json.dumps(spec), "--threads", "1",
               "--no-progress"]
    if not launcher:
        command.insert(0, sys.executable)
    if not wait:
        return subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    result = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_lr_schedule_is_warmup_then_cosine_to_min_ratio():
    settings = TrainSettings(seq_len=8, batch_size=2, steps=100, lr=1.0, min_lr_ratio=0.1,
                             warmup_steps=10, weight_decay=0, beta1=0.9, beta2=0.95,
                             grad_clip=None, eval_every=50, log_spaced_evals=5, eval_batches=1,
                             log_every=1, checkpoint_every=10, precision="fp32", init_std=0.02,
                             micro_batch_size=None)
    assert lr_multiplier(0, settings) == pytest.approx(0.1)
    assert lr_multiplier(9, settings) == pytest.approx(1.0)
    middle = 10 + 45
    assert lr_multiplier(middle, settings) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_multiplier(100, settings) == pytest.approx(0.1)
    steps = evaluation_steps(settings)
    assert {50, 100} <= set(steps) and steps == sorted(set(steps))
    # log-spaced points: successive ratios roughly constant, starting early in training
    assert min(steps) <= 2


def test_training_learns_and_the_checkpoint_reproduces_the_logged_val_loss(tmp_path, test_config,
                                                                           data_dir):
    model = tiny_model(test_config, steps=60, eval_every=30, lr=1e-2)
    summary = pretrain("tiny", model, data_dir, tmp_path / "out", tmp_path / "state", seed=0,
                       threads=1, progress=False)
    log = pd.read_csv(tmp_path / "out" / "train_log.csv")
    val = log[log.split == "val"]
    vocab = json.loads((data_dir / "meta.json").read_text())["vocab_size"]
    assert val.loss.iloc[-1] < math.log(vocab) - 0.5, val
    assert val.tokens.iloc[-1] == 60 * 16 * 4
    assert not (tmp_path / "state" / "state.pt").exists()  # removed once the checkpoint exists

    from transformers import AutoModelForCausalLM
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert type(reloaded).__name__ == "LlamaForCausalLM"  # lns folds into plain Llama
    settings = TrainSettings.from_dict(model["train"])
    batches = validation_batches(load_tokens(data_dir, "val"), settings)
    assert validation_loss(reloaded, batches, torch.device("cpu"), None) == pytest.approx(
        summary["final_val_loss"], abs=1e-5)
    provenance = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert provenance["seed"] == 0 and provenance["config"]["norm_scheme"] == "lns"
    assert str(data_dir) in provenance["inputs"]


def test_resume_after_sigkill_ends_bit_identical(tmp_path, test_config, data_dir):
    model = tiny_model(test_config, steps=300, checkpoint_every=5, eval_every=100)
    run_script(model, data_dir, tmp_path / "reference", tmp_path / "state_ref")

    state = tmp_path / "state" / "state.pt"
    process = run_script(model, data_dir, tmp_path / "resumed", tmp_path / "state", wait=False)
    deadline = time.time() + 120
    while not state.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "resumed").exists(), "the kill came too late to test resumption"
    killed_at = torch.load(state, weights_only=False)["step"]
    assert 0 < killed_at < 300

    result = run_script(model, data_dir, tmp_path / "resumed", tmp_path / "state")
    assert "resumed from step" in result.stderr
    reference = load_file(tmp_path / "reference" / "model.safetensors")
    resumed = load_file(tmp_path / "resumed" / "model.safetensors")
    assert reference.keys() == resumed.keys()
    for name in reference:
        assert torch.equal(reference[name], resumed[name]), name
    columns = ["step", "tokens", "split", "loss", "lr"]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "reference" / "train_log.csv")[columns],
                                  pd.read_csv(tmp_path / "resumed" / "train_log.csv")[columns])


def test_two_gloo_ranks_match_one_process(tmp_path, test_config, data_dir):
    model = tiny_model(test_config, steps=12, eval_every=6)
    run_script(model, data_dir, tmp_path / "single", tmp_path / "s1")
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--standalone",
                "--nproc_per_node", "2"]
    run_script(model, data_dir, tmp_path / "ddp", tmp_path / "s2", *torchrun)
    single = pd.read_csv(tmp_path / "single" / "train_log.csv")
    ddp = pd.read_csv(tmp_path / "ddp" / "train_log.csv")
    assert len(single) == len(ddp) and (single.split == "train").sum() == 12
    np.testing.assert_allclose(ddp.loss, single.loss, atol=1e-5, rtol=0)
    assert json.loads((tmp_path / "ddp" / "provenance.json").read_text())["summary"]["world_size"] == 2


def test_gradient_accumulation_matches_the_full_batch(tmp_path, test_config, data_dir):
    full = tiny_model(test_config, steps=6, eval_every=3)
    accumulated = tiny_model(test_config, steps=6, eval_every=3, micro_batch_size=1)
    pretrain("tiny", full, data_dir, tmp_path / "a", tmp_path / "sa", seed=0, threads=1, progress=False)
    pretrain("tiny", accumulated, data_dir, tmp_path / "b", tmp_path / "sb", seed=0, threads=1,
             progress=False)
    np.testing.assert_allclose(pd.read_csv(tmp_path / "a" / "train_log.csv").loss,
                               pd.read_csv(tmp_path / "b" / "train_log.csv").loss, atol=1e-5)


def test_non_finite_loss_stops_and_names_the_step(tmp_path, test_config, data_dir):
    # Adam's first update moves every weight by ~lr, so step 2's forward overflows.
    model = tiny_model(test_config, steps=5, lr=1e20, warmup_steps=0, grad_clip=None)
    with pytest.raises(FloatingPointError, match="at step 2;"):
        pretrain("tiny", model, data_dir, tmp_path / "out", tmp_path / "state", seed=0,
                 threads=1, progress=False)
    assert not (tmp_path / "out").exists()
