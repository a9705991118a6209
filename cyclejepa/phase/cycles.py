"""Signal-neutral helpers of the cycle detectors (`pulse`, `breath`): cycle length, direction,
refractory peak picking, and each cycle's quality (`assess_cycles`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "CycleAssessment",
    "assess_cycles",
    "check_detector_options",
    "cycle_matrix",
    "cycle_periods",
    "orientation",
    "pick_with_refractory",
]

PERIOD_WINDOW_S = 10.0
"""Shortest window (s) of `cycle_periods` (also ≥ three of the band's longest cycles)."""
HARMONIC_ACCEPT = 0.8
"""A shorter-lag autocorrelation peak is the cycle when ≥ this × the highest (which may be two)."""


def orientation(slope: np.ndarray) -> float:
    """+1 when the wave rises in at most half of its samples (a pulse rises in systole, breath
    in a fast inspiration), else −1; unlike the slope's extremes, robust to artefacts."""
    return 1.0 if float(np.mean(slope > 0)) <= 0.5 else -1.0


def window_period(x: np.ndarray, fs: float, band_hz: tuple[float, float]) -> float:
    """Cycle length (s): among the local maxima of the autocorrelation r(τ) at 1/band_hz[1] ≤ τ ≤
    1/band_hz[0], the shortest with r ≥ `HARMONIC_ACCEPT` × the highest; NaN when none is positive."""
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
    """Local cycle length (s) at every sample: `window_period` over half-overlapping windows,
    interpolated between centres; a window without one takes the others' median (all NaN: none)."""
    window = min(len(x), round(max(PERIOD_WINDOW_S, 3.0 / band_hz[0]) * fs))
    starts = np.arange(0, max(len(x) - window, 0) + 1, max(window // 2, 1))
    periods = np.array([window_period(x[s : s + window], fs, band_hz) for s in starts])
    if not np.isfinite(periods).any():
        return np.full(len(x), np.nan)
    periods[~np.isfinite(periods)] = np.median(periods[np.isfinite(periods)])
    return np.interp(np.arange(len(x)), starts + window / 2, periods)


def pick_with_refractory(candidates: np.ndarray, heights: np.ndarray, refractory: np.ndarray) -> np.ndarray:
    """Sorted ``candidates`` kept highest first unless within ``refractory[candidate]`` samples of
    one kept (`find_peaks`'s ``distance``, per candidate)."""
    from bisect import bisect_left, insort

    kept: list[int] = []
    for i in np.argsort(-heights, kind="stable"):
        position, reach = candidates[i], refractory[candidates[i]]
        j = bisect_left(kept, position)
        if (j < len(kept) and kept[j] - position < reach) or (j > 0 and position - kept[j - 1] < reach):
            continue
        insort(kept, int(position))
    return np.asarray(kept, dtype=np.int64)


def check_detector_options(
    fiducial: str,
    fiducials: tuple[str, ...],
    polarity: str,
    polarities: tuple[str, ...],
    band_hz: tuple[float, float],
    fractions: dict[str, float],
) -> None:
    """ValueError naming the first bad option: a choice outside its list, a band without
    0 < low < high, a fraction outside (0, 1)."""
    if fiducial not in fiducials:
        raise ValueError(f"fiducial must be one of {', '.join(fiducials)}, got {fiducial!r}")
    if polarity not in polarities:
        raise ValueError(f"polarity must be one of {', '.join(polarities)}, got {polarity!r}")
    if not 0 < band_hz[0] < band_hz[1]:
        raise ValueError(f"band_hz must satisfy 0 < low < high, got {band_hz}")
    if not all(0 < value < 1 for value in fractions.values()):
        raise ValueError(f"{' and '.join(fractions)} must lie in (0, 1), got {', '.join(map(str, fractions.values()))}")


CYCLE_POINTS = 64
"""Samples each cycle is resampled to before it is compared with the template (`cycle_matrix`)."""
MIN_CYCLES_ASSESSED = 3
"""Fewest cycles from which a median template is formed; with fewer none is assessed (NaN)."""
LOCAL_INTERVAL_CYCLES = 9
"""Cycles in the running median an interval is compared with (`max_interval_ratio`)."""


@dataclass(frozen=True)
class CycleAssessment:
    """Quality of each cycle of a record or window, and its periodicity (NaN: not assessed).

    ``quality``: (cycles,) correlation with the median template, clipped to [0, 1];
    ``plausible``: (cycles,) interval in range and within the ratio of the running median;
    ``template_share`` = var(t) / (var(t) + mean_i var(c_i − t)); ``periodicity`` = r(T) =
    Σ x_n x_{n+T} / Σ x_n² at the median interval (x centred); ``fundamental_share`` =
    |T_1|² / Σ_{k≥1} |T_k|² of the template's DFT (low when one cycle holds two).
    """

    quality: np.ndarray
    plausible: np.ndarray
    template_share: float
    periodicity: float
    fundamental_share: float


def cycle_matrix(wave: np.ndarray, events: np.ndarray, points: int = CYCLE_POINTS) -> np.ndarray:
    """(cycles, points) float64: each cycle [events[i], events[i+1]] of ``wave`` linearly
    resampled to ``points`` samples, both events included."""
    events = np.asarray(events, dtype=np.float64)
    steps = np.linspace(0.0, 1.0, points)
    positions = events[:-1, None] + np.diff(events)[:, None] * steps
    return np.interp(positions.ravel(), np.arange(len(wave)), wave).reshape(len(events) - 1, points)


def _row_correlations(rows: np.ndarray, template: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row with ``template`` (0 for a constant row)."""
    rows = rows - rows.mean(axis=1, keepdims=True)
    template = template - template.mean()
    norms = np.sqrt((rows**2).sum(axis=1) * (template**2).sum())
    return np.divide(rows @ template, norms, out=np.zeros(len(rows)), where=norms > 0)


def autocorrelation_at(x: np.ndarray, lag: int) -> float:
    """r(lag) = Σ x_n x_{n+lag} / Σ x_n² of centred ``x``; NaN for a constant ``x`` or a lag beyond."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    energy = float(x @ x)
    if not energy > 0 or not 0 < lag < len(x):
        return float("nan")
    return float(x[:-lag] @ x[lag:]) / energy


def plausible_intervals(
    intervals_s: np.ndarray, interval_range_s: tuple[float, float], max_interval_ratio: float | None
) -> np.ndarray:
    """Whether each interval lies in ``interval_range_s`` and within ``max_interval_ratio`` (None:
    unchecked) of the running median of `LOCAL_INTERVAL_CYCLES`."""
    low, high = interval_range_s
    ok = (intervals_s >= low) & (intervals_s <= high)
    if max_interval_ratio is not None and len(intervals_s):
        from scipy.ndimage import median_filter

        local = median_filter(intervals_s, size=LOCAL_INTERVAL_CYCLES, mode="nearest")
        ok &= np.maximum(intervals_s / local, local / intervals_s) <= max_interval_ratio
    return ok


def assess_cycles(
    wave: np.ndarray, events: np.ndarray, fs: float, interval_range_s: tuple[float, float], max_interval_ratio: float | None
) -> CycleAssessment:
    """`CycleAssessment` of ``wave``'s cycles between ``events``: the template is the median of
    the plausible cycles (all when under `MIN_CYCLES_ASSESSED`) resampled by `cycle_matrix`."""
    wave = np.asarray(wave, dtype=np.float64)
    events = np.asarray(events, dtype=np.int64)
    n_cycles = max(len(events) - 1, 0)
    plausible = plausible_intervals(np.diff(events) / fs, interval_range_s, max_interval_ratio)
    if n_cycles < MIN_CYCLES_ASSESSED:
        nan = float("nan")
        return CycleAssessment(np.full(n_cycles, np.nan), plausible, nan, nan, nan)
    cycles = cycle_matrix(wave, events)
    basis = cycles[plausible] if plausible.sum() >= MIN_CYCLES_ASSESSED else cycles
    template = np.median(basis, axis=0)
    residual = float(np.mean((basis - template).var(axis=1)))
    spread = float(template.var())
    harmonics = np.abs(np.fft.rfft(template[:-1] - template[:-1].mean())) ** 2
    period = int(round(np.median(np.diff(events))))
    return CycleAssessment(
        quality=np.clip(_row_correlations(cycles, template), 0.0, 1.0),
        plausible=plausible,
        template_share=spread / (spread + residual) if spread + residual > 0 else float("nan"),
        periodicity=autocorrelation_at(wave, period),
        fundamental_share=float(harmonics[1] / harmonics[1:].sum()) if harmonics[1:].sum() > 0 else float("nan"),
    )
