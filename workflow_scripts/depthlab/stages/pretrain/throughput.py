"""Training throughput, measured side by side on one device: depthlab's pretraining loop against
a plain transformers loop, and the share of the device's bf16 matmul peak each reaches.

- `measure_training("depthlab", ...)` runs the project's own PretrainLoop (the model, optimizer,
  schedule, compile and loss checks exactly as `pretrain()` builds them) on random token windows.
- `measure_training("plain", ...)` is what one writes by default: `LlamaForCausalLM` (SDPA
  attention), `torch.optim.AdamW` (fused on CUDA), eager, the same windows, shape and precision.
- `matmul_peak_tflops` measures the device's bf16 matmul rate (the denominator of the model FLOPs
  utilisation, MFU); `training_flops_per_token` / `forward_flops_per_token` count a step's model
  FLOPs the way PaLM's appendix B does: 6N (2N forward) for the N matmul weights, plus the
  attention scores, 12 L d T (4 L d T forward) for L layers of width d over T positions.

Both loops time only steady-state steps: the first `warmup` steps (compilation, allocator and
kernel autotuning) are excluded, and the device is synchronised at both ends of the window.
bench/bench_pretrain_throughput.py and workflow_scripts/gpu_check.py print these numbers.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from depthlab.stages.pretrain.training import (
    Distributed,
    PretrainLoop,
    TrainSettings,
    effective_compile,
    language_model_loss,
    make_optimizer,
    make_scheduler,
    pretraining_model,
    train_batch,
)

# Shapes the GPU check measures. cod_130m: the Curse-of-Depth 130M model (12 x 768, MLP 2048)
# with the batch of its reference code; 1b: 24 x 2048, 32 heads, MLP 5461; tiny: a CPU smoke
# shape. vocab 512 keeps the head small, as in the measurement that opened this work.
SHAPES = {
    "cod_130m": {
        "arch": {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 2048},
        "batch_size": 64,
        "seq_len": 256,
        "vocab_size": 512,
    },
    "1b": {
        "arch": {"hidden_size": 2048, "num_layers": 24, "num_heads": 32, "intermediate_size": 5461},
        "batch_size": 32,
        "seq_len": 256,
        "vocab_size": 512,
    },
    "tiny": {
        "arch": {"hidden_size": 64, "num_layers": 4, "num_heads": 4, "intermediate_size": 176},
        "batch_size": 8,
        "seq_len": 64,
        "vocab_size": 512,
    },
}
MIX_LN_POST_FRACTION = 0.25  # Mix-LN's share of Post-LN layers, as the default config trains it


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak_tflops(
    device: torch.device | str, dtype=torch.bfloat16, size: int | None = None, repeats: int = 20
) -> float:
    """The device's measured matmul rate in TFLOP/s: `repeats` products of two size x size
    matrices in `dtype` (size 8192 on a GPU, 1024 on a CPU), after one untimed product."""
    device = torch.device(device)
    size = size or (8192 if device.type == "cuda" else 1024)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    torch.matmul(a, b)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.matmul(a, b)
    synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e12


def matmul_parameters(arch: dict, vocab_size: int) -> int:
    """Weights that take part in a matmul per token: the decoder layers' projections and the
    head (the embedding is a lookup)."""
    hidden, inner = arch["hidden_size"], arch["intermediate_size"]
    head_dim = hidden // arch["num_heads"]
    kv = arch.get("num_kv_heads", arch["num_heads"]) * head_dim
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * inner
    return arch["num_layers"] * per_layer + vocab_size * hidden


def forward_flops_per_token(arch: dict, vocab_size: int, seq_len: int) -> float:
    """Model FLOPs of one token's forward pass: 2N + 4 L d T (PaLM, app. B: a third of the
    training step's 6N + 12 L d T; the attention scores QK^T and their product with V, 2 L d T
    each, over all T positions, causal masking not discounted)."""
    attention = 4 * arch["num_layers"] * arch["hidden_size"] * seq_len
    return 2 * matmul_parameters(arch, vocab_size) + attention


def training_flops_per_token(arch: dict, vocab_size: int, seq_len: int) -> float:
    """Model FLOPs of one token's forward and backward pass: 6N + 12 L d T (PaLM, app. B)."""
    return 3 * forward_flops_per_token(arch, vocab_size, seq_len)


def random_tokens(vocab_size: int, tokens: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab_size, size=tokens).astype(np.int32)


def _train_settings(batch_size, seq_len, warmup, steps, precision, compile) -> TrainSettings:
    """Settings of a timing run: no evaluation or checkpoint inside it; a log row (one
    synchronisation) after the warm-up and at the end bound the timed window."""
    return TrainSettings(
        seq_len=seq_len,
        batch_size=batch_size,
        steps=warmup + steps,
        lr=3e-4,
        min_lr_ratio=0.1,
        warmup_steps=0,
        weight_decay=0.0,
        beta1=0.9,
        beta2=0.95,
        grad_clip=1.0,
        eval_every=10**9,
        log_spaced_evals=0,
        eval_batches=1,
        log_every=warmup,
        checkpoint_every=10**9,
        precision=precision,
        init_std=0.02,
        micro_batch_size=None,
        compile=compile,
    )


def _depthlab_rate(norm_scheme, arch, settings, vocab_size, tokens, device, warmup, steps):
    """tokens/s of PretrainLoop's steps warmup+1..warmup+steps, and its compile seconds."""
    if norm_scheme == "mix_ln":
        arch = {**arch, "mix_ln_post_fraction": MIX_LN_POST_FRACTION}
    meta = {"vocab_size": vocab_size, "bos_id": None, "eos_id": None, "pad_id": None}
    decl = {"architecture": arch, "norm_scheme": norm_scheme}
    model, _ = pretraining_model("throughput", decl, settings, meta, 0, device)
    optimizer = make_optimizer(model, settings)
    val = [train_batch(tokens, 0, 1, 1, settings.seq_len)]
    with tempfile.TemporaryDirectory() as state_dir:
        loop = PretrainLoop(
            "throughput",
            model,
            optimizer,
            make_scheduler(optimizer, settings),
            settings,
            Distributed(device),
            0,
            (tokens, {}, val),
            state_path=Path(state_dir) / "state.pt",
            fingerprint="throughput",
            process_start=time.perf_counter(),
        )
        loop.eval_at = set()  # validation is not training throughput
        loop.distribute()
        loop.run(progress=False)
    walls = {row[0]: row[5] for row in loop.log_rows if row[2] == "train"}
    seconds = walls[warmup + steps] - walls[warmup]
    return steps * settings.tokens_per_step / seconds, loop.compile_s, loop.last_loss


def _plain_rate(arch, settings, vocab_size, tokens, device, warmup, steps):
    """tokens/s of a plain LlamaForCausalLM + AdamW loop (SDPA; fused AdamW on CUDA)."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=arch["hidden_size"],
            intermediate_size=arch["intermediate_size"],
            num_hidden_layers=arch["num_layers"],
            num_attention_heads=arch["num_heads"],
            max_position_embeddings=settings.seq_len,
            use_cache=False,
        )
    )
    weight_dtype = torch.bfloat16 if settings.precision == "pure_bf16" else torch.float32
    model = model.to(device, dtype=weight_dtype)
    autocast = torch.bfloat16 if settings.precision == "bf16" else None
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, fused=True if device.type == "cuda" else None
    )
    start = None
    for step in range(warmup + steps):
        if step == warmup:
            synchronize(device)
            start = time.perf_counter()
        window = train_batch(tokens, step, 0, settings.batch_size, settings.seq_len)
        loss = language_model_loss(model, window.to(device), autocast)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    return steps * settings.tokens_per_step / (time.perf_counter() - start), float(loss.detach())


def measure_training(
    loop: str,
    *,
    norm_scheme: str = "pre_ln",
    arch: dict,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    precision: str,
    device: torch.device | str,
    steps: int,
    warmup: int,
    compile: bool | str = "auto",
    threads: int | None = None,
) -> dict:
    """One loop's steady-state training throughput on `device`: `warmup` untimed steps, then
    `steps` timed ones. `loop`: "depthlab" (PretrainLoop with `norm_scheme`, `precision` as
    train.precision, `compile` as train.compile) or "plain" (LlamaForCausalLM, eager; precision
    pure_bf16, bf16 or fp32). Returns tokens_per_s, step_s, compile_s (0 when not compiled),
    compiled, final_loss and the model FLOPs per token."""
    if loop not in ("depthlab", "plain"):
        raise ValueError(f"loop: {loop!r} is not depthlab or plain")
    if warmup < 1 or steps < 1:
        raise ValueError(f"warmup {warmup} and steps {steps} must both be >= 1")
    device = torch.device(device)
    if threads:
        torch.set_num_threads(threads)
    compiled = loop == "depthlab" and effective_compile(compile, device)
    settings = _train_settings(batch_size, seq_len, warmup, steps, precision, compiled)
    # enough distinct windows for every step (batches are drawn from (seed, step))
    tokens = random_tokens(vocab_size, max(1 << 16, 4 * batch_size * (seq_len + 1)))
    if loop == "depthlab":
        rate, compile_s, final_loss = _depthlab_rate(
            norm_scheme, arch, settings, vocab_size, tokens, device, warmup, steps
        )
    else:
        (rate, final_loss), compile_s = (
            _plain_rate(arch, settings, vocab_size, tokens, device, warmup, steps),
            0.0,
        )
    return {
        "loop": loop,
        "norm_scheme": norm_scheme if loop == "depthlab" else "pre_ln",
        "precision": precision,
        "device": str(device),
        "tokens_per_s": rate,
        "step_s": settings.tokens_per_step / rate,
        "compiled": compiled,
        "compile_s": round(compile_s, 3),
        "final_loss": final_loss,
        "flops_per_token": training_flops_per_token(arch, vocab_size, seq_len),
    }


def model_flops_utilisation(tokens_per_s: float, flops_per_token: float, peak_tflops: float):
    """The share of the measured matmul peak that a rate of model FLOPs reaches."""
    return tokens_per_s * flops_per_token / (peak_tflops * 1e12)
