"""The shape of every declared model (depthlab.plan.model_shapes), for the resource plan: a model
trained here from its architecture block and the run's vocabulary, a GGUF model from its header,
a local folder from its config.json and safetensors headers, a hub model from the pinned table
(None when the table has no row for it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from depthlab.config.models import declared_checkpoint_folder, gguf_sources, training_data
from depthlab.core.errors import ConfigError
from depthlab.plan.job_costs import PRECISION_DTYPE
from depthlab.plan.model_shapes import Shape, folder_shape, gguf_shape, hub_shape, pretrain_shape

if TYPE_CHECKING:
    from depthlab.config.resolved import Resolved


def model_shape(resolved: Resolved, name: str, base_dir: Path) -> Shape | None:
    model = resolved.models[name]
    if model["kind"] == "pretrain":
        train = model["train"]
        if training_data(model) == "problems":
            from depthlab.data.problem_sets import VOCABULARY

            vocab = len(VOCABULARY)
        else:  # a pretrained tokenizer may leave it unset: 2^16, the data's uint16 ids
            vocab = (resolved.config["data"].get("tokenizer") or {}).get("vocab_size") or 2**16
        dtype = PRECISION_DTYPE[train["precision"]]
        return pretrain_shape(
            model["architecture"], vocab, train["seq_len"], dtype, model["norm_scheme"]
        )
    if model["kind"] == "gguf":
        first = gguf_sources(model, base_dir, f"models.{name}.files")[0]
        try:
            return gguf_shape(first, "float32")  # convert_gguf stores float32
        except (OSError, ValueError, KeyError) as error:
            raise ConfigError(f"models.{name}.files[0]: {first}: {error}") from None
    folder = declared_checkpoint_folder(resolved, name)
    if folder is not None:
        return folder_shape(folder)
    return hub_shape(model["path"], model.get("revision"))


def declared_shapes(resolved: Resolved, base_dir: Path) -> dict[str, Shape | None]:
    """{model name: its shape} of every declared model."""
    return {name: model_shape(resolved, name, base_dir) for name in resolved.models}
