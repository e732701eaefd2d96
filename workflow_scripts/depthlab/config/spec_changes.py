"""What changed in a job's spec since its output was made, one readable line per changed key.

Snakemake reruns a job whose params changed and says so by printing both whole param sets (a
spec is ~2 KB of JSON); `spec_change_lines` names each changed key instead:

    choose_depth[lns]: auto_depth.tolerances.val_loss 0.5 -> 0.6

The old spec is the one Snakemake recorded with the job's output (`recorded_spec` reads its
params record: each param's repr), so the lines describe exactly the change that reruns the job.
"""

from __future__ import annotations

import ast
import json

ABSENT = object()  # a key on one side only
LONGEST_VALUE = 60  # characters of a value in a line (a long list is cut, the key still named)


def spec_changes(old, new, key: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, old value, new value) for every value that differs between two specs, in
    key order: dicts are compared key by key, lists of equal length item by item
    (`export[0].metric`); a key on one side only has ABSENT on the other."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for name in sorted(old.keys() | new.keys()):
            inner = f"{key}.{name}" if key else str(name)
            changes += spec_changes(old.get(name, ABSENT), new.get(name, ABSENT), inner)
        return changes
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            change
            for index, (a, b) in enumerate(zip(old, new))
            for change in spec_changes(a, b, f"{key}[{index}]")
        ]
    # 1 and 1.0 are the same number to Python but not to the recorded JSON text
    same = type(old) is type(new) and old == new
    return [] if same else [(key or "(spec)", old, new)]


def show_value(value) -> str:
    """A value as JSON (strings quoted, null for None), cut to LONGEST_VALUE characters."""
    if value is ABSENT:
        return "(absent)"
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= LONGEST_VALUE else text[: LONGEST_VALUE - 3] + "..."


def spec_change_lines(label: str, old: dict, new: dict) -> list[str]:
    """One line per changed key: `<label>: <key> <old> -> <new>`."""
    return [
        f"{label}: {key} {show_value(a)} -> {show_value(b)}" for key, a, b in spec_changes(old, new)
    ]


def recorded_spec(recorded_params) -> dict | None:
    """The spec among a job's recorded params (Snakemake stores each param as its repr; the spec
    is the one that is a JSON object), or None when none is."""
    for item in recorded_params or ():
        try:
            value = ast.literal_eval(item)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if not isinstance(value, str) or not value.startswith("{"):
            continue
        try:
            spec = json.loads(value)
        except json.JSONDecodeError:
            continue
        if isinstance(spec, dict):
            return spec
    return None
