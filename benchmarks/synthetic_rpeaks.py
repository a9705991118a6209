"""R-peak detection and phase QC on a synthetic corpus, scored against its ground-truth peaks.

    python benchmarks/synthetic_rpeaks.py [CORPUS] [CACHE] [--tolerance-ms 50]

CORPUS is a corpus written by `cyclejepa synth` (it carries ``synthetic_rpeaks.json``) and
CACHE the cache `cyclejepa prepare` built from it; the defaults are the quickstart's. Beats
within the tolerance of either end of the record are left out on both sides. Prints pooled
sensitivity and PPV, the records with any error, and the records that failed phase QC by reason.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from cyclejepa.data.cache import PreparedCache
from cyclejepa.data.ptbxl import FS, N_SAMPLES
from cyclejepa.data.synthetic import read_rpeaks
from cyclejepa.phase import score_events


def inside(peaks: np.ndarray, margin: int) -> np.ndarray:
    """The peaks at least ``margin`` samples from both ends of the record."""
    return peaks[(peaks >= margin) & (peaks < N_SAMPLES - margin)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", default="runs/quickstart/corpus")
    parser.add_argument("cache", nargs="?", default="runs/quickstart/cache")
    parser.add_argument("--tolerance-ms", type=float, default=50.0)
    args = parser.parse_args()

    truth = read_rpeaks(args.corpus)
    cache = PreparedCache(args.cache)
    margin = int(round(args.tolerance_ms * FS / 1000))
    totals = Counter()
    records_with_errors = 0
    for i, ecg_id in enumerate(cache.columns["record_id"]):
        score = score_events(
            inside(cache.events(i), margin), inside(truth[int(ecg_id)], margin), FS,
            tolerance_s=args.tolerance_ms / 1000,
        )  # fmt: skip
        totals.update({key: score[key] for key in ("tp", "fn", "fp")})
        records_with_errors += score["fn"] + score["fp"] > 0
    qc_failed = ~cache.columns["qc_ok"]
    reasons = Counter(str(reason) for reason in cache.columns["qc_reason"][qc_failed])
    n = len(cache)
    print(f"{n} records, ±{args.tolerance_ms:g} ms")
    print(
        f"sensitivity {totals['tp'] / (totals['tp'] + totals['fn']):.4f}, "
        f"PPV {totals['tp'] / (totals['tp'] + totals['fp']):.4f} "
        f"({totals['fn']} missed, {totals['fp']} false of {totals['tp'] + totals['fn']} beats)"
    )
    print(f"records with any detection error: {records_with_errors} ({records_with_errors / n:.1%})")
    print(f"records failing phase QC: {qc_failed.sum()} ({qc_failed.sum() / n:.1%}) {dict(reasons)}")


if __name__ == "__main__":
    main()
