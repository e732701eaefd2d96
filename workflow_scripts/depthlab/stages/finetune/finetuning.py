"""Supervised fine-tuning of a pretrained model (Curse of Depth, Sec. 5: LNS's gain "carries over
seamlessly to supervised fine-tuning"): full fine-tuning or LoRA (peft), resumable, HF folder out.

Data: prompt/answer pairs (`train.jsonl`, `val.jsonl` of a build_finetune_data folder), tokenised
as prompt ids followed by the ids that the text `prompt + " " + answer` adds after them (how
lm-eval splits a multiple-choice context from its choice), cut to `seq_len` tokens: the prompt
loses tokens from its start, the answer from its end. The loss is next-token cross-entropy on the
answer tokens (and the prompt's too with `train_on_prompt`); padding and masked positions are
IGNORE targets.

Training runs depthlab.stages.train_loop's loop, shared with pretraining (FinetuneLoop supplies the
batches and the held-out loss): batches drawn from `default_rng([seed, step])`, so resuming needs
only the step counter; the resumable state file (a weights-only torch file) with a run
fingerprint, so a state from another run is never resumed; the run record (resumed, from which
step, processes, total wall time) in the provenance. From depthlab.stages.pretrain.training: AdamW without decay
on 1-D parameters (make_optimizer), warmup + cosine (make_scheduler), bf16 autocast with eager
attention on a CPU (training_attention).

Output: the fine-tuned model as an ordinary HF folder that loads like its parent (a plain Llama
parent stays plain Llama; a `DepthlabForCausalLM` parent keeps its modeling file and auto_map;
LoRA adapters are merged into the weights), its tokenizer, `train_log.csv` (step, tokens, split,
loss, lr, wall_s; split val is the held-out task loss) and `provenance.json`.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from depthlab.core.atomic_files import atomic_path
from depthlab.core.provenance import Provenance, sha256_path
from depthlab.settings.training import RunSettings, StepSet
from depthlab.stages.finetune.data import FinetuneError, read_pairs
from depthlab.stages.train_loop import (
    IGNORE,
    TrainingLoop,
    effective_precision,
    make_optimizer,
    make_scheduler,
    run_fingerprint,
    training_attention,
)

FINETUNE_METHODS = ("full", "lora")


@dataclass(frozen=True, kw_only=True)
class FinetuneSettings(RunSettings):
    """`finetune.train`: a resumable run of the training settings family
    (depthlab.settings.training), with the method and the prompt's part in the loss."""

    section: ClassVar[str] = "finetune.train"
    error: ClassVar[type[Exception]] = FinetuneError
    noun: ClassVar[str] = "fine-tuning"

    method: str
    train_on_prompt: bool
    lora: dict | None = None  # {rank, alpha, dropout, target_modules} with method lora


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
    from depthlab.models.decoders import DepthlabForCausalLM, save_checkpoint

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


# --------------------------------------------------------------------------- training


class FinetuneLoop(TrainingLoop):
    """Fine-tuning's part of the shared loop: each step a batch of pairs drawn from (seed, step),
    the held-out task loss at each evaluation; no tracker (train_log.csv holds the curve)."""

    loss_hint = "lower finetune.train.lr"
    show_throughput = False

    def __init__(self, name, model, optimizer, scheduler, settings, seed, train, val, **state):
        """`train`, `val`: (input_ids, labels) as encode_pairs gives them; `state`: state_path,
        fingerprint, device, process_start."""
        steps, every = settings.steps, settings.eval_every
        super().__init__(
            name,
            model,
            optimizer,
            scheduler,
            settings,
            eval_at=StepSet(steps, every),  # lazy: no list of every step
            tokens_per_step=settings.tokens_per_step,
            **state,
        )
        self.seed, self.batch_size = seed, settings.batch_size
        (self.train_inputs, self.train_labels), (self.val_inputs, self.val_labels) = train, val
        self.autocast_dtype = torch.bfloat16 if settings.precision == "bf16" else None

    def train_loss(self, step: int) -> float:
        rows = torch.from_numpy(sft_batch(len(self.train_inputs), step, self.seed, self.batch_size))
        loss = masked_lm_loss(
            self.model,
            self.train_inputs[rows].to(self.device),
            self.train_labels[rows].to(self.device),
            self.autocast_dtype,
        )
        loss.backward()
        return loss.detach()  # read by the loop at its check steps only

    def validate(self, step: int) -> float:
        return task_loss(
            self.model, self.val_inputs, self.val_labels, self.device, self.autocast_dtype, 64
        )

    def validated(self, step: int, val: float, tokens_per_s: float) -> None:
        print(f"[{self.name}] step {step} held-out task loss {val:.4f}", file=sys.stderr)


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
    from depthlab.models.architectures import load_model, load_tokenizer

    process_start = time.perf_counter()
    data_dir = Path(data_dir)
    settings = replace(settings, precision=effective_precision(settings.precision, device))
    provenance = Provenance(
        "finetune",
        config={
            **(provenance_config or {"model_name": model_name}),
            "precision_used": settings.precision,
        },
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
    train = encode_pairs(train_pairs, tokenizer, settings.seq_len, settings.train_on_prompt)
    # the held-out task loss is always on the answers alone: what lm-eval scores
    val = encode_pairs(val_pairs, tokenizer, settings.seq_len, False)
    default_attention = model.config._attn_implementation
    attention = training_attention(settings.precision, torch_device)
    if attention is not None:
        model.set_attn_implementation(attention)
    torch.manual_seed(seed)  # LoRA's initial A matrices
    if settings.method == "lora":
        model = attach_lora(model, settings.lora)
    model.train()
    optimizer = make_optimizer(model, settings)
    loop = FinetuneLoop(
        model_name,
        model,
        optimizer,
        make_scheduler(optimizer, settings),
        settings,
        seed,
        train,
        val,
        state_path=Path(state_dir) / "state.pt",
        fingerprint=_run_fingerprint(parent, revision, data_dir, settings, seed),
        device=torch_device,
        process_start=process_start,
    )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    loop.resume()
    print(
        f"[{model_name}] {settings.method} fine-tuning of {parent}: {len(train_pairs)} train / "
        f"{len(val_pairs)} held-out pairs, {settings.steps} steps x {settings.batch_size} rows x "
        f"{settings.seq_len} tokens, {trainable / 1e6:.3f}M trainable parameters, device {device}",
        file=sys.stderr,
    )
    if loop.step == 0:
        loop.log_rows.append([0, 0, "val", loop.validate(0), 0.0, 0.0])
    loop.run(progress, progress_every)

    if settings.method == "lora":
        model = model.merge_and_unload()
    model.eval()
    model.set_attn_implementation(default_attention)  # the checkpoint loads as its parent did
    val_losses = [r[3] for r in loop.log_rows if r[2] == "val"]
    summary = {
        "method": settings.method,
        "trainable_parameters": int(trainable),
        "initial_task_loss": val_losses[0],
        "final_task_loss": val_losses[-1],
        "train_pairs": len(train_pairs),
        "val_pairs": len(val_pairs),
        "tokens": settings.steps * loop.tokens_per_step,
    }
    with atomic_path(out_dir, is_dir=True) as tmp:
        save_finetuned(model, tokenizer, tmp)
        loop.write_outputs(tmp, summary, provenance, parent={"path": parent, "revision": revision})
    loop.discard_state()
    shutil.rmtree(state_dir, ignore_errors=True)
    return summary


def _run_fingerprint(parent: str, revision, data_dir: Path, settings, seed: int) -> str:
    """The run's identity: its settings, the parent's files, the pairs and the seed."""
    return run_fingerprint(
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
