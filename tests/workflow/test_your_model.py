"""Your own model in one line (docs/your-model.md): config/your_model.yaml run for real by
Snakemake on a local HF folder (a tiny random Llama), sized `tiny` from its parameter count;
the pruned export with its mergekit.yaml and the claims about the model come out."""

import json
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from depthlab.config import apply_overrides, load_config, resolve
from depthlab.config.work_size import sized_settings
from local_snakemake import SNAKEMAKE, fresh_checkout, local_env

ROOT = Path(__file__).resolve().parents[2]
LAYERS = 6

pytestmark = pytest.mark.workflow


def tiny_llama_folder(folder: Path) -> Path:
    """A random 6-layer LlamaForCausalLM (32 wide) with a byte-level BPE trained on a few
    docstrings, saved as a user's HF folder is (safetensors, tokenizer.json)."""
    import argparse
    import difflib
    import textwrap

    from tiny_models import byte_level_tokenizer, llama

    texts = [module.__doc__ for module in (json, subprocess, argparse, difflib, textwrap)]
    tokenizer = byte_level_tokenizer(texts, vocab_size=400)
    model = llama(
        layers=LAYERS, vocab_size=len(tokenizer), max_position_embeddings=128, num_key_value_heads=4
    )
    model.config.bos_token_id = tokenizer.bos_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


# config/test.yaml's seconds-scale documents instead of the real-LM prose (a 1 MB walk)
SMALL_DATA = (
    "data={docstrings: {packages: [json, csv, argparse, textwrap, difflib], prose_only: false, "
    "min_ascii_fraction: 0.95}, min_document_chars: 32}"
)


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("your_model")
    model = tiny_llama_folder(base / "my_model")
    checkout = fresh_checkout(base / "depthlab")
    overrides = [f"models={{mine: {{path: {model}}}}}", SMALL_DATA]
    start = time.monotonic()
    result = subprocess.run(
        [SNAKEMAKE, "--cores", "1", "--configfile", "config/your_model.yaml", "--config",
         *overrides],
        cwd=checkout, capture_output=True, text=True, timeout=900, env=local_env(),
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return checkout / "results" / "your_model", model, time.monotonic() - start


def test_the_work_is_sized_tiny_from_the_folder(own_run):
    """The same command line resolved here: the folder's parameter count (under 50M) picks the
    tiny size, and its 6 layers the grid (every n)."""
    _, model, _ = own_run
    config = apply_overrides(
        load_config(ROOT / "config" / "your_model.yaml"), {"models": {"mine": {"path": str(model)}}}
    )
    resolved = resolve(config)
    tiny = sized_settings("tiny", LAYERS)
    assert (
        resolved.jobs("analyse_model")["val/mine"]["max_samples"] == tiny["analysis"]["max_samples"]
    )
    assert resolved.jobs("prune_model")["mine"]["n_grid"] is None  # every n, 1 to L-1


def test_the_pruned_model_is_exported_with_its_mergekit_config(own_run):
    run, model, _ = own_run
    exports = run / "pruned_models" / "mine"
    recipes = sorted(exports.rglob("mergekit.yaml"))
    assert recipes, sorted(p.relative_to(run).as_posix() for p in exports.rglob("*"))
    folder = recipes[0].parent
    pruned = json.loads((folder / "config.json").read_text())
    assert 1 <= pruned["num_hidden_layers"] < LAYERS
    recipe = recipes[0].read_text()
    assert str(model) in recipe and "passthrough" in recipe
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()


def test_the_claims_table_has_rows_for_the_model(own_run):
    run, _, _ = own_run
    claims = pd.read_csv(run / "claims.csv")
    about = claims[claims["claim_id"].str.endswith(":mine")]
    assert len(about) >= 3, claims["claim_id"].tolist()
    # nothing was trained: no claim reads a model of the default suite
    assert not claims["claim_id"].str.contains("pre_ln|lns|smollm2").any()
