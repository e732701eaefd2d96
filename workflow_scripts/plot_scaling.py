#!/usr/bin/env python
"""Plot one scaling fit: loss vs depth (or N) with the fitted curve, residuals, bootstrap spread."""

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fit", required=True, help="fit JSON from fit_scaling.py")
    parser.add_argument("--samples", required=True, help="bootstrap samples CSV")
    parser.add_argument("--out", required=True, help="figure path (.png, .pdf or .svg)")
    args = parser.parse_args()

    import pandas as pd

    from depthlab.io import save_figure
    from depthlab.provenance import Provenance, sidecar_path
    from depthlab.scaling_plots import plot_scaling_fit

    provenance = Provenance("scaling.plot", config={"fit": args.fit},
                            inputs=[args.fit, args.samples])
    with open(args.fit) as handle:
        record = json.load(handle)
    fig = plot_scaling_fit(record, pd.read_csv(args.samples), title=record.get("name", ""))
    save_figure(args.out, fig)
    provenance.write(sidecar_path(args.out))


if __name__ == "__main__":
    main()
