"""The depth-use stage's settings: the skip interventions' kinds and scopes (`depth_use.skip`)
and the checks of their settings and of the linear maps' (`depth_use.linear_maps`) that the schema
cannot make, including whether two checkpoints share a tokenizer (read from tokenizer files
only). Torch-free: the resolver runs these checks while the Snakefile plans the DAG; the engines
(depthlab.stages.depth_use) parse their variants with the same names.
"""

from __future__ import annotations

import numbers

KINDS = ("layer", "attention", "mlp")


SCOPES = ("all", "future")


VARIANTS = tuple(f"{kind}_{scope}" for kind in KINDS for scope in SCOPES)


def parse_variant(name: str, where: str = "variants") -> tuple[str, str]:
    """`<kind>_<scope>` -> (kind, scope); ValueError naming `where` for an unknown one."""
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(
            f"{where}: unknown intervention kind {name!r} (known: {', '.join(VARIANTS)})"
        )
    kind, scope = name.rsplit("_", 1)
    return kind, scope


def check_layer_indices(layers, num_layers: int, where: str = "layers") -> None:
    """Every index an int in [0, num_layers); ValueError naming `where` otherwise."""
    for index in layers:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise ValueError(f"{where}: layer index {index!r} is not an integer")
        if not 0 <= int(index) < num_layers:
            raise ValueError(
                f"{where}: layer index {index} is out of range for a model with "
                f"{num_layers} layers (0..{num_layers - 1})"
            )


def validate_intervention_settings(
    spec: dict, num_layers: int | None = None, where: str = "depth_use.skip"
) -> None:
    """Config-time check of a skip-intervention settings dict (keys as SkipSettings) against a
    model of `num_layers` layers (None: unknown, nothing to check): every skipped layer exists.
    The variants' names, the intervention counts and the depth score's `_all` variant are the
    schema's. Raises ValueError whose message starts with the key."""
    layers = spec.get("layers")
    if layers is not None and num_layers is not None:
        check_layer_indices(layers, num_layers, f"{where}.layers")


# --------------------------------------------------------------------------- linear maps


def validate_linear_map_settings(spec: dict, where: str = "depth_use.linear_maps") -> None:
    """Config-time check of what the schema cannot say about the linear-map settings (it owns
    every type, range and enum; the loader refuses a number that is not finite): fractions that
    leave documents to fit on. ValueError naming the key."""
    if spec["val_fraction"] + spec["test_fraction"] >= 1:
        raise ValueError(
            f"{where}.test_fraction: val_fraction + test_fraction must leave documents to fit on"
        )


def tokenizer_difference(a, b) -> str | None:
    """How two loaded tokenizers differ in the ids they give (vocabulary, bos/eos id), or None
    when they map every token to the same id."""
    if a.get_vocab() != b.get_vocab():
        return f"different tokenizers (vocabularies of {len(a)} and {len(b)} tokens differ)"
    for attr in ("bos_token_id", "eos_token_id"):
        if getattr(a, attr) != getattr(b, attr):
            return f"different {attr}"
    return None


def check_same_tokenizer(path_a: str, path_b: str, where: str = "depth_use.linear_maps") -> None:
    """Raise ValueError (naming `where`) unless the two checkpoints' tokenizers map every token
    to the same id (same vocabulary and special tokens); reads only tokenizer files."""
    from depthlab.models.architectures import load_tokenizer

    try:
        a, b = load_tokenizer(path_a), load_tokenizer(path_b)
    except (OSError, ValueError) as error:
        raise ValueError(f"{where}: cannot load a tokenizer to compare ({error})") from None
    difference = tokenizer_difference(a, b)
    if difference is None:
        return
    if difference.startswith("different tokenizers"):
        raise ValueError(
            f"{where}: models {path_a} and {path_b} have {difference}; a linear map "
            f"between their states position by position needs the same tokens "
            f"(alignment: word_ends pairs the ends of words instead)"
        )
    raise ValueError(f"{where}: models {path_a} and {path_b} have {difference}")
