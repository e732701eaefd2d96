"""The library's module graph: no import cycle, no upward import, and a code map that names every
module (docs/design.md). Imports are read from the source with the workflow's own walker
(depthlab.code_fingerprint.imported_modules), function-local imports included."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from depthlab.code_fingerprint import _dotted_name, imported_modules

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow_scripts" / "depthlab"

# Lowest first. A module may import from its own layer or a lower one (docs/design.md, code map).
LAYERS = {
    "foundation": {
        "errors",
        "atomic_files",
        "provenance",
        "devices",
        "placement",
        "code_fingerprint",
        "figure_style",
        "paper_values",
    },
    "models": {"modeling_depthlab", "models", "architectures", "gguf_models", "model_shapes"},
    "data": {"data", "model_tokens", "pretrain_runs", "problem_sets", "benchmark_problems"},
    "engines": {
        "residual_stream",
        "measures",
        "interventions",
        "linear_maps",
        "layer_removal",
        "pruning",
        "healing",
        "lm_tasks",
        "speed",
        "training",
        "finetuning",
        "finetune_data",
        "finetune_scores",
        "tracking",
        "toy",
        "power_law_fitter",
        "scaling_fits",
        "toy_fit",
        "depth_score",
        "problem_scoring",
        "claims",
        "verdicts",
        "audit",
        "stage_settings",
        "resource_plan",
        "plan_tables",
        "preflight",
    },
    "stages": {
        "analysis_stage",
        "skip_stage",
        "linear_map_stage",
        "pruning_stage",
        "finetune_stage",
        "model_job",
        "analysis_plots",
        "depth_use_plots",
        "pretrain_plots",
        "pruning_plots",
        "finetune_plots",
        "scaling_plots",
        "toy_plots",
    },
    "entry": {"cli"},
}
# The config package resolves specs with the engines' and stages' settings checks, and cli reads it.
CONFIG_LAYER = list(LAYERS).index("entry") - 0.5


def layer_of(module: str) -> float:
    if module == "config" or module.startswith("config."):
        return CONFIG_LAYER
    for index, names in enumerate(LAYERS.values()):
        if module in names:
            return index
    raise AssertionError(f"depthlab.{module} is in no layer: add it to LAYERS and the code map")


def library_graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _dotted_name(PACKAGE, path)
        if name:
            graph[name] = imported_modules(path, PACKAGE) - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_library_has_no_import_cycle():
    assert find_cycle(library_graph()) is None


def test_no_module_imports_a_higher_layer():
    upward = [
        f"{module} -> {target}"
        for module, targets in library_graph().items()
        for target in targets
        if not target.startswith(module + ".")  # a package's __init__ re-exports its modules
        and layer_of(target) > layer_of(module)
    ]
    assert upward == []


@pytest.mark.parametrize("layer", list(LAYERS))
def test_code_map_names_every_module_of_the_layer(layer):
    design = (REPO / "docs" / "design.md").read_text()
    code_map = design[design.index("## Code map") : design.index("## The four papers")]
    row = next(line for line in code_map.splitlines() if line.startswith(f"| {layer} |"))
    named = set(re.findall(r"`([a-z_*]+)`", row.split("|")[2]))
    expected = {m for m in LAYERS[layer] if not m.endswith("_plots")}
    assert expected - named == set()


def test_every_library_module_has_a_layer():
    for module in library_graph():
        layer_of(module)
