"""Teacher-student toy residual networks of Liu et al. (2026), "Inverse Depth Scaling From Most
Layers Being Similar".

A residual MLP network h <- h + MLP(rmsnorm(h)), MLP = W_out relu(W_in x + b)^2, reads
Gaussian inputs and ends in rmsnorm and a linear head. A deep *teacher* (output projections
scaled by 1/sqrt(L)) has either independent layers or one layer tied across depth (a smooth,
ODE-like map). Students of several depths (output projections zeroed at init) learn the
teacher's tempered distribution softmax(logits / T) by KL divergence on fresh Gaussian inputs
every step (infinite data). The paper's finding: loss ~ 1/l (ensemble averaging) against
independent teachers, ~ 1/l^3 against tied ones once converged.

Three training protocols (`toy.protocol`):
  embedding  this project's first version: inputs pass through a frozen square Gaussian matrix
             shared by teacher and students (not a rotation: its condition number is large), the
             students' head starts at zero and trains, constant lr.
  released   Liu et al.'s released toy code (exp-9 / exp-9-1): the input is rmsnorm(x), x an
             isotropic Gaussian of dimension width; head as above; constant lr.
  converged  their longer runs (exp-9-3): rmsnorm(x) inputs; the student reads out through the
             teacher's fixed Gaussian head (never trained) at the same temperature; Adam lr
             lr/sqrt(student depth), constant, then linear decay to a tenth over the last 20%
             of steps.

The depth-exponent fits of the trained students are in `toy_fit.py`, the figure in
`toy_plots.py`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from depthlab.core.devices import resolve_device

TEACHER_KINDS = ("independent", "tied")
PROTOCOLS = ("embedding", "released", "converged")
# converged protocol: the last DECAY_FRACTION of steps decay the lr linearly to FINAL_LR_FRACTION
DECAY_FRACTION = 0.2
FINAL_LR_FRACTION = 0.1


def check_protocol(protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"toy.protocol: '{protocol}' is not one of {', '.join(PROTOCOLS)}")


def converged_lr_factor(step: int, steps: int) -> float:
    """lr multiplier of the converged protocol at `step` (0-based) of `steps`: 1 while
    step < (1 - DECAY_FRACTION) * steps, then linear towards FINAL_LR_FRACTION at `steps`."""
    if step < (1 - DECAY_FRACTION) * steps:
        return 1.0
    remaining = (steps - step) / (DECAY_FRACTION * steps)
    return FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * remaining


@dataclasses.dataclass(frozen=True)
class ToyShape:
    width: int
    hidden: int
    input_size: int
    output_size: int


def rmsnorm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


class ToyMLP(nn.Module):
    def __init__(self, shape: ToyShape):
        super().__init__()
        self.fc_in = nn.Linear(shape.width, shape.hidden, bias=True)
        self.fc_out = nn.Linear(shape.hidden, shape.width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.relu(self.fc_in(x)) ** 2)  # ReLU^2


class ToyBlock(nn.Module):
    def __init__(self, shape: ToyShape):
        super().__init__()
        self.mlp = ToyMLP(shape)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mlp(rmsnorm(h))


class ToyResNet(nn.Module):
    """[Embedding (frozen buffer)] -> rmsnorm -> residual MLP blocks -> rmsnorm -> linear head.
    Without an embedding (None) the inputs have dimension width and enter through rmsnorm."""

    def __init__(
        self, shape: ToyShape, depth: int, embedding: torch.Tensor | None, tied: bool = False
    ):
        super().__init__()
        self.shape = shape
        self.register_buffer("embedding", None if embedding is None else embedding.clone())
        if tied:  # one block reused at every depth: the same parameters, listed once
            block = ToyBlock(shape)
            self.layers = nn.ModuleList([block] * depth)
        else:
            self.layers = nn.ModuleList(ToyBlock(shape) for _ in range(depth))
        self.head = nn.Linear(shape.width, shape.output_size, bias=False)

    @property
    def depth(self) -> int:
        return len(self.layers)

    def forward(self, inputs: torch.Tensor, temperature: float = 1.0, return_hidden: bool = False):
        h = rmsnorm(inputs if self.embedding is None else inputs @ self.embedding)
        hidden = [h]
        for layer in self.layers:
            h = layer(h)
            if return_hidden:
                hidden.append(h)
        logits = self.head(rmsnorm(h)) / temperature
        return (logits, hidden) if return_hidden else logits


def make_embedding(shape: ToyShape, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape.input_size, shape.width, generator=generator) / math.sqrt(
        shape.input_size
    )


def build_teacher(
    shape: ToyShape, depth: int, kind: str, seed: int, protocol: str = "embedding"
) -> ToyResNet:
    """A random teacher; output projections scaled by 1/sqrt(depth) keep the stream O(1). In the
    converged protocol its head is Gaussian with variance 1/width, the readout students share."""
    if kind not in TEACHER_KINDS:
        raise ValueError(f"teacher kind '{kind}' is not one of {', '.join(TEACHER_KINDS)}")
    check_protocol(protocol)
    if protocol != "embedding" and shape.input_size != shape.width:
        raise ValueError(
            f"toy.input_size: {shape.input_size} must equal toy.width "
            f"({shape.width}) in the {protocol} protocol (inputs are rmsnorm(x))"
        )
    generator = torch.Generator().manual_seed(seed)
    embedding = make_embedding(shape, generator) if protocol == "embedding" else None
    with torch.random.fork_rng(devices=[]):  # seeded init without touching the global RNG
        torch.manual_seed(seed)
        teacher = ToyResNet(shape, depth, embedding, tied=kind == "tied")
    with torch.no_grad():
        for block in dict.fromkeys(teacher.layers):  # each distinct block once
            block.mlp.fc_out.weight.mul_(1.0 / math.sqrt(depth))
        if protocol == "converged":
            teacher.head.weight.copy_(
                torch.randn(shape.output_size, shape.width, generator=generator)
                / math.sqrt(shape.width)
            )
    teacher.requires_grad_(False)
    return teacher.eval()


def build_student(
    shape: ToyShape, depth: int, teacher: ToyResNet, seed: int, protocol: str = "embedding"
) -> ToyResNet:
    """A student reading the teacher's inputs (its embedding, if any); output projections start
    at zero (the stream starts as the input). Its head starts at zero and trains, or in the
    converged protocol is a frozen copy of the teacher's."""
    check_protocol(protocol)
    embedding = None if teacher.embedding is None else teacher.embedding.cpu()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        student = ToyResNet(shape, depth, embedding, tied=False)
    with torch.no_grad():
        for block in student.layers:
            block.mlp.fc_out.weight.zero_()
        if protocol == "converged":
            student.head.weight.copy_(teacher.head.weight)
            student.head.requires_grad_(False)
        else:
            student.head.weight.zero_()
    return student


def successive_update_angles(hidden: list[torch.Tensor]) -> np.ndarray:
    """Mean angle (degrees) between successive residual updates dh_l = h_{l+1} - h_l and dh_{l+1},
    per pair of adjacent layers, averaged over samples: one value per l = 0..L-2. Smooth (tied)
    dynamics give small angles; independent layers give near-orthogonal updates."""
    states = torch.stack([h.double() for h in hidden])  # (L+1, B, width)
    updates = states[1:] - states[:-1]  # (L, B, width)
    if updates.shape[0] < 2:
        return np.array([])
    cos = F.cosine_similarity(updates[:-1], updates[1:], dim=-1, eps=1e-30)
    angles = torch.rad2deg(torch.arccos(cos.clamp(-1.0, 1.0)))
    return angles.mean(dim=1).cpu().numpy()


def kl_to_teacher(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(p_teacher || p_student), mean over the batch."""
    return F.kl_div(
        F.log_softmax(student_logits, -1),
        F.log_softmax(teacher_logits, -1),
        reduction="batchmean",
        log_target=True,
    )


def student_temperature(temperature: float, protocol: str) -> float:
    """The temperature of the student's own logits: a student with the teacher's fixed head
    (converged protocol) reads out at the teacher's temperature; a trained head absorbs it."""
    return temperature if protocol == "converged" else 1.0


@torch.no_grad()
def evaluate(
    student: ToyResNet,
    teacher: ToyResNet,
    temperature: float,
    batches: int,
    batch_size: int,
    seed: int,
    protocol: str = "embedding",
) -> float:
    generator = torch.Generator().manual_seed(seed)
    device = teacher.head.weight.device
    own = student_temperature(temperature, protocol)
    total = 0.0
    for _ in range(batches):
        inputs = torch.randn(batch_size, teacher.shape.input_size, generator=generator)
        inputs = inputs.to(device)
        total += kl_to_teacher(student(inputs, own), teacher(inputs, temperature)).item()
    return total / batches


def make_optimizer(student: ToyResNet, lr: float, steps: int, protocol: str):
    """Adam on the student's trainable parameters and its lr schedule (None: constant lr). The
    converged protocol starts at lr/sqrt(depth); call schedule.step() after each step."""
    trainable = [p for p in student.parameters() if p.requires_grad]
    if protocol != "converged":
        return torch.optim.Adam(trainable, lr=lr), None
    optimizer = torch.optim.Adam(trainable, lr=lr / math.sqrt(student.depth))
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: converged_lr_factor(step, steps)
    )


def train_students(
    teacher: ToyResNet,
    depths,
    temperatures,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    eval_batches: int,
    eval_seed: int,
    temperature_offset: int = 0,
    protocol: str = "embedding",
) -> list[dict]:
    """Adam on KL to the teacher's tempered output, fresh Gaussian inputs each step.

    All students (temperature x depth) train in lockstep on the same input stream, so the
    teacher's forward pass is computed once per step and shared; each student has its own init
    seed and optimizer, so the result equals training them one after another on that stream.
    In the converged protocol each student's lr is lr/sqrt(depth) under converged_lr_factor.
    """
    check_protocol(protocol)
    device = teacher.head.weight.device
    runs = []
    for t_index, temperature in enumerate(temperatures, start=temperature_offset):
        for depth in depths:
            student = build_student(
                teacher.shape, depth, teacher, seed * 1000 + t_index * 100 + depth, protocol
            ).to(device)
            optimizer, schedule = make_optimizer(student, lr, steps, protocol)
            runs.append(
                {
                    "temperature": temperature,
                    "depth": depth,
                    "student": student,
                    "optimizer": optimizer,
                    "schedule": schedule,
                    "losses": [],
                    "own_temperature": student_temperature(temperature, protocol),
                }
            )
    # One input stream shared by every student: it depends only on `seed`, so a job that trains
    # one temperature reproduces that slice of a job that trains all of them.
    generator = torch.Generator().manual_seed(seed)
    for step in range(steps):
        inputs = torch.randn(batch_size, teacher.shape.input_size, generator=generator)
        inputs = inputs.to(device)
        with torch.no_grad():
            teacher_logits = teacher(inputs)
        for run in runs:
            loss = kl_to_teacher(
                run["student"](inputs, run["own_temperature"]), teacher_logits / run["temperature"]
            )
            run["optimizer"].zero_grad(set_to_none=True)
            loss.backward()
            run["optimizer"].step()
            if run["schedule"] is not None:
                run["schedule"].step()
            run["losses"].append(loss.detach())  # no per-step host sync on a GPU
        if step % 100 == 99 or step == steps - 1:
            for run in runs:
                if not torch.isfinite(run["losses"][-1]):
                    raise FloatingPointError(
                        f"student depth {run['depth']}, temperature {run['temperature']}: "
                        f"loss became {run['losses'][-1].item()}; lower toy.lr"
                    )
    results = []
    probe = torch.randn(
        batch_size, teacher.shape.input_size, generator=torch.Generator().manual_seed(eval_seed + 1)
    ).to(device)
    for run in runs:
        student = run["student"]
        test_loss = evaluate(
            student, teacher, run["temperature"], eval_batches, batch_size, eval_seed, protocol
        )
        with torch.no_grad():
            _, hidden = student(probe, return_hidden=True)
        angles = successive_update_angles(hidden)
        tail = torch.stack(run["losses"][-max(1, steps // 10) :]).cpu().numpy()
        results.append(
            {
                "temperature": run["temperature"],
                "student_depth": run["depth"],
                "test_loss": test_loss,
                "final_train_loss": float(np.mean(tail)),
                "student_angle_deg": float(angles.mean()) if len(angles) else float("nan"),
            }
        )
    return results


def toy_shape(settings: dict) -> ToyShape:
    return ToyShape(
        width=settings["width"],
        hidden=settings["hidden"],
        input_size=settings.get("input_size") or settings["width"],
        output_size=settings["output_size"],
    )


def run_teacher_kind(
    kind: str, settings: dict, seed: int, log=print, temperature_index: int | None = None
) -> tuple[pd.DataFrame, dict]:
    """Train every student (replicate x temperature x depth) against one teacher kind, or only
    the temperatures[temperature_index] students (same teacher, same streams: a slice of the
    full run). Returns the losses frame and the teacher's successive-update angle statistic."""
    shape = toy_shape(settings)
    # the grid arrives expanded (depthlab.config.temperature_grid)
    temperatures = [float(t) for t in settings["temperatures"]]
    protocol = settings.get("protocol", "embedding")
    check_protocol(protocol)
    if not temperatures or min(temperatures) <= 0:
        raise ValueError(f"toy.temperatures: {settings['temperatures']} must be positive numbers")
    offset = 0
    if temperature_index is not None:
        if not 0 <= temperature_index < len(temperatures):
            raise ValueError(
                f"temperature index {temperature_index} outside the "
                f"{len(temperatures)} configured temperatures"
            )
        temperatures, offset = [temperatures[temperature_index]], temperature_index
    device = torch.device(resolve_device(settings.get("device", "auto")))
    rows, teachers = [], []
    kind_index = TEACHER_KINDS.index(kind)
    for replicate in range(settings["replicates"]):
        teacher_seed = seed * 10_000 + replicate * 100 + kind_index
        teacher = build_teacher(shape, settings["teacher_layers"], kind, teacher_seed, protocol).to(
            device
        )
        with torch.no_grad():
            probe = torch.randn(
                settings["angle_samples"],
                shape.input_size,
                generator=torch.Generator().manual_seed(teacher_seed + 7),
            )
            probe = probe.to(device)
            _, hidden = teacher(probe, return_hidden=True)
        per_layer = successive_update_angles(hidden)
        teachers.append(
            {
                "replicate": replicate,
                "seed": teacher_seed,
                "mean_angle_deg": float(per_layer.mean()),
                "angle_deg_per_layer": per_layer.tolist(),
            }
        )
        for out in train_students(
            teacher,
            settings["student_depths"],
            temperatures,
            settings["steps"],
            settings["batch_size"],
            settings["lr"],
            teacher_seed,
            settings["eval_batches"],
            teacher_seed + 13,
            temperature_offset=offset,
            protocol=protocol,
        ):
            rows.append({"teacher_kind": kind, "replicate": replicate, **out})
            log(
                f"[toy {kind}] replicate {replicate} T={out['temperature']:.4g} depth "
                f"{out['student_depth']}: test KL {out['test_loss']:.4g}"
            )
    angles = {
        "teacher_kind": kind,
        "teacher_layers": settings["teacher_layers"],
        "protocol": protocol,
        "mean_angle_deg": float(np.mean([t["mean_angle_deg"] for t in teachers])),
        "replicates": teachers,
    }
    return pd.DataFrame(rows), angles
