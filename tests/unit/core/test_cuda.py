"""Tests of the GPU itself, marked `cuda`: they run only where a CUDA device is visible (tests/
conftest.py skips them elsewhere; workflow_scripts/gpu_check.py runs them with `pytest -m cuda`).
Each names its devices: a CUDA result against the same computation on the CPU."""

import numpy as np
import pytest
import torch
from depthlab.core import norm_schemes
from depthlab.core.devices import AUTO_DEVICE_VARIABLE, resolve_device
from depthlab.models.decoders import build_model, make_config
from depthlab.stages.pretrain.training import language_model_loss

pytestmark = pytest.mark.cuda

ARCH = {"hidden_size": 64, "num_layers": 4, "num_heads": 4, "intermediate_size": 128}
VOCAB = 128


def one_step(device: str, norm_scheme: str) -> tuple[float, dict]:
    """One fp32 forward and backward pass of a fresh model: the loss and every gradient."""
    arch = {**ARCH, "mix_ln_post_fraction": 0.25} if norm_scheme == "mix_ln" else ARCH
    model = build_model(make_config(arch, norm_scheme, vocab_size=VOCAB, max_positions=64), seed=0)
    model = model.to(device)
    window = torch.randint(0, VOCAB, (8, 33), generator=torch.Generator().manual_seed(1))
    loss = language_model_loss(model, window.to(device), None)
    loss.backward()
    return float(loss), {name: p.grad.detach().cpu() for name, p in model.named_parameters()}


@pytest.mark.parametrize("norm_scheme", norm_schemes.names())
def test_a_training_step_on_cuda_matches_the_cpu(norm_scheme):
    """fp32 without TF32 (torch's default for matmuls): the loss to 1e-5 relative, and each
    weight's gradient to 1e-4 of that tensor's largest (fp32 rounding gives ~1e-6; a wrong
    gradient is off by its own size). Gradients, not the weights after an AdamW step: Adam's
    first step is lr * g / (|g| + eps), which turns a rounding-sized difference of a gradient
    near eps into a ~1e-5 weight change (2.4e-5 for Pre-LN on an H200; fp32 against float64 on
    a CPU, 3.4e-5 for LNS)."""
    assert not torch.backends.cuda.matmul.allow_tf32
    cpu_loss, cpu_grads = one_step("cpu", norm_scheme)
    cuda_loss, cuda_grads = one_step("cuda", norm_scheme)
    assert cuda_loss == pytest.approx(cpu_loss, rel=1e-5)
    for name, grad in cpu_grads.items():
        scale = float(grad.abs().max())
        assert scale > 0, name  # every weight takes part in the loss
        assert float((cuda_grads[name] - grad).abs().max()) <= 1e-4 * scale, name


def test_the_pretraining_loop_on_cuda_follows_the_cpu():
    """The project's PretrainLoop, 12 fp32 steps, eager on both devices: the same final loss;
    compiled on CUDA (train.compile auto): the same within 1e-3."""
    from depthlab.stages.pretrain.throughput import SHAPES, measure_training

    shape = SHAPES["tiny"]
    common = dict(
        arch=shape["arch"], batch_size=shape["batch_size"], seq_len=shape["seq_len"],
        vocab_size=shape["vocab_size"], precision="fp32", steps=6, warmup=6,
    )  # fmt: skip
    cpu = measure_training("depthlab", device="cpu", compile=False, **common)
    eager = measure_training("depthlab", device="cuda", compile=False, **common)
    compiled = measure_training("depthlab", device="cuda", compile="auto", **common)
    assert compiled["compiled"] and not eager["compiled"]
    assert eager["final_loss"] == pytest.approx(cpu["final_loss"], rel=1e-4)
    assert compiled["final_loss"] == pytest.approx(eager["final_loss"], abs=1e-3)


def test_qlora_healing_runs_on_cuda():
    """Two QLoRA steps (bitsandbytes' CUDA NF4 kernels) on a model on the GPU: finite losses,
    and the healed model back on the GPU with its full-precision weights changed."""
    from depthlab.settings.training import HealSettings
    from depthlab.stages.pruning.healing import heal

    model = build_model(make_config(ARCH, "pre_ln", vocab_size=VOCAB, max_positions=64), seed=0)
    model = model.to("cuda")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    settings = HealSettings(
        method="qlora", rank=4, alpha=8, dropout=0.0,
        target_modules=("gate_proj", "up_proj", "down_proj"), steps=2, batch_size=4, seq_len=32,
        lr=1e-2, warmup_steps=1, min_lr_ratio=0.1, schedule="cosine", weight_decay=0.0,
    )  # fmt: skip
    tokens = np.random.default_rng(0).integers(0, VOCAB, 4096).astype(np.int32)
    healed, record = heal(model, tokens, settings, seed=0, device="cuda")
    assert np.isfinite(record["first_train_loss"]) and np.isfinite(record["last_train_loss"])
    weights = dict(healed.named_parameters())
    assert all(p.device.type == "cuda" for p in weights.values())
    changed = [n for n in before if "mlp" in n and not torch.equal(before[n], weights[n])]
    assert changed, "the merged adapters changed no MLP weight"


def test_auto_is_cuda_where_nothing_pins_it(monkeypatch):
    monkeypatch.delenv(AUTO_DEVICE_VARIABLE, raising=False)
    assert resolve_device("auto") == "cuda"
