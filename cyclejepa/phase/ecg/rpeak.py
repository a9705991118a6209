"""The library's default R-peak detector, `detect_r_peaks` (docs/phase.md, "R-peaks"), at the
record's native rate:

1. per-lead QRS envelope: RMS over 100 ms of the 5–25 Hz zero-phase band-passed slope (linear
   in amplitude, unlike Pan–Tompkins' squared energy);
2. lead fusion: envelopes over their beat heights, weighted by quality (height / median);
3. thresholds from the medians of the last 8 beat and noise heights: noise + 0.4 (signal −
   noise), at least 0.15 × signal;
4. a T wave within 360 ms of a beat has under 0.6 × its slope;
5. search-back after 1.5 median RR intervals at half the threshold;
6. refinement to the R-wave peak (or the nadir) of the timing lead (`refine_to_qrs_fiducial`).
"""

from __future__ import annotations

from collections import deque
from statistics import median

import numpy as np

from cyclejepa.phase.filters import bandpass

QRS_BAND_HZ = (5.0, 25.0)
REFINE_BAND_HZ = (0.5, 45.0)
ENVELOPE_S = 0.100
REFRACTORY_S = 0.200
T_WAVE_WINDOW_S = 0.360
T_WAVE_SLOPE_RATIO = 0.6
THRESHOLD_FRACTION = 0.4
THRESHOLD_FLOOR = 0.15
SEARCHBACK_RR_FACTOR = 1.5
SEARCHBACK_FRACTION = 0.5
HISTORY = 8
LEVEL_WINDOW_S = 1.0
MIN_LEAD_QUALITY = 0.5
FLOOR_WINDOW_S = 2.0
SPIKE_RATIO = 10.0
PREMATURE_RR_FACTOR = 0.6
PREMATURE_LEVEL = 0.6
SPIKE_S = 0.006
R_BEFORE_S_RATIO = 4.0
"""A lead whose positive wave precedes its nadir (an RS or rS complex) is timed on that R wave
unless its negative deflection is over this many times the positive one (median over beats)."""
NEGATIVE_QRS_RATIO = 2.0
"""A lead whose positive wave follows its nadir (a Qr complex, an inverted lead) is timed on
the nadir when its negative deflection is over this many times the positive one."""
INVERTED_BEAT_RATIO = 4.0
"""A beat of a lead timed on the R wave is timed on its own nadir when its negative deflection
is over this many times its positive one (an inverted ectopic beat)."""
FLAT = 1e-12
DETECTION_FS = 125.0


def _median(x: np.ndarray) -> np.ndarray:
    """``np.median(x, axis=-1)`` of finite values, by one partition (without its overhead)."""
    n = x.shape[-1]
    half = n // 2
    if n % 2:
        return np.partition(x, half, axis=-1)[..., half]
    part = np.partition(x, [half - 1, half], axis=-1)
    return (part[..., half - 1] + part[..., half]) / 2


def _quantile(x: np.ndarray, q: float) -> np.ndarray:
    """``np.quantile(x, q, axis=-1)`` (numpy's linear formula) of finite values, by one partition."""
    virtual = (x.shape[-1] - 1) * np.float64(q)
    below = int(np.floor(virtual))
    above = min(below + 1, x.shape[-1] - 1)
    part = np.partition(x, [below, above] if above > below else below, axis=-1)
    a, b = part[..., below], part[..., above]
    t = virtual - below
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def detection_rate(signal: np.ndarray, fs: float) -> tuple[np.ndarray, float, int]:
    """(signal, rate, factor): ``signal`` averaged over blocks of ``factor = fs // 125`` samples
    (500 → 125 Hz, 360 → 180 Hz; detection needs only 5–25 Hz). Sample p stands for native time
    p · factor + (factor − 1) / 2."""
    factor = max(1, int(fs // DETECTION_FS))
    if factor == 1:
        return signal, fs, 1
    n = signal.shape[-1] // factor
    blocks = signal[..., : n * factor].reshape(*signal.shape[:-1], n, factor)
    return blocks.mean(axis=-1), fs / factor, factor


def remove_spikes(signal: np.ndarray, fs: float) -> np.ndarray:
    """(leads, samples) ``signal`` with spikes (second difference over ``SPIKE_RATIO`` × the
    lead's 95th percentile: electrode pops, pacemaker pulses) and samples within ``SPIKE_S`` of
    them replaced by a running median; ``signal`` itself when there is none."""
    second = np.abs(np.diff(signal, n=2, axis=-1))
    step = max(1, second.shape[-1] // 1000)  # the percentile of ~1000 samples is plenty
    limit = SPIKE_RATIO * _quantile(second[..., ::step], 0.95)[..., None]
    flagged = second > np.maximum(limit, FLAT)
    if not flagged.any():
        return signal
    from scipy.ndimage import binary_dilation, median_filter

    half = max(1, round(SPIKE_S * fs))
    cleaned = signal.copy()
    for row in np.flatnonzero(flagged.any(axis=-1)):
        mask = np.zeros(signal.shape[-1], bool)
        mask[1:-1] = flagged[row]
        mask = binary_dilation(mask, iterations=half)
        smooth = median_filter(signal[row], size=4 * half + 1, mode="nearest")
        cleaned[row, mask] = smooth[mask]
    return cleaned


def _window_maxima(x: np.ndarray, width: int) -> np.ndarray:
    """(..., windows) maxima of ``x`` over consecutive windows of ``width`` samples."""
    n = x.shape[-1] // width
    if n == 0:
        return x.max(axis=-1, keepdims=True)
    return x[..., : n * width].reshape(*x.shape[:-1], n, width).max(axis=-1)


def qrs_envelope(signal: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-lead QRS envelope (RMS slope over 100 ms) and absolute slope, both (leads, samples)."""
    from scipy.ndimage import uniform_filter1d

    slope = np.gradient(bandpass(signal, fs, QRS_BAND_HZ), axis=-1) * fs
    width = max(1, round(ENVELOPE_S * fs))
    envelope = np.sqrt(np.maximum(uniform_filter1d(slope**2, width, axis=-1, mode="nearest"), 0))
    return envelope, np.abs(slope)


def lead_quality(envelope: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray]:
    """(leads,) beat height (median of per-second envelope maxima) and quality (height /
    envelope median; 0 for a flat lead)."""
    height = _median(_window_maxima(envelope, max(1, round(LEVEL_WINDOW_S * fs))))
    floor = _median(envelope)
    quality = np.where(height > FLAT, height / np.maximum(floor, FLAT * 1e-3), 0.0)
    return height, quality


def local_floor(x: np.ndarray, fs: float, window_s: float = FLOOR_WINDOW_S) -> np.ndarray:
    """Running median of ``x`` over about ``window_s`` (block medians of ¼ of the window,
    a median of 5 blocks around each, linearly interpolated): the envelope's local noise floor."""
    block = max(1, round(window_s * fs / 4))
    n = len(x) // block
    if n < 1:
        return np.full(len(x), np.median(x))
    medians = _median(x[: n * block].reshape(n, block))
    padded = np.concatenate((np.repeat(medians[:1], 2), medians, np.repeat(medians[-1:], 2)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, 5)
    smooth = _median(windows)
    centres = (np.arange(n) + 0.5) * block
    return np.interp(np.arange(len(x)), centres, smooth)


def fuse_leads(envelope: np.ndarray, slope: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(samples,) quality-weighted means of the height-normalised envelopes and slopes, and the
    (leads,) weights (sum 1; 0 for excluded leads)."""
    height, quality = lead_quality(envelope, fs)
    best = quality.max()
    if best <= 0:  # every lead flat: nothing to detect
        zeros = np.zeros(envelope.shape[-1])
        return zeros, zeros, np.full(len(quality), 1.0 / len(quality))
    weights = np.where(quality >= MIN_LEAD_QUALITY * best, quality, 0.0)
    weights = weights / weights.sum()
    scale = (weights / np.maximum(height, FLAT))[:, None]
    if np.count_nonzero(weights) == 1:
        row = int(np.argmax(weights))
        return envelope[row] * scale[row], slope[row] * scale[row], weights
    return (envelope * scale).sum(axis=0), (slope * scale).sum(axis=0), weights


class _History:
    """The last `HISTORY` values and their median, recomputed only when one is appended."""

    def __init__(self, values: list[float] | None = None):
        self.values: deque[float] = deque(values or [], maxlen=HISTORY)
        self._median = median(self.values) if self.values else None

    def __bool__(self) -> bool:
        return bool(self.values)

    @property
    def median(self) -> float:
        """The median of the values; read only once one was appended (``bool(history)``)."""
        if self._median is None:
            raise ValueError("the median of an empty history")
        return self._median

    def append(self, value: float) -> None:
        self.values.append(value)
        self._median = median(self.values)


def classify_peaks(
    positions: np.ndarray,
    heights: np.ndarray,
    slopes: np.ndarray,
    fs: float,
    n_samples: int,
    levels: tuple[float, float],
) -> np.ndarray:
    """Indices of the (P,) candidate peaks (positions, heights, steepest slopes) accepted as QRS
    complexes (steps 3–5 of the module), from starting (signal, noise) ``levels``."""
    signal_hist, noise_hist, rr_hist = _History([levels[0]]), _History([levels[1]]), _History()
    # Python numbers: the loop reads one element at a time (same arithmetic, less overhead).
    positions, heights, slopes = positions.tolist(), heights.tolist(), slopes.tolist()
    beats: list[int] = []
    t_window = T_WAVE_WINDOW_S * fs
    refractory = REFRACTORY_S * fs

    def threshold() -> float:
        signal_level, noise_level = signal_hist.median, noise_hist.median
        return max(
            noise_level + THRESHOLD_FRACTION * (signal_level - noise_level),
            THRESHOLD_FLOOR * signal_level,
        )

    def is_t_wave(k: int, previous: int | None) -> bool:
        return (
            previous is not None
            and positions[k] - positions[previous] < t_window
            and slopes[k] < T_WAVE_SLOPE_RATIO * slopes[previous]
        )

    def search_back(k: int, now: float) -> None:
        while beats and rr_hist:
            last = beats[-1]
            if now - positions[last] <= SEARCHBACK_RR_FACTOR * rr_hist.median:
                return
            limit = SEARCHBACK_FRACTION * threshold()
            keep = [
                j
                for j in range(last + 1, k)
                if heights[j] > limit
                and positions[j] - positions[last] >= refractory
                and now - positions[j] >= refractory
                and not is_t_wave(j, last)
            ]
            if not keep:
                return
            found = max(keep, key=lambda j: heights[j])
            rr_hist.append(positions[found] - positions[last])
            beats.append(found)
            signal_hist.append(heights[found])

    def needed(k: int, previous: int | None) -> float:
        """The threshold, raised for a peak that comes much earlier than the RR history says."""
        limit = threshold()
        if previous is not None and rr_hist:
            early = positions[k] - positions[previous] < PREMATURE_RR_FACTOR * rr_hist.median
            if early:
                limit = max(limit, PREMATURE_LEVEL * signal_hist.median)
        return limit

    for k in range(len(positions)):
        search_back(k, positions[k])
        previous = beats[-1] if beats else None
        if heights[k] > needed(k, previous) and not is_t_wave(k, previous):
            if previous is not None:
                rr_hist.append(positions[k] - positions[previous])
            beats.append(k)
            signal_hist.append(heights[k])
        else:
            noise_hist.append(heights[k])
    search_back(len(positions), n_samples)
    return np.asarray(beats, dtype=np.int64)


def refine_to_qrs_fiducial(signal: np.ndarray, fs: float, detections: np.ndarray, window_s: float = 0.06) -> np.ndarray:
    """Move each detection to the fiducial point of the (samples,) lead within ±``window_s``.

    On the 0.5–45 Hz zero-phase band-passed lead, a beat's ratio is −min / max over its window.
    The lead is timed on the R-wave peak unless the median ratio exceeds `R_BEFORE_S_RATIO` (max
    before min in most beats: RS, rS) or `NEGATIVE_QRS_RATIO` (Qr, inverted lead); then on the
    nadir. A beat departs only when its own ratio is above `INVERTED_BEAT_RATIO` (on a positive
    lead) or below 1 (on a negative one).
    """
    if len(detections) == 0:
        return np.zeros(0, np.int64)
    filtered = bandpass(signal, fs, REFINE_BAND_HZ)
    half = max(1, round(window_s * fs))
    window = np.clip(detections[:, None] + np.arange(-half, half + 1), 0, len(signal) - 1)
    values = filtered[window]  # (beats, window)
    peak, trough = values.max(axis=-1), -values.min(axis=-1)
    r_before_s = np.count_nonzero(values.argmax(axis=-1) < values.argmin(axis=-1)) * 2 > len(values)
    ratio = R_BEFORE_S_RATIO if r_before_s else NEGATIVE_QRS_RATIO
    upward = trough <= INVERTED_BEAT_RATIO * peak if _median(trough) <= ratio * _median(peak) else trough < peak
    polarity = np.where(upward, 1.0, -1.0)[:, None]
    extremum = np.argmax(polarity * values, axis=-1)
    refined = window[np.arange(len(detections)), extremum]
    # Two detections refined onto one extremum are one beat.
    return np.unique(refined).astype(np.int64)


def checked_ecg(signal: np.ndarray, fs: float, refine_window_s: float) -> np.ndarray:
    """(leads, samples) float64 ``signal``; ValueError unless finite, ≥ 1 s long, and
    ``refine_window_s`` in (0, refractory / 2)."""
    signal = np.atleast_2d(np.asarray(signal, dtype=np.float64))
    if not 0 < refine_window_s < REFRACTORY_S / 2:
        raise ValueError(f"refine_window_s must be in (0, {REFRACTORY_S / 2}), got {refine_window_s}")
    if signal.shape[-1] < fs:
        raise ValueError(f"ECG of {signal.shape[-1]} samples at {fs} Hz is shorter than 1 s")
    if not np.isfinite(signal).all():
        raise ValueError("ECG contains non-finite samples; interpolate or drop them first")
    return signal


def detect_r_peaks(
    signal: np.ndarray,
    fs: float,
    refine_window_s: float = 0.06,
    timing_row: int | None = None,
) -> np.ndarray:
    """Strictly increasing int64 R-peak indices of a finite (samples,) or (leads, samples) ECG
    at its native rate ``fs`` (tested at 125–1000 Hz); beats timed on lead ``timing_row``
    (None: the best quality) within ±``refine_window_s`` in (0, 0.1) s."""
    from scipy.signal import find_peaks

    signal = checked_ecg(signal, fs, refine_window_s)
    if timing_row is not None and not 0 <= timing_row < len(signal):
        raise ValueError(f"timing_row {timing_row} is not a row of a {len(signal)}-lead signal")
    low, fs_low, factor = detection_rate(signal, fs)
    low = remove_spikes(low, fs_low)
    envelope, slope = qrs_envelope(low, fs_low)
    fused, fused_slope, weights = fuse_leads(envelope, slope, fs_low)
    if fused.max() <= 0:
        return np.zeros(0, np.int64)
    # Zero ends: a beat at the very edge of the record is still a local maximum.
    padded = np.concatenate(([0.0], fused, [0.0]))
    positions = find_peaks(padded, distance=max(1, round(REFRACTORY_S * fs_low)))[0] - 1
    fused = np.maximum(fused - local_floor(fused, fs_low), 0.0)
    heights = fused[positions]
    half = max(1, round(ENVELOPE_S * fs_low / 2))
    around = np.clip(positions[:, None] + np.arange(-half, half + 1), 0, len(fused) - 1)
    slopes = fused_slope[around].max(axis=1)
    level_window = max(1, round(LEVEL_WINDOW_S * fs_low))
    levels = (float(_median(_window_maxima(fused, level_window))), float(_median(fused)))
    accepted = classify_peaks(positions, heights, slopes, fs_low, len(fused), levels)
    beats = positions[accepted] * factor + (factor - 1) // 2
    row = int(np.argmax(weights)) if timing_row is None else timing_row
    timing = remove_spikes(signal[row : row + 1], fs)[0]
    return refine_to_qrs_fiducial(timing, fs, beats, refine_window_s)
