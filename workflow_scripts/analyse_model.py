#!/usr/bin/env python
"""One streamed pass of one model over a text set: every hidden-state measure of the four papers.

Writes into the spec's `out` folder: measures.csv (tidy: model, text_set, measure, layer, n,
value, count), angular_distance_last.csv (the (L+1) x (L+1) matrix of d(x^i, x^j) on the last
real token), angular_distance_all.csv (with all_token_distance), summary.json (counts,
architecture, notes) and provenance.json. See depthlab/stages/analysis/stage.py for the stage,
depthlab/stages/analysis/measures.py for the measures and depthlab/models/architectures.py for the architectures and what
a_l, m_l mean in each.

Spec (`analyse_model` job, named <text_set>/<model>): model_name, model_path (HF folder, hub id
or pkg:<package>/<folder>), dtype, revision, text_set, texts ({source: jsonl, path} or
{source: hf_dataset, name, config_name, split}), text_field, max_samples, max_tokens,
max_length, batch_size, logit_lens, logit_lens_stride, all_token_distance, add_special_tokens
(false: documents encoded as in the training stream; true: with the tokenizer's template),
device, out.

By hand: python workflow_scripts/analyse_model.py --config config/default.yaml --job val/lns
"""

import json

from depthlab.cli import main_guard, resolve_device, start_job


def main() -> None:
    _, spec = start_job(__doc__, "analyse_model")

    from depthlab.stages.analysis.stage import run

    summary = run(spec, device=resolve_device(spec["device"]))
    print(
        json.dumps(
            {
                k: summary[k]
                for k in (
                    "model",
                    "samples",
                    "tokens",
                    "pass_seconds",
                    "tokens_per_second",
                    "notes",
                )
            }
        )
    )


if __name__ == "__main__":
    main_guard(main)
