"""Signal-neutral helpers of the cycle detectors (`cyclejepa.phase.pulse`, `cyclejepa.phase.breath`):
the record's own cycle length, the direction of its cycles, and peak picking with a refractory
period adapted to that length."""

from __future__ import annotations

import numpy as np

__all__ = ["check_detector_options", "cycle_periods", "orientation", "pick_with_refractory", "rising_fraction"]

PERIOD_WINDOW_S = 10.0
"""Shortest window over which the cycle length is estimated (`cycle_periods`, windows half
overlapping); a window spans at least three of the longest cycles of the band."""
HARMONIC_ACCEPT = 0.8
"""An autocorrelation peak at a shorter lag than the highest one is the cycle when it is at least
this fraction of the highest (the highest may be two cycles at a regular rhythm)."""


def rising_fraction(slope: np.ndarray) -> float:
    """Fraction of samples on which ``slope`` is positive."""
    return float(np.mean(slope > 0))


def orientation(slope: np.ndarray) -> float:
    """+1 when the wave rises in less than half of its samples, else -1.

    A pulse wave rises in systole (a third of the cycle) and falls in diastole; breathing
    inspires faster than it expires. The fraction of samples with a positive slope is
    therefore below 1/2 for an upright wave and above it for an inverted one. Unlike the
    extremes of the slope (its percentiles or skewness), this count is not moved by a few
    artefacts however large.
    """
    return 1.0 if rising_fraction(slope) <= 0.5 else -1.0


def window_period(x: np.ndarray, fs: float, band_hz: tuple[float, float]) -> float:
    """The cycle length (s) of ``x`` from its autocorrelation: among the local maxima of the
    autocorrelation r(τ) at lags 1/band_hz[1] ≤ τ ≤ 1/band_hz[0], the shortest whose r is at
    least `HARMONIC_ACCEPT` times the highest; NaN when none is positive."""
    x = x - x.mean()
    n = len(x)
    spectrum = np.fft.rfft(x, 2 * n)
    acf = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
    if not acf[0] > 0:
        return np.nan
    acf = acf / acf[0]
    shortest, longest = int(np.ceil(fs / band_hz[1])), min(int(fs / band_hz[0]), n - 2)
    lags = np.arange(max(shortest, 1), longest + 1)
    if len(lags) == 0:
        return np.nan
    local = (acf[lags] > acf[lags - 1]) & (acf[lags] >= acf[lags + 1]) & (acf[lags] > 0)
    peaks = lags[local]
    if len(peaks) == 0:
        return np.nan
    best = acf[peaks].max()
    return float(peaks[np.argmax(acf[peaks] >= HARMONIC_ACCEPT * best)] / fs)


def cycle_periods(x: np.ndarray, fs: float, band_hz: tuple[float, float]) -> np.ndarray:
    """The local cycle length (s) at every sample of ``x``: `window_period` over windows of
    `PERIOD_WINDOW_S` or three of the band's longest cycles, whichever is longer (hop half of that), linearly interpolated between window centres; windows
    without a cycle take the median of the others; all NaN when no window has one."""
    window = min(len(x), round(max(PERIOD_WINDOW_S, 3.0 / band_hz[0]) * fs))
    starts = np.arange(0, max(len(x) - window, 0) + 1, max(window // 2, 1))
    periods = np.array([window_period(x[s : s + window], fs, band_hz) for s in starts])
    if not np.isfinite(periods).any():
        return np.full(len(x), np.nan)
    periods[~np.isfinite(periods)] = np.median(periods[np.isfinite(periods)])
    return np.interp(np.arange(len(x)), starts + window / 2, periods)


def pick_with_refractory(candidates: np.ndarray, heights: np.ndarray, refractory: np.ndarray) -> np.ndarray:
    """The ``candidates`` (sorted sample indices) kept by height: the highest first, then each
    next highest unless within ``refractory[candidate]`` samples of one already kept (as
    `scipy.signal.find_peaks`'s ``distance``, with a distance per candidate); sorted."""
    from bisect import bisect_left, insort

    kept: list[int] = []
    for i in np.argsort(-heights, kind="stable"):
        position, reach = candidates[i], refractory[candidates[i]]
        j = bisect_left(kept, position)
        if (j < len(kept) and kept[j] - position < reach) or (j > 0 and position - kept[j - 1] < reach):
            continue
        insort(kept, int(position))
    return np.asarray(kept, dtype=np.int64)


def check_detector_options(fiducial: str, fiducials: tuple[str, ...], polarity: str, polarities: tuple[str, ...],
                           band_hz: tuple[float, float], fractions: dict[str, float]) -> None:  # fmt: skip
    """ValueError naming the first bad option of a cycle detector: ``fiducial`` and ``polarity``
    outside their choices, a band without 0 < low < high, a fraction outside (0, 1)."""
    if fiducial not in fiducials:
        raise ValueError(f"fiducial must be one of {', '.join(fiducials)}, got {fiducial!r}")
    if polarity not in polarities:
        raise ValueError(f"polarity must be one of {', '.join(polarities)}, got {polarity!r}")
    if not 0 < band_hz[0] < band_hz[1]:
        raise ValueError(f"band_hz must satisfy 0 < low < high, got {band_hz}")
    if not all(0 < value < 1 for value in fractions.values()):
        raise ValueError(f"{' and '.join(fractions)} must lie in (0, 1), got {', '.join(map(str, fractions.values()))}")
