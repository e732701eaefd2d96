#!/usr/bin/env python
"""Plot validation loss against training tokens for every pretrained model of a run."""

import argparse

from depthlab.io import save_figure
from depthlab.loss_curves import plot_loss_curves, read_training_runs
from depthlab.provenance import Provenance, sidecar_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", required=True, help="pretrain checkpoint folders")
    parser.add_argument("--out", required=True, help="figure path (.png, .pdf or .svg)")
    args = parser.parse_args()

    provenance = Provenance("figures.loss_curves", config={"models": args.models},
                            inputs=[f"{m}/train_log.csv" for m in args.models])
    save_figure(args.out, plot_loss_curves(read_training_runs(args.models)))
    provenance.write(sidecar_path(args.out))


if __name__ == "__main__":
    main()
