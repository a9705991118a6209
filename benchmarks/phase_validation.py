"""R-peak detection against reference beat annotations: cyclejepa vs NeuroKit2's detectors.

    python benchmarks/phase_validation.py [RECORD] [--channel MLII] [--tolerance-ms 50]

RECORD is a WFDB record path without extension that has ``.atr`` annotations; the default is
MIT-BIH record 100 in ../shared/data/physionet-samples. Detections are matched one-to-one to
the reference beats (non-beat labels dropped) within the tolerance; the table gives
sensitivity, positive predictivity, the median absolute timing error of the matched beats
(annotations mark the R-wave peak) and the detection time. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from cyclejepa.phase import channel_indices, detect_r_peaks, read_beat_annotations, score_events

DEFAULT_RECORD = Path(__file__).resolve().parents[2] / "shared/data/physionet-samples/100"
NEUROKIT_METHODS = ("neurokit", "pantompkins1985", "hamilton2002", "elgendi2010", "engzeemod2012")


def neurokit_detector(method: str) -> Callable[[np.ndarray, float], np.ndarray]:
    """NeuroKit2's cleaning and R-peak finder of the same ``method``."""
    import neurokit2 as nk

    def detect(ecg: np.ndarray, fs: float) -> np.ndarray:
        cleaned = nk.ecg_clean(ecg, sampling_rate=fs, method=method)
        return np.asarray(nk.ecg_findpeaks(cleaned, sampling_rate=fs, method=method)["ECG_R_Peaks"])

    return detect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", nargs="?", default=str(DEFAULT_RECORD))
    parser.add_argument("--channel", default="MLII")
    parser.add_argument("--tolerance-ms", type=float, default=50.0)
    args = parser.parse_args()

    import wfdb

    record = wfdb.rdrecord(args.record)
    ecg = record.p_signal[:, channel_indices(record.sig_name, args.channel)[0]]
    reference = read_beat_annotations(args.record)
    detectors = {"cyclejepa `ecg-rpeak`": detect_r_peaks}
    detectors |= {f"NeuroKit2 `{m}`": neurokit_detector(m) for m in NEUROKIT_METHODS}

    print(f"{args.record} ({args.channel}, {record.fs} Hz, {len(reference)} reference beats, "
          f"±{args.tolerance_ms:g} ms)\n")
    print("| detector | sensitivity | PPV | FN | FP | median abs. error (ms) | time (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, detect in detectors.items():
        detect(ecg[: 10 * record.fs], record.fs)  # warm-up: imports and caches
        start = time.perf_counter()
        detected = np.sort(detect(ecg, record.fs))
        elapsed = time.perf_counter() - start
        s = score_events(detected, reference, record.fs, args.tolerance_ms / 1e3)
        print(f"| {name} | {s['sensitivity']:.4f} | {s['ppv']:.4f} | {s['fn']} | {s['fp']} | "
              f"{s['median_abs_error_ms']:.1f} | {elapsed * 1e3:.0f} |")


if __name__ == "__main__":
    main()
