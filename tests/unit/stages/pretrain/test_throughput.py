"""The throughput measurement (depthlab.stages.pretrain.throughput): the model FLOPs it counts
against a count taken from a built model, and both loops timed on the CPU."""

import math

import pytest
import torch
from depthlab.models.decoders import build_model, make_config
from depthlab.stages.pretrain.throughput import (
    SHAPES,
    forward_flops_per_token,
    matmul_peak_tflops,
    measure_training,
    model_flops_utilisation,
    training_flops_per_token,
)


@pytest.mark.parametrize("shape", ["cod_130m", "tiny"])
def test_model_flops_count_every_matmul_weight_and_the_attention_scores(shape):
    # PaLM's count: 6 per matmul weight (forward 2, backward 4) plus 12 L d T for the scores;
    # the weights counted here from a built model: every 2-D parameter but the embedding.
    arch, vocab, seq = SHAPES[shape]["arch"], 512, SHAPES[shape]["seq_len"]
    model = build_model(make_config(arch, "pre_ln", vocab_size=vocab, max_positions=seq), 0)
    weights = sum(
        p.numel() for name, p in model.named_parameters() if p.ndim == 2 and "embed" not in name
    )
    scores = 12 * arch["num_layers"] * arch["hidden_size"] * seq
    assert training_flops_per_token(arch, vocab, seq) == 6 * weights + scores
    assert forward_flops_per_token(arch, vocab, seq) * 3 == 6 * weights + scores
    assert model_flops_utilisation(1e6, 2e6, 4.0) == pytest.approx(0.5)


@pytest.mark.parametrize("loop", ["depthlab", "plain"])
def test_both_loops_time_steady_steps_on_the_cpu(loop):
    shape = SHAPES["tiny"]
    result = measure_training(
        loop,
        norm_scheme="lns",
        arch=shape["arch"],
        batch_size=2,
        seq_len=16,
        vocab_size=shape["vocab_size"],
        precision="fp32",
        device="cpu",
        steps=2,
        warmup=1,
        threads=1,
    )
    assert result["tokens_per_s"] > 0 and result["step_s"] == pytest.approx(
        32 / result["tokens_per_s"]
    )
    assert math.isfinite(result["final_loss"]) and abs(result["final_loss"] - math.log(512)) < 1
    assert not result["compiled"] and result["compile_s"] == 0  # auto: eager on a CPU
    assert result["norm_scheme"] == ("lns" if loop == "depthlab" else "pre_ln")


def test_the_matmul_peak_is_a_rate():
    rate = matmul_peak_tflops("cpu", torch.float32, size=128, repeats=2)
    assert 0 < rate < 1e3
