"""Steps 4 and 6 of the preprocessing chain: decimation and per-lead z-score normalisation.

`resample` brings a record at another rate to the corpus rate with the same filter design.

Decimation is polyphase FIR resampling (up 1, down 5) with scipy's default design for that
ratio: ``firwin(101, 1/5, window=("kaiser", 5.0))``, i.e. 101 linear-phase taps, cut-off at the
new Nyquist frequency (50 Hz), Kaiser beta = 5.0. `scipy.signal.resample_poly` compensates the
group delay, so output sample n is the filtered input at time n / 100 s, and ``padtype="edge"``
extends the record at both ends by its boundary value, so a non-zero baseline makes no step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = [
    "DECIMATION",
    "KAISER_BETA",
    "Normalisation",
    "cut_windows",
    "decimate",
    "fit_normalisation",
    "resample",
]

DECIMATION = 5
"""500 Hz -> 100 Hz."""
KAISER_BETA = 5.0
"""Shape parameter of the Kaiser window of the anti-aliasing FIR filter."""


def decimate(x: np.ndarray, factor: int = DECIMATION) -> np.ndarray:
    """Polyphase decimation by ``factor`` along the last axis, float32 out.

    (..., L) -> (..., ceil(L / factor)); e.g. (12, 5000) at 500 Hz -> (12, 1000) at 100 Hz.
    """
    from scipy.signal import resample_poly

    x = np.asarray(x)
    if x.shape[-1] < 2 * factor:
        raise ValueError(f"cannot decimate {x.shape[-1]} samples by {factor}")
    y = resample_poly(
        x.astype(np.float64), 1, factor, axis=-1, window=("kaiser", KAISER_BETA), padtype="edge"
    )
    return y.astype(np.float32)


MIN_FS, MAX_FS = 0.01, 1e6
"""Sampling rates (Hz) a record may declare; anything outside is refused before any work."""
MAX_RATIO_TERM = 1_000_000
"""Largest up or down factor of a polyphase resampling (its filter has about 20 · factor taps: 160 MB at most)."""


def resampling_ratio(fs: float, fs_out: float) -> Fraction:
    """fs_out / fs as the fraction `resample` uses (each rate to 1/1000 Hz); ValueError for a
    rate outside [`MIN_FS`, `MAX_FS`] or a ratio whose terms exceed `MAX_RATIO_TERM`."""
    for name, rate in (("fs", fs), ("fs_out", fs_out)):
        if not (np.isfinite(rate) and MIN_FS <= rate <= MAX_FS):
            raise ValueError(f"{name} = {rate!r} Hz is outside [{MIN_FS:g}, {MAX_FS:g}] Hz")
    ratio = Fraction(fs_out).limit_denominator(1000) / Fraction(fs).limit_denominator(1000)
    if max(ratio.numerator, ratio.denominator) > MAX_RATIO_TERM:
        raise ValueError(
            f"resampling {fs:g} Hz to {fs_out:g} Hz needs up/down factors {ratio.numerator}/{ratio.denominator} "
            f"(at most {MAX_RATIO_TERM})"
        )
    return ratio


def resample(x: np.ndarray, fs: float, fs_out: float) -> np.ndarray:
    """Polyphase resampling of ``x`` from ``fs`` to ``fs_out`` Hz along the last axis, float32 out.

    The filter design of `decimate` (Kaiser window, beta `KAISER_BETA`, edge padding) for the
    rational ratio ``fs_out / fs`` (each rate to 1/1000 Hz): (..., L) -> (..., ceil(L · fs_out /
    fs)), output sample n at time n / fs_out. Equal rates return ``x`` as float32, unfiltered.
    """
    from scipy.signal import resample_poly

    ratio = resampling_ratio(fs, fs_out)
    x = np.asarray(x)
    if ratio == 1:
        return x.astype(np.float32)
    y = resample_poly(
        x.astype(np.float64), ratio.numerator, ratio.denominator, axis=-1,
        window=("kaiser", KAISER_BETA), padtype="edge",
    )  # fmt: skip
    return y.astype(np.float32)


def cut_windows(x: np.ndarray, window: int) -> np.ndarray:
    """(..., L) -> (W, ..., window): consecutive non-overlapping windows from the first sample.

    The windowing rule of the cache and of `cyclejepa.embed`: W = L // window, a tail shorter
    than ``window`` is dropped; a record shorter than one window raises ValueError.
    """
    x = np.asarray(x)
    count = x.shape[-1] // window
    if count == 0:
        raise ValueError(f"{x.shape[-1]} samples are fewer than one window of {window}")
    return np.stack([x[..., w * window : (w + 1) * window] for w in range(count)])


@dataclass(frozen=True)
class Normalisation:
    """Per-lead z-score statistics: ``mean`` and ``std`` of shape (leads,), in mV.

    ``std`` is the population standard deviation (ddof = 0) over every sample of every
    training-fold record.
    """

    mean: np.ndarray
    std: np.ndarray

    def __post_init__(self):
        if self.mean.shape != self.std.shape or self.mean.ndim != 1:
            raise ValueError(f"mean {self.mean.shape} and std {self.std.shape} must be (leads,)")
        if not np.all(np.isfinite(self.std) & (self.std > 0)):
            raise ValueError(f"normalisation std must be finite and positive, got {self.std}")

    def apply(self, x: np.ndarray) -> np.ndarray:
        """(..., leads, samples) -> z-scored float32, computed in float64."""
        x = np.asarray(x, dtype=np.float64)
        return ((x - self.mean[:, None]) / self.std[:, None]).astype(np.float32)

    def to_dict(self, leads: Sequence[str] | None = None) -> dict:
        out = {"mean": self.mean.tolist(), "std": self.std.tolist()}
        return out if leads is None else {"leads": list(leads), **out}

    @classmethod
    def from_dict(cls, data: dict) -> Normalisation:
        return cls(*(np.asarray(data[key], dtype=np.float64) for key in ("mean", "std")))


def fit_normalisation(
    signals: np.ndarray, mask_train: np.ndarray, chunk: int = 512
) -> Normalisation:
    """Per-lead mean and std over the records selected by ``mask_train``.

    ``signals`` is (N, leads, samples) (a memmap is fine: it is read ``chunk`` records at a
    time); ``mask_train`` is a boolean (N,) mask. Two passes in float64: the mean, then the mean
    squared deviation from it.
    """
    mask_train = np.asarray(mask_train, dtype=bool)
    if mask_train.shape != (len(signals),):
        raise ValueError(f"mask_train has shape {mask_train.shape}, expected ({len(signals)},)")
    rows = np.flatnonzero(mask_train)
    if rows.size == 0:
        raise ValueError("no training record to fit the normalisation on")
    count = rows.size * signals.shape[-1]
    blocks = [rows[i : i + chunk] for i in range(0, rows.size, chunk)]
    total = sum(np.asarray(signals[b], dtype=np.float64).sum(axis=(0, 2)) for b in blocks)
    mean = total / count
    squares = sum(
        ((np.asarray(signals[b], dtype=np.float64) - mean[:, None]) ** 2).sum(axis=(0, 2))
        for b in blocks
    )
    return Normalisation(mean, np.sqrt(squares / count))
