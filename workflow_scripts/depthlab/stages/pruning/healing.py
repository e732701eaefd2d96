"""Healing a pruned model on the pretraining corpus: LoRA (peft), QLoRA, or continued
pretraining of every weight.

Gromov et al. heal each pruned model with QLoRA: the base weights in 4-bit NF4 (bitsandbytes),
LoRA adapters on the MLP, C4, 5000 steps, global batch 16, cosine schedule with 100 warmup steps,
sequence length 2048 (up to 7B) or 4096. Here:

  method  lora   adapters on the full-precision pruned model
          qlora  the pruned model is exported and reloaded with 4-bit NF4 weights
                 (`BitsAndBytesConfig(load_in_4bit=True)`; bitsandbytes has a CPU backend), the
                 adapters train against the quantised base
          full   continued pretraining (Kim et al. 2024, Shortened LLaMA): every weight of the
                 pruned model trains with AdamW, no adapters, on the same data, schedule, steps,
                 batch and sequence length as the adapter methods, so the same tokens; its
                 learning rate is pruning.healing.full_lr where given (the config resolver puts
                 it in the job's `lr`)
  data    random windows of the run's train split (`train.bin`, the pretraining corpus), the
          batch of step s drawn from (seed, s) as in pretraining (depthlab.stages.pretrain.training.train_batch)
  loop    depthlab.stages.train_loop's TrainingLoop (HealLoop), as pretraining and fine-tuning:
          AdamW over the trainable parameters, the warmup + cosine (or constant) schedule of the
          training settings family, every step's loss checked for NaN / inf
  merge   (adapter methods) the trained adapters are merged (`merge_and_unload`) into the *full-precision* pruned
          weights (QLoRA too: its adapters are loaded onto the fp32 pruned model and merged),
          so a healed variant is an ordinary model evaluated exactly like an unhealed one.

A pruned model dispatched over several GPUs (depthlab.core.placement) heals as it is: peft puts each
adapter on its layer's GPU, the batches go to the input embedding's device, QLoRA's 4-bit copy
is spread over the same GPUs, and the adapters merge into the weights where they lie. peft can
neither train nor merge adapters on weights accelerate offloads to the CPU or disk (they sit on
`meta` between passes), so a model with offloaded weights is refused.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np
import torch

from depthlab.core.errors import PruningError
from depthlab.core.placement import gpu_budget, has_offloaded_weights, input_device, is_dispatched
from depthlab.core.tracking import Tracker
from depthlab.models.architectures import _register_depthlab_models
from depthlab.settings.training import ADAPTER_METHODS, HealSettings
from depthlab.stages.pruning.layer_removal import export_pruned
from depthlab.stages.train_loop import (
    IGNORE,
    TrainingLoop,
    language_model_loss,
    make_scheduler,
    train_batch,
)


def _lora_config(settings: HealSettings):
    from peft import LoraConfig

    return LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def _check_targets(model, settings: HealSettings) -> None:
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in settings.target_modules if t not in names]
    if missing:
        raise PruningError(
            f"pruning.healing.target_modules: {missing} are not modules of {type(model).__name__}"
        )


def _quantised_placement(pruned, device: str) -> dict:
    """QLoRA's 4-bit copy on `device`, or balanced over the job's GPUs when the pruned model is
    dispatched over several."""
    if device.startswith("cuda") and is_dispatched(pruned):
        return {"device_map": "balanced", "max_memory": gpu_budget(device)}
    return {"device_map": {"": device}}


def compute_dtype(pruned) -> torch.dtype:
    """QLoRA's compute dtype: the pruned model's own when it is 16-bit (bf16 on the paper's GPUs,
    as in QLoRA itself; fp32 compute runs at ~1/16 of an A100's bf16 rate), else fp32."""
    dtype = next(pruned.parameters()).dtype
    return dtype if dtype in (torch.bfloat16, torch.float16) else torch.float32


def _quantised_copy(pruned, device: str):
    """The pruned model reloaded with 4-bit NF4 linear weights (QLoRA's frozen base)."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig  # QLoRA only

    _register_depthlab_models()
    dtype = compute_dtype(pruned)
    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=dtype,
        bnb_4bit_use_double_quant=True,
    )
    with tempfile.TemporaryDirectory(prefix="depthlab-qlora-") as folder:
        # the export keeps each layer's LNS factor / DeepNorm alpha of its original depth
        export_pruned(pruned, (), folder)
        quantised = AutoModelForCausalLM.from_pretrained(
            folder,
            quantization_config=config,
            dtype=dtype,
            **_quantised_placement(pruned, device),
        )
    return quantised


def accumulated_loss(model, window: torch.Tensor, micro_batch_size: int | None) -> torch.Tensor:
    """The batch's mean next-token loss, its gradient accumulated over chunks of
    `micro_batch_size` rows (None: one pass), each chunk weighted by its share of the batch's
    scored targets, so the gradient is the whole batch's whatever the chunking."""
    rows = window.shape[0]
    micro = micro_batch_size or rows
    if micro >= rows:
        loss = language_model_loss(model, window, None)
        loss.backward()
        return loss.detach()
    scored = (window[:, 1:] != IGNORE).sum()
    total = torch.zeros((), device=window.device)
    for chunk in window.split(micro):
        share = (chunk[:, 1:] != IGNORE).sum() / scored
        if not share:
            continue  # all padding: no target, no gradient
        loss = language_model_loss(model, chunk, None) * share
        loss.backward()
        total += loss.detach()
    return total


def _check_healable(pruned, settings: HealSettings) -> None:
    """PruningError when the adapters (or, `full`, the weights) cannot train on `pruned` as
    configured."""
    if settings.method in ADAPTER_METHODS:
        _check_targets(pruned, settings)
    if has_offloaded_weights(pruned):
        raise PruningError(
            "pruning.healing: the pruned model has weights offloaded to the CPU or disk "
            "(device_map / max_memory), where peft can neither train nor merge adapters; give "
            "the job GPUs that hold the model"
        )
    context = getattr(pruned.config, "max_position_embeddings", None)
    if context is not None and settings.seq_len > context:
        raise PruningError(
            f"pruning.healing.seq_len: {settings.seq_len} exceeds the model's "
            f"context of {context} positions"
        )


def _adapter_base(pruned, settings: HealSettings, device: str):
    """The model the adapters train against: `pruned` itself (LoRA) or its 4-bit copy (QLoRA),
    with gradient checkpointing when configured."""
    base = _quantised_copy(pruned, device) if settings.method == "qlora" else pruned
    if settings.method == "qlora":
        from peft import prepare_model_for_kbit_training

        base = prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)
    if settings.gradient_checkpointing:
        # non-reentrant: the frozen base's inputs need no requires_grad for the adapters' grads
        base.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    return base


def _full_base(pruned, settings: HealSettings):
    """`full`: the pruned model itself with every parameter trainable (and gradient
    checkpointing when configured)."""
    for parameter in pruned.parameters():
        parameter.requires_grad_(True)
    if settings.gradient_checkpointing:
        pruned.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    return pruned


def heal_optimizer(model, settings: HealSettings) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (the adapters, or every weight for `full`), each
    decayed by weight_decay, torch's default betas and implementation (pretraining's
    make_optimizer spares 1-D parameters the decay and fuses on CUDA: not healing's recipe)."""
    return torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=settings.lr,
        weight_decay=settings.weight_decay,
    )


class HealLoop(TrainingLoop):
    """Healing's part of the shared loop: each step a batch of random train windows drawn from
    (seed, step) as pretraining draws them, its gradient accumulated over micro-batches; no
    evaluation inside the loop (the healed model is scored after the merge) and no resumable
    state. Every step's loss is logged (HealSettings.log_every): the record reads them all."""

    loss_hint = "lower pruning.healing.lr"
    show_throughput = False

    def __init__(self, model, optimizer, settings: HealSettings, train_tokens, seed, inputs_at):
        super().__init__(
            "healing",
            model,
            optimizer,
            make_scheduler(optimizer, settings),
            settings,
            eval_at=(),
            tokens_per_step=settings.tokens_per_step,
            state_path=None,
            fingerprint=None,
            device=inputs_at,
            process_start=time.perf_counter(),
        )
        self.settings, self.train_tokens, self.seed = settings, train_tokens, seed

    def train_loss(self, step: int) -> torch.Tensor:
        settings = self.settings
        window = train_batch(
            self.train_tokens, step, self.seed, settings.batch_size, settings.seq_len
        ).to(self.device)
        return accumulated_loss(self.model, window, settings.micro_batch_size)

    def train_scalars(self, loss: float, lr: float, tokens_per_s: float) -> dict:
        return {"heal/loss": loss, "heal/lr": lr}

    def train_losses(self) -> list[float]:
        return [row[3] for row in self.log_rows if row[2] == "train"]


def _frozen(model, settings: HealSettings):
    """`full`'s trained model in eval mode with every parameter frozen."""
    model.eval()
    if settings.gradient_checkpointing:
        model.activation_checkpointing_disable()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def _merge_adapters(model, pruned, settings: HealSettings):
    """The adapters merged into the full-precision pruned weights (QLoRA's moved onto `pruned`
    first), in eval mode with every parameter frozen."""
    from peft import get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    if settings.method == "qlora":
        adapters = get_peft_model_state_dict(model)
        model = get_peft_model(pruned, _lora_config(settings))
        set_peft_model_state_dict(model, adapters)
    merged = model.merge_and_unload().eval()
    if settings.gradient_checkpointing:
        merged.activation_checkpointing_disable()
    for parameter in merged.parameters():
        parameter.requires_grad_(False)
    return merged


def _heal_record(settings: HealSettings, trainable: int, seconds: float, losses: list) -> dict:
    return {
        "method": settings.method,
        "steps": settings.steps,
        "trainable_parameters": int(trainable),
        "lr": settings.lr,
        "train_seconds": round(seconds, 3),
        "first_train_loss": losses[0] if losses else None,
        "last_train_loss": float(np.mean(losses[-max(1, len(losses) // 10) :])) if losses else None,
    }


def heal(
    pruned,
    train_tokens: np.ndarray,
    settings: HealSettings,
    seed: int,
    device: str = "cpu",
    log=None,
    tensorboard_dir=None,
    wandb: dict | None = None,
    run_name: str = "healing",
    run_config: dict | None = None,
):
    """Heal `pruned` (a model of its own, e.g. depthlab.stages.pruning.layer_removal.prune_copy;
    it is modified: the adapters are merged into it, or, `full`, its weights are trained) and
    return (healed model in eval mode, record).
    `log` also gets a progress line about every quarter of the steps (a bar on a terminal);
    `tensorboard_dir`: where to write the loss and lr as TensorBoard scalars (None: nowhere);
    `wandb`: the resolved `tracking.wandb` settings (None: no W&B run), for a run `run_name`
    with config `run_config`."""
    _check_healable(pruned, settings)
    torch.manual_seed(seed)
    if settings.method in ADAPTER_METHODS:
        # peft is imported when a model is healed with adapters, not with this module
        # (config-time validation and stages without healing import it)
        from peft import get_peft_model

        base = _adapter_base(pruned, settings, device)
        model = get_peft_model(base, _lora_config(settings))
    else:
        base = model = _full_base(pruned, settings)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    loop = HealLoop(
        model, heal_optimizer(model, settings), settings, train_tokens, seed, input_device(base)
    )
    start = time.perf_counter()
    loop.tracker = Tracker(
        tensorboard_dir,
        enabled=tensorboard_dir is not None,
        wandb=wandb,
        run_name=run_name,
        run_config=run_config,
    )
    try:
        loop.run(log is not None, max(1, settings.steps // 4), write=log)
    finally:
        loop.tracker.close()
    seconds = time.perf_counter() - start
    losses = loop.train_losses()
    if settings.method in ADAPTER_METHODS:
        healed = _merge_adapters(model, pruned, settings)
    else:
        healed = _frozen(model, settings)
    record = _heal_record(settings, trainable, seconds, losses)
    if log:
        what = "adapter" if settings.method in ADAPTER_METHODS else "trained"
        log(
            f"healed ({settings.method}, {settings.steps} steps, {trainable} {what} "
            f"parameters) in {seconds:.1f} s: train loss {record['first_train_loss']:.3f} -> "
            f"{record['last_train_loss']:.3f}"
        )
    return healed, record
