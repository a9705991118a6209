"""Write a raw camera-like pulse-wave corpus from the shared PLETH records, as WFDB.

    python docs/scripts/raw_pulse_corpus.py --out runs/raw_pulse

The PLETH channels of ``a103l``, ``mixedsignals`` and ``v102s`` (read by the ``wfdb`` dataset:
wrap-around undone, short gaps filled) are cut into 40 s pieces, resampled to 30 Hz (a
smartphone camera's frame rate) and made as raw as a camera's colour mean: each piece scaled to
a pulse of 1.5-12 units (its 5th-95th percentile range) on a constant offset of 124-255 units,
one piece inverted (``*-inverted``), one time-stretched to 50 beats per minute (``*-slow``), and
one with a 26-unit exposure drop 1.5 s in (``*-exposure``). Each piece is one record
``PLETH`` in ``NU``, written with ``wfdb.wrsamp`` (format 16: the ADC range fits the piece, so
the drop spans most of it). The seed fixes offsets and scales.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from cyclejepa.data.preprocess import resample
from cyclejepa.data.wfdb_folder import WfdbFolder

SOURCES = Path("../shared/data/physionet-samples")
"""Where the shared records are, seen from the repository root (as in the example configs)."""
CAMERA_FS = 30.0
PIECE_S = 40.0
SLOW_BPM = 50.0


def pulse_rate_hz(x: np.ndarray, fs: float) -> float:
    """The strongest frequency of ``x`` between 0.5 and 3.5 Hz (its pulse rate)."""
    spectrum = np.abs(np.fft.rfft(x - x.mean()))
    freqs = np.fft.rfftfreq(len(x), 1 / fs)
    band = (freqs >= 0.5) & (freqs <= 3.5)
    return float(freqs[band][np.argmax(spectrum[band])])


def pieces(root: Path) -> list[tuple[str, np.ndarray]]:
    """(name, 30 Hz PLETH) of every 40 s piece of the shared PLETH records."""
    dataset = WfdbFolder(root, channels=["PLETH"])
    out = []
    for entry in dataset.entries():
        record = dataset.read(entry)
        x = resample(record.signal[0], record.fs, CAMERA_FS).astype(np.float64)
        length = round(PIECE_S * CAMERA_FS)
        out += [(f"{entry.name}-{k}", x[k * length : (k + 1) * length]) for k in range(len(x) // length)]
    return out


def make_raw(x: np.ndarray, rng: np.random.Generator, kind: str) -> np.ndarray:
    """``x`` as a raw camera signal of ``kind`` (``plain``, ``inverted``, ``slow``, ``exposure``)."""
    if kind == "slow":  # played back slower: the pulse rate becomes SLOW_BPM
        factor = pulse_rate_hz(x, CAMERA_FS) * 60 / SLOW_BPM
        x = resample(x, CAMERA_FS / factor, CAMERA_FS).astype(np.float64)[: len(x)]
    low, high = np.percentile(x, [5, 95])
    x = (x - np.median(x)) / (high - low) * rng.uniform(1.5, 12.0)
    x = -x if kind == "inverted" else x
    x = x + rng.uniform(124.0, 255.0)
    if kind == "exposure":
        x[round(1.5 * CAMERA_FS) :] -= 26.0
    return x


def main() -> None:
    import wfdb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/raw_pulse"))
    parser.add_argument("--sources", type=Path, default=SOURCES)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    kinds = {1: "inverted", 2: "slow", 3: "exposure"}
    for index, (name, x) in enumerate(pieces(args.sources)):
        kind = kinds.get(index, "plain")
        record = name if kind == "plain" else f"{name}-{kind}"
        raw = make_raw(x, rng, kind)
        wfdb.wrsamp(record, fs=CAMERA_FS, units=["NU"], sig_name=["PLETH"], p_signal=raw[:, None], fmt=["16"],
                    write_dir=str(args.out))  # fmt: skip
        print(f"{record}: {len(raw) / CAMERA_FS:.0f} s, level {np.median(raw):.1f}, range {np.ptp(raw):.1f} units")


if __name__ == "__main__":
    main()
