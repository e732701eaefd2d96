#!/usr/bin/env python
"""One model's tuned-lens and layer-swap figure, from its lens_swaps job's tables (no lens is
trained here: redrawing the figure takes seconds).

Writes the spec's `figure` with a .provenance.json sidecar: KL to the output and top-1 agreement
per state for the logit and the tuned lens, and the accuracy kept by each layer swap and deletion
(depthlab/stages/lens_swaps/plots.py).

Spec (`plot_lens_swaps` job, named <model>): model_name, lens_swaps (the lens_swaps output
folder), text_sets (the names of its text sets, in order), figure.
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "plot_lens_swaps")

    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.stages.lens_swaps.plots import plot_lens_swaps, read_tables, table_files

    files = table_files(spec["lens_swaps"], spec["text_sets"])
    provenance = Provenance("figures.lens_swaps", config=spec, inputs=[str(f) for f in files])
    frames = read_tables(spec["lens_swaps"], spec["text_sets"])
    plot_lens_swaps(frames, spec["model_name"], spec["figure"])
    provenance.write(sidecar_path(spec["figure"]))


if __name__ == "__main__":
    main_guard(main)
