"""depthlab.models.decoders: every norm scheme against a from-the-formula float64 reference, init
scales, and checkpoint export (plain Llama where exact; the rest reload exactly in the project).
Loading checkpoints without depthlab is tested in test_checkpoints.py.

The reference below is plain torch written from docs/design.md (Curse of Depth) and the LLaMA formulas
(RMSNorm, rotate-half RoPE, causal GQA attention, SwiGLU); it reads weights from the model's
state_dict by name and never calls transformers or depthlab code.
"""

import json
import math

import pytest
import torch
from depthlab.models import decoders as models
from tiny_models import large_weights

torch.set_num_threads(1)

VOCAB = 97
SEQ = 10
BATCH = 2
EPS = 1e-6  # LlamaConfig's default rms_norm_eps, which make_config keeps
# Relative to max |logit| (~6 here): even a float64 model runs HF's RMSNorm and RoPE tables in
# float32, so the measured gap is 1.5e-6..1.1e-5 absolute; wrong schemes miss by > 2.
TOL = 1e-5
SCHEMES = tuple(models.NORM_SCHEMES)  # each needs its formula in scheme_plan / reference_forward
# the schemes exported with their modeling code (not as a plain Llama)
CUSTOM_CODE_SCHEMES = tuple(s for s in SCHEMES if s not in models.PLAIN_LLAMA_SCHEMES)

# theta != 10000 so an ignored rope_theta shows; 4 layers so Mix-LN has 1 Post-LN layer and
# LNS scales 1, 1/sqrt2, 1/sqrt3, 1/2.
ARCHS = {
    "gqa": dict(
        hidden_size=32,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=64,
        rope_theta=500.0,
        mix_ln_post_fraction=0.25,
    ),
    "mha": dict(
        hidden_size=48,
        num_layers=3,
        num_heads=3,
        intermediate_size=80,
        rope_theta=10000.0,
        mix_ln_post_fraction=0.25,
    ),
}


# ---------------------------------------------------------------- reference (plain torch)


def rms_norm(x, gain):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * gain


def rope(x, theta):
    """Rotate-half RoPE on x (batch, heads, T, d) at positions 0..T-1."""
    d, steps = x.shape[-1], x.shape[-2]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(steps, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angle.cos(), angle.cos()], -1)
    sin = torch.cat([angle.sin(), angle.sin()], -1)
    rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


def attention(x, w, prefix, arch):
    batch, steps, hidden = x.shape
    n_heads = arch["num_heads"]
    n_kv = arch.get("num_kv_heads", n_heads)
    head_dim = hidden // n_heads

    def heads(name, n):
        return (x @ w[prefix + name].T).view(batch, steps, n, head_dim).transpose(1, 2)

    q = rope(heads("q_proj.weight", n_heads), arch["rope_theta"])
    k = rope(heads("k_proj.weight", n_kv), arch["rope_theta"])
    v = heads("v_proj.weight", n_kv)
    future = torch.ones(steps, steps, dtype=torch.bool).triu(1)
    outputs = []
    for h in range(n_heads):
        kv = h // (n_heads // n_kv)  # GQA: consecutive query heads share one kv head
        scores = q[:, h] @ k[:, kv].transpose(-1, -2) / math.sqrt(head_dim)
        scores = scores.masked_fill(future, float("-inf"))
        outputs.append(torch.softmax(scores, -1) @ v[:, kv])
    return torch.cat(outputs, -1) @ w[prefix + "o_proj.weight"].T


def swiglu(x, w, prefix):
    gate = x @ w[prefix + "gate_proj.weight"].T
    up = x @ w[prefix + "up_proj.weight"].T
    return (gate * torch.sigmoid(gate) * up) @ w[prefix + "down_proj.weight"].T


def scheme_plan(scheme, num_layers):
    """Per-layer (is_post_ln, residual alpha, norm-output scale) from docs/design.md (Curse of Depth)."""
    mix_post = round(0.25 * num_layers)
    plan = []
    for idx in range(num_layers):
        post = scheme in ("post_ln", "deepnorm") or (scheme == "mix_ln" and idx < mix_post)
        alpha = (2 * num_layers) ** 0.25 if scheme == "deepnorm" else 1.0
        scale = 1 / math.sqrt(idx + 1) if scheme == "lns" else 1.0
        plan.append((post, alpha, scale))
    return plan


def reference_forward(state, ids, arch, plan, output_norms=None):
    """Residual stream h_0..h_L and logits, in float64. output_norms: "peri" (Peri-LN, Gemma-3:
    h = h + N3(Attn(N1(h))); h = h + N4(MLP(N2(h)))) or "output_only" (OLMo-2's placement, a
    plausible wrong reading: h = h + N3(Attn(h)); h = h + N4(MLP(h)))."""
    w = {name: tensor.detach().to(torch.float64) for name, tensor in state.items()}
    h = w["model.embed_tokens.weight"][ids]
    stream = [h]
    for idx, (post, alpha, scale) in enumerate(plan):
        p = f"model.layers.{idx}."
        g1, g2 = w[p + "input_layernorm.weight"], w[p + "post_attention_layernorm.weight"]
        if output_norms:
            g3, g4 = w[p + "attention_output_norm.weight"], w[p + "mlp_output_norm.weight"]
            pre = (lambda x, g: x) if output_norms == "output_only" else rms_norm
            h = h + rms_norm(attention(pre(h, g1), w, p + "self_attn.", arch), g3)
            h = h + rms_norm(swiglu(pre(h, g2), w, p + "mlp."), g4)
        elif post:
            h = rms_norm(alpha * h + attention(h, w, p + "self_attn.", arch), g1)
            h = rms_norm(alpha * h + swiglu(h, w, p + "mlp."), g2)
        else:
            h = h + attention(rms_norm(h, g1) * scale, w, p + "self_attn.", arch)
            h = h + swiglu(rms_norm(h, g2) * scale, w, p + "mlp.")
        stream.append(h)
    logits = rms_norm(h, w["model.norm.weight"]) @ w["lm_head.weight"].T
    return stream, logits


# ---------------------------------------------------------------- helpers


def build(scheme, arch, seed=0, init_std=0.02):
    config = models.make_config(
        arch, scheme, vocab_size=VOCAB, max_positions=SEQ + 6, init_std=init_std
    )
    return models.build_model(config, seed).eval()


def input_ids(seed=0):
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def model_stream(model, ids):
    """Residual stream via hooks (h_0 = embeddings, h_l = output of layer l) and logits."""
    captured = []
    hooks = [
        model.model.embed_tokens.register_forward_hook(lambda mod, args, out: captured.append(out))
    ]
    for layer in model.model.layers:
        hooks.append(
            layer.register_forward_hook(
                lambda mod, args, out: captured.append(out[0] if isinstance(out, tuple) else out)
            )
        )
    try:
        logits = model(ids).logits
    finally:
        for hook in hooks:
            hook.remove()
    return captured, logits


def max_diff(a, b):
    return (a.to(torch.float64) - b.to(torch.float64)).abs().max().item()


def randomized_double(scheme, arch_name, seed=1):
    arch = ARCHS[arch_name]
    model = build(scheme, arch)
    model.load_state_dict(large_weights(model, seed))
    return model.double(), arch


# ---------------------------------------------------------------- forward vs reference


@pytest.mark.parametrize("arch_name", sorted(ARCHS))
@pytest.mark.parametrize("scheme", SCHEMES)
def test_forward_matches_formula_reference(scheme, arch_name):
    model, arch = randomized_double(scheme, arch_name)
    ids = input_ids()
    stream, logits = model_stream(model, ids)
    ref_stream, ref_logits = reference_forward(
        model.state_dict(),
        ids,
        arch,
        scheme_plan(scheme, arch["num_layers"]),
        output_norms="peri" if scheme == "peri_ln" else None,
    )
    assert len(stream) == len(ref_stream) == arch["num_layers"] + 1
    for idx, (got, want) in enumerate(zip(stream, ref_stream)):
        assert max_diff(got, want) <= TOL * max(1.0, want.abs().max().item()), (
            f"{scheme}: residual stream h_{idx} differs from the reference"
        )
    assert max_diff(logits, ref_logits) <= TOL * max(1.0, ref_logits.abs().max().item())


WRONG_PLANS = {
    # what a plausible bug would compute instead of the docs/design.md definition
    "lns": {
        "pre_ln": lambda L: scheme_plan("pre_ln", L),
        "lns 0-based l+1 off by one": lambda L: [
            (False, 1.0, 1 / math.sqrt(i + 2)) for i in range(L)
        ],
        "lns 1/l instead of 1/sqrt(l)": lambda L: [(False, 1.0, 1 / (i + 1)) for i in range(L)],
    },
    "mix_ln": {
        "all pre_ln": lambda L: scheme_plan("pre_ln", L),
        "2 post-ln layers": lambda L: [(i < 2, 1.0, 1.0) for i in range(L)],
    },
    "deepnorm": {
        "post_ln (alpha=1)": lambda L: scheme_plan("post_ln", L),
        "alpha=(2L)^(1/2)": lambda L: [(True, math.sqrt(2 * L), 1.0) for i in range(L)],
    },
}


def test_peri_ln_differs_from_pre_ln_and_from_output_norms_only():
    """Peri-LN's reference is not met by Pre-LN on the same weights (output norms ignored) nor
    by OLMo-2's placement (input norms dropped): both miss by far more than the tolerance."""
    model, arch = randomized_double("peri_ln", "gqa")
    ids = input_ids()
    _, logits = model_stream(model, ids)
    plan = scheme_plan("pre_ln", arch["num_layers"])
    for wrong in (None, "output_only"):
        _, want = reference_forward(model.state_dict(), ids, arch, plan, output_norms=wrong)
        assert max_diff(logits, want) > 1e3 * TOL, f"peri_ln indistinguishable from {wrong}"
    layer = model.model.layers[0]
    assert sum(p.numel() for n, p in layer.named_parameters() if "norm" in n) == 4 * 32


@pytest.mark.parametrize("scheme", sorted(WRONG_PLANS))
def test_reference_is_sensitive_to_plausible_bugs(scheme):
    """The tolerance above is meaningful: nearby wrong definitions miss by far more."""
    model, arch = randomized_double(scheme, "gqa")
    ids = input_ids()
    _, logits = model_stream(model, ids)
    for label, plan in WRONG_PLANS[scheme].items():
        _, wrong = reference_forward(model.state_dict(), ids, arch, plan(arch["num_layers"]))
        assert max_diff(logits, wrong) > 1e3 * TOL, f"{scheme} indistinguishable from {label}"


def test_lns_differs_from_pre_ln_on_same_weights_by_the_right_amount():
    """The public LNS code shipped with its scaling branch disabled; guard against that."""
    arch = ARCHS["gqa"]
    pre_ln = build("pre_ln", arch)
    lns = build("lns", arch)
    state = large_weights(pre_ln, seed=3)
    pre_ln.load_state_dict(state)
    lns.load_state_dict(state)
    ids = input_ids(1)
    pre_stream, pre_logits = model_stream(pre_ln.double(), ids)
    lns_stream, lns_logits = model_stream(lns.double(), ids)
    # layer 1 (l = 1) is unscaled, so h_1 agrees; every later layer is scaled
    assert max_diff(pre_stream[1], lns_stream[1]) <= TOL
    for idx in range(2, arch["num_layers"] + 1):
        assert max_diff(pre_stream[idx], lns_stream[idx]) > 1e-2, f"h_{idx} unchanged by LNS"
    assert max_diff(pre_logits, lns_logits) > 1e-1
    _, ref_lns = reference_forward(state, ids, arch, scheme_plan("lns", arch["num_layers"]))
    _, ref_pre = reference_forward(state, ids, arch, scheme_plan("pre_ln", arch["num_layers"]))
    assert max_diff(lns_logits - pre_logits, ref_lns - ref_pre) <= TOL * 10


# ---------------------------------------------------------------- initialisation

WIDE = dict(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=512)


@pytest.fixture(scope="module")
def wide_models():
    return {
        scheme: build(scheme, WIDE, seed=7)
        for scheme in ("pre_ln", "scaled_init", "deepnorm", "lns")
    }


def projection_stds(model, name):
    owner = "self_attn" if name in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
    return [
        getattr(getattr(layer, owner), name).weight.std().item() for layer in model.model.layers
    ]


def assert_std(stds, expected, what):
    # >= 65k entries per matrix: the sample std is within ~0.3% of the true std (1 s.e.)
    for idx, std in enumerate(stds):
        assert abs(std / expected - 1) < 0.03, (
            f"{what} layer {idx}: std {std:.5f} != {expected:.5f}"
        )


PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.parametrize("scheme", ["pre_ln", "lns"])
def test_init_unscaled_schemes_use_initializer_range(wide_models, scheme):
    model = wide_models[scheme]
    for name in PROJECTIONS:
        assert_std(projection_stds(model, name), 0.02, f"{scheme} {name}")
    assert_std([model.model.embed_tokens.weight.std().item()], 0.02, "embed_tokens")
    for layer in model.model.layers:
        assert torch.equal(layer.input_layernorm.weight, torch.ones(WIDE["hidden_size"]))


def test_init_scaled_init_shrinks_o_and_down_proj(wide_models):
    model = wide_models["scaled_init"]
    scaled = 0.02 / math.sqrt(2 * WIDE["num_layers"])
    for name in PROJECTIONS:
        expected = scaled if name in ("o_proj", "down_proj") else 0.02
        assert_std(projection_stds(model, name), expected, f"scaled_init {name}")


def test_init_deepnorm_scales_v_o_and_mlp_by_beta(wide_models):
    model = wide_models["deepnorm"]
    beta = (8 * WIDE["num_layers"]) ** -0.25
    for name in PROJECTIONS:
        expected = 0.02 if name in ("q_proj", "k_proj") else 0.02 * beta
        assert_std(projection_stds(model, name), expected, f"deepnorm {name}")


# The DeepNorm baseline of the LayerNorm-Scaling code: residual factor 2*sqrt(2) at any depth,
# Xavier-normal init (std = gain * sqrt(2 / (fan_in + fan_out))), gain (8L)^(+1/4) on v/o/MLP
# and 1 on q/k. GQA here, so k/v are narrower than q/o and a swapped fan shows.
WIDE_GQA = dict(WIDE, num_kv_heads=2, deepnorm_variant="lns_reference")


def test_init_deepnorm_lns_reference_uses_xavier_with_gain_8L_to_the_quarter():
    model = build("deepnorm", WIDE_GQA, seed=7)
    hidden, inner, kv_width = 256, 512, 2 * 64  # kv heads x head size
    gain = 32**0.25  # (8 * 4 layers)^(1/4)
    expected = {
        "q_proj": math.sqrt(2 / (hidden + hidden)),
        "k_proj": math.sqrt(2 / (hidden + kv_width)),
        "v_proj": gain * math.sqrt(2 / (hidden + kv_width)),
        "o_proj": gain * math.sqrt(2 / (hidden + hidden)),
        "gate_proj": gain * math.sqrt(2 / (hidden + inner)),
        "up_proj": gain * math.sqrt(2 / (hidden + inner)),
        "down_proj": gain * math.sqrt(2 / (inner + hidden)),
    }
    for name in PROJECTIONS:
        assert_std(projection_stds(model, name), expected[name], f"lns_reference {name}")
    assert_std([model.model.embed_tokens.weight.std().item()], 0.02, "embed_tokens")
    assert [layer.residual_scale for layer in model.model.layers] == [2.8284271247461903] * 4


def test_deepnorm_default_variant_is_deepnet():
    config = models.make_config(ARCHS["gqa"], "deepnorm", vocab_size=VOCAB, max_positions=SEQ)
    assert config.deepnorm_variant == "deepnet"
    assert models.residual_scale(config) == 8**0.25  # (2 * 4 layers)^(1/4)


def test_deepnorm_lns_reference_forward_matches_formula_reference():
    arch = dict(ARCHS["gqa"], deepnorm_variant="lns_reference")
    model = build("deepnorm", arch)
    model.load_state_dict(large_weights(model, seed=4))
    model = model.double()
    ids = input_ids()
    _, logits = model_stream(model, ids)
    plan = [(True, 2 * math.sqrt(2), 1.0)] * arch["num_layers"]
    _, want = reference_forward(model.state_dict(), ids, arch, plan)
    assert max_diff(logits, want) <= TOL * max(1.0, want.abs().max().item())
    _, deepnet = reference_forward(
        model.state_dict(), ids, arch, scheme_plan("deepnorm", arch["num_layers"])
    )
    assert max_diff(logits, deepnet) > 1e3 * TOL  # alpha 2.83 vs (2L)^(1/4) = 1.68 shows


@pytest.mark.parametrize("scheme", ["deepnorm", "lns"])
def test_same_seed_gives_identical_weights(scheme):
    arch = ARCHS["gqa"]
    first, second, other = (build(scheme, arch, seed=s).state_dict() for s in (11, 11, 12))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.equal(
        first["model.layers.0.self_attn.q_proj.weight"],
        other["model.layers.0.self_attn.q_proj.weight"],
    )


# ---------------------------------------------------------------- checkpoint export


@pytest.fixture(scope="module")
def saved_checkpoints(tmp_path_factory):
    """Each scheme with random weights (random norm gains, so LNS folding matters): the model,
    its float32 logits and the directory save_checkpoint wrote."""
    root = tmp_path_factory.mktemp("checkpoints")
    ids = input_ids(2)
    saved = {}
    for scheme in SCHEMES:
        model = build(scheme, ARCHS["gqa"])
        model.load_state_dict(large_weights(model, seed=5))
        with torch.no_grad():
            logits = model(ids).logits
        out_dir = root / scheme
        models.save_checkpoint(model, None, out_dir)
        saved[scheme] = dict(model=model, logits=logits, dir=out_dir, ids=ids)
    return saved


@pytest.mark.parametrize("scheme", models.PLAIN_LLAMA_SCHEMES)
def test_to_plain_llama_gives_same_logits(saved_checkpoints, scheme):
    item = saved_checkpoints[scheme]
    plain = models.to_plain_llama(item["model"])
    assert type(plain).__name__ == "LlamaForCausalLM"
    with torch.no_grad():
        logits = plain.eval()(item["ids"]).logits
    assert max_diff(logits, item["logits"]) <= TOL
    config = json.loads((item["dir"] / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert not any(
        "depthlab" in json.dumps(value) or "norm_scheme" in key for key, value in config.items()
    )


@pytest.mark.parametrize("scheme", CUSTOM_CODE_SCHEMES)
def test_depthlab_checkpoints_reload_exactly(saved_checkpoints, scheme):
    item = saved_checkpoints[scheme]
    config = json.loads((item["dir"] / "config.json").read_text())
    assert config["model_type"] == "depthlab_llama"
    assert config["norm_scheme"] == scheme
    reloaded, info = models.AutoModelForCausalLM.from_pretrained(
        item["dir"], output_loading_info=True
    )
    assert isinstance(reloaded, models.DepthlabForCausalLM)
    assert {k: v for k, v in info.items() if v} == {}
    assert reloaded.config.norm_scheme == scheme
    assert reloaded.config.mix_ln_post_layers == item["model"].config.mix_ln_post_layers
    assert [layer.post_ln for layer in reloaded.model.layers] == [
        post for post, _, _ in scheme_plan(scheme, ARCHS["gqa"]["num_layers"])
    ]
    with torch.no_grad():
        logits = reloaded.eval()(item["ids"]).logits
    assert max_diff(logits, item["logits"]) <= 1e-6


@pytest.mark.parametrize("scheme", CUSTOM_CODE_SCHEMES)
def test_to_plain_llama_refuses_non_llama_schemes(saved_checkpoints, scheme):
    with pytest.raises(ValueError, match=f"norm_scheme '{scheme}'.*plain-Llama"):
        models.to_plain_llama(saved_checkpoints[scheme]["model"])


# ---------------------------------------------------------------- bad config


def test_unknown_norm_scheme_names_the_key():
    with pytest.raises(Exception, match=r"norm_scheme.*'rms_lns'"):
        models.make_config(ARCHS["gqa"], "rms_lns", vocab_size=VOCAB, max_positions=SEQ)


def test_mix_ln_without_post_fraction_names_the_key():
    arch = {k: v for k, v in ARCHS["gqa"].items() if k != "mix_ln_post_fraction"}
    with pytest.raises(ValueError, match="mix_ln_post_fraction"):
        models.make_config(arch, "mix_ln", vocab_size=VOCAB, max_positions=SEQ)
    # other schemes do not need it
    assert (
        models.make_config(arch, "pre_ln", vocab_size=VOCAB, max_positions=SEQ).mix_ln_post_layers
        == 0
    )


def test_deepnorm_variant_outside_deepnorm_or_unknown_names_the_key():
    with pytest.raises(ValueError, match="deepnorm_variant: has no effect for norm_scheme post_ln"):
        models.make_config(
            dict(ARCHS["gqa"], deepnorm_variant="deepnet"),
            "post_ln",
            vocab_size=VOCAB,
            max_positions=SEQ,
        )
    with pytest.raises(ValueError, match="deepnorm_variant: unknown variant 'deepnorm'"):
        models.make_config(
            dict(ARCHS["gqa"], deepnorm_variant="deepnorm"),
            "deepnorm",
            vocab_size=VOCAB,
            max_positions=SEQ,
        )


def test_mix_ln_post_layers_out_of_range_names_the_key():
    with pytest.raises(Exception, match="mix_ln_post_layers"):
        models.DepthlabConfig(num_hidden_layers=2, norm_scheme="mix_ln", mix_ln_post_layers=3)
