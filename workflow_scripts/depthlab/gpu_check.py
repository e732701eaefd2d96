"""The check a cluster user runs on one GPU node before the big run (workflow_scripts/gpu_check.py).

On the node's first GPU it
  1. runs config/test.yaml's whole DAG on the GPU into results/gpu_check/ (Snakemake, every
     stage's device cuda, pretraining in precision auto);
  2. measures the device's dense matmul rates (bf16, fp32 without TF32, fp64) and training
     throughput, depthlab's loop against a plain transformers loop
     (depthlab.stages.pretrain.throughput), at the Curse-of-Depth 130M shape (every norm scheme)
     and the 1B shape, in pure_bf16 and bf16, with each run's share of the measured bf16 peak;
  3. measures the FLOP rate of each job family the plan prices apart
     (depthlab.plan.job_costs.UTILISATION_FAMILIES), counted with the plan's own FLOP model, at
     the 1B shape: training (the row above), analysis (a forward pass keeping every layer's
     states), lm_eval (lm-eval's scoring: a forward pass and float32 log-softmax at lm-eval's
     batch, half the plan's context), healing (QLoRA steps through the healing stage's code);
     their shares of the bf16 peak are what `plan.py --calibrate` writes;
  4. runs one analysis on the GPU and the same in float64 on the CPU and reports the largest
     difference of the angular distances, and whether each n picks the same block;
  5. runs the tests marked `cuda` (pytest -m cuda);
and writes gpu_check.json and gpu_check.md (GPU, driver, CUDA, torch and package versions, CPU,
date, commit) and prints one table.

Without a GPU it says so and runs the same checks at tiny shapes, with a narrowed DAG (one
model's analysis and what it needs); that run is its CI smoke test. Its shares describe a CPU:
`plan.py --calibrate` refuses them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from depthlab.core import norm_schemes

RUN_NAME = "gpu_check"
# The stages whose device the DAG sets to cuda (config/test.yaml pins cpu)
DEVICE_SECTIONS = ("toy", "analysis", "lens_swaps", "pruning", "depth_use", "finetune")
# Every scheme of the registry, Pre-LN and LNS first (the pair timed before a budget cuts)
NORM_SCHEMES = ("pre_ln", "lns", *(s for s in norm_schemes.names() if s not in ("pre_ln", "lns")))
PACKAGES = ("torch", "transformers", "peft", "bitsandbytes", "accelerate", "lm_eval", "snakemake")
LM_EVAL_BATCH = 32


@dataclass
class Sizes:
    """What one run measures: GPU sizes, or the tiny ones of a machine without a GPU."""

    cuda: bool
    training_shape: str  # 130M-like shape, every norm scheme
    large_shape: str  # the families' shape
    precisions: tuple
    warmup: int
    steps: int
    family_steps: int
    norm_schemes: tuple = NORM_SCHEMES
    notes: list = field(default_factory=list)

    @classmethod
    def for_device(cls, cuda: bool) -> Sizes:
        if cuda:
            return cls(True, "cod_130m", "1b", ("pure_bf16", "bf16"), warmup=8, steps=30,
                       family_steps=10)  # fmt: skip
        # a CPU: tiny shapes, fp32 and pure_bf16 (bf16 autocast adds nothing at this size),
        # two norm schemes (the loop is the same for all; the GPU run times every scheme)
        return cls(False, "tiny", "tiny", ("pure_bf16",), warmup=2, steps=4, family_steps=3,
                   norm_schemes=("pre_ln", "lns"))  # fmt: skip


# --- the machine -----------------------------------------------------------------------------


def _run(command: list[str], cwd=None) -> str:
    try:
        return subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts(root: Path) -> dict:
    """The device, versions, CPU, date and commit a result belongs to."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = version(package.replace("_", "-"))
        except PackageNotFoundError:
            versions[package] = None
    versions["cuda"] = torch.version.cuda
    versions["python"] = platform.python_version()
    cuda = torch.cuda.is_available()
    device = {"type": "cuda" if cuda else "cpu", "count": torch.cuda.device_count() if cuda else 0}
    if cuda:
        properties = torch.cuda.get_device_properties(0)
        device["name"] = properties.name
        device["memory_gb"] = round(properties.total_memory / 2**30, 1)
        device["capability"] = f"{properties.major}.{properties.minor}"
        device["driver"] = _run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"]
        )
    else:
        device["name"] = cpu_model()
    # DEPTHLAB_COMMIT: a checkout copied to the node (without .git, or with a stale one) names
    # the commit its files are
    commit = os.environ.get("DEPTHLAB_COMMIT", "") or _run(["git", "rev-parse", "HEAD"], cwd=root)
    dirty = "DEPTHLAB_COMMIT" not in os.environ and bool(
        _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    )
    return {
        "device": device,
        "versions": versions,
        "cpu": {"model": cpu_model(), "cores": os.cpu_count()},
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": (commit[:12] + ("+dirty" if dirty else "")) if commit else "unknown",
    }


# --- 1. the test config's DAG -----------------------------------------------------------------


def dag_command(root: Path, cuda: bool, cores: int) -> tuple[list[str], str]:
    """The Snakemake command of step 1 and what it runs."""
    overrides = [f"run_name={RUN_NAME}"]
    target = []
    if cuda:
        from depthlab.config import load_config

        sections = load_config(root / "config" / "test.yaml")
        overrides += ["pretrain={precision: auto}"]
        overrides += [f"{s}={{device: cuda}}" for s in DEVICE_SECTIONS if s in sections]
        what = "config/test.yaml's whole DAG on the GPU"
    else:
        target = [f"results/{RUN_NAME}/analysis/val/pre_ln"]
        what = (
            "no GPU: a narrowed DAG of config/test.yaml (data, one model's pretraining and its "
            "analysis) on the CPU; on a GPU the whole DAG runs"
        )
    # `python -m snakemake`: a node may have the package without its launcher beside the
    # interpreter (installed with pip --target); the rules' jobs run under this same `python`
    # --forceall: every job runs on this node, also where an earlier check left its outputs
    command = [sys.executable, "-m", "snakemake", *target, "--configfile=config/test.yaml"]
    command += ["--cores", str(cores)]
    command += ["--forceall"]
    command += ["--config", *overrides]
    return command, what


def filter_config(root: Path, cuda: bool) -> dict:
    """config/test.yaml with the DAG's overrides, resolved (the check reads its job specs)."""
    from depthlab.config import apply_overrides, load_config

    overrides = {"run_name": RUN_NAME}
    config = apply_overrides(load_config(root / "config" / "test.yaml"), overrides)
    if cuda:
        config["pretrain"]["precision"] = "auto"
        for section in DEVICE_SECTIONS:
            if section in config:
                config[section]["device"] = "cuda"
    return config


def run_dag(root: Path, cuda: bool, cores: int, log) -> dict:
    command, what = dag_command(root, cuda, cores)
    log(f"[1/5] {what}")
    start = time.perf_counter()
    # the jobs' `python` is this interpreter (a node's PATH may name another, or none)
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")])}  # fmt: skip
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    text = result.stdout + result.stderr
    done = [line for line in text.splitlines() if "steps (100%) done" in line]
    summary = {
        "what": what,
        "command": " ".join(["snakemake", *command[3:]]),
        "returncode": result.returncode,
        "seconds": round(seconds, 1),
        "done": done[-1].strip() if done else "",
    }
    if result.returncode != 0:
        summary["tail"] = text[-3000:]
    return summary


# --- 2-3. throughput and the families ---------------------------------------------------------


def plan_shape(arch: dict, vocab_size: int, seq_len: int):
    from depthlab.plan.model_shapes import pretrain_shape

    return pretrain_shape(arch, vocab_size, seq_len, "bfloat16")


def plan_training_flops(arch: dict, vocab_size: int, seq_len: int) -> float:
    """Training FLOPs per token as the plan counts them (3 forward passes)."""
    from depthlab.plan.job_costs import forward_flops

    return 3 * forward_flops(plan_shape(arch, vocab_size, seq_len), seq_len)


def peaks(device) -> dict:
    import torch

    from depthlab.stages.pretrain.throughput import matmul_peak_tflops

    # fp32 without TF32, as the plan's fp32 peak (cluster.gpu.fp32_tflops)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        size = None if device.type == "cuda" else 512
        return {
            "bf16_tflops": matmul_peak_tflops(device, torch.bfloat16, size=size),
            "fp32_tflops": matmul_peak_tflops(device, torch.float32, size=size),
            "fp64_tflops": matmul_peak_tflops(device, torch.float64, size=size),
        }
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def throughput_plan(sizes: Sizes) -> list[dict]:
    """The training runs, in the order a time budget should cut them last: first what the
    calibration and the speed targets need (the 130M shape's plain loop and depthlab Pre-LN, then
    the 1B shape's, whose depthlab row is the `training` family's share), then LNS at 130M, then
    bf16 autocast, then the other norm schemes. Each compiled run compiles afresh (30-100 s on an
    H200), so the cheap rows come first."""
    first, *rest = sizes.precisions
    shapes = tuple(dict.fromkeys((sizes.training_shape, sizes.large_shape)))

    def run(shape, loop, scheme, precision):
        return {"shape": shape, "loop": loop, "norm_scheme": scheme, "precision": precision}

    runs = [run(shape, loop, "pre_ln", first) for shape in shapes for loop in ("plain", "depthlab")]
    runs += [run(sizes.training_shape, "depthlab", s, first) for s in sizes.norm_schemes[1:2]]
    for precision in rest:
        runs += [run(shape, loop, "pre_ln", precision) for shape in shapes
                 for loop in ("plain", "depthlab")]  # fmt: skip
        runs += [
            run(sizes.training_shape, "depthlab", s, precision) for s in sizes.norm_schemes[1:2]
        ]
    for precision in sizes.precisions:
        runs += [
            run(sizes.training_shape, "depthlab", s, precision) for s in sizes.norm_schemes[2:]
        ]
    return runs


def measure_throughput(device, sizes: Sizes, peak: float, deadline: float, log) -> list[dict]:
    from depthlab.stages.pretrain.throughput import SHAPES, measure_training

    rows = []
    for run in throughput_plan(sizes):
        if time.perf_counter() > deadline:
            rows.append({**run, "skipped": "time budget"})
            continue
        shape = SHAPES[run["shape"]]
        result = measure_training(
            run["loop"], norm_scheme=run["norm_scheme"], arch=shape["arch"],
            batch_size=shape["batch_size"], seq_len=shape["seq_len"],
            vocab_size=shape["vocab_size"], precision=run["precision"], device=device,
            steps=sizes.steps, warmup=sizes.warmup, compile="auto",
        )  # fmt: skip
        flops = plan_training_flops(shape["arch"], shape["vocab_size"], shape["seq_len"])
        row = {
            **run,
            "tokens_per_s": result["tokens_per_s"],
            "compiled": result["compiled"],
            "compile_s": result["compile_s"],
            "final_loss": result["final_loss"],
            "share_of_peak": result["tokens_per_s"] * flops / (peak * 1e12),
        }
        rows.append(row)
        log(
            f"  {run['shape']} {run['loop']} {run['norm_scheme']} {run['precision']}: "
            f"{row['tokens_per_s']:,.0f} tokens/s, {row['share_of_peak']:.3f} of the peak"
            + (f", compiled in {row['compile_s']:.1f} s" if row["compiled"] else "")
        )
    plain = {
        (r["shape"], r["precision"]): r["tokens_per_s"]
        for r in rows
        if r["loop"] == "plain" and "tokens_per_s" in r
    }
    for row in rows:
        base = plain.get((row["shape"], row["precision"]))
        if "tokens_per_s" in row and base:
            row["vs_plain"] = row["tokens_per_s"] / base
    return rows


def _timed(device, step, repeats: int) -> float:
    """Seconds per call of `step` after one untimed call."""
    from depthlab.stages.pretrain.throughput import synchronize

    step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / repeats


def _family_model(shape: dict, device, dtype):
    """A randomly initialised depthlab model of `shape` (the measured rates do not depend on
    the weights' values)."""
    import torch

    from depthlab.models.decoders import build_model, make_config

    config = make_config(
        shape["arch"], "pre_ln", vocab_size=shape["vocab_size"], max_positions=1024
    )
    with torch.device(device):  # built where it runs: a 1B model's CPU init takes a while
        return build_model(config, seed=0).to(dtype=dtype).eval()


def measure_families(device, sizes: Sizes, peak: float, training_rows: list, log) -> dict:
    """Each family's FLOP rate (the plan's FLOP model) and share of the bf16 peak."""
    import numpy as np
    import torch

    from depthlab.plan.job_costs import LM_EVAL_CONTEXT, forward_flops
    from depthlab.settings.training import HealSettings
    from depthlab.stages.pretrain.throughput import SHAPES
    from depthlab.stages.pruning.healing import heal

    shape = SHAPES[sizes.large_shape]
    arch, vocab, seq = shape["arch"], shape["vocab_size"], shape["seq_len"]
    dtype = torch.bfloat16
    families = {}
    training = [
        r
        for r in training_rows
        if r["shape"] == sizes.large_shape and r["loop"] == "depthlab" and "tokens_per_s" in r
        and r["norm_scheme"] == "pre_ln"
    ]  # fmt: skip
    if training:
        best = max(training, key=lambda r: r["tokens_per_s"])
        families["training"] = {
            "what": f"depthlab pretraining, {sizes.large_shape} shape, {best['precision']}",
            "tflops": best["share_of_peak"] * peak,
        }
    model = _family_model(shape, device, dtype)
    generator = torch.Generator().manual_seed(0)
    rows = shape["batch_size"] if device.type == "cuda" else 4
    ids = torch.randint(0, vocab, (rows, seq), generator=generator).to(device)

    def forward():
        with torch.no_grad():
            model(input_ids=ids, output_hidden_states=True)

    seconds = _timed(device, forward, sizes.family_steps)
    families["analysis"] = {
        "what": f"forward pass keeping every layer's states, {rows} x {seq} tokens, bf16",
        "tflops": rows * seq * forward_flops(plan_shape(arch, vocab, seq), seq) / seconds / 1e12,
    }
    context = LM_EVAL_CONTEXT // 2 if device.type == "cuda" else seq
    lm_rows = LM_EVAL_BATCH if device.type == "cuda" else 4
    lm_ids = torch.randint(0, vocab, (lm_rows, context), generator=generator).to(device)

    def score():
        with torch.no_grad():
            logits = model(input_ids=lm_ids).logits
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            logprobs.gather(-1, lm_ids.unsqueeze(-1)).sum()

    seconds = _timed(device, score, sizes.family_steps)
    families["lm_eval"] = {
        "what": f"lm-eval's scoring: forward + float32 log-softmax, {lm_rows} x {context} tokens",
        "tflops": lm_rows * context * forward_flops(plan_shape(arch, vocab, context), context)
        / seconds / 1e12,
    }  # fmt: skip
    heal_rows = max(1, rows // 4)
    settings = HealSettings(
        method="qlora", rank=16, alpha=32, dropout=0.0,
        target_modules=("gate_proj", "up_proj", "down_proj"), steps=sizes.family_steps,
        batch_size=heal_rows, seq_len=seq, lr=1e-4, warmup_steps=1, min_lr_ratio=0.1,
        schedule="cosine", weight_decay=0.0,
    )  # fmt: skip
    tokens = np.random.default_rng(0).integers(0, vocab, 1 << 16).astype(np.int32)
    heal(
        _family_model(shape, device, dtype).train(), tokens, _steps(settings, 1), 0, str(device)
    )  # fmt: skip  (untimed: bitsandbytes' kernels and the allocator warm up)
    _, record = heal(_family_model(shape, device, dtype).train(), tokens, settings, 0, str(device))
    heal_flops = 2 * forward_flops(plan_shape(arch, vocab, seq), seq)  # the plan's QLoRA count
    families["healing"] = {
        "what": f"QLoRA (heal_pruned's code), {heal_rows} x {seq} tokens a step, rank 16 on the MLP",
        "tflops": settings.steps * heal_rows * seq * heal_flops / record["train_seconds"] / 1e12,
        "loss": [record["first_train_loss"], record["last_train_loss"]],
    }
    for name, family in families.items():
        family["share_of_peak"] = family["tflops"] / peak
        log(f"  {name}: {family['tflops']:.3g} TFLOP/s = {family['share_of_peak']:.3f} of the peak")
    return families


def _steps(settings, steps: int):
    from dataclasses import replace

    return replace(settings, steps=steps)


# --- 4. GPU against float64 CPU -----------------------------------------------------------------


def analysis_agreement(root: Path, config: dict, device, scratch: Path) -> dict:
    """The DAG's first analysis job on `device` in float32 and on the CPU in float64: the
    largest difference of the last-token angular distances, and whether every n picks the same
    block (argmin over l of d(l, l+n))."""
    import numpy as np
    import pandas as pd

    from depthlab.config import resolve
    from depthlab.stages.analysis.stage import run

    jobs = resolve(config).jobs("analyse_model")
    name, spec = next(iter(jobs.items()))
    spec = {**spec, "model_path": str(root / spec["model_path"])}
    spec["texts"] = {
        **spec["texts"],
        **{k: str(root / v) for k, v in spec["texts"].items() if k in ("path", "input")},
    }
    matrices = {}
    for label, where, dtype in (("device", str(device), "float32"), ("cpu", "cpu", "float64")):
        out = scratch / f"analysis_{label}"
        run({**spec, "dtype": dtype, "device": where, "out": str(out)}, device=where,
            log=lambda message: None)  # fmt: skip
        matrices[label] = pd.read_csv(out / "angular_distance_last.csv", index_col=0).to_numpy()
    a, b = matrices["device"], matrices["cpu"]
    both = np.isfinite(a) & np.isfinite(b)
    same_block = all(
        np.nanargmin(np.diag(a, n)) == np.nanargmin(np.diag(b, n)) for n in range(1, a.shape[0] - 1)
    )
    return {
        "job": name,
        "device": f"{device} float32",
        "reference": "cpu float64",
        "max_abs_difference": float(np.max(np.abs(a[both] - b[both]))),
        "same_block_for_every_n": bool(same_block),
    }


# --- 5. the cuda-marked tests -------------------------------------------------------------------


def run_cuda_tests(root: Path, cuda: bool) -> dict:
    if not cuda:
        return {"skipped": "no GPU visible: the cuda-marked tests need one"}
    command = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
               "tests"]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(command, cwd=root, capture_output=True, text=True)
    lines = [line for line in result.stdout.strip().splitlines() if line.strip()]
    return {
        "command": "pytest -q -m cuda tests",
        "returncode": result.returncode,
        "summary": lines[-1] if lines else "",
        "seconds": round(time.perf_counter() - start, 1),
    }


# --- the whole check ------------------------------------------------------------------------------


def run_check(root: Path, out_dir: Path, *, budget_s: float, cores: int, skip_dag: bool = False,
              log=print) -> dict:  # fmt: skip
    """Every step above; writes out_dir/gpu_check.json and gpu_check.md and returns the record."""
    import tempfile

    import torch

    start = time.perf_counter()
    facts = machine_facts(root)
    cuda = facts["device"]["type"] == "cuda"
    sizes = Sizes.for_device(cuda)
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if not cuda:
        log("no GPU is visible: running the same checks at tiny shapes on the CPU (a smoke run)")
    record = {**facts, "sizes": {"training_shape": sizes.training_shape,
                                 "large_shape": sizes.large_shape, "steps": sizes.steps,
                                 "warmup": sizes.warmup}}  # fmt: skip
    config = filter_config(root, cuda)
    out_dir.mkdir(parents=True, exist_ok=True)

    def save(step: str) -> None:
        """The record so far (a check stopped by a time limit keeps what it measured)."""
        record["completed"] = step
        (out_dir / "gpu_check.json").write_text(json.dumps(record, indent=1, default=str) + "\n")

    if skip_dag:
        record["dag"] = {"skipped": "--skip-dag"}
    else:
        record["dag"] = run_dag(root, cuda, cores, log)
    save("dag")
    log("[2/5] matmul peaks and training throughput")
    record["peaks"] = peaks(device)
    peak = record["peaks"]["bf16_tflops"]
    log(f"  bf16 {peak:.4g} TFLOP/s, fp32 {record['peaks']['fp32_tflops']:.4g}, "
        f"fp64 {record['peaks']['fp64_tflops']:.4g}")  # fmt: skip
    deadline = time.perf_counter() + budget_s  # the throughput runs' own window
    record["throughput"] = measure_throughput(device, sizes, peak, deadline, log)
    save("throughput")
    log("[3/5] the job families' rates (the plan's utilisation)")
    record["families"] = measure_families(device, sizes, peak, record["throughput"], log)
    record["utilisation"] = {
        name: round(family["share_of_peak"], 4) for name, family in record["families"].items()
    }
    save("families")
    log("[4/5] one analysis on the device against float64 on the CPU")
    if record["dag"].get("returncode", 0) == 0 and not skip_dag:
        with tempfile.TemporaryDirectory() as scratch:
            record["analysis_check"] = analysis_agreement(root, config, device, Path(scratch))
    else:
        record["analysis_check"] = {"skipped": "the DAG did not run or failed"}
    save("analysis_check")
    log("[5/5] the tests marked cuda")
    record["cuda_tests"] = run_cuda_tests(root, cuda)
    record["seconds"] = round(time.perf_counter() - start, 1)
    save("all")
    (out_dir / "gpu_check.md").write_text(markdown(record))
    log(table(record))
    return record


# --- the outputs ----------------------------------------------------------------------------------


def _float(value, digits=3) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def table(record: dict) -> str:
    """One table: every measurement and check, a line each."""
    device = record["device"]
    lines = [
        f"| check | {device['name']} ({device['type']}) |",
        "|---|---|",
        f"| bf16 / fp32 / fp64 matmul peak (TFLOP/s) | {record['peaks']['bf16_tflops']:.4g} / "
        f"{record['peaks']['fp32_tflops']:.4g} / {record['peaks']['fp64_tflops']:.4g} |",
    ]
    dag = record["dag"]
    if "returncode" in dag:
        status = "ok" if dag["returncode"] == 0 else f"FAILED (exit {dag['returncode']})"
        lines.append(
            f"| test DAG ({dag['what']}) | {status}, {dag['seconds']:.0f} s {dag['done']} |"
        )
    else:
        lines.append(f"| test DAG | skipped: {dag['skipped']} |")
    for row in record["throughput"]:
        what = f"{row['shape']} {row['loop']} {row['norm_scheme']} {row['precision']}"
        if "skipped" in row:
            lines.append(f"| training {what} | skipped ({row['skipped']}) |")
            continue
        vs = (
            f", {row['vs_plain']:.2f}x plain"
            if "vs_plain" in row and row["loop"] != "plain"
            else ""
        )
        compiled = f", compile {row['compile_s']:.1f} s" if row["compiled"] else ""
        lines.append(
            f"| training {what} | {row['tokens_per_s']:,.0f} tokens/s{vs}, "
            f"{row['share_of_peak']:.3f} of the bf16 peak{compiled} |"
        )
    for name, family in record["families"].items():
        lines.append(
            f"| utilisation `{name}` ({family['what']}) | {family['share_of_peak']:.3f} "
            f"({family['tflops']:.3g} TFLOP/s) |"
        )
    check = record["analysis_check"]
    if "skipped" in check:
        lines.append(f"| analysis on the device vs float64 CPU | skipped: {check['skipped']} |")
    else:
        lines.append(
            f"| analysis {check['job']}: {check['device']} vs {check['reference']} | largest "
            f"difference {check['max_abs_difference']:.2e}; same block for every n: "
            f"{'yes' if check['same_block_for_every_n'] else 'NO'} |"
        )
    heal = record["families"].get("healing", {})
    if heal:
        lines.append(
            f"| QLoRA healing on {device['type']} | ran; loss {heal['loss'][0]:.3f} -> "
            f"{heal['loss'][1]:.3f} |"
        )
    tests = record["cuda_tests"]
    lines.append(f"| pytest -m cuda | {tests.get('skipped') or tests['summary']} |")
    lines.append(f"| whole check | {record['seconds']:.0f} s |")
    return "\n".join(lines) + "\n"


def markdown(record: dict) -> str:
    device, versions = record["device"], record["versions"]
    facts = [
        f"- device: {device['name']}"
        + (f", {device['memory_gb']} GB, compute capability {device['capability']}, driver "
           f"{device['driver'] or 'unknown'}" if device["type"] == "cuda" else " (no GPU visible)"),
        f"- CUDA {versions.get('cuda') or '(none)'}, "
        + ", ".join(f"{name} {versions.get(name)}" for name in ("python", *PACKAGES)),
        f"- CPU: {record['cpu']['model']}, {record['cpu']['cores']} cores",
        f"- date: {record['date']}; commit {record['commit']}",
    ]  # fmt: skip
    note = (
        "Made by `python workflow_scripts/gpu_check.py`. `utilisation` is each job family's "
        "measured FLOP rate (the plan's FLOP count) over the measured bf16 matmul peak; "
        "`plan.py CONFIG --calibrate gpu_check.json --write OVERLAY` prices the plan with them."
    )
    if device["type"] != "cuda":
        note += " No GPU was visible: tiny shapes on the CPU, a smoke run, not a measurement to plan with."
    return "# GPU check\n\n" + note + "\n\n" + "\n".join(facts) + "\n\n" + table(record)
