"""Optional keys' defaults are written once, as `default:` in config/schema.yaml
(depthlab.settings.defaults), and the code that fills in an omitted key reads them from there:
before, the re-encoding caps, the tracking defaults and the toy's and the scaling fit's exponent
bounds were restated in the resolvers (and the fit's bounds in the fitter too)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from depthlab.config import load_config, resolve
from depthlab.config.stages.pretrain import tracking_settings
from depthlab.settings import defaults as schema_defaults
from depthlab.settings.defaults import default, defaults
from depthlab.stages.power_law_fitter import FitSettings

ROOT = Path(__file__).resolve().parents[3]


def test_defaults_are_read_through_refs_and_nested_mappings():
    assert default("pruning", "retokenize", "val_tokens") == 1_000_000
    assert default("toy", "exponent_bounds") == [0.0, 10.0]
    assert default("toy", "protocol") == "embedding"
    assert default("scaling", "fit", "exponent_bounds") == [0.0, 5.0]  # via $ref scaling_fit
    assert defaults("tracking") == {"tensorboard": True, "progress_every": None, "wandb": None}
    assert defaults("tracking", "wandb") == {"mode": "offline", "entity": None}


def test_a_key_without_a_default_or_unknown_is_named():
    with pytest.raises(KeyError, match=r"toy\.width: schema\.yaml states no default"):
        default("toy", "width")
    with pytest.raises(KeyError, match=r"toy\.widht: not a key of schema\.yaml"):
        default("toy", "widht")


def test_an_omitted_key_gets_the_schemas_default_and_follows_it(monkeypatch):
    config = load_config(ROOT / "config" / "test.yaml")
    config["toy"].pop("exponent_bounds", None)
    config["toy"].pop("protocol", None)
    config["tracking"] = {"wandb": {"project": "p"}}
    resolved = resolve(config)
    (fit,) = resolved.jobs("fit_toy").values()
    assert fit["exponent_bounds"] == [0.0, 10.0] and fit["protocol"]["name"] == "embedding"
    wandb = tracking_settings(config)["wandb"]
    assert (wandb["mode"], wandb["entity"], tracking_settings(config)["tensorboard"]) == (
        "offline",
        None,
        True,
    )
    # a planted default in the schema is what the resolver, the fitter and the tracking use
    planted = copy.deepcopy(schema_defaults.schema())
    planted["properties"]["toy"]["properties"]["exponent_bounds"]["default"] = [0.5, 9.0]
    planted["properties"]["tracking"]["properties"]["tensorboard"]["default"] = False
    planted["definitions"]["scaling_fit"]["properties"]["exponent_bounds"]["default"] = [1.0, 2.0]
    monkeypatch.setattr(schema_defaults, "_schema", lambda: planted)
    (fit,) = resolve(config).jobs("fit_toy").values()
    assert fit["exponent_bounds"] == [0.5, 9.0]
    assert tracking_settings(config)["tensorboard"] is False
    assert default("scaling", "fit", "exponent_bounds") == [1.0, 2.0]


def test_the_fitter_takes_the_schemas_bounds():
    assert FitSettings().exponent_bounds == tuple(default("scaling", "fit", "exponent_bounds"))
