"""docs/config-reference.md is a committed file (issue 51: four links to it broke when the docs
were read as files, the page existing only in the site) and it is the page config/schema.yaml
gives: after a schema change, `python docs/hooks/config_reference.py --write`."""

import re
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_config_reference_is_current():
    hook = runpy.run_path(str(ROOT / "docs" / "hooks" / "config_reference.py"))
    assert hook["stale_message"]() is None, hook["stale_message"]()
    page = (ROOT / "docs" / "config-reference.md").read_text(encoding="utf-8")
    assert '<code class="config-key">run_<wbr>name</code>' not in page  # breaks only after dots
    assert '<code class="config-key">run_name</code>' in page


def test_every_link_to_it_resolves_as_a_file():
    linked = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]*config-reference\.md)", path.read_text()):
            linked.append(path.name)
            assert (path.parent / target).is_file(), f"{path.name}: {target}"
    assert len(linked) >= 4  # index, configs, development, stage-reference
