#!/usr/bin/env python
"""Figure of one scaling fit: loss vs depth (or N) with the fitted curve, residuals, bootstrap
spread; the measured exponents with their intervals beside the published ones (paper_values).

Spec (`plot_scaling` job, one per fit): fit (fit JSON of fit_scaling.py), samples (bootstrap
CSV), out (figure path; .png, .pdf or .svg).
"""

import json

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "plot_scaling")

    import pandas as pd
    from depthlab.core.atomic_files import save_figure
    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.stages.scaling.plots import plot_scaling_fit, published_exponents

    provenance = Provenance("scaling.plot", config=spec, inputs=[spec["fit"], spec["samples"]])
    with open(spec["fit"]) as handle:
        record = json.load(handle)
    fig = plot_scaling_fit(
        record,
        pd.read_csv(spec["samples"]),
        title=record.get("name", ""),
        published=published_exponents(record["law"]),
    )
    save_figure(spec["out"], fig)
    provenance.write(sidecar_path(spec["out"]))


if __name__ == "__main__":
    main_guard(main)
