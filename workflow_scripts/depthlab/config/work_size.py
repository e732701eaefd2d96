"""`work:` — the size of the model-reading stages' work, chosen from one model's size.

    work: {model: mine, size: auto}

`size_work(config, base_dir)` fills in the analysis, pruning and depth-use keys a config leaves
out (documents, windows, lengths, batches, lm-eval items, the block-size grid) from one of four
sizes; `auto` picks the size from the parameter count of `work.model`, read without loading it
(depthlab.plan.model_shapes: a local folder's config.json and safetensors headers, a GGUF header,
the pinned hub table). A key the config writes always wins, so `--config 'analysis={max_samples:
8}'` still sets it. The `work` section itself is consumed here, before the schema check: the
specs carry the sized values, so a job reruns when its size changes, and a record names them.
config/your_model.yaml is the config that uses it (docs/your-model.md).
"""

from __future__ import annotations

import copy
from pathlib import Path

from depthlab.config.models import gguf_sources, local_path
from depthlab.config.sources import key_text
from depthlab.core.errors import ConfigError
from depthlab.models.architectures import resolve_model_path
from depthlab.plan.model_shapes import folder_shape, gguf_shape, hub_shape

# (largest parameter count, size): the first whose bound the model stays under. tiny: the test
# models; small: a 135M-1B LM on a CPU (SmolLM2-135M, Gemma-3-270M); medium and large: one GPU.
SIZE_BOUNDS = ((50e6, "tiny"), (1.5e9, "small"), (15e9, "medium"), (float("inf"), "large"))
SIZES = tuple(size for _, size in SIZE_BOUNDS)

# Per size: documents and tokens per analysis pass, validation and calibration windows of the
# pruning scores, lm-eval items, skip-intervention documents. The small row is what the default
# suite gives SmolLM2 on a 2-core CPU (config/default.yaml); larger rows read more text at longer
# lengths, where a GPU makes the forward passes cheap and the intervals narrow.
_SETTINGS = {
    #        docs len batch stride  windows seq val_batch loss  calib calib_len items ctx  greedy skip skip_len rows
    "tiny": (12, 32, 8, 1, 4, 32, 4, 16, 4, 16, 16, 16, None, 4, 16, 64),
    "small": (48, 64, 16, 16, 12, 64, 12, 32, 4, 64, 32, 24, 2, 4, 32, 64),
    "medium": (128, 128, 16, 8, 32, 128, 16, 64, 16, 128, 128, 32, 4, 16, 64, 256),
    "large": (256, 256, 8, 8, 64, 256, 8, 128, 32, 256, 256, 32, 4, 32, 128, 256),
}
# retokenized ids per split (pruning.retokenize): enough for every window and the healing text
_TOKENS = {"tiny": 20_000, "small": 100_000, "medium": 1_000_000, "large": 2_000_000}
# block sizes n: 1 and 2 (a model that cannot lose L/8 layers within the tolerance may still
# lose one or two, and auto depth exports that), then shares of the depth L
_GRID_SHARES = (1 / 8, 1 / 4, 3 / 8, 1 / 2)


def size_for(parameters: int) -> str:
    """The work size of a model with `parameters` parameters (SIZE_BOUNDS)."""
    return next(size for bound, size in SIZE_BOUNDS if parameters < bound)


def block_grid(size: str, layers: int) -> list[int] | None:
    """pruning.n_grid: None (every n) for the tiny size, else 1, 2 and about L/8, L/4, 3L/8
    and L/2."""
    if size == "tiny":
        return None
    shares = {round(share * layers) for share in _GRID_SHARES}
    return sorted({min(layers - 1, max(1, n)) for n in {1, 2} | shares})


def sized_settings(size: str, layers: int) -> dict:
    """{stage: settings} of one size for a model of `layers` layers; merged under a config's own
    keys by `size_work`."""
    (docs, length, batch, stride, windows, seq, val_batch, loss_tokens, calib, calib_len,
     items, context, greedy, skip_docs, skip_len, rows) = _SETTINGS[size]  # fmt: skip
    grid = block_grid(size, layers)
    # lm-eval scores the block at about L/4 (its items cost a forward each per scored model)
    quarter = max(1, min(layers - 1, round(layers / 4)))
    lm_eval_grid = [min(grid, key=lambda n: abs(n - quarter)) if grid else quarter]
    return {
        "analysis": {
            "max_samples": docs,
            "max_length": length,
            "batch_size": batch,
            "logit_lens_stride": stride,
        },
        "pruning": {
            "n_grid": grid,
            "greedy_max_n": greedy,
            "val": {
                "windows": windows,
                "seq_len": seq,
                "batch_size": val_batch,
                "loss_tokens": loss_tokens,
            },
            "calibration": {"windows": calib, "seq_len": calib_len, "batch_size": min(calib, 8)},
            "tasks": {"examples": items, "context_tokens": context},
            "lm_eval": {"n_grid": lm_eval_grid, "batch_size": val_batch},
            "retokenize": {"val_tokens": _TOKENS[size], "train_tokens": _TOKENS[size]},
        },
        "depth_use": {
            "skip": {
                "max_samples": skip_docs,
                "max_length": skip_len,
                "batch_size": skip_docs,
                "max_rows": rows,
            }
        },
    }


def _model_shape(config: dict, name: str, base_dir: Path):
    """The shape of the declared model `name`, read from its files (None: a hub id that the
    pinned table has no row for)."""
    model = (config.get("models") or {}).get(name)
    if not isinstance(model, dict):
        declared = ", ".join(sorted(config.get("models") or {})) or "none"
        raise ConfigError(f"work.model: '{name}' is not a declared model (declared: {declared})")
    key = f"models.{name}"
    if model.get("kind") == "gguf":
        first = gguf_sources(model, base_dir, f"{key}.files")[0]
        try:
            return gguf_shape(first, "float32")
        except (OSError, ValueError, KeyError) as error:
            raise ConfigError(f"{key}.files[0]: {first}: {error}") from None
    if model.get("kind") != "hf" or not isinstance(model.get("path"), str):
        raise ConfigError(
            f"work.model: '{name}' is a kind {model.get('kind')} model; work size auto reads a "
            f"kind hf or gguf model's files (or set work.size: {' | '.join(SIZES)})"
        )
    try:
        local = local_path(resolve_model_path(model["path"]), base_dir)
    except FileNotFoundError as error:  # a pkg: path whose package or folder is missing
        raise ConfigError(f"{key}.path: {error}") from None
    if local is None:
        return hub_shape(model["path"], model.get("revision"))
    if not (Path(local) / "config.json").is_file():
        raise ConfigError(f"{key}.path: '{model['path']}' holds no config.json")
    try:
        return folder_shape(local)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{key}.path: {local}/config.json: unreadable ({error!r})") from None


def _work_section(config: dict) -> tuple[str, str]:
    """(model, size) of the `work:` section; ConfigError naming the key when malformed."""
    work = config["work"]
    if not isinstance(work, dict) or set(work) - {"model", "size"} or "model" not in work:
        raise ConfigError(
            f"work: {work!r}: a mapping {{model: <a declared model>, size: auto | "
            f"{' | '.join(SIZES)}}}"
        )
    size = work.get("size", "auto")
    if size != "auto" and size not in SIZES:
        raise ConfigError(f"work.size: {size!r} is not one of auto, {', '.join(SIZES)}")
    if not isinstance(work["model"], str):
        raise ConfigError(f"work.model: {work['model']!r} is not a model name")
    return work["model"], size


def work_size(config: dict, base_dir: Path) -> tuple[str, int, int | None] | None:
    """(size, layers, parameters) that `work:` picks (None without a `work:` section);
    parameters is None where a named size was given."""
    if config.get("work") is None:
        return None
    name, size = _work_section(config)
    shape = _model_shape(config, name, Path(base_dir))
    if shape is None:
        hub_id = config["models"][name]["path"]
        raise ConfigError(
            f"work.model: the hub model '{hub_id}' has no row in the pinned table "
            f"(depthlab/plan/hub_architectures.yaml), so its size and depth are unknown offline: "
            f"download it (`huggingface-cli download {hub_id} --local-dir <folder>`) and point "
            f"models.{name}.path at the folder"
        )
    if size == "auto":
        return size_for(shape.parameters), shape.num_layers, shape.parameters
    return size, shape.num_layers, None


def _merge_under(sized: dict, own: dict, path: tuple = ()) -> dict:
    """`own` with every key of `sized` it leaves out added (own values win, mappings merged)."""
    merged = copy.deepcopy(own)
    for key, value in sized.items():
        if key not in merged:
            merged[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(merged[key], dict):
            merged[key] = _merge_under(value, merged[key], (*path, key))
        elif isinstance(value, dict) and merged[key] is not None:
            raise ConfigError(f"{key_text((*path, key))}: {merged[key]!r} is not a mapping")
    return merged


def size_work(config: dict, base_dir: str | Path) -> dict:
    """`config` without its `work:` section, the keys it leaves out of analysis, pruning and
    depth_use filled in at the work size `work:` picks (see the module docstring); `config`
    itself when it has no `work:` section. A stage set to null stays off."""
    picked = work_size(config, Path(base_dir))
    if "work" not in config:
        return config
    config = copy.deepcopy(config)  # a LoadedConfig stays one: errors still name their files
    del config["work"]
    if picked is None:  # `work: null`: the stages as written
        return config
    size, layers, _ = picked
    sized = sized_settings(size, layers)
    for stage, settings in sized.items():
        if isinstance(config.get(stage), dict):
            config[stage] = _merge_under(settings, config[stage], (stage,))
    analysis = config.get("analysis")
    text_sets = analysis.get("text_sets") if isinstance(analysis, dict) else None
    for text_set in (text_sets or {}).values():
        # a document shard (the claims' intervals over shards) reads a third of a full pass
        if isinstance(text_set, dict) and "shard" in text_set and "max_samples" not in text_set:
            text_set["max_samples"] = max(2, sized["analysis"]["max_samples"] // 3)
    return config
