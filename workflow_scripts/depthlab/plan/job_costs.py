"""The cost model of the resource plan (depthlab.plan.resource_plan): what one job of each stage
does, as FLOPs by dtype and memory by phase, from its model's shape (depthlab.plan.model_shapes) and
its spec; the assumptions (config `cluster.gpu`, `cluster.sizing`) it is read with. One short
cost model per stage, sharing the estimate's vocabulary. Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from depthlab.plan.engine_budgets import (
    LOGIT_CHUNK_ELEMENTS,
    LOSS_CHUNK_ELEMENTS,
    SWEEP_CACHE_MIB,
    TASK_CHOICES,
)
from depthlab.plan.model_shapes import (
    DTYPE_BYTES,
    Shape,
    head_matrix_parameters,
    layer_matrix_parameters,
    matmul_parameters,
)
from depthlab.settings.pruning import block_sizes

MiB, GiB = 2**20, 2**30  # Slurm's (and Snakemake's) MB are MiB; a GPU's "80 GB" is 80 GiB

ACTIVATION_BYTES = 34  # per token, layer and hidden unit in 16-bit (Korthikanti et al. 2022)
TRAIN_STATE_BYTES = {  # per parameter: weights + gradients + AdamW's two moments
    "pure_bf16": 2 + 2 + 2 + 2,
    "bf16": 4 + 4 + 4 + 4,  # autocast over fp32 weights
    "auto": 4 + 4 + 4 + 4,  # bf16 on every GPU the plan sizes for
    "fp32": 4 + 4 + 4 + 4,
}
PRECISION_DTYPE = {
    "pure_bf16": "bfloat16",
    "bf16": "bfloat16",
    "auto": "bfloat16",  # a GPU multiplies bf16 natively: auto trains in bf16 there
    "fp32": "float32",
}
# The stages' memory budgets (depthlab.plan.engine_budgets, which the engines read too)
LOGIT_LENS_CHUNK = LOGIT_CHUNK_ELEMENTS["cuda"]
LOSS_CHUNK = LOSS_CHUNK_ELEMENTS
SWEEP_CACHE = int(SWEEP_CACHE_MIB * MiB)
LM_EVAL_CONTEXT = 2048  # the longest harness request taken as a batch's length
# Tokens one evaluation of a harness task reads (questions x prompt tokens, lm-eval grouping the
# choices of a question that share a context; generation counted as its prompt plus answer):
# approximate, from the tasks' sizes and typical prompt lengths.
HARNESS_TASK_TOKENS = {
    "mmlu": 14_042 * 620,  # 5-shot prompts, one-token answers
    "boolq": 3_270 * 170,
    "hellaswag": 10_042 * 4 * 90,  # four endings, each scored with its context
    "gsm8k": 1_319 * (900 + 256),  # 5-shot prompt + up to 256 generated tokens
    "arc_easy": 2_376 * 4 * 40,
    "arc_challenge": 1_172 * 4 * 45,
    "winogrande": 1_267 * 2 * 40,
    "piqa": 1_838 * 2 * 60,
    "social_iqa": 1_954 * 3 * 50,
    "openbookqa": 500 * 4 * 30,
}
HARNESS_DEFAULT_TOKENS = 5_000_000  # a task not listed above
LOCAL_TASK_CHOICES = TASK_CHOICES
LORA_MLP_MODULES = {"gate_proj", "up_proj", "down_proj", "fc1", "fc2", "dense_h_to_4h",
                    "dense_4h_to_h"}  # fmt: skip
# The job families whose share of the peak (config `cluster.gpu.utilisation`) is stated apart,
# because they reach very different shares (workflow_scripts/gpu_check.py measures each):
# training = pretraining and fine-tuning (forward + backward + optimizer), analysis = forward-only
# passes (analysis, loss sweeps, criteria, interventions, linear maps, speed runs), lm_eval =
# lm-eval's scoring, healing = (Q)LoRA or continued-pretraining of a pruned model.
UTILISATION_FAMILIES = ("training", "analysis", "lm_eval", "healing")


# --- assumptions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assumptions:
    """config `cluster.gpu` and `cluster.sizing`: the GPU every GPU job runs on, and how the
    derived requests are sized from the estimates."""

    gpu: dict
    sizing: dict

    @classmethod
    def from_config(cls, config: dict) -> Assumptions | None:
        cluster = config.get("cluster") or {}
        if "gpu" not in cluster:
            return None
        return cls(gpu=cluster["gpu"], sizing=cluster["sizing"])  # the schema requires both

    @property
    def usable_bytes(self) -> float:
        """One GPU's memory less the headroom."""
        return self.gpu["memory_gb"] * GiB * (1 - self.sizing["gpu_memory_headroom"])

    def utilisation(self, family: str) -> float:
        """The share of the peak that `family`'s work reaches (one number: every family's)."""
        value = self.gpu["utilisation"]
        return value[family] if isinstance(value, dict) else value

    def flops_per_second(self, dtype: str, family: str) -> float:
        key = {"bfloat16": "bf16_tflops", "float16": "bf16_tflops", "auto": "bf16_tflops",
               "float32": "fp32_tflops", "float64": "fp64_tflops"}[dtype]  # fmt: skip
        return self.gpu[key] * 1e12 * self.utilisation(family)

    def seconds(self, work: Work) -> float:
        """Compute time of `work` on one GPU: each family's FLOPs at its dtype's peak times the
        family's utilisation."""
        return sum(
            flops / self.flops_per_second(dtype, family)
            for (family, dtype), flops in work.flops.items()
        )

    def utilisation_text(self) -> str:
        value = self.gpu["utilisation"]
        if not isinstance(value, dict):
            return f"at {value:.0%} utilisation"
        shares = ", ".join(f"{family} {value[family]:.0%}" for family in UTILISATION_FAMILIES)
        return f"at utilisation {shares}"

    def lines(self) -> list[str]:
        gpu, sizing = self.gpu, self.sizing
        source = [f"- values from: {gpu['source']}"] if gpu.get("source") else []
        return [
            f"- GPU: {gpu['name']}, {gpu['memory_gb']} GB, {gpu['per_node']} per node; peak "
            f"{gpu['bf16_tflops']} TFLOP/s bf16, {gpu['fp32_tflops']} fp32, "
            f"{gpu['fp64_tflops']} fp64, {self.utilisation_text()}",
            *source,
            f"- headroom: {sizing['gpu_memory_headroom']:.0%} of each GPU's memory kept free; "
            f"host memory +{sizing['host_memory_headroom']:.0%} over "
            f"{sizing['host_base_mb'] / 1024:.0f} GB + the estimate; time limit = "
            f"{sizing['startup_minutes']} min + the estimate x "
            f"{1 + sizing['runtime_headroom']:.2g}; disk = {sizing['disk_base_mb'] / 1024:.0f} GB "
            f"+ the estimate",
        ]


# --- the work of one job ---------------------------------------------------------------------


@dataclass
class Phase:
    """GPU memory of one phase of a job: `split` spreads over the job's GPUs by whole layers,
    `fixed` sits on each GPU that runs a batch (activations, logits)."""

    name: str
    split: dict[str, float]
    fixed: dict[str, float] = field(default_factory=dict)


@dataclass
class Work:
    """What one job does, as the cost model sees it."""

    flops: dict[tuple[str, str], float]  # by (utilisation family, the dtype the work runs in)
    phases: list[Phase]
    weights: float  # bytes that must fit in the job's memory at least (the refusal floor)
    weights_what: str
    host: float  # host bytes beyond the base
    disk: float  # bytes beyond the base
    data_parallel: bool = False  # pretraining: every GPU holds all of it, the FLOPs are shared


def forward_flops(shape: Shape, context: int) -> float:
    """FLOPs of one token's forward pass with `context` positions of attention."""
    attention = 4 * shape.num_layers * shape.attention_width * context
    return 2 * matmul_parameters(shape) + attention


def _what(name: str, shape: Shape, dtype: str) -> str:
    return f"weights ({name}, {shape.parameters / 1e9:.3g}B parameters in {dtype})"


def _context(length: int, shape: Shape) -> int:
    return min(length, shape.max_positions or length)


def _layer_activations(shape: Shape, tokens: float, dtype_bytes: int) -> float:
    """Training activations of `tokens` tokens over all layers (eq. 2 of Korthikanti et al.)."""
    return tokens * shape.num_layers * ACTIVATION_BYTES * shape.hidden_size * dtype_bytes / 2


def _inference_batch(shape: Shape, tokens: float, dtype_bytes: int) -> float:
    """One layer's live tensors and the KV cache of every layer for `tokens` tokens."""
    live = 4 * shape.hidden_size + 2 * shape.intermediate_size
    cache = 2 * shape.num_layers * shape.kv_width
    return tokens * (live + cache) * dtype_bytes


def pretrain_work(name: str, spec: dict, shape: Shape) -> Work:
    train, processes = spec["model"]["train"], spec["processes"]
    precision = train["precision"]
    dtype = PRECISION_DTYPE[precision]
    seq, rows = train["seq_len"], train["batch_size"]
    tokens = train["steps"] * rows * seq
    evaluations = train["steps"] // train["eval_every"] + train["log_spaced_evals"]
    eval_tokens = evaluations * train["eval_batches"] * rows * seq
    micro = train["micro_batch_size"] or rows // processes
    act = DTYPE_BYTES[dtype]
    state = shape.parameters * TRAIN_STATE_BYTES[precision]
    logits = micro * seq * shape.vocab_size * (act + 8)  # + fp32 copy for the loss and its grad
    saved = DTYPE_BYTES[dtype] if precision == "pure_bf16" else 4
    return Work(
        flops={
            ("training", dtype): tokens * 3 * forward_flops(shape, seq),
            ("analysis", dtype): eval_tokens * forward_flops(shape, seq),
        },
        phases=[
            Phase(
                "training",
                split={},
                fixed={
                    "training state": state,
                    "activations": _layer_activations(shape, micro * seq, act),
                    "logits": logits,
                },
            )
        ],
        weights=state,
        weights_what=f"training state ({name}: weights, gradients and AdamW moments, {precision})",
        host=processes * shape.parameters * 4,  # each process builds the model in fp32 first
        disk=state + shape.parameters * saved,  # train_state checkpoint + the saved model
        data_parallel=True,
    )


def analysis_work(name: str, spec: dict, shape: Shape, download: float) -> Work:
    dtype, b = spec["dtype"], DTYPE_BYTES[spec["dtype"]]
    context = _context(spec["max_length"], shape)
    batch = spec["batch_size"] * context
    tokens = spec["max_tokens"] or spec["max_samples"] * context  # documents fill max_length
    lens = spec["logit_lens"]
    stride = spec["logit_lens_stride"]
    states = shape.num_layers + 1
    flops = tokens * forward_flops(shape, context)
    if lens:
        flops += tokens / stride * states * 2 * head_matrix_parameters(shape)
    fixed = {
        "batch": _inference_batch(shape, batch, b),
        "statistics (float64)": batch * shape.hidden_size * 8 * 4,
    }
    if lens:
        fixed["logit-lens states"] = states * batch / stride * shape.hidden_size * b
        fixed["logit-lens logits"] = (
            min(LOGIT_LENS_CHUNK, states * batch / stride * shape.vocab_size) * 14
        )
    if spec["all_token_distance"]:
        fixed["unit states (float64)"] = states * batch * shape.hidden_size * 8
    return Work(
        flops={("analysis", dtype): flops},
        phases=[Phase("pass", split={"weights": shape.parameters * b}, fixed=fixed)],
        weights=shape.parameters * b,
        weights_what=_what(name, shape, dtype),
        host=shape.weight_bytes(),  # a checkpoint may be staged in host memory once
        disk=download,
    )


def lens_swaps_work(name: str, spec: dict, shape: Shape, download: float) -> Work:
    """lens_swaps: the train-split states of the tuned lens' tokens (one forward each), its
    training (per step and layer: the translator and the head, forward and backward through the
    frozen head), then per text set a clean pass, both lenses read at every state of every
    scored token, and 2L variants (each adjacent swap, each deletion) replayed from their first
    changed layer (L/2 layers on average) and read out."""
    dtype, b = spec["dtype"], DTYPE_BYTES[spec["dtype"]]
    L, d = shape.num_layers, shape.hidden_size
    context = _context(spec["max_length"], shape)
    lens = spec["tuned_lens"]
    head = head_matrix_parameters(shape)
    layer = layer_matrix_parameters(shape)
    flops = lens["train_tokens"] * forward_flops(shape, context)
    flops += lens["steps"] * lens["batch_tokens"] * L * 3 * 2 * (head + d * d)
    tokens = len(spec["text_sets"]) * spec["max_samples"] * context  # documents fill max_length
    scored = tokens / spec["stride"]
    flops += tokens * forward_flops(shape, context)
    flops += scored * 2 * (L + 1) * 2 * head  # the logit lens and the tuned lens
    flops += 2 * L * (tokens * (L / 2) * 2 * layer + scored * 2 * head)
    rows = spec["batch_size"] * context
    translators = L * (d * d + d) * 4 * 4  # float32 weights, gradients and Adam's two moments
    return Work(
        flops={("analysis", dtype): flops},
        phases=[
            Phase(
                "tuned lens and swaps",
                split={"weights": shape.parameters * b},
                fixed={
                    "translators (float32, with Adam state)": translators,
                    "train-split states (float32)": (L + 1) * lens["train_tokens"] * d * 4,
                    "batch and every layer's states": _inference_batch(shape, rows, b)
                    + (L + 1) * rows * d * b,
                    "lens logits": min(LOGIT_LENS_CHUNK, (L + 1) * rows * shape.vocab_size) * 14,
                },
            )
        ],
        weights=shape.parameters * b,
        weights_what=_what(name, shape, dtype),
        host=shape.weight_bytes() + translators,
        disk=download + L * (d * d + d) * 4,  # translators.safetensors
    )


def _lora_parameters(shape: Shape, healing: dict) -> int:
    d, i = shape.hidden_size, shape.intermediate_size
    per_layer = sum(
        healing["rank"] * (d + i if module in LORA_MLP_MODULES else 2 * d)
        for module in healing["target_modules"]
    )
    return shape.num_layers * per_layer


def _lm_eval_tokens(spec: dict, tasks_config: dict) -> float:
    """Tokens one lm-eval evaluation of one model variant reads."""
    lm = spec["lm_eval"]
    tokens = sum(
        HARNESS_TASK_TOKENS.get(task["name"], HARNESS_DEFAULT_TOKENS)
        for task in lm.get("harness_tasks") or []
    )
    local = tasks_config["kinds"] if lm["tasks"] is None else lm["tasks"]
    examples = tasks_config["examples"]
    for kind in local:
        count = examples if isinstance(examples, int) else examples.get(kind, 0)
        words = tasks_config["words"].get(kind, 1)
        tokens += count * LOCAL_TASK_CHOICES * (tasks_config["context_tokens"] + 2 * words)
    return tokens


def _sweep_phase(shape: Shape, spec: dict, b: int) -> Phase:
    """The loss sweep's memory: the weights and the cached states of every window, one batch."""
    L, d = shape.num_layers, shape.hidden_size
    val = spec["val"]
    seq = _context(val["seq_len"], shape)
    val_tokens = val["windows"] * seq
    return Phase(
        "loss sweep",
        split={
            "weights": shape.parameters * b,
            "cached states of every window": (L + 1) * val_tokens * d * b,
        },
        fixed={
            "batch": _inference_batch(shape, val["batch_size"] * seq, b) + SWEEP_CACHE,
            "loss logits": LOSS_CHUNK * 12,
        },
    )


def _lm_eval_phase(shape: Shape, spec: dict, b: int, split: dict) -> Phase:
    rows = spec["lm_eval"]["batch_size"] * _context(LM_EVAL_CONTEXT, shape)
    return Phase(
        "lm-eval",
        split=dict(split),
        fixed={"batch": _inference_batch(shape, rows, b), "logits": rows * shape.vocab_size * 8},
    )


def _lm_eval_flops(shape: Shape, spec: dict, tasks_config: dict) -> float:
    """FLOPs of one lm-eval evaluation of one variant (a request: half the longest context)."""
    return _lm_eval_tokens(spec, tasks_config) * forward_flops(shape, LM_EVAL_CONTEXT // 2)


def _criteria_work(shape: Shape, spec: dict, b: int, n_values: list[int]):
    """(FLOPs, memory phase) of the block-ranking criteria on pruning.calibration's windows
    (depthlab.stages.pruning.criteria), or None when no strategy reads them: each criterion's
    declared cost (depthlab.settings.block_criteria): loss-sweep sets on the calibration windows
    (ppl: L single blocks, SLEB's path with its barrier), half the model a set after one full
    pass; a gradient pass (Taylor) one forward and backward pass per batch (3 forward passes'
    FLOPs), holding the blocks' gradient sums in float64 and a batch's training activations."""
    from depthlab.settings.block_criteria import CALIBRATED_STRATEGIES, CRITERIA

    strategies, calibration = spec["strategies"], spec.get("calibration")
    if calibration is None or not set(strategies) & set(CALIBRATED_STRATEGIES):
        return None
    L = shape.num_layers
    seq = _context(calibration["seq_len"], shape)
    tokens = calibration["windows"] * seq
    declared = [CRITERIA[s] for s in strategies if s in CRITERIA]
    sets = sum(c.calibration_sets(L, n_values) for c in declared if c.calibration_sets)
    flops = (1 + 0.5 * sets) * tokens * forward_flops(shape, seq) if sets else 0.0
    taylor = any(c.gradient_pass for c in declared)
    rows = calibration["batch_size"] * seq
    fixed = {"batch": _inference_batch(shape, rows, b), "loss logits": LOSS_CHUNK * 12}
    split = {"weights": shape.parameters * b}
    if sets:
        split["cached calibration states"] = (L + 1) * tokens * shape.hidden_size * b
    if taylor:
        flops += 3 * tokens * forward_flops(shape, seq)
        split["float64 gradient sums + gradients"] = shape.parameters * (8 + b)
        fixed = {"training activations": _layer_activations(shape, rows, b),
                 "logits": rows * shape.vocab_size * 8}  # fmt: skip
    return flops, Phase("block criteria", split=split, fixed=fixed)


def pruning_work(name: str, spec: dict, shape: Shape, tasks_config: dict, download: float) -> Work:
    """prune_model: the loss sweep, lm-eval of the unhealed sets (unless each set is its own
    evaluate_pruned job) and the speed measurement; healing is heal_pruned's (heal_work)."""
    dtype, b = spec["dtype"], DTYPE_BYTES[spec["dtype"]]
    L = shape.num_layers
    weights = shape.parameters * b
    n_values = block_sizes(spec["n_grid"], L)
    val = spec["val"]
    seq = _context(val["seq_len"], shape)
    val_tokens = val["windows"] * seq
    strategies = spec["strategies"]
    greedy_end = min(max(n_values), spec.get("greedy_max_n") or max(n_values))
    # Each removal set after the full pass reruns the layers after its first removed layer
    # (LossSweep's cached prefix): half the model on average.
    greedy_sets = sum(L - k + 1 for k in range(1, greedy_end + 1)) if "greedy" in strategies else 0
    other_sets = L + len([s for s in strategies if s != "greedy"]) * len(n_values)
    sweep_passes = 1 + 0.5 * (other_sets + greedy_sets)
    sublayer = spec.get("sublayer") or {}
    if sublayer.get("enabled"):  # each sub-layer step: a full pass per candidate unit, no reuse
        sweep_passes += sum(2 * L - k + 1 for k in range(1, sublayer["max_units"] + 1))

    def has_set(strategy: str, n: int) -> bool:
        return n in n_values and (strategy != "greedy" or n <= greedy_end)

    lm = spec["lm_eval"]
    variants = 0
    if lm["enabled"] and not lm.get("per_set_jobs"):
        lm_n = n_values if lm["n_grid"] is None else block_sizes(lm["n_grid"], L)
        variants = 1 + len({(s, n) for s in strategies for n in lm_n if has_set(s, n)})
        variants += L if lm["single_layer"] else 0
    flops = {("analysis", dtype): sweep_passes * val_tokens * forward_flops(shape, seq)}
    if variants:
        flops[("lm_eval", dtype)] = variants * _lm_eval_flops(shape, spec, tasks_config)
    phases = [_sweep_phase(shape, spec, b)]
    criteria = _criteria_work(shape, spec, b, n_values)
    if criteria is not None:
        flops[("analysis", dtype)] += criteria[0]
        phases.append(criteria[1])
    if variants:
        phases.append(_lm_eval_phase(shape, spec, b, phases[0].split))
    disk = download
    speed = spec["speed"]
    if speed["enabled"]:
        speed_n = block_sizes(speed["n_grid"], L)
        length = speed["prompt_length"] + speed["new_tokens"]
        speed_tokens = (1 + len(speed_n)) * speed["repeats"] * speed["batch_size"] * length
        flops[("analysis", dtype)] += speed_tokens * forward_flops(shape, length)
        disk += sum(weights * (L - n) / L for n in speed_n)  # the timed variants' exports
    return Work(
        flops=flops,
        phases=phases,
        weights=weights,
        weights_what=_what(name, shape, dtype),
        host=2 * shape.weight_bytes(),  # exports and reloads stage a copy in host memory
        disk=disk,
    )


def heal_work(name: str, spec: dict, shape: Shape, tasks_config: dict, download: float) -> Work:
    """heal_pruned: one variant's healing with n layers removed ((Q)LoRA adapters, or `full`:
    continued pretraining of every weight), its validation loss and (lm_eval.enabled) one
    lm-eval evaluation."""
    dtype, b = spec["dtype"], DTYPE_BYTES[spec["dtype"]]
    L = shape.num_layers
    weights = shape.parameters * b
    healing = spec["healing"]
    keep = (L - spec["n"]) / L  # the share of layers the pruned copy keeps
    seq = _context(spec["val"]["seq_len"], shape)
    val_tokens = spec["val"]["windows"] * seq
    heal_seq = _context(healing["seq_len"], shape)
    heal_tokens = healing["steps"] * healing["batch_size"] * heal_seq
    # QLoRA computes in the model's dtype (depthlab.stages.pruning.healing.compute_dtype)
    frozen = 2 * forward_flops(shape, heal_seq) * keep  # forward + input gradients
    full = healing["method"] == "full"
    if full:  # + the weight gradients of every kept layer: forward + backward = 3 forwards
        frozen = 3 * forward_flops(shape, heal_seq) * keep
    flops = {
        ("healing", dtype): heal_tokens * frozen,
        ("analysis", dtype): val_tokens * forward_flops(shape, seq) * keep,
    }
    # one forward/backward holds micro_batch_size rows; with checkpointing only each layer's
    # input is kept, plus one layer's activations while it is recomputed
    rows = (healing.get("micro_batch_size") or healing["batch_size"]) * heal_seq
    activations = _layer_activations(shape, rows, b)
    if healing.get("gradient_checkpointing"):
        activations = rows * shape.hidden_size * b * L + activations / L
    heal_split = {"weights": weights, "pruned copy": weights * keep}
    if full:
        # every kept weight's gradient and AdamW's two moments, in the weights' dtype (torch's
        # AdamW keeps its state in the parameter's dtype)
        heal_split["gradients + AdamW states"] = 3 * weights * keep
    else:
        heal_split["adapters + AdamW (fp32)"] = _lora_parameters(shape, healing) * 16
    heal_split["training activations"] = activations
    disk = download
    if healing["method"] == "qlora":
        matrices = L * layer_matrix_parameters(shape)
        heal_split["4-bit copy"] = (matrices * 0.5 + (shape.parameters - matrices) * 4) * keep
        disk += weights * keep  # the pruned copy exported for its 4-bit reload
    phases = [Phase("healing", split=heal_split, fixed={"logits": rows * shape.vocab_size * 12})]
    if spec["lm_eval"]["enabled"]:
        flops[("lm_eval", dtype)] = _lm_eval_flops(shape, spec, tasks_config) * keep
        phases.append(
            _lm_eval_phase(shape, spec, b, {"weights": weights, "healed copy": weights * keep})
        )
    return Work(
        flops=flops,
        phases=phases,
        weights=weights,
        weights_what=_what(name, shape, dtype),
        host=2 * shape.weight_bytes(),  # the 4-bit reload stages a copy in host memory
        disk=disk,
    )


def evaluate_work(name: str, spec: dict, shape: Shape, tasks_config: dict, download: float) -> Work:
    """evaluate_pruned: one lm-eval evaluation of one removal set of the model."""
    dtype, b = spec["dtype"], DTYPE_BYTES[spec["dtype"]]
    weights = shape.parameters * b
    return Work(
        flops={("lm_eval", dtype): _lm_eval_flops(shape, spec, tasks_config)},
        phases=[_lm_eval_phase(shape, spec, b, {"weights": weights})],
        weights=weights,
        weights_what=_what(name, shape, dtype),
        host=shape.weight_bytes(),
        disk=download,
    )


def skip_work(name: str, spec: dict, shape: Shape, depth_use: dict, download: float) -> Work:
    dtype, b = spec["dtype"], DTYPE_BYTES[spec["dtype"]]
    context = _context(spec["max_length"], shape)
    skipped = len(spec["layers"]) if spec["layers"] else shape.num_layers - spec["no_skip_front"]
    passes = 1 + len(spec["variants"]) * skipped
    flops = passes * spec["max_samples"] * context * forward_flops(shape, context)
    if spec["problems"]:
        problems = depth_use["problems"]
        families = problems["families"]
        per_level = problems["eval_per_level"]
        count = per_level * sum(len(f["levels"]) for f in families.values())
        flops += (1 + skipped) * count * context * forward_flops(shape, context)
        generated = sum(
            per_level * len(f["levels"]) * f.get("max_new_tokens", 0) for f in families.values()
        )
        flops += generated * forward_flops(shape, context)
    rows = spec["batch_size"] * context
    return Work(
        flops={("analysis", dtype): flops},
        phases=[
            Phase(
                "passes",
                split={"weights": shape.parameters * b},
                fixed={
                    "batch": _inference_batch(shape, rows, b),
                    "logits": rows * shape.vocab_size * 8,
                },
            )
        ],
        weights=shape.parameters * b,
        weights_what=_what(name, shape, dtype),
        host=shape.weight_bytes(),
        disk=download,
    )


def linear_maps_work(names, spec: dict, shapes, downloads) -> Work:
    source, target = shapes
    dtype, b = spec["dtype"], DTYPE_BYTES[spec["dtype"]]
    context = min(_context(spec["max_length"], source), _context(spec["max_length"], target))
    tokens = spec["max_documents"] * context
    n_s = source.num_layers + 1 - spec["skip_first"]
    n_t = target.num_layers + 1 - spec["skip_first"]
    d_a, d_b = source.hidden_size, target.hidden_size
    # float64 sums of every pair (X'Y) and every source layer (X'X, fit and validation)
    sums = 8 * (n_s * n_t * d_a * d_b + 2 * n_s * d_a * d_a + n_t * d_b)
    budget = spec["max_memory_mb"] * MiB
    blocks = max(1, math.ceil(sums / budget))  # tokens streamed once per block of target layers
    model_flops = forward_flops(source, context) + forward_flops(target, context)
    rows = spec["batch_size"] * context
    weights = (source.parameters + target.parameters) * b
    return Work(
        flops={
            ("analysis", dtype): blocks * tokens * model_flops,
            ("analysis", "float64"): tokens * 2 * (n_s * n_t * d_a * d_b + 2 * n_s * d_a * d_a),
        },
        phases=[
            Phase(
                "pass",
                split={"weights of both models": weights},
                fixed={
                    "float64 sums": min(sums, budget),
                    "batch": _inference_batch(source, rows, b) + _inference_batch(target, rows, b),
                },
            )
        ],
        weights=weights,
        weights_what=f"weights ({' and '.join(names)} in {dtype})",
        host=source.weight_bytes() + target.weight_bytes(),
        disk=sum(downloads),
    )


def finetune_work(name: str, spec: dict, shape: Shape) -> Work:
    """Fine-tuning one parent (depthlab.stages.finetune.finetuning): full (weights, gradients, AdamW) or LoRA
    (frozen weights, adapters + their AdamW), under the train section's precision."""
    train = spec["train"]
    precision = train["precision"]
    dtype = PRECISION_DTYPE[precision]
    act = DTYPE_BYTES[dtype]
    rows = train["batch_size"] * train["seq_len"]
    tokens = train["steps"] * rows
    forward = forward_flops(shape, train["seq_len"])
    if train["method"] == "lora":
        lora = train["lora"]
        state = shape.parameters * 4 + _lora_parameters(shape, lora) * 16
        flops = tokens * 2 * forward  # forward + the input gradients through the frozen base
        what = f"frozen weights and adapters ({name}, LoRA rank {lora['rank']})"
    else:
        state = shape.parameters * TRAIN_STATE_BYTES[precision]
        flops = tokens * 3 * forward
        what = f"training state ({name}: weights, gradients and AdamW moments, {precision})"
    return Work(
        flops={("training", dtype): flops},
        phases=[
            Phase(
                "fine-tuning",
                split={},
                fixed={
                    "training state": state,
                    "activations": _layer_activations(shape, rows, act),
                    "logits": rows * shape.vocab_size * (act + 8),
                },
            )
        ],
        weights=state,
        weights_what=what,
        host=shape.parameters * 4,
        disk=2 * shape.parameters * 4,  # the resumable state and the saved model
    )


def finetune_eval_work(name: str, spec: dict, shape: Shape, tasks_config: dict | None) -> Work:
    """lm-eval of the parent and each of its fine-tuned models, one model at a time."""
    dtype, b = spec["dtype"], DTYPE_BYTES[spec["dtype"]]
    tokens = sum(
        HARNESS_TASK_TOKENS.get(task["name"], HARNESS_DEFAULT_TOKENS)
        for task in spec["lm_eval"].get("harness_tasks") or []
    )
    if spec["tasks"] is not None and tasks_config:
        examples, words = tasks_config["eval_examples"], tasks_config["words"]
        tokens += sum(
            examples.get(kind, 0) * LOCAL_TASK_CHOICES * (tasks_config["context_tokens"] + 2 * words.get(kind, 1))
            for kind in tasks_config["kinds"]
        )  # fmt: skip
    models = 1 + len(spec["finetuned"])
    context = _context(LM_EVAL_CONTEXT, shape)
    rows = spec["lm_eval"]["batch_size"] * context
    return Work(
        flops={("lm_eval", dtype): models * tokens * forward_flops(shape, context)},
        phases=[
            Phase(
                "lm-eval",
                split={"weights": shape.parameters * b},
                fixed={
                    "batch": _inference_batch(shape, rows, b),
                    "logits": rows * shape.vocab_size * 8,
                },
            )
        ],  # fmt: skip
        weights=shape.parameters * b,
        weights_what=_what(name, shape, dtype),
        host=shape.weight_bytes(),
        disk=0,
    )


def host_copy_work(name: str, spec: dict, shape: Shape, copies: int, download: float) -> Work:
    """A CPU job that loads a model and writes `copies` folders of it (export_pruned: the pruned
    variants; convert_gguf: the dequantized model)."""
    dtype = spec.get("dtype") or shape.dtype
    weights = shape.parameters * DTYPE_BYTES[dtype]
    return Work(
        flops={},
        phases=[Phase("copy", split={"weights": weights})],
        weights=weights,
        weights_what=_what(name, shape, dtype),
        host=weights,  # the loaded model + the copy being written
        disk=download + copies * weights,
    )
