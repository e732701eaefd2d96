"""The cost of one train_toy job (depthlab.stages.toy.teacher_student: one teacher kind, one
temperature, every replicate and student depth), for the plan's GPU-hour estimate.

Two terms, both stated in the plan's assumptions line:
- FLOPs: per step, the teacher's forward pass (shared by every student) and each student's
  forward and backward pass, 2 and 6 x parameters x batch;
- kernel launches: the toy models are tiny (width 32 in config/paper.yaml), so a step's time is
  its kernel launches, not its FLOPs: KERNELS_PER_TRAINED_LAYER per student layer (forward,
  backward, Adam) and KERNELS_PER_FORWARD_LAYER per teacher layer, at LAUNCH_SECONDS each. These
  are counts of the ops of a residual ReLU^2 MLP block (two linears, the activation, the residual
  add, their gradients and Adam's per-tensor updates) and a typical CUDA launch latency, not a
  measurement of this code on a GPU.
"""

from __future__ import annotations

KERNELS_PER_TRAINED_LAYER = 16
KERNELS_PER_FORWARD_LAYER = 4
LAUNCH_SECONDS = 10e-6


def block_parameters(settings: dict) -> int:
    """One residual block: fc_in (width x hidden + bias), fc_out (hidden x width)."""
    width, hidden = settings["width"], settings["hidden"]
    return width * hidden + hidden + hidden * width


def head_parameters(settings: dict) -> int:
    return settings["width"] * settings["output_size"]


def toy_job_seconds(settings: dict, flops_per_second: float) -> tuple[float, float]:
    """(FLOPs, estimated seconds) of one train_toy job: its replicates x steps, each step the
    teacher's forward and every student depth's training step."""
    batch, steps = settings["batch_size"], settings["steps"]
    depths, teacher_layers = settings["student_depths"], settings["teacher_layers"]
    block, head = block_parameters(settings), head_parameters(settings)
    teacher = 2 * (teacher_layers * block + head) * batch
    students = sum(6 * (depth * block + head) * batch for depth in depths)
    runs = settings["replicates"] * steps
    flops = runs * (teacher + students)
    launches = runs * (
        KERNELS_PER_FORWARD_LAYER * teacher_layers + KERNELS_PER_TRAINED_LAYER * sum(depths)
    )
    return flops, flops / flops_per_second + launches * LAUNCH_SECONDS


def estimate_toy_job(plan, spec: dict, assumptions) -> None:
    """A train_toy job's FLOPs and, with a GPU stated, its wall time (depthlab.plan.toy_costs):
    its request stays the stage's, the estimate says whether that request holds it."""
    gpus = plan.request.get("gpu", 0)
    rate = assumptions.flops_per_second("float32", "training") if assumptions is not None else 1.0
    plan.flops, seconds = toy_job_seconds(spec["settings"], rate)
    if assumptions is None or not gpus:
        return
    plan.wall_hours = assumptions.sizing["startup_minutes"] / 60 + seconds / 3600
    plan.gpu_hours = gpus * plan.wall_hours
    if plan.wall_hours * 60 > plan.request["runtime"]:
        plan.notes.append(
            f"estimated {plan.wall_hours:,.1f} h, over its time limit of "
            f"{plan.request['runtime'] / 60:,.1f} h (resources.toy.runtime)"
        )
