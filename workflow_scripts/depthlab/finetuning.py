"""Supervised fine-tuning of a pretrained model (Curse of Depth, Sec. 5: LNS's gain "carries over
seamlessly to supervised fine-tuning"): full fine-tuning or LoRA (peft), resumable, HF folder out.

Data: prompt/answer pairs (`train.jsonl`, `val.jsonl` of a build_finetune_data folder), tokenised
as prompt ids followed by the ids that the text `prompt + " " + answer` adds after them (how
lm-eval splits a multiple-choice context from its choice), cut to `seq_len` tokens: the prompt
loses tokens from its start, the answer from its end. The loss is next-token cross-entropy on the
answer tokens (and the prompt's too with `train_on_prompt`); padding and masked positions are
IGNORE targets.

Training reuses depthlab.training's machinery: batches drawn from `default_rng([seed, step])`, so
resuming needs only the step counter; AdamW without decay on 1-D parameters (make_optimizer);
warmup + cosine (lr_multiplier); bf16 autocast with eager attention on a CPU
(training_attention); the resumable state file (save_state / load_state, a weights-only torch
file) with a run fingerprint, so a state from another run is never resumed; the run record
(resumed, from which step, processes, total wall time) in the provenance.

Output: the fine-tuned model as an ordinary HF folder that loads like its parent (a plain Llama
parent stays plain Llama; a `DepthlabForCausalLM` parent keeps its modeling file and auto_map;
LoRA adapters are merged into the weights), its tokenizer, `train_log.csv` (step, tokens, split,
loss, lr, wall_s; split val is the held-out task loss) and `provenance.json`.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from .atomic_files import atomic_path, write_dataframe
from .finetune_data import FinetuneError, read_pairs
from .provenance import Provenance, sha256_path
from .tracking import Progress
from .training import (
    IGNORE,
    LOG_COLUMNS,
    load_state,
    lr_multiplier,
    make_optimizer,
    run_fingerprint,
    run_record,
    save_state,
    training_attention,
)

FINETUNE_METHODS = ("full", "lora")


@dataclass(frozen=True)
class FinetuneSettings:
    method: str
    steps: int
    batch_size: int
    seq_len: int
    lr: float
    min_lr_ratio: float
    warmup_steps: int
    weight_decay: float
    beta1: float
    beta2: float
    grad_clip: float | None
    eval_every: int
    log_every: int
    checkpoint_every: int
    precision: str
    train_on_prompt: bool
    lora: dict | None = None  # {rank, alpha, dropout, target_modules} with method lora

    @classmethod
    def from_dict(cls, values: dict) -> FinetuneSettings:
        required = {f.name for f in fields(cls) if f.default is MISSING}
        missing = sorted(required - set(values))
        if missing:
            raise FinetuneError(f"finetune.train.{missing[0]}: missing fine-tuning setting")
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


# --------------------------------------------------------------------------- data


def encode_pairs(
    pairs: list[dict], tokenizer, seq_len: int, train_on_prompt: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels), each (len(pairs), seq_len): prompt + answer ids, right-padded with
    the pad id; labels are the ids where the loss applies and IGNORE elsewhere."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    inputs = np.full((len(pairs), seq_len), pad, dtype=np.int64)
    labels = np.full((len(pairs), seq_len), IGNORE, dtype=np.int64)
    for row, pair in enumerate(pairs):
        prompt = tokenizer(pair["prompt"], add_special_tokens=False)["input_ids"]
        whole = tokenizer(pair["prompt"] + " " + pair["answer"], add_special_tokens=False)[
            "input_ids"
        ]
        # lm-eval's split: the choice is what the whole adds after the context's own ids
        shared = 0
        while shared < min(len(prompt), len(whole)) and prompt[shared] == whole[shared]:
            shared += 1
        prompt, answer = whole[:shared], whole[shared:]
        answer = answer[: seq_len - 1]  # at least one prompt token predicts the first answer id
        prompt = prompt[max(0, len(prompt) - (seq_len - len(answer))) :]
        ids = prompt + answer
        inputs[row, : len(ids)] = ids
        first = 0 if train_on_prompt else len(prompt)
        labels[row, first : len(ids)] = ids[first:]
    return torch.from_numpy(inputs), torch.from_numpy(labels)


def sft_batch(count: int, step: int, seed: int, batch_size: int) -> np.ndarray:
    """Row indices of the batch of `step`: drawn from (seed, step) alone, as pretraining's."""
    return np.random.default_rng([seed, step]).integers(0, count, size=batch_size)


def masked_lm_loss(
    model, inputs: torch.Tensor, labels: torch.Tensor, autocast_dtype
) -> torch.Tensor:
    """Mean next-token cross-entropy over the label positions that are not IGNORE."""
    with torch.autocast(
        device_type=inputs.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None
    ):
        logits = model(input_ids=inputs).logits
    logits = logits[:, :-1].float()
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=IGNORE
    )


@torch.no_grad()
def task_loss(
    model, inputs: torch.Tensor, labels: torch.Tensor, device, autocast_dtype, batch_size: int
) -> float:
    """Mean loss per answer token over held-out pairs (every labelled token weighs the same)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(inputs), batch_size):
        batch_in = inputs[start : start + batch_size].to(device)
        batch_labels = labels[start : start + batch_size].to(device)
        tokens = int((batch_labels[:, 1:] != IGNORE).sum())
        if tokens:
            total += masked_lm_loss(model, batch_in, batch_labels, autocast_dtype).item() * tokens
            count += tokens
    model.train(was_training)
    return total / max(count, 1)


# --------------------------------------------------------------------------- model


def attach_lora(model, lora: dict):
    """The model wrapped with LoRA adapters (peft); FinetuneError when a target is missing."""
    from peft import LoraConfig, get_peft_model

    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in lora["target_modules"] if t not in names]
    if missing:
        raise FinetuneError(
            f"finetune.lora.target_modules: {missing} are not modules of {type(model).__name__}"
        )
    config = LoraConfig(
        r=lora["rank"],
        lora_alpha=lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=list(lora["target_modules"]),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def save_finetuned(model, tokenizer, out_dir: str | Path) -> None:
    """The fine-tuned model as its parent was saved: depthlab's own class through
    models.save_checkpoint (plain Llama where exact, else modeling file + auto_map), any other
    model with save_pretrained."""
    from .models import DepthlabForCausalLM, save_checkpoint

    if isinstance(model, DepthlabForCausalLM):
        save_checkpoint(model, tokenizer, out_dir)
    else:
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)


def _parent_fingerprint(parent: str) -> dict:
    """Checksums of a local parent's config and weights (a hub id stands for itself)."""
    folder = Path(parent)
    if not folder.is_dir():
        return {"hub": parent}
    return {
        f.name: sha256_path(f)
        for f in sorted(folder.iterdir())
        if f.name == "config.json" or f.suffix == ".safetensors"
    }


def finetune(
    model_name: str,
    parent: str,
    revision: str | None,
    data_dir: str | Path,
    out_dir: str | Path,
    state_dir: str | Path,
    settings: FinetuneSettings,
    seed: int,
    device: str = "cpu",
    progress: bool = True,
    progress_every: int | None = None,
    provenance_config: dict | None = None,
) -> dict:
    """Fine-tune `parent` (a model folder, pkg: path or hub id) on `data_dir`'s train.jsonl and
    write the result atomically to out_dir; resumable from state_dir/state.pt (saved every
    checkpoint_every steps, removed when the run completes). Returns the run's summary."""
    from .architectures import load_model, load_tokenizer

    process_start = time.perf_counter()
    data_dir = Path(data_dir)
    provenance = Provenance(
        "finetune",
        config=provenance_config or {"model_name": model_name},
        inputs=[p for p in (parent, data_dir) if Path(p).exists()],
        seed=seed,
    )
    train_pairs = read_pairs(data_dir / "train.jsonl")
    val_pairs = read_pairs(data_dir / "val.jsonl")
    torch_device = torch.device(device)
    model = load_model(parent, dtype="float32", device=device, revision=revision)
    tokenizer = load_tokenizer(parent, revision=revision)
    context = getattr(model.config, "max_position_embeddings", None)
    if context is not None and settings.seq_len > context:
        raise FinetuneError(
            f"finetune.train.seq_len: {settings.seq_len} exceeds the {context} positions of "
            f"{parent}"
        )
    train_inputs, train_labels = encode_pairs(
        train_pairs, tokenizer, settings.seq_len, settings.train_on_prompt
    )
    # the held-out task loss is always on the answers alone: what lm-eval scores
    val_inputs, val_labels = encode_pairs(val_pairs, tokenizer, settings.seq_len, False)
    autocast_dtype = torch.bfloat16 if settings.precision == "bf16" else None
    default_attention = model.config._attn_implementation
    attention = training_attention(settings.precision, torch_device)
    if attention is not None:
        model.set_attn_implementation(attention)
    torch.manual_seed(seed)  # LoRA's initial A matrices
    if settings.method == "lora":
        model = attach_lora(model, settings.lora)
    model.train()
    optimizer = make_optimizer(model, settings)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, SimpleNamespace(**_schedule(settings)))
    )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)

    state_path = Path(state_dir) / "state.pt"
    fingerprint = run_fingerprint(
        {
            "settings": settings.__dict__,
            "parent": _parent_fingerprint(parent),
            "revision": revision,
        },
        seed,
        {
            "train": sha256_path(data_dir / "train.jsonl"),
            "val": sha256_path(data_dir / "val.jsonl"),
        },
        1,
    )
    step, log_rows, wall_offset = 0, [], 0.0
    earlier_processes, earlier_wall, resumed_from = 0, 0.0, None
    if state_path.exists():
        state = load_state(state_path, torch_device)
        if state["fingerprint"] == fingerprint:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["torch_rng"].cpu())
            step, log_rows, wall_offset = state["step"], state["log_rows"], state["wall_s"]
            resumed_from = step
            earlier_processes = int(state.get("processes", 1))
            earlier_wall = float(state.get("total_wall_s", state["wall_s"]))
            print(f"[{model_name}] resumed from step {step} ({state_path})", file=sys.stderr)
        else:
            print(
                f"[{model_name}] ignoring {state_path}: saved by a different run configuration",
                file=sys.stderr,
            )
    print(
        f"[{model_name}] {settings.method} fine-tuning of {parent}: {len(train_pairs)} train / "
        f"{len(val_pairs)} held-out pairs, {settings.steps} steps x {settings.batch_size} rows x "
        f"{settings.seq_len} tokens, {trainable / 1e6:.3f}M trainable parameters, device {device}",
        file=sys.stderr,
    )
    if step == 0:
        val = task_loss(model, val_inputs, val_labels, torch_device, autocast_dtype, 64)
        log_rows.append([0, 0, "val", val, 0.0, 0.0])
    tokens_per_step = settings.batch_size * settings.seq_len
    started = time.perf_counter()
    wall = wall_offset
    bar = Progress(settings.steps, model_name, initial=step, enabled=progress, every=progress_every)
    while step < settings.steps:
        rows = torch.from_numpy(sft_batch(len(train_inputs), step, seed, settings.batch_size))
        loss = masked_lm_loss(
            model,
            train_inputs[rows].to(torch_device),
            train_labels[rows].to(torch_device),
            autocast_dtype,
        )
        loss.backward()
        step += 1
        value = loss.item()
        if not math.isfinite(value):
            raise FloatingPointError(
                f"[{model_name}] loss is {value} at step {step}; stopping (lower finetune.train.lr)"
            )
        if settings.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        wall = wall_offset + time.perf_counter() - started
        if step % settings.log_every == 0 or step == settings.steps:
            log_rows.append([step, step * tokens_per_step, "train", value, lr, round(wall, 3)])
        if step % settings.eval_every == 0 or step == settings.steps:
            val = task_loss(model, val_inputs, val_labels, torch_device, autocast_dtype, 64)
            log_rows.append([step, step * tokens_per_step, "val", val, lr, round(wall, 3)])
            print(f"[{model_name}] step {step} held-out task loss {val:.4f}", file=sys.stderr)
        if step % settings.checkpoint_every == 0 and step < settings.steps:
            save_state(
                state_path,
                {
                    "fingerprint": fingerprint,
                    "step": step,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    "log_rows": log_rows,
                    "wall_s": wall,
                    "processes": earlier_processes + 1,
                    "total_wall_s": earlier_wall + time.perf_counter() - process_start,
                },
            )
        bar.update(1, loss=value, lr=lr)
    bar.close()

    if settings.method == "lora":
        model = model.merge_and_unload()
    model.eval()
    model.set_attn_implementation(default_attention)  # the checkpoint loads as its parent did
    val_losses = [r[3] for r in log_rows if r[2] == "val"]
    summary = {
        "method": settings.method,
        "trainable_parameters": int(trainable),
        "initial_task_loss": val_losses[0],
        "final_task_loss": val_losses[-1],
        "train_pairs": len(train_pairs),
        "val_pairs": len(val_pairs),
        "tokens": settings.steps * tokens_per_step,
    }
    with atomic_path(out_dir, is_dir=True) as tmp:
        save_finetuned(model, tokenizer, tmp)
        write_dataframe(tmp / "train_log.csv", pd.DataFrame(log_rows, columns=LOG_COLUMNS))
        record = run_record(resumed_from, earlier_processes, earlier_wall, process_start)
        summary.update(record)
        provenance.extra.update(record)
        provenance.extra["summary"] = summary
        provenance.extra["parent"] = {"path": parent, "revision": revision}
        provenance.write(tmp / "provenance.json")
    state_path.unlink(missing_ok=True)
    shutil.rmtree(state_dir, ignore_errors=True)
    return summary


def _schedule(settings: FinetuneSettings) -> dict:
    return {
        "warmup_steps": settings.warmup_steps,
        "steps": settings.steps,
        "min_lr_ratio": settings.min_lr_ratio,
    }
