"""The spread of `cyclejepa.embed.input_distance` over real records of a 500 Hz WFDB corpus.

    python benchmarks/input_distance.py ROOT [--scale 200]

Reads every ``*_hr`` record under ROOT (the PTB-XL layout), decimates each by 5 as the cache
does, fits the per-channel normalisation on all of them, and prints the median, 99th
percentile and maximum of each record's distance, how many exceed `OUT_OF_RANGE_DECADES`, and
the smallest distance of the same records multiplied by ``--scale``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from cyclejepa.data.cache import decimate_fast
from cyclejepa.data.preprocess import fit_normalisation
from cyclejepa.data.ptbxl import read_record_fast
from cyclejepa.embed import OUT_OF_RANGE_DECADES, input_distance


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a folder of WFDB records named *_hr (PTB-XL layout)")
    parser.add_argument("--scale", type=float, default=200.0, help="factor of the out-of-range copies")
    args = parser.parse_args(argv)
    paths = sorted(args.root.rglob("*_hr.hea"))
    signals = np.stack([decimate_fast(read_record_fast(p.with_suffix("")), 5) for p in paths])
    norm = fit_normalisation(signals, np.ones(len(signals), bool))
    distances = np.array([input_distance(norm.apply(x)[None])[0] for x in signals])
    scaled = np.array([input_distance(norm.apply(args.scale * x)[None])[0] for x in signals])
    print(
        f"{len(paths)} records: median {np.median(distances):.2f}, 99th percentile {np.percentile(distances, 99):.2f}, "
        f"maximum {distances.max():.2f} decades; {(distances > OUT_OF_RANGE_DECADES).sum()} above {OUT_OF_RANGE_DECADES:g}; "
        f"×{args.scale:g}: minimum {scaled.min():.2f}"
    )


if __name__ == "__main__":
    main()
