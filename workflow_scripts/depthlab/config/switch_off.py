"""Switching things off from an overlay with `null` (docs/configs.md, "Switching things off").

    drop_removed_entries(c, notes)  a copy of `c` without what null removed; the models and sweeps
                                    removed (and the models trained on problems when the problems
                                    are off) dropped from every list that names them, one note each
    null_keys(c)                    every key of `c` that null switches off or removes, from
                                    config/schema.yaml (the tests run each)

What null does at a key is read from config/schema.yaml, never listed here: a key whose schema
allows null keeps it (a stage, `depth_use.problems`: off); an entry of a mapping keyed by names the
user chooses (a model, a sweep, a fit, a text set, a per_model model, a problem family) is removed;
an optional sub-section (not required, null not allowed) is removed, so it is absent (its
defaults, which for an optional sub-section is nothing). Anything else set to null is left for the
schema check to name.
"""

from __future__ import annotations

import copy
import functools
import re

from depthlab.settings.defaults import schema


@functools.cache
def _schema() -> dict:
    """config/schema.yaml, read once (settings.defaults.schema copies it at every call)."""
    return schema()


# Where stages name models (a list of names, or a mapping keyed by them): a model or sweep that a
# config removes is dropped from each. `*` stands for every entry of a named mapping.
MODEL_LISTS = (
    ("analysis", "models"),
    ("analysis", "text_sets", "*", "models"),
    ("lens_swaps", "models"),
    ("pruning", "models"),
    ("depth_use", "skip", "models"),
    ("depth_use", "depth_score", "models"),
    ("finetune", "models"),
)
MODEL_KEYS = (
    ("analysis", "per_model"),
    ("lens_swaps", "per_model"),
    ("pruning", "per_model"),
    ("depth_use", "skip", "per_model"),
    ("depth_use", "depth_score", "families"),
)
MAP_PAIRS = ("depth_use", "linear_maps", "pairs")
FAMILIES = ("depth_use", "problems", "families")


def schema_node(node: dict) -> dict:
    """A schema node with its `$ref` followed and its `allOf` parts merged (their properties and
    required keys), so that a walk sees one mapping per key."""
    definitions = _schema().get("definitions", {})
    while "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if "allOf" not in node:
        return node
    merged = {k: v for k, v in node.items() if k != "allOf"}
    for part in map(schema_node, node["allOf"]):
        merged["properties"] = {**part.get("properties", {}), **merged.get("properties", {})}
        merged["required"] = [*merged.get("required", []), *part.get("required", [])]
        for key in ("type", "additionalProperties"):
            if key in part:
                merged.setdefault(key, part[key])
    return merged


def _types(node: dict) -> list:
    kind = node.get("type", [])
    return kind if isinstance(kind, list) else [kind]


def nullable(node: dict) -> bool:
    """Whether the schema accepts null at `node`."""
    node = schema_node(node)
    alternatives = node.get("oneOf", []) + node.get("anyOf", [])
    return "null" in _types(node) or any(nullable(option) for option in alternatives)


def _section(node: dict) -> bool:
    node = schema_node(node)
    return "object" in _types(node) or "properties" in node


def _children(value: dict, node: dict):
    """(key, its schema node, how null acts there) for each key of `value` the schema knows:
    `keep` (null allowed: off), `named` (an entry of a named mapping), `optional` (an optional
    sub-section), or None (null is the schema's to refuse)."""
    node = schema_node(node)
    properties, extra = node.get("properties", {}), node.get("additionalProperties")
    required = set(node.get("required", []))
    for key in value:
        if key in properties:
            child = properties[key]
            if nullable(child):
                action = "keep"
            elif key not in required and _section(child):
                action = "optional"
            else:
                action = None
        elif isinstance(extra, dict):
            # an entry holding settings or a list (not a number: `words: {continuation: 1}`)
            child = extra
            action = "named" if {"object", "array"} & set(_types(schema_node(extra))) else None
        else:
            continue  # an unknown key (or an x- anchor): the schema check names it
        yield key, child, action


def null_keys(config: dict, node: dict | None = None, path: tuple = ()) -> list[tuple]:
    """Every key path of `config` where null switches something off or removes it: each stage and
    nullable sub-section given as a mapping, each optional sub-section, each named entry."""
    found = []
    for key, child, action in _children(config, _schema() if node is None else node):
        value = config[key]
        if action and (action != "keep" or isinstance(value, dict)):
            found.append((*path, key))
        if isinstance(value, dict):
            found += null_keys(value, child, (*path, key))
    return found


def _drop_nulls(value: dict, node: dict, path: tuple, removed: list) -> None:
    for key, child, action in list(_children(value, node)):
        if value[key] is None and action in ("named", "optional"):
            del value[key]
            removed.append((*path, key))
        elif isinstance(value[key], dict):
            _drop_nulls(value[key], child, (*path, key), removed)


def drop_removed_entries(config: dict, notes: list | None = None) -> dict:
    """A copy of `config` without the entries and optional sub-sections set to null; a stage set
    to null stays (off). A model or sweep removed, and a model trained on problems
    (`data: problems`) when depth_use or its problems are off, is also dropped from every stage
    list, per_model entry and linear-map pair that names it, and a sweep from scaling; a problem
    family removed leaves the depth score's family lists. `notes` (when given) receives one line
    per model or sweep dropped, naming the keys it left, and one per depth-score narrowing."""
    config = copy.deepcopy(config)
    removed: list[tuple] = []
    _drop_nulls(config, _schema(), (), removed)
    dropped = {}  # what was removed -> (the model names it made, the sweep it was or None)
    for path in removed:
        if path[0] == "models" and len(path) == 2:
            dropped[f"models.{path[1]}"] = (_model_names(path[1]), None)
        elif path[0] == "sweeps" and len(path) == 2:
            dropped[f"sweeps.{path[1]}"] = (_sweep_names(re.escape(path[1])), path[1])
        elif path == ("sweeps",):  # every sweep: their names are gone with them
            dropped["sweeps"] = (_sweep_names(r"[A-Za-z0-9][A-Za-z0-9_.-]*"), ALL_SWEEPS)
    families = sorted(p[3] for p in removed if p[:3] == FAMILIES)
    dropped.update(_problem_models(config, families))
    lines = [_drop_references(config, what, *names) for what, names in dropped.items()]
    lines += _narrow_depth_score(config, set(families))
    if notes is not None:
        notes.extend(lines)
    return config


def _problem_models(config: dict, families: list) -> dict:
    """The models trained on problems (`data: problems`), removed from `config` when there are
    no problems to train on: depth_use off, its problems off, its last family removed (which
    switches the problems off), or its last synthetic family removed (`families`). What is not
    a mapping here is left as it is, for the schema check to name."""
    depth_use = config.get("depth_use")
    problems = _mapping(depth_use).get("problems")
    if families and _mapping(problems).get("families") == {}:
        depth_use["problems"] = problems = None
    if not isinstance(depth_use, (dict, type(None))) or not isinstance(
        problems, (dict, type(None))
    ):
        return {}
    from depthlab.data.problem_sets import has_synthetic_family  # read only here

    if problems and not (families and not has_synthetic_family(problems)):
        return {}
    gone = ", ".join(families)
    off = (
        "depth_use is off" if not depth_use
        else f"no problem family left once {gone} is removed" if families and not problems
        else "depth_use.problems is off" if not problems
        else f"no synthetic family left once {gone} is removed"
    )  # fmt: skip
    models = _mapping(config.get("models"))
    dropped = {}
    for name in [n for n, m in models.items() if _mapping(m).get("data") == "problems"]:
        del models[name]  # its training data is the problems, which are off
        dropped[f"models.{name} (data: problems; {off})"] = (_model_names(name), None)
    return dropped


ALL_SWEEPS = "*"


def _mapping(value) -> dict:
    """`value` where it is a mapping, else {} (the config is not checked yet)."""
    return value if isinstance(value, dict) else {}


def _model_names(name: str) -> re.Pattern:
    """A declared model's name and its seeds' names (<name>_s<seed>)."""
    return re.compile(rf"{re.escape(name)}(_s\d+)?\Z")


def _sweep_names(sweep: str) -> re.Pattern:
    """The model names of the sweeps `sweep` (a regex) matches: <sweep>_l<depth>_m<width>, and
    their seeds'."""
    return re.compile(rf"({sweep})_l\d+_m\d+(_s\d+)?\Z")


def _sections(config: dict, path: tuple) -> list:
    """(key text, mapping holding the last part) for every place `path` names in `config`."""
    found = [("", config)]
    for part in path[:-1]:
        deeper = []
        for key, section in found:
            if part == "*":
                deeper += [(f"{key}.{n}", v) for n, v in section.items() if isinstance(v, dict)]
            elif isinstance(section.get(part), dict):
                deeper.append((f"{key}.{part}", section[part]))
        found = deeper
    return [(f"{key}.{path[-1]}".lstrip("."), section) for key, section in found]


def _drop_references(config: dict, what: str, pattern: re.Pattern, sweep: str | None) -> str:
    """Drop every name `pattern` matches from the stage lists, per_model keys and linear-map
    pairs (a name still declared is kept), and `sweep` (a removed sweep) from scaling; the note
    naming the keys it left."""
    declared = set(_mapping(config.get("models")))

    def hit(name) -> bool:
        """A name the removal made, not one a model still declared makes (or its seeds)."""
        if not isinstance(name, str) or re.sub(r"_s\d+\Z", "", name) in declared:
            return False
        return name not in declared and bool(pattern.match(name))

    left = []
    for path in MODEL_LISTS:
        for key, section in _sections(config, path):
            names = section.get(path[-1])
            if isinstance(names, list) and any(hit(name) for name in names):
                section[path[-1]] = [name for name in names if not hit(name)]
                left.append(key + (" (now empty)" if not section[path[-1]] else ""))
    for path in MODEL_KEYS:
        for key, section in _sections(config, path):
            entries = section.get(path[-1])
            if isinstance(entries, dict) and any(hit(name) for name in entries):
                for name in [name for name in entries if hit(name)]:
                    del entries[name]
                left.append(key)
    for key, section in _sections(config, MAP_PAIRS):
        pairs = section.get(MAP_PAIRS[-1])
        for pair, ends in list((pairs or {}).items()) if isinstance(pairs, dict) else []:
            if isinstance(ends, dict) and (hit(ends.get("source")) or hit(ends.get("target"))):
                del pairs[pair]
                left.append(f"{key}.{pair}")
    left += _drop_sweep_fits(config, sweep) if sweep else []
    where = f"dropped from {', '.join(left)}" if left else "no stage named it"
    return f"{what}: removed; {where}"


def _drop_sweep_fits(config: dict, removed: str) -> list:
    """scaling.sweep when it names the `removed` sweep (ALL_SWEEPS: any), and the fits that read
    it (source: sweep)."""
    scaling = _mapping(config.get("scaling"))
    sweep = scaling.get("sweep")
    if not sweep or sweep in _mapping(config.get("sweeps")) or removed not in (sweep, ALL_SWEEPS):
        return []
    del scaling["sweep"]
    left = ["scaling.sweep"]
    default = _mapping(scaling.get("fit")).get("source")
    for name, fit in list(_mapping(scaling.get("fits")).items()):
        if _mapping(fit).get("source", default) == "sweep":
            del scaling["fits"][name]
            left.append(f"scaling.fits.{name}")
    return left


def _narrow_depth_score(config: dict, removed_families: set) -> list:
    """The depth score without what it reads that was switched off: no scored model when
    depth_use.problems is off; a removed problem family dropped from each model's families, and a
    model left with none no longer scored. The notes."""
    score = _mapping(config.get("depth_use")).get("depth_score")
    if not isinstance(score, dict):
        return []
    if not config["depth_use"].get("problems"):
        if score.get("models") == []:
            return []
        score["models"] = []
        return ["depth_use.depth_score.models: emptied (the depth score reads depth_use.problems, "
                "which is off)"]  # fmt: skip
    lines = []
    chosen = _mapping(score.get("families"))
    for model, families in list(chosen.items()):
        if not isinstance(families, list):
            continue
        gone = [family for family in families if family in removed_families]
        if not gone:
            continue
        chosen[model] = [family for family in families if family not in gone]
        text = f"depth_use.depth_score.families.{model}: {', '.join(gone)} removed"
        if not chosen[model]:  # nothing left to score: the model leaves the depth score
            del chosen[model]
            names = score.get("models") or []
            pattern = _model_names(model)
            score["models"] = [n for n in names if not (isinstance(n, str) and pattern.match(n))]
            text += f"; {model} is no longer scored (dropped from depth_use.depth_score.models)"
        lines.append(text)
    return lines
