#!/usr/bin/env python
"""One model's tuned lens (Belrose et al. 2023) beside its logit lens, and its layer swaps and
deletions (Lad et al. 2024), on each of its text sets.

Writes into the spec's `out` folder: translators.safetensors, lens_training.json,
<text_set>/lens.csv, <text_set>/swaps.csv, summary.json and provenance.json (the figure is
plot_lens_swaps.py's). See depthlab/stages/lens_swaps/stage.py (the job), tuned_lens.py (the lens
and where its training differs from the paper's) and layer_swaps.py (the variants).

Spec (`lens_swaps` job, named <model>): model_name, model_path, dtype, revision, train_data (the
data folder whose train split trains the lens), text_sets ({name: texts}, held-out documents),
text_field, max_samples, max_length, batch_size, stride (every k-th scored token),
add_special_tokens, tuned_lens ({train_tokens, steps, batch_tokens, lr}), seed, device, out.

By hand: python workflow_scripts/lens_swaps.py --config config/test.yaml --job pre_ln
"""

import json

from depthlab.cli import main_guard, resolve_device, start_job


def main() -> None:
    _, spec = start_job(__doc__, "lens_swaps")

    from depthlab.stages.lens_swaps.stage import run

    summary = run(spec, device=resolve_device(spec["device"]))
    print(json.dumps({k: summary[k] for k in ("model", "train_seconds", "eval_seconds")}))


if __name__ == "__main__":
    main_guard(main)
