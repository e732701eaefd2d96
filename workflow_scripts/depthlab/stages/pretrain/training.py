"""Pretraining loop: AdamW, warmup + cosine, resumable, DDP under torchrun, HF checkpoint out.

Data order is a pure function of (seed, step): the batch of step s is drawn from
`np.random.default_rng([seed, s])`, so resuming needs only the step counter, and any number of
DDP ranks see the same global batch (each takes its rows). `train.document_layout` packed (the
default) takes random windows of the token stream; truncate_pad (the LNS reference code's layout)
takes random documents (the eos-separated runs of train.bin), each after a bos token, cut to
seq_len + 1 tokens and padded with IGNORE, which the loss skips (each micro-batch and rank
averages over its own real tokens; the logs' `tokens` count positions, padding included).

Precision: fp32; bf16 = autocast over fp32 weights; pure_bf16 = weights, gradients and AdamW
state in bf16 (no fp32 master copy), as the LNS reference code trains. With bf16 or pure_bf16 on
a CPU, attention runs as transformers' eager attention (bf16 matmuls, softmax in fp32) instead of
SDPA: the CPU's bf16 flash-attention backward is several times slower than its fp32 one at small
widths and ate the whole bf16 matmul gain (bench/bench_pretrain_throughput.py measures both). On
a GPU, SDPA stays (its bf16 kernels are the fast ones). The checkpoint is saved with the model's
default attention, so nothing downstream sees the choice. auto = bf16 where the device
multiplies bf16 natively (a GPU with bf16; a CPU whose oneDNN has bf16 kernels, AVX512-BF16 or
AMX), else fp32: an AVX2-only CPU emulates bf16 matmuls about 60x slower than fp32 ones. The
precision a run used is in its provenance record (config.precision_used).

At each evaluation the main rank also records, per decoder layer, the variance of the layer's
output over the validation tokens (the Curse-of-Depth quantity, pre-final-norm, like h_l in
docs/design.md) and the norm of the gradient of the step just taken (per layer and total) in
`layer_stats.csv`; at step 0 the variance of the initial model (no gradient yet). Progress and
TensorBoard and W&B scalars go through depthlab.core.tracking; event files are written to
`<state_dir>/tensorboard/` while training (resumed with the state) and moved into the model
folder with the checkpoint.

Speed on a GPU (`train.compile`, auto = on where CUDA is visible): the forward pass and the loss
are compiled with torch.compile (inductor fuses each norm scheme's scalings, LNS's 1/sqrt(l),
DeepNorm's alpha, into the surrounding kernels), compiled once before the first step so that the
compile time is reported apart from the training time (`compile_s` in the summary, the job's log
and provenance); under DDP the wrapper is compiled, as the PyTorch docs do it. AdamW is the fused
kernel on CUDA (on a CPU the default implementation stays, so CPU runs are unchanged). The
step's loss stays on the device; the loop reads losses only at its check steps
(depthlab.stages.train_loop).

The loop itself (steps, clipping, AdamW and schedule steps, logs, evaluation, the resumable
`<state_dir>/state.pt` and the run record) is depthlab.stages.train_loop's, shared with fine-tuning;
PretrainLoop adds pretraining's batches, DDP, gradient accumulation and layer statistics.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from transformers import AutoTokenizer

from depthlab.core.atomic_files import atomic_path, write_dataframe
from depthlab.core.devices import resolve_device
from depthlab.core.provenance import Provenance
from depthlab.core.tracking import Tracker
from depthlab.data import prepare as data_lib
from depthlab.models.decoders import build_model, make_config, save_checkpoint
from depthlab.stages.pretrain.batches import (  # noqa: F401 (re-exported)
    document_batch,
    document_bounds,
    document_rows,
    validation_batches,
)
from depthlab.stages.pretrain.settings import (  # noqa: F401 (re-exported)
    TrainSettings,
    evaluation_steps,
    lr_multiplier,
)
from depthlab.stages.train_loop import (  # noqa: F401 (re-exported)
    IGNORE,
    TrainingLoop,
    effective_precision,
    language_model_loss,
    make_optimizer,
    make_scheduler,
    run_fingerprint,
    save_state,
    train_batch,
    training_attention,
)

LAYER_STATS_COLUMNS = ["step", "tokens", "layer", "output_variance", "grad_norm", "total_grad_norm"]


def effective_compile(setting: bool | str, device: torch.device | str) -> bool:
    """Whether a run compiles its forward and loss: `auto` on CUDA only (on a CPU the compile
    costs 30-60 s, more than a toy model's whole training); true / false as declared."""
    if setting == "auto":
        return torch.device(device).type == "cuda"
    if not isinstance(setting, bool):
        raise ValueError(f"train.compile: {setting!r} is not one of auto, true, false")
    return setting


class LayerOutputVariance:
    """Context manager: hooks on decoder layers that accumulate, in float64, the variance of each
    layer's output over every element at the real (not padding) positions of the batches run
    inside it; `mask` is the current batch's (batch, positions) bool mask."""

    def __init__(self, layers):
        self.layers = list(layers)
        self.sums = np.zeros((len(self.layers), 3))  # count, sum, sum of squares
        self.mask = None
        self._handles = []

    def __enter__(self) -> LayerOutputVariance:
        for index, layer in enumerate(self.layers):

            def output(module, args, result, index=index):
                hidden = (result[0] if isinstance(result, (tuple, list)) else result).double()
                if self.mask is not None:
                    hidden = hidden[self.mask.to(hidden.device)]
                self.sums[index] += (
                    hidden.numel(),
                    hidden.sum().item(),
                    hidden.square().sum().item(),
                )

            self._handles.append(layer.register_forward_hook(output))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def variances(self) -> list[float]:
        count, total, squares = self.sums.T
        mean = total / count
        return [float(v) for v in squares / count - mean**2]  # plain floats: state.pt


@torch.no_grad()
def validation_loss(
    model, batches, device, autocast_dtype, variance: LayerOutputVariance | None = None
) -> float:
    was_training = model.training
    model.eval()
    losses = []
    for batch in batches:
        batch = batch.to(device)
        if variance is not None:
            variance.mask = batch[:, :-1] >= 0
        losses.append(language_model_loss(model, batch, autocast_dtype).item())
    model.train(was_training)
    return float(np.mean(losses))


def gradient_norms(model) -> tuple[list[float], float]:
    """L2 norm of the gradient of each decoder layer's parameters, and of all parameters."""

    def norm(parameters):
        grads = [p.grad for p in parameters if p.grad is not None]
        return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0

    return ([norm(layer.parameters()) for layer in model.model.layers], norm(model.parameters()))


class Distributed:
    """Rank/world from torchrun's environment; a single process otherwise. `device`: where a
    single process runs (default: this rank's GPU where device auto resolves to CUDA, else
    the CPU; $DEPTHLAB_AUTO_DEVICE can pin the CPU)."""

    def __init__(self, device: torch.device | str | None = None):
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.enabled = self.world_size > 1
        if device is not None and not self.enabled:
            self.device = torch.device(device)
        elif resolve_device("auto") == "cuda":  # $DEPTHLAB_AUTO_DEVICE can pin the CPU
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        if self.enabled and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            value = value.detach().clone()
            dist.all_reduce(value)
            value /= self.world_size
        return value

    def barrier(self):
        if self.enabled:
            dist.barrier()

    def close(self):
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()


def load_data_tokenizer(data_dir: str | Path, meta: dict):
    """The data stage's tokenizer; DataError when it is missing, unreadable, or has ids beyond
    meta.json's vocab_size (the embedding is sized from meta.json)."""
    folder = Path(data_dir) / "tokenizer"
    if not folder.is_dir():
        raise data_lib.DataError(f"{folder}: missing (is {data_dir} a complete data stage output?)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, TypeError, KeyError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise data_lib.DataError(
            f"{folder}: cannot load the tokenizer ({type(error).__name__}: {first})"
        ) from None
    largest = max(tokenizer.get_vocab().values(), default=-1)
    if largest >= meta["vocab_size"]:
        raise data_lib.DataError(
            f"{folder}: token id {largest} is outside meta.json's "
            f"vocab_size {meta['vocab_size']}: the tokenizer does not "
            f"belong to this data"
        )
    return tokenizer


def check_split_length(data_dir: str | Path, split: str, tokens, seq_len: int) -> None:
    """A split must hold at least one window of seq_len + 1 tokens (+1 for the random start)."""
    need = seq_len + 1 + (split == "train")
    if len(tokens) < need:
        raise data_lib.DataError(
            f"{Path(data_dir) / f'{split}.bin'}: {len(tokens)} tokens, "
            f"fewer than the {need} that one window of train.seq_len "
            f"{seq_len} needs; use a larger corpus or a shorter seq_len"
        )


def load_pretraining_data(data_dir: str | Path, settings: TrainSettings):
    """meta.json, the train tokens, truncate_pad's document layouts ({} when packed) and the
    validation batches; DataError when a split is too short for one window."""
    meta = data_lib.read_meta(data_dir)
    train_tokens = data_lib.load_tokens(data_dir, "train")  # checked against meta.json
    val_tokens = data_lib.load_tokens(data_dir, "val")
    check_split_length(data_dir, "train", train_tokens, settings.seq_len)
    check_split_length(data_dir, "val", val_tokens, settings.seq_len)
    layouts = {}
    if settings.document_layout == "truncate_pad":
        layouts = {
            split: {
                "bounds": document_bounds(tokens, meta["eos_id"]),
                "bos_id": meta["eos_id"] if meta.get("bos_id") is None else meta["bos_id"],
            }
            for split, tokens in (("train", train_tokens), ("val", val_tokens))
        }
    val_batches = validation_batches(val_tokens, settings, layouts.get("val"))
    return meta, train_tokens, layouts, val_batches


def pretraining_model(
    model_name: str, model_decl: dict, settings: TrainSettings, meta, seed, device
):
    """The declared model, initialised from `seed`, in the training precision and attention;
    and the attention implementation it is saved with."""
    config = make_config(
        model_decl["architecture"],
        model_decl["norm_scheme"],
        vocab_size=meta["vocab_size"],
        max_positions=settings.seq_len,
        init_std=settings.init_std,
        bos_token_id=meta.get("bos_id"),
        eos_token_id=meta.get("eos_id"),
        pad_token_id=meta.get("pad_id"),
    )
    weight_dtype = torch.bfloat16 if settings.precision == "pure_bf16" else torch.float32
    model = build_model(config, seed).to(device, dtype=weight_dtype)
    default_attention = model.config._attn_implementation
    attention = training_attention(settings.precision, device)
    if attention is not None:
        model.set_attn_implementation(attention)
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            print(
                f"[{model_name}] warning: this CPU has no native bf16 matmul (oneDNN); "
                f"train.precision {settings.precision} will be slower than fp32 here",
                file=sys.stderr,
            )
    return model, default_attention


class PretrainLoop(TrainingLoop):
    """Pretraining's part of the shared loop: each step's global batch (packed windows or
    truncate_pad documents) split among the DDP ranks and, within a rank, into micro-batches
    whose gradients accumulate (one all-reduce per step); the validation loss on the fixed val
    batches with each layer's output variance, and the gradient norms, in layer_rows."""

    extra_rows = ("layer_rows",)
    loss_hint = "lower train.lr or set train.grad_clip"

    def __init__(self, name, model, optimizer, scheduler, settings, ddp, seed, data, **state):
        """`data`: (train tokens, layouts, validation batches) as load_pretraining_data gives
        them; `state`: state_path, fingerprint, process_start."""
        super().__init__(
            name,
            model,
            optimizer,
            scheduler,
            settings,
            eval_at=evaluation_steps(settings) if ddp.is_main else (),  # only rank 0 evaluates
            tokens_per_step=settings.tokens_per_step,
            device=ddp.device,
            is_main=ddp.is_main,
            **state,
        )
        self.settings, self.ddp, self.seed = settings, ddp, seed
        self.train_tokens, self.layouts, self.val_batches = data
        self.autocast_dtype = torch.bfloat16 if settings.precision == "bf16" else None
        self.train_model = model  # the DDP wrapper once distribute() has run
        self.grads, self.variance = None, None
        self.compiled = effective_compile(settings.compile, ddp.device)
        self.step_loss = None  # distribute() sets it: (micro-batch) -> loss, maybe compiled
        self.compile_s = 0.0

    def distribute(self) -> None:
        """Wrap the model for DDP (after a resume: the wrapper starts every rank from rank 0's
        weights) and check that micro-batches divide each rank's rows."""
        settings, ddp = self.settings, self.ddp
        if ddp.enabled:
            self.train_model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[ddp.device.index] if ddp.device.type == "cuda" else None
            )
        self.rows_per_rank = settings.batch_size // ddp.world_size
        self.micro_rows = settings.micro_batch_size or self.rows_per_rank
        if self.rows_per_rank % self.micro_rows:
            raise ValueError(
                f"train.micro_batch_size: {self.micro_rows} does not divide the "
                f"{self.rows_per_rank} rows each process gets per step"
            )
        self.accumulation = self.rows_per_rank // self.micro_rows
        train_model, autocast_dtype = self.train_model, self.autocast_dtype

        def step_loss(window: torch.Tensor) -> torch.Tensor:
            return language_model_loss(train_model, window, autocast_dtype)

        # torch.compile of the (DDP-wrapped) model's forward and loss together: the docs'
        # order for DDP (wrap, then compile), and the loss's float cast and cross-entropy fuse
        # with the head.
        self.step_loss = torch.compile(step_loss) if self.compiled else step_loss

    def before_first_step(self) -> None:
        """Compiling: one forward and backward pass of the next step's first micro-batch, whose
        gradients are then dropped, so the compile happens here and its time is compile_s, not
        training time (the weights, the optimizer and the RNG are untouched)."""
        if not self.compiled or self.step >= self.steps:
            return
        start = time.perf_counter()
        rank, rows = self.ddp.rank, self.rows_per_rank
        local = self.batch(self.step)[rank * rows : (rank + 1) * rows].to(self.device)
        self.step_loss(local[: self.micro_rows]).backward()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.compile_s = time.perf_counter() - start
        if self.is_main:
            print(
                f"[{self.name}] compiled the forward and loss in {self.compile_s:.1f} s "
                f"(not counted in the training time or tok/s)",
                file=sys.stderr,
            )

    def batch(self, step: int) -> torch.Tensor:
        settings = self.settings
        if settings.document_layout == "truncate_pad":
            layout = self.layouts["train"]
            return document_batch(
                self.train_tokens,
                layout["bounds"],
                step,
                self.seed,
                settings.batch_size,
                settings.seq_len,
                layout["bos_id"],
            )
        return train_batch(
            self.train_tokens, step, self.seed, settings.batch_size, settings.seq_len
        )

    def train_loss(self, step: int) -> float:
        rank, rows = self.ddp.rank, self.rows_per_rank
        local = self.batch(step)[rank * rows : (rank + 1) * rows].to(self.device)
        loss = torch.zeros((), device=self.device)
        for index, micro in enumerate(local.split(self.micro_rows)):
            # Gradients are all-reduced once per step, on the last micro-batch.
            sync = index == self.accumulation - 1 or not self.ddp.enabled
            with contextlib.nullcontext() if sync else self.train_model.no_sync():
                micro_loss = self.step_loss(micro) / self.accumulation
                micro_loss.backward()
            loss += micro_loss.detach()
        return self.ddp.mean(loss)  # on the device: the loop reads it at its check steps

    def gradients_taken(self, step: int) -> None:
        self.grads = gradient_norms(self.model)  # as all-reduced, before clipping

    def validate(self, step: int) -> float:
        with LayerOutputVariance(self.model.model.layers) as variance:
            val = validation_loss(
                self.model, self.val_batches, self.device, self.autocast_dtype, variance
            )
        self.variance = variance
        return val

    def validated(self, step: int, val: float, tokens_per_s: float) -> None:
        self.record_layer_stats(step, self.variance, self.grads)
        print(
            f"[{self.name}] step {step} tokens {step * self.tokens_per_step} val_loss {val:.4f} "
            f"tok/s {tokens_per_s:.0f}",
            file=sys.stderr,
        )

    def write_state(self, path: Path, state: dict) -> None:
        save_state(path, state)  # this module's name, looked up per call so it can be replaced

    def initial_layer_stats(self) -> None:
        """The initial model's variance profile (no gradient yet)."""
        with LayerOutputVariance(self.model.model.layers) as variance:
            validation_loss(
                self.model, self.val_batches, self.device, self.autocast_dtype, variance
            )
        self.record_layer_stats(0, variance, None)

    def record_layer_stats(self, at_step: int, variance: LayerOutputVariance, grads) -> None:
        layer_norms, total = (
            grads if grads is not None else ([math.nan] * len(variance.layers), math.nan)
        )
        tokens = at_step * self.tokens_per_step
        for layer, (var, norm) in enumerate(zip(variance.variances(), layer_norms)):
            self.layer_rows.append([at_step, tokens, layer, var, norm, total])
            self.tracker.scalars(at_step, {f"output_variance/layer_{layer:02d}": var})
            if grads is not None:
                self.tracker.scalars(at_step, {f"grad_norm/layer_{layer:02d}": norm})
        if grads is not None:
            self.tracker.scalars(at_step, {"grad_norm/total": total})


def open_tracker(tensorboard_dir: Path, tracking: dict, resumed_from, name: str, config: dict):
    """Rank 0's tracker: TensorBoard events in tensorboard_dir (purged after a resume's step),
    W&B when `tracking` asks for it."""
    if tracking.get("tensorboard") and resumed_from is None:
        # events of an abandoned run must not mix with this one's
        shutil.rmtree(tensorboard_dir, ignore_errors=True)
    # steps up to resumed_from are in the state; later ones died with the killed process
    return Tracker(
        tensorboard_dir,
        enabled=bool(tracking.get("tensorboard")),
        purge_step=resumed_from and resumed_from + 1,
        wandb=tracking.get("wandb"),
        run_name=name,
        run_config={**config, "resumed_from_step": resumed_from},
    )


def write_pretrained(
    loop: PretrainLoop, tokenizer, out_dir, summary: dict, provenance, tracking, tensorboard_dir
) -> None:
    """The checkpoint folder, written atomically: weights, tokenizer, train_log.csv,
    layer_stats.csv, the TensorBoard events (when on) and provenance.json; then the state and
    the events' working folder go."""
    with atomic_path(out_dir, is_dir=True) as tmp:
        save_checkpoint(loop.model, tokenizer, tmp)
        write_dataframe(
            tmp / "layer_stats.csv", pd.DataFrame(loop.layer_rows, columns=LAYER_STATS_COLUMNS)
        )
        if tensorboard_dir.is_dir() and tracking.get("tensorboard"):
            shutil.copytree(tensorboard_dir, tmp / "tensorboard")
        loop.write_outputs(tmp, summary, provenance)
    loop.discard_state()
    shutil.rmtree(tensorboard_dir, ignore_errors=True)


def announce_pretraining(loop: PretrainLoop, norm_scheme: str, n_params: int, threads: int):
    """The line rank 0 prints as it starts: the model, its size, the steps and where it runs."""
    model, settings, ddp = loop.model, loop.settings, loop.ddp
    print(
        f"[{loop.name}] {norm_scheme} {model.config.num_hidden_layers}x"
        f"{model.config.hidden_size}, {n_params / 1e6:.2f}M params, {settings.steps} steps x "
        f"{settings.tokens_per_step} tokens, device {ddp.device}, threads {threads}, "
        f"world {ddp.world_size}",
        file=sys.stderr,
    )


def pretraining_summary(loop: PretrainLoop, n_params: int) -> dict:
    """What pretrain returns: the last validation loss, the tokens and their rate, the size."""
    settings = loop.settings
    return {
        "final_val_loss": next((r[3] for r in reversed(loop.log_rows) if r[2] == "val"), None),
        "tokens": settings.steps * settings.tokens_per_step,
        "tokens_per_s": settings.steps * settings.tokens_per_step / max(loop.wall, 1e-9),
        "params": n_params,
        "world_size": loop.ddp.world_size,
        "compiled": loop.compiled,
        "compile_s": round(loop.compile_s, 3),  # apart from the training time above
    }


def pretrain(
    model_name: str,
    model_decl: dict,
    data_dir: str | Path,
    out_dir: str | Path,
    state_dir: str | Path,
    seed: int,
    threads: int,
    progress: bool = True,
    tracking: dict | None = None,
) -> dict:
    """Train one declared model and write its HF checkpoint directory atomically to out_dir.
    `threads` are the job's, shared among its DDP processes; `tracking` is the config's
    `tracking:` section as config.tracking_settings resolves it (None: no TensorBoard, no W&B,
    progress lines every ~5%)."""
    process_start = time.perf_counter()
    tracking = tracking or {}
    settings = TrainSettings.from_dict(model_decl["train"])
    ddp = Distributed()
    torch.set_num_threads(max(1, threads // ddp.world_size))
    settings = replace(settings, precision=effective_precision(settings.precision, ddp.device))
    provenance = Provenance(
        "pretrain",
        config={
            "model_name": model_name,
            **model_decl,
            "precision_used": settings.precision,
            "compile_used": effective_compile(settings.compile, ddp.device),
        },
        inputs=[data_dir],
        seed=seed,
    )
    if settings.batch_size % ddp.world_size:
        raise ValueError(
            f"train.batch_size: {settings.batch_size} is not divisible by the "
            f"{ddp.world_size} processes"
        )
    meta, *data = load_pretraining_data(data_dir, settings)
    tokenizer = load_data_tokenizer(data_dir, meta)  # before training, not after it
    model, default_attention = pretraining_model(
        model_name, model_decl, settings, meta, seed, ddp.device
    )
    optimizer = make_optimizer(model, settings)
    loop = PretrainLoop(
        model_name,
        model,
        optimizer,
        make_scheduler(optimizer, settings),
        settings,
        ddp,
        seed,
        data,
        state_path=Path(state_dir) / "state.pt",
        fingerprint=run_fingerprint(model_decl, seed, meta, ddp.world_size),
        process_start=process_start,
    )
    loop.resume()
    loop.distribute()
    n_params = sum(p.numel() for p in model.parameters())
    if ddp.is_main:
        announce_pretraining(loop, model_decl["norm_scheme"], n_params, threads)
    tensorboard_dir = Path(state_dir) / "tensorboard"
    if ddp.is_main:  # only rank 0 logs
        run_config = {
            "model_name": model_name,
            "model": model_decl,
            "data": str(data_dir),
            "out": str(out_dir),
            "state_dir": str(state_dir),
            "seed": seed,
            "tracking": tracking,
            "world_size": ddp.world_size,
        }
        loop.tracker = open_tracker(
            tensorboard_dir, tracking, loop.resumed_from, model_name, run_config
        )
        if loop.step == 0:
            loop.initial_layer_stats()
    loop.run(progress and ddp.is_main, tracking.get("progress_every"))
    loop.tracker.close()

    summary = pretraining_summary(loop, n_params)
    if ddp.is_main:
        model.set_attn_implementation(default_attention)  # the checkpoint loads as it always did
        write_pretrained(loop, tokenizer, out_dir, summary, provenance, tracking, tensorboard_dir)
    else:
        summary.update(loop.record())
    # The DDP wrapper holds the process group: freed after the group is destroyed, on a rank
    # whose peer has already exited, it can hang in gloo's teardown. Free it on every rank first.
    loop.train_model = loop.step_loss = None  # the compiled step closes over the wrapper
    gc.collect()
    ddp.barrier()
    ddp.close()
    return summary
