#!/usr/bin/env python
"""Supervised fine-tuning of one pretrained model (full or LoRA), resumable, written as an HF
folder that loads like its parent (depthlab/stages/finetune/finetuning.py).

Spec (`finetune_model` job, one per parent model and fine-tuning seed):
  model_name    this fine-tuned model's name (<parent>_ft_s<seed>)
  parent_name   the parent's name in the config
  parent        the parent's HF folder, pkg: path or hub id
  revision      hub revision of a hub parent (null)
  data          build_finetune_data output folder (train.jsonl, val.jsonl)
  train         {method (full|lora), steps, batch_size, seq_len, lr, min_lr_ratio, warmup_steps,
                 weight_decay, beta1, beta2, grad_clip, eval_every, log_every, checkpoint_every,
                 precision (fp32|bf16), train_on_prompt, lora {rank, alpha, dropout,
                 target_modules}}
  seed          the batch order and LoRA's initial adapters
  device        auto | cpu | cuda
  progress_every  steps between progress lines (null: about every 5%)
  out           output folder (written atomically): the model, train_log.csv, provenance.json
  state_dir     resumable state (state.pt), removed when the run completes
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "finetune_model")
    from depthlab.cli import resolve_device
    from depthlab.stages.finetune.finetuning import FinetuneSettings, finetune

    settings = FinetuneSettings.from_dict(spec["train"])
    summary = finetune(
        spec["model_name"],
        spec["parent"],
        spec["revision"],
        spec["data"],
        spec["out"],
        spec["state_dir"],
        settings,
        spec["seed"],
        device=resolve_device(spec["device"]),
        progress_every=spec["progress_every"],
        provenance_config=spec,
    )
    print(
        f"{spec['model_name']}: held-out task loss {summary['initial_task_loss']:.4f} -> "
        f"{summary['final_task_loss']:.4f}"
    )


if __name__ == "__main__":
    main_guard(main)
