"""One look for every figure: a fixed colour per norm scheme, a sequential palette by depth for
sweep models, the model groups that share a panel (norm schemes, each sweep, hub models), colour
scales shared by heatmaps that are compared, and seed replicates folded into mean + band.

Model facts (`facts`: {model name: {kind, norm_scheme, sweep, seed, seed_group}}, the resolved
model config's keys) come from the job spec; a model without facts is classified by its name.
"""

from __future__ import annotations

import re

import numpy as np

from depthlab.core import norm_schemes

# Each scheme's colour is declared with the scheme (depthlab.core.norm_schemes): Pre-LN and LNS,
# the contrast every Curse of Depth figure draws, blue and vermilion; seaborn's colourblind grey,
# pink, yellow and sky blue stay free for hub models.
NORM_SCHEMES = norm_schemes.names()
_HUB_INDICES = (7, 6, 8, 9)
NORM_GROUP = "norm schemes"
HUB_GROUP = "hub models"
SEED_BAND = ("pi", 100)  # seaborn errorbar: the full range over seed replicates
_SWEEP_NAME = re.compile(r"^(?P<sweep>.+)_l(?P<depth>\d+)_m(?P<width>\d+)$")


def _palette():
    import seaborn as sns

    return sns.color_palette("colorblind")


def scheme_colours() -> dict:
    """{norm scheme: RGB}, the same in every figure."""
    from matplotlib.colors import to_rgb

    return {name: to_rgb(scheme.colour) for name, scheme in norm_schemes.schemes().items()}


def model_facts(names, facts: dict | None = None) -> dict:
    """{name: facts} for every name, with `base` (the seed group or the name), `group` and, for
    sweep models, `depth` and `width` (from the name <sweep>_l<depth>_m<width>)."""
    facts = facts or {}
    out = {}
    for name in names:
        fact = dict(facts.get(name, {}))
        base = fact.get("seed_group", name)
        if not fact:
            match = _SWEEP_NAME.match(base)
            if base in NORM_SCHEMES:
                fact = {"kind": "pretrain", "norm_scheme": base}
            elif match:
                fact = {"kind": "pretrain", "sweep": match["sweep"]}
            else:
                fact = {"kind": "hf"}
        match = _SWEEP_NAME.match(base)
        if "sweep" in fact and match:
            fact.update(depth=int(match["depth"]), width=int(match["width"]))
        fact["base"] = base
        fact["group"] = (
            f"sweep {fact['sweep']}"
            if "sweep" in fact
            else HUB_GROUP
            if fact.get("kind") in ("hf", "gguf")  # declared checkpoints
            else NORM_GROUP
        )
        out[name] = fact
    return out


def groups(facts: dict) -> dict:
    """{group title: [model names]}: norm schemes first, then each sweep, then hub models."""
    order = {NORM_GROUP: 0, HUB_GROUP: 2}
    grouped: dict[str, list] = {}
    for name, fact in facts.items():
        grouped.setdefault(fact["group"], []).append(name)
    if any(title.startswith("sweep ") for title in grouped):
        for title, names in grouped.items():
            if title.startswith("sweep "):
                names.sort(key=lambda n: (facts[n].get("depth", 0), facts[n].get("width", 0)))
    return dict(sorted(grouped.items(), key=lambda item: order.get(item[0], 1)))


def label(fact: dict) -> str:
    """Legend label of a seed group: its norm scheme, `l<depth> m<width>` or its name."""
    if "depth" in fact:
        return f"l{fact['depth']} m{fact['width']}"
    if fact["group"] == NORM_GROUP:
        return fact.get("norm_scheme", fact["base"])
    return fact["base"]


def colours(facts: dict) -> dict:
    """{base name: colour}: norm schemes their fixed colour, sweep models a sequential palette
    by depth (darker = deeper; widths share a colour and differ by line style), hub models
    grey, pink, yellow, sky blue."""
    import seaborn as sns

    schemes, palette = scheme_colours(), _palette()
    out, hub = {}, 0
    sweep_depths = sorted({f["depth"] for f in facts.values() if "depth" in f})
    ramp = dict(zip(sweep_depths, sns.color_palette("crest", max(len(sweep_depths), 1))))
    for fact in facts.values():
        base = fact["base"]
        if base in out:
            continue
        if "depth" in fact:
            out[base] = ramp[fact["depth"]]
        elif fact["group"] == NORM_GROUP and fact.get("norm_scheme") in schemes:
            out[base] = schemes[fact["norm_scheme"]]
        else:
            out[base] = palette[_HUB_INDICES[hub % len(_HUB_INDICES)]]
            hub += 1
    return out


def line_style(fact: dict, facts: dict) -> str:
    """Sweep widths are told apart by line style (the narrowest solid)."""
    widths = sorted({f["width"] for f in facts.values() if "width" in f})
    if "width" not in fact:
        return "-"
    return ("-", "--", ":", "-.")[widths.index(fact["width"]) % 4]


# line_style as seaborn dash specs
DASHES = {"-": "", "--": (4, 2), ":": (1, 1.5), "-.": (4, 1.5, 1, 1.5)}


def seed_counts(facts: dict) -> dict:
    """{base name: number of seed replicates}."""
    counts: dict[str, int] = {}
    for fact in facts.values():
        counts[fact["base"]] = counts.get(fact["base"], 0) + 1
    return counts


def shared_norm(matrices, vmin: float | None = None):
    """One colour scale for heatmaps that are compared: min and max over all of them (vmin
    fixed when given)."""
    from matplotlib.colors import Normalize

    values = [np.asarray(m, float) for m in matrices]
    finite = [v[np.isfinite(v)] for v in values]
    finite = [v for v in finite if v.size]
    low = vmin if vmin is not None else (min(v.min() for v in finite) if finite else 0.0)
    high = max(v.max() for v in finite) if finite else 1.0
    return Normalize(vmin=low, vmax=max(high, low + 1e-12))


def plain_log_ticks(axis, ticks=None) -> None:
    """Log-scaled axis labelled with plain numbers (2, 4, 8 ... not 2 x 10^0)."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    if ticks is not None:
        axis.set_ticks(ticks)
    formatter = ScalarFormatter()
    formatter.set_scientific(False)
    axis.set_major_formatter(formatter)
    axis.set_minor_formatter(NullFormatter())


def format_interval(value: float, interval: dict | None, digits: int = 3) -> str:
    """`0.347 [0.317, 0.371]` (or the value alone when there is no interval)."""
    text = f"{value:.{digits}g}"
    if interval:
        text += f" [{interval['low']:.{digits}g}, {interval['high']:.{digits}g}]"
    return text
