"""Reading a pretraining run's outputs: its training log and the model facts of its config.json.

A pretrain model folder (training.pretrain's output) holds `train_log.csv` (one row per logged
step: step, tokens, split = train | val, loss, lr and the wall-clock column `wall_s`) and the
Hugging Face `config.json` of the checkpoint. `read_run` reads both into one `PretrainRun`; the
sweep collector (scaling.collect_sweep_points) and the loss-curve figure (pretrain_plots) use it.

Only the files a checkpoint carries are read: configuration values that are not part of the
checkpoint (a display label, which sweep a model belongs to) are the caller's to pass in.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd

TRAIN_LOG = "train_log.csv"
MODEL_CONFIG = "config.json"
TRAIN_LOG_COLUMNS = ("tokens", "split", "loss")  # what every reader of the log needs


def non_embedding_params(config: dict) -> int:
    """Non-embedding parameters of a LLaMA-style decoder (Kaplan's N) from its config.json."""
    width = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or width // heads
    ffn = config["intermediate_size"]
    attention = width * heads * head_dim * 2 + width * kv_heads * head_dim * 2
    if config.get("attention_bias"):
        attention += heads * head_dim + 2 * kv_heads * head_dim + width
    mlp = 3 * width * ffn + (2 * ffn + width if config.get("mlp_bias") else 0)
    norms = 2 * width
    return int(config["num_hidden_layers"] * (attention + mlp + norms) + width)


@dataclasses.dataclass
class PretrainRun:
    """One pretraining run: its folder, training log and the facts of its config.json."""

    name: str  # the folder name (the model's name in the config)
    path: Path
    log: pd.DataFrame  # train_log.csv as written
    width: int  # hidden_size (m)
    depth: int  # num_hidden_layers (l)
    non_embedding_params: int | None  # Kaplan's N; None when config.json lacks the MLP size
    norm_scheme: str | None  # recorded by depthlab_llama checkpoints; None for plain Llama
    config: dict  # the whole config.json

    def val_losses(self, min_tokens: int = 0) -> pd.DataFrame:
        """Validation rows with at least `min_tokens` tokens; a repeated token count keeps its
        last row."""
        val = self.log[(self.log["split"] == "val") & (self.log["tokens"] >= min_tokens)]
        return val.drop_duplicates("tokens", keep="last")


def read_run(model_dir: str | Path) -> PretrainRun:
    """Read one pretrain model folder (config.json + train_log.csv); errors name the file."""
    model_dir = Path(model_dir)
    for required in (MODEL_CONFIG, TRAIN_LOG):
        if not (model_dir / required).is_file():
            raise FileNotFoundError(f"{model_dir}: missing {required}")
    config = json.loads((model_dir / MODEL_CONFIG).read_text())
    for key in ("hidden_size", "num_hidden_layers"):
        if key not in config:
            raise ValueError(f"{model_dir / MODEL_CONFIG}: missing '{key}'")
    log = pd.read_csv(model_dir / TRAIN_LOG)
    missing = set(TRAIN_LOG_COLUMNS) - set(log.columns)
    if missing:
        raise ValueError(f"{model_dir / TRAIN_LOG}: missing column '{sorted(missing)[0]}'")
    return PretrainRun(
        name=model_dir.name,
        path=model_dir,
        log=log,
        width=config["hidden_size"],
        depth=config["num_hidden_layers"],
        non_embedding_params=(
            non_embedding_params(config) if "intermediate_size" in config else None
        ),
        norm_scheme=config.get("norm_scheme"),
        config=config,
    )


def read_training_runs(
    model_dirs, labels: dict | None = None, sweeps: dict | None = None
) -> pd.DataFrame:
    """One tidy frame of every run's train_log.csv rows, with columns model (folder name),
    label (`labels[model]`, e.g. its norm scheme; default the model name), sweep
    (`sweeps[model]`, the depth x width sweep the model belongs to; "" if none), depth, width and
    norm_scheme (as recorded in config.json, else None). Labels and sweeps are configuration,
    so the caller passes them; nothing is read back from provenance records."""
    labels, sweeps = dict(labels or {}), dict(sweeps or {})
    frames = []
    for model_dir in model_dirs:
        run = read_run(model_dir)
        frames.append(
            run.log.assign(
                model=run.name,
                label=labels.get(run.name, run.name),
                norm_scheme=run.norm_scheme,
                depth=run.depth,
                width=run.width,
                sweep=sweeps.get(run.name) or "",
            )
        )
    if not frames:
        raise ValueError("read_training_runs: no model directories given")
    return pd.concat(frames, ignore_index=True)
