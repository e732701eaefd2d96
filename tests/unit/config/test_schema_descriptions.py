"""Every key of config/schema.yaml has a description: the config key reference (rendered from the
schema by docs/hooks/config_reference.py) says what each key does. Before, 499 of its 676 keys
had none (`seed`, `run_name`, `pruning.models`, ...). A key added without one fails here, named
with where to write it."""

import importlib.util
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def reference_hook():
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "docs" / "hooks" / "config_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def undescribed(schema: dict) -> list[str]:
    hook = reference_hook()
    walker = hook.Walker(schema)
    walker.walk({k: v for k, v in schema.items() if k != "definitions"}, "")
    return [key.path for key in walker.keys.values() if not key.description]


def test_every_config_key_has_a_description():
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    missing = undescribed(schema)
    assert not missing, (
        f"{len(missing)} config key(s) without a `description:` in config/schema.yaml (the key "
        f"reference shows it beside the key): " + ", ".join(missing)
    )


def test_a_key_without_a_description_is_named():
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    schema["definitions"]["train_settings"]["properties"]["compile"] = {"type": "boolean"}
    schema["properties"]["cluster"]["properties"]["gpu"]["properties"]["utilisation"] = {
        "type": "object"
    }
    assert set(undescribed(schema)) == {
        "models.<name>.train.compile",
        "sweeps.<name>.train.compile",
        "pretrain.compile",
        "cluster.gpu.utilisation",
    }


def test_the_reference_shows_lists_as_values_and_breaks_keys_only_after_dots():
    """Before, a list default read "(a list)" and key names broke mid-word in the narrow key
    column (`data.docstri` / `ngs`)."""
    text = reference_hook().page_text(ROOT)
    default = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    packages = ", ".join(f'"{p}"' for p in default["data"]["docstrings"]["packages"])
    assert "(a list)" not in text
    assert (
        '| <code class="config-key">data.<wbr>docstrings.<wbr>packages</code> | '
        f'<code class="config-value">[{packages}]</code> | *array of string*: ' in text
    )
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    assert "code.config-key" in css and "word-break: normal" in css
