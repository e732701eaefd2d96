#!/usr/bin/env python
"""The untrained twins of the models trained here at one shape on one data set, measured: each
model rebuilt as it was before its first step (same architecture, norm scheme, seed and training
precision) through the trained model's own measures, so the claims can set each trained value
beside the initialisation's. The stage is depthlab/stages/twins/stage.py.

Writes into spec["out"] (atomically) one folder per twin, <model>/ (a table only where the trained
model has that job): states.csv (state, h_var), layers.csv (layer, distance d(l, l+1) over all
tokens, block_rel_norm), updates.csv (pair, angle_update), losses.json ({removal key: mean
validation loss}: full, single:<l>, angular:<n>, deepest:<n>), skip_effects.csv (the skip stage's
layer_future rows), lens_swaps/<i>/{lens,swaps}.csv (per text set); and provenance.json.

Spec keys:
  group                 the shape and data set: <data>_l<layers>_h<width>
  twins                 {model: its twin}, each (null where marked):
    model_name            the trained model
    declaration           {architecture, norm_scheme, train: {seq_len, init_std, precision}}
    seed                  the seed pretraining builds the model from
    data                  the data stage's folder (meta.json: vocabulary, special ids; val tokens)
    tokenizer             the trained model's folder (its tokenizer, as its own jobs read it)
    analysis              null or the trained model's analyse_model settings: texts, text_field,
                          batch_size, add_special_tokens, max_samples, max_length, max_tokens
    val                   null or {windows, seq_len, batch_size} of the validation windows
    removals              score every single layer and the blocks (else the full model alone)
    n_values              block sizes of the angular and deepest blocks
    skip                  null or its skip_interventions job's settings (layer_future only)
    lens_swaps            null or its lens_swaps job's settings
  device                auto | cpu | cuda
  out                   output folder (results/<run>/twins/<group>)

Example (default run): --config config/default.yaml --job problems_l4_h64
"""

from depthlab.cli import main_guard, resolve_device, start_job


def main() -> None:
    _, spec = start_job(__doc__, "measure_twin")

    from depthlab.stages.twins.stage import run

    run(spec, device=resolve_device(spec["device"]))


if __name__ == "__main__":
    main_guard(main)
