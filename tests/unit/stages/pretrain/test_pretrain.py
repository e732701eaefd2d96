"""Pretraining: schedule, resume after SIGKILL (bit-identical), DDP parity and the workflow's
torchrun launch, NaN stop, export, pure bf16, truncate-and-pad documents."""

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
from depthlab.data.prepare import load_tokens
from depthlab.models.decoders import build_model, make_config
from depthlab.stages.pretrain.training import (
    IGNORE,
    TrainSettings,
    document_batch,
    document_bounds,
    document_rows,
    evaluation_steps,
    language_model_loss,
    lr_multiplier,
    pretrain,
    validation_batches,
    validation_loss,
)
from safetensors.torch import load_file
from script_runs import assert_same_training, run_command
from tiny_models import tiny_pretrain_model, train_tiny

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "workflow_scripts" / "pretrain_model.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "workflow_scripts")}


# two local gloo ranks of this interpreter's torchrun
TORCHRUN_TWO_RANKS = (str(Path(sys.executable).with_name("torchrun")), "--standalone",
                      "--nproc_per_node", "2")  # fmt: skip


def tiny_model(test_config, **train) -> dict:
    return tiny_pretrain_model(test_config, "lns", 2, **train)


def run_script(model, data_dir, out, state, *launcher, wait=True, tracking=None):
    spec = {
        "model_name": "tiny",
        "model": model,
        "data": str(data_dir),
        "seed": 0,
        "out": str(out),
        "state_dir": str(state),
        "tracking": tracking,
    }
    command = [
        *launcher,
        str(SCRIPT),
        "--spec",
        json.dumps(spec),
        "--threads",
        "1",
        "--no-progress",
    ]
    if not launcher:
        command.insert(0, sys.executable)
    return run_command(command, ENV, wait)


def test_lr_schedule_is_warmup_then_cosine_to_min_ratio(test_config):
    schedule = dict(steps=100, lr=1.0, min_lr_ratio=0.1, warmup_steps=10, eval_every=50,
                    log_spaced_evals=5)  # fmt: skip
    settings = TrainSettings.from_dict(tiny_model(test_config, **schedule)["train"])
    assert lr_multiplier(0, settings) == pytest.approx(0.1)
    assert lr_multiplier(9, settings) == pytest.approx(1.0)
    middle = 10 + 45
    assert lr_multiplier(middle, settings) == pytest.approx(
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5))
    )
    assert lr_multiplier(100, settings) == pytest.approx(0.1)
    steps = list(evaluation_steps(settings))  # a lazy StepSet, in order
    assert {50, 100} <= set(steps) and steps == sorted(set(steps))
    # log-spaced points: successive ratios roughly constant, starting early in training
    assert min(steps) <= 2


def test_training_learns_and_the_checkpoint_reproduces_the_logged_val_loss(
    tmp_path, test_config, data_dir
):
    model = tiny_model(test_config, steps=60, eval_every=30, lr=1e-2)
    summary = train_tiny(model, data_dir, tmp_path / "out", tmp_path / "state")
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
        summary["final_val_loss"], abs=1e-5
    )
    provenance = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert provenance["seed"] == 0 and provenance["config"]["norm_scheme"] == "lns"
    assert str(data_dir) in provenance["inputs"]


def test_resume_after_sigkill_ends_bit_identical(tmp_path, test_config, data_dir):
    model = tiny_model(test_config, steps=300, checkpoint_every=5, eval_every=100)
    run_script(model, data_dir, tmp_path / "reference", tmp_path / "state_ref")

    state = tmp_path / "state" / "state.pt"
    tracking = {"tensorboard": True}
    process = run_script(
        model, data_dir, tmp_path / "resumed", tmp_path / "state", wait=False, tracking=tracking
    )
    deadline = time.time() + 120
    while not state.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "resumed").exists(), "the kill came too late to test resumption"
    killed_at = torch.load(state, weights_only=False)["step"]
    assert 0 < killed_at < 300

    result = run_script(
        model, data_dir, tmp_path / "resumed", tmp_path / "state", tracking=tracking
    )
    assert "resumed from step" in result.stderr
    assert_same_training(tmp_path / "reference", tmp_path / "resumed")
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "reference" / "layer_stats.csv"),
        pd.read_csv(tmp_path / "resumed" / "layer_stats.csv"),
    )
    # TensorBoard: the steps the killed process logged after its last state are purged, so
    # every step appears once, with the loss of train_log.csv
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "resumed" / "tensorboard"))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("loss/train")]
    train = pd.read_csv(tmp_path / "resumed" / "train_log.csv").query("split == 'train'")
    assert [step for step, _ in logged] == train.step.tolist()
    np.testing.assert_allclose([value for _, value in logged], train.loss, rtol=1e-6)


def test_two_gloo_ranks_match_one_process(tmp_path, test_config, data_dir):
    model = tiny_model(test_config, steps=12, eval_every=6)
    train_tiny(model, data_dir, tmp_path / "single", tmp_path / "s1")
    run_script(model, data_dir, tmp_path / "ddp", tmp_path / "s2", *TORCHRUN_TWO_RANKS)
    single = pd.read_csv(tmp_path / "single" / "train_log.csv")
    ddp = pd.read_csv(tmp_path / "ddp" / "train_log.csv")
    assert len(single) == len(ddp) and (single.split == "train").sum() == 12
    np.testing.assert_allclose(ddp.loss, single.loss, atol=1e-5, rtol=0)
    assert (
        json.loads((tmp_path / "ddp" / "provenance.json").read_text())["summary"]["world_size"] == 2
    )


def test_gradient_accumulation_matches_the_full_batch(tmp_path, test_config, data_dir):
    full = tiny_model(test_config, steps=6, eval_every=3)
    accumulated = tiny_model(test_config, steps=6, eval_every=3, micro_batch_size=1)
    train_tiny(full, data_dir, tmp_path / "a", tmp_path / "sa")
    train_tiny(accumulated, data_dir, tmp_path / "b", tmp_path / "sb")
    np.testing.assert_allclose(
        pd.read_csv(tmp_path / "a" / "train_log.csv").loss,
        pd.read_csv(tmp_path / "b" / "train_log.csv").loss,
        atol=1e-5,
    )


def test_non_finite_loss_stops_and_names_the_step(tmp_path, test_config, data_dir):
    # Adam's first update moves every weight by ~lr, so step 2's forward overflows.
    model = tiny_model(test_config, steps=5, lr=1e20, warmup_steps=0, grad_clip=None)
    with pytest.raises(FloatingPointError, match="at step 2;"):
        train_tiny(model, data_dir, tmp_path / "out", tmp_path / "state")
    assert not (tmp_path / "out").exists()


def test_pure_bf16_trains_bf16_weights_with_a_finite_loss(tmp_path, test_config, data_dir):
    model = tiny_model(test_config, steps=4, eval_every=2, precision="pure_bf16")
    summary = train_tiny(model, data_dir, tmp_path / "out", tmp_path / "state")
    weights = load_file(tmp_path / "out" / "model.safetensors")
    assert {tensor.dtype for tensor in weights.values()} == {torch.bfloat16}
    log = pd.read_csv(tmp_path / "out" / "train_log.csv")
    assert np.isfinite(log.loss).all() and math.isfinite(summary["final_val_loss"])
    fp32 = tiny_model(test_config, steps=4, eval_every=2)
    train_tiny(fp32, data_dir, tmp_path / "fp32", tmp_path / "s32")
    # same start, so close to fp32, but rounded: bf16 keeps ~3 significant digits
    fp32_log = pd.read_csv(tmp_path / "fp32" / "train_log.csv")
    assert not np.array_equal(log.loss, fp32_log.loss)
    np.testing.assert_allclose(log.loss, fp32_log.loss, rtol=0.02)


def test_bf16_on_a_cpu_trains_with_eager_attention_and_saves_the_default(
    tmp_path, test_config, data_dir, monkeypatch
):
    """bf16 autocast on a CPU runs transformers' eager attention (SDPA's bf16 backward is the slow
    kernel there); the loss stays within bf16 rounding of the fp32 run from the same start, and
    the checkpoint is an ordinary one (fp32 weights, SDPA when loaded)."""
    from transformers import AutoModelForCausalLM
    from transformers.integrations import sdpa_attention
    from transformers.models.llama import modeling_llama

    calls = {"eager": 0, "sdpa": 0}

    def counting(name, function):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(
        modeling_llama,
        "eager_attention_forward",
        counting("eager", modeling_llama.eager_attention_forward),
    )
    monkeypatch.setitem(
        modeling_llama.ALL_ATTENTION_FUNCTIONS._global_mapping,
        "sdpa",
        counting("sdpa", sdpa_attention.sdpa_attention_forward),
    )
    runs = {}
    for precision in ("bf16", "fp32"):
        calls.update(eager=0, sdpa=0)
        model = tiny_model(test_config, steps=4, eval_every=2, precision=precision)
        out = tmp_path / precision
        pretrain("tiny", model, data_dir, out, tmp_path / f"s_{precision}", 0, 1, progress=False)
        runs[precision] = (dict(calls), pd.read_csv(out / "train_log.csv"))
    (bf16_calls, bf16_log), (fp32_calls, fp32_log) = runs["bf16"], runs["fp32"]
    assert bf16_calls["eager"] > 0 and bf16_calls["sdpa"] == 0, bf16_calls
    assert fp32_calls["sdpa"] > 0 and fp32_calls["eager"] == 0, fp32_calls
    assert not np.array_equal(bf16_log.loss, fp32_log.loss)
    np.testing.assert_allclose(bf16_log.loss, fp32_log.loss, rtol=0.02)
    weights = load_file(tmp_path / "bf16" / "model.safetensors")
    assert {tensor.dtype for tensor in weights.values()} == {torch.float32}
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16")
    assert loaded.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("native", [False, True])
def test_auto_precision_is_bf16_only_where_the_cpu_multiplies_bf16_natively(
    tmp_path, test_config, data_dir, monkeypatch, native
):
    """precision auto trains exactly as the precision it resolves to on this machine (fp32 on an
    AVX2-only CPU, whose emulated bf16 matmuls are ~60x slower; bf16 where oneDNN has bf16
    kernels), and the provenance record says which one ran."""
    from depthlab.stages.pretrain import training

    monkeypatch.setattr(training.torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native)
    expected = "bf16" if native else "fp32"
    assert training.effective_precision("auto", "cpu") == expected
    assert training.effective_precision("fp32", "cpu") == "fp32"  # a declared value stays
    assert training.effective_precision("pure_bf16", "cpu") == "pure_bf16"
    logs = {}
    for precision in ("auto", expected):
        model = tiny_model(test_config, steps=4, eval_every=2, precision=precision)
        out = tmp_path / precision
        pretrain("tiny", model, data_dir, out, tmp_path / f"s_{precision}", 0, 1, progress=False)
        logs[precision] = pd.read_csv(out / "train_log.csv").drop(columns="wall_s")
        provenance = json.loads((out / "provenance.json").read_text())
        assert provenance["config"]["precision_used"] == expected
        assert provenance["config"]["train"]["precision"] == precision  # as declared
    pd.testing.assert_frame_equal(logs["auto"], logs[expected])


def test_truncate_pad_rows_are_one_document_each_cut_and_padded():
    eos, bos = 1, 2
    tokens = np.array([5, 6, eos, 7, eos, 8, 9, 10, 11, eos], dtype=np.uint16)
    bounds = document_bounds(tokens, eos)
    assert bounds.tolist() == [[0, 3], [3, 5], [5, 10]]
    rows = document_rows(tokens, bounds, [0, 1, 2], seq_len=3, bos_id=bos)
    assert rows.tolist() == [[bos, 5, 6, eos], [bos, 7, eos, IGNORE], [bos, 8, 9, 10]]
    again = document_batch(tokens, bounds, step=4, seed=0, batch_size=6, seq_len=3, bos_id=bos)
    assert torch.equal(again, document_batch(tokens, bounds, 4, 0, 6, 3, bos))


def test_padding_does_not_change_the_loss_of_the_real_tokens(test_config):
    torch.manual_seed(0)
    decl = tiny_model(test_config)
    config = make_config(
        decl["architecture"], "pre_ln", vocab_size=32, max_positions=16, init_std=0.02
    )
    model = build_model(config, 0).eval()
    document = torch.tensor([[2, 5, 6, 7, 1]])
    padded = torch.cat([document, torch.full((1, 4), IGNORE)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=document[:, :-1]).logits[0]
        expected = torch.nn.functional.cross_entropy(logits, document[0, 1:])
        assert language_model_loss(model, padded, None).item() == pytest.approx(
            expected.item(), rel=1e-6
        )


def test_truncate_pad_training_reads_whole_documents(tmp_path, test_config, data_dir):
    model = tiny_model(
        test_config, steps=30, eval_every=15, lr=1e-2, document_layout="truncate_pad"
    )
    train_tiny(model, data_dir, tmp_path / "out", tmp_path / "state")
    log = pd.read_csv(tmp_path / "out" / "train_log.csv")
    vocab = json.loads((data_dir / "meta.json").read_text())["vocab_size"]
    assert log.loss.iloc[-1] < math.log(vocab) - 0.5, log
    stats = pd.read_csv(tmp_path / "out" / "layer_stats.csv")
    assert np.isfinite(stats.output_variance).all()


@pytest.mark.workflow
def test_workflow_starts_torchrun_with_two_ranks_when_asked(tmp_path):
    from local_snakemake import SNAKEMAKE, local_env
    from test_workflow import copy_checkout

    checkout = copy_checkout(ROOT, tmp_path / "depthlab")
    model = "depth_width_l1_m16"
    override = "resources={pretrain: {threads: 2, mem_mb: 2000, runtime: 5, processes: 2}}"
    result = subprocess.run(
        [
            SNAKEMAKE,
            "--configfile=config/test.yaml",
            "--cores",
            "2",
            "--config",
            override,
            "--",
            f"results/test/models/{model}",
        ],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=180,
        env=local_env(),
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    folder = checkout / "results" / "test" / "models" / model
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(folder).config.num_hidden_layers == 1
    assert (pd.read_csv(folder / "train_log.csv").split == "train").any()
    provenance = json.loads((folder / "provenance.json").read_text())
    assert provenance["summary"]["world_size"] == 2
    log = (checkout / "results" / "test" / "logs" / "pretrain_model" / f"{model}.log").read_text()
    assert "world 2" in log and "\r" not in log and f"[{model}] step 12/12" in log


def test_compiled_training_matches_eager_also_under_ddp(tmp_path, test_config, data_dir):
    # train.compile true on this CPU (inductor's C++ kernels), in two gloo ranks with gradient
    # accumulation (DDP wraps the model, then the wrapper is compiled, as the PyTorch docs do it;
    # the micro-batches before the last run under no_sync), against one eager process: same data,
    # seed and global batches, an LNS model (its 1/sqrt(l) scaling is fused under compile). In
    # fp32 the two differ only by summation order: measured 2026-12-04, largest difference of the
    # logged losses 4.8e-7 nats over 6 steps; bounded here at 1e-4 (bf16's resolution at these
    # losses is ~0.03). One compiled process costs ~35 s here, so both properties share a run.
    eager = tiny_model(test_config, steps=6, eval_every=3, compile=False)
    summary = train_tiny(eager, data_dir, tmp_path / "eager", tmp_path / "s1")
    compiled = tiny_model(test_config, steps=6, eval_every=3, compile=True, micro_batch_size=1)
    run_script(compiled, data_dir, tmp_path / "compiled", tmp_path / "s2", *TORCHRUN_TWO_RANKS)
    losses = {
        name: pd.read_csv(tmp_path / name / "train_log.csv").loss.to_numpy()
        for name in ("eager", "compiled")
    }
    largest = float(np.max(np.abs(losses["compiled"] - losses["eager"])))
    assert len(losses["eager"]) == len(losses["compiled"]) > 6  # train and val rows
    assert largest < 1e-4, largest
    records = {
        name: json.loads((tmp_path / name / "provenance.json").read_text())
        for name in ("eager", "compiled")
    }
    assert records["compiled"]["config"]["compile_used"] is True
    assert (
        records["compiled"]["summary"]["compiled"]
        and records["compiled"]["summary"]["world_size"] == 2
    )
    assert records["compiled"]["summary"]["compile_s"] > 0
    assert records["eager"]["config"]["compile_used"] is False
    assert not summary["compiled"] and summary["compile_s"] == 0
    assert records["eager"]["summary"]["compile_s"] == 0
