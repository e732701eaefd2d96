"""The linear-maps stage (`linear_maps` job): the closed-form affine maps from every layer state
of a source model to every layer state of a target model on the same tokens
(depthlab.stages.depth_use.linear_maps), written into spec["out"]: relative_error.csv, best_target.csv,
summary.json, provenance.json. The spec keys and the outputs are documented in
workflow_scripts/linear_maps.py.

spec["alignment"] says which token states are paired (depthlab.stages.depth_use.linear_maps): positions (one
tokenizer, the source's, for both models), word_ends (each model its own tokenizer, states paired
at shared word ends), or auto: positions when the two tokenizers give the same ids and both
models read the same special tokens, else word_ends. The mode used and, per split, the documents,
tokens and pairs go into summary.json and the log.
"""

from __future__ import annotations

import itertools
import os

from depthlab.core.errors import UserError
from depthlab.stages.model_job import (
    clamp_max_length,
    load,
    log_stderr,
    provenance_inputs,
    text_batches,
)


def _check_hub_tokenizers(spec: dict) -> None:
    """The resolver compares the tokenizers of models trained here (their data folders) and of
    local checkpoints (config: _check_same_tokens); a hub model's tokenizer is known only once
    it is downloaded, so such a pair is compared here."""
    from depthlab.models.architectures import resolve_model_path
    from depthlab.settings.depth_use import check_same_tokenizer

    if all(os.path.isdir(resolve_model_path(spec[k])) for k in ("source_path", "target_path")):
        return
    try:
        check_same_tokenizer(spec["source_path"], spec["target_path"], where="spec")
    except ValueError as error:
        raise UserError(str(error)) from None


def run(spec: dict, device: str = "cpu", log=log_stderr) -> dict:
    """Run one `linear_maps` job on `device`; returns its summary (also in summary.json).
    log: notes and the best target layer per source layer."""
    import time

    from depthlab.core.atomic_files import atomic_path, write_dataframe, write_json
    from depthlab.core.provenance import Provenance
    from depthlab.stages.depth_use.linear_maps import fit_linear_maps, paired_batches, split_of

    if spec["alignment"] == "positions":
        _check_hub_tokenizers(spec)
    provenance = Provenance(
        "depth_use.linear_maps",
        config=spec,
        inputs=provenance_inputs(spec["texts"], [spec["source_path"], spec["target_path"]]),
    )
    source, tokenizer = load(spec["source_path"], spec["source_revision"], spec["dtype"], device)
    target, target_tokenizer = load(
        spec["target_path"],
        spec["target_revision"],
        spec["dtype"],
        device,
        tokenizer=spec["alignment"] != "positions",
    )
    alignment = _alignment(spec, tokenizer, target_tokenizer)
    max_length = clamp_max_length(spec["max_length"], [source, target], log)

    def keep(split):
        return lambda text: split_of(text, spec["val_fraction"], spec["test_fraction"]) == split

    def batches_by_split(split):
        if alignment == "word_ends":
            return paired_batches(
                _documents(spec, keep(split)),
                tokenizer,
                target_tokenizer,
                max_length,
                spec["batch_size"],
                add_special_tokens=(spec["add_special_tokens"], spec["target_add_special_tokens"]),
                skip_first=spec["skip_first"],
            )
        return text_batches(
            spec, tokenizer, max_length, max_documents=spec["max_documents"], keep=keep(split)
        )

    clock = time.perf_counter()
    result = fit_linear_maps(
        source,
        target,
        batches_by_split,
        alphas=spec["alphas"],
        max_memory_mb=spec["max_memory_mb"],
        skip_first=spec["skip_first"],
    )
    seconds = time.perf_counter() - clock
    frame = result.to_frame(pair=spec["pair"])
    centred = spec["error"] == "centred"
    best_frame = result.best_target_frame(centred, pair=spec["pair"])
    summary = {
        "pair": spec["pair"],
        "error": spec["error"],
        "source": spec["source_name"],
        "target": spec["target_name"],
        "source_layers": result.source_layers - 1,
        "target_layers": result.target_layers - 1,
        "tokens": result.tokens,
        "alignment": alignment,
        "streams": result.streams,
        "blocks": result.blocks,
        "alphas": result.alphas,
        "max_length": max_length,
        "fit_seconds": round(seconds, 3),
        "alpha_chosen_counts": {str(a): int((result.alpha == a).sum()) for a in result.alphas},
        "mean_abs_depth_offset_of_best_target": result.depth_offset_of_best_target(centred),
    }
    with atomic_path(spec["out"], is_dir=True) as out:
        write_dataframe(out / "relative_error.csv", frame)
        write_dataframe(out / "best_target.csv", best_frame)
        write_json(out / "summary.json", summary)
        provenance.extra["summary"] = summary
        provenance.write(out / "provenance.json")
    log(
        f"alignment {alignment}: "
        + "; ".join(
            f"{split} {c['pairs']} pairs from {c['documents']} documents "
            f"({c['source_tokens']} source, {c['target_tokens']} target tokens)"
            for split, c in result.streams.items()
        )
    )
    log(best_frame.to_string(index=False))
    return summary


def _alignment(spec: dict, source_tokenizer, target_tokenizer) -> str:
    """The pairing the job runs: spec["alignment"], with auto decided on the loaded tokenizers
    (positions only when both give the same ids for the same text: same vocabulary, bos/eos
    and the same special tokens added)."""
    from depthlab.settings.depth_use import tokenizer_difference

    if spec["alignment"] != "auto":
        return spec["alignment"]
    same = (
        tokenizer_difference(source_tokenizer, target_tokenizer) is None
        and spec["add_special_tokens"] == spec["target_add_special_tokens"]
    )
    return "positions" if same else "word_ends"


def _documents(spec: dict, keep):
    """The spec's documents (the first max_documents read) that `keep` takes, as text."""
    from depthlab.data.prepare import iter_texts

    documents = iter_texts(spec["texts"], spec["text_field"])
    if spec["max_documents"] is not None:
        documents = itertools.islice(documents, spec["max_documents"])
    return (text for text in documents if keep(text))
