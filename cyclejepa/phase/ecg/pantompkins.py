"""The Pan–Tompkins-style core the paper names (detector ``"pan-tompkins"``), at the native rate.

1. QRS energy per lead: zero-phase 5–15 Hz band-pass, derivative, squaring, 150 ms centred
   moving-window integration (Pan & Tompkins, 1985); each lead divided by its 99th percentile,
   then summed.
2. Running thresholds over the energy's local maxima (≥ 200 ms apart, measured by prominence):
   threshold = noise + ¼ (signal − noise), T-wave rejection within 360 ms by slope,
   search-back at half threshold after 1.66 mean RR intervals without a beat.
3. Refinement to the R-wave extremum of the 0.5–45 Hz band-passed lead within ±60 ms, on the
   record's dominant deflection; with several leads, the median over leads.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from cyclejepa.phase.ecg.rpeak import REFRACTORY_S, bandpass, checked_ecg

QRS_BAND_HZ = (5.0, 15.0)
REFINE_BAND_HZ = (0.5, 45.0)
INTEGRATION_S = 0.150
T_WAVE_WINDOW_S = 0.360
SEARCHBACK_RR_FACTOR = 1.66
RR_HISTORY = 8
# A beat whose deflection against the record's polarity is this many times larger flips.
OPPOSITE_BEAT_RATIO = 2.0
# A lead whose 99th-percentile QRS energy is below this (signal units² per sample²) is flat:
# it is left out of the combined energy instead of having numerical noise amplified.
FLAT_ENERGY = 1e-20


def qrs_energy(signal: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray]:
    """(samples,) sums over leads of the normalised integrated squared slope and of the
    squared slope before integration."""
    from scipy.ndimage import uniform_filter1d

    squared_slope = np.gradient(bandpass(signal, fs, QRS_BAND_HZ), axis=-1) ** 2
    width = max(1, round(INTEGRATION_S * fs))
    energy = uniform_filter1d(squared_slope, width, axis=-1, mode="nearest")
    scale = np.quantile(energy, 0.99, axis=-1, keepdims=True)
    weight = np.where(scale > FLAT_ENERGY, 1.0 / np.maximum(scale, FLAT_ENERGY), 0.0)
    return (energy * weight).sum(axis=0), (squared_slope * weight).sum(axis=0)


def initial_levels(energy: np.ndarray, heights: np.ndarray, fs: float) -> tuple[float, float]:
    """Starting (signal, noise) levels: the median of the largest peak heights a 30-bpm rhythm
    would give over the record, and the median energy (for Pan–Tompkins' 2 s learning phase)."""
    n_largest = min(len(heights), max(1, round(len(energy) / fs / 2)))
    return float(np.median(np.sort(heights)[-n_largest:])), float(np.median(energy))


def adaptive_threshold(
    positions: np.ndarray,
    heights: np.ndarray,
    slopes: np.ndarray,
    fs: float,
    n_samples: int,
    levels: tuple[float, float],
) -> np.ndarray:
    """Indices of the (P,) candidate peaks (positions, prominences, largest squared slopes)
    accepted as QRS complexes by Pan–Tompkins' rules, from `initial_levels`."""
    signal_level, noise_level = levels
    beats: list[int] = []
    recent_rr: deque[int] = deque(maxlen=RR_HISTORY)
    t_wave_window = T_WAVE_WINDOW_S * fs

    for k in range(len(positions) + 1):  # the last pass only searches back before the end
        now = positions[k] if k < len(positions) else n_samples
        while recent_rr and now - positions[beats[-1]] > SEARCHBACK_RR_FACTOR * np.mean(recent_rr):
            skipped = np.arange(beats[-1] + 1, k)
            threshold = noise_level + 0.25 * (signal_level - noise_level)
            skipped = skipped[heights[skipped] > 0.5 * threshold]
            if len(skipped) == 0:
                break
            found = int(skipped[np.argmax(heights[skipped])])
            recent_rr.append(positions[found] - positions[beats[-1]])
            beats.append(found)
            signal_level = 0.25 * heights[found] + 0.75 * signal_level
        if k == len(positions):
            break
        threshold = noise_level + 0.25 * (signal_level - noise_level)
        t_wave = (
            bool(beats)
            and positions[k] - positions[beats[-1]] < t_wave_window
            and slopes[k] < 0.25 * slopes[beats[-1]]  # half the slope, squared
        )
        if heights[k] > threshold and not t_wave:
            if beats:
                recent_rr.append(positions[k] - positions[beats[-1]])
            beats.append(k)
            signal_level = 0.125 * heights[k] + 0.875 * signal_level
        else:
            noise_level = 0.125 * heights[k] + 0.875 * noise_level
    return np.asarray(beats, dtype=np.int64)


def refine_to_dominant_extremum(signal: np.ndarray, fs: float, detections: np.ndarray, window_s: float = 0.06) -> np.ndarray:
    """Move each detection to the R-wave extremum within ±``window_s``: per 0.5–45 Hz band-passed
    lead, on the record's dominant deflection (a beat whose opposite one is over twice as large
    flips); the median over leads."""
    if len(detections) == 0:
        return np.zeros(0, np.int64)
    filtered = bandpass(signal, fs, REFINE_BAND_HZ)
    half = round(window_s * fs)
    window = np.clip(detections[:, None] + np.arange(-half, half + 1), 0, signal.shape[-1] - 1)
    values = filtered[:, window]  # (leads, beats, window)
    peak, trough = values.max(axis=-1), -values.min(axis=-1)  # (leads, beats)
    record_up = np.median(peak, axis=1, keepdims=True) >= np.median(trough, axis=1, keepdims=True)
    dominant, opposite = np.where(record_up, peak, trough), np.where(record_up, trough, peak)
    upward = record_up ^ (opposite > OPPOSITE_BEAT_RATIO * dominant)
    polarity = np.where(upward, 1.0, -1.0)[..., None]
    extremum = np.argmax(polarity * values, axis=-1)  # (leads, beats)
    per_lead = np.take_along_axis(window[None], extremum[..., None], axis=-1)[..., 0]
    return np.round(np.asarray(np.median(per_lead, axis=0))).astype(np.int64)


def detect_r_peaks_pan_tompkins(signal: np.ndarray, fs: float, refine_window_s: float = 0.06) -> np.ndarray:
    """Strictly increasing int64 R-peak indices of a finite (samples,) or (leads, samples) ECG
    at ``fs`` Hz (tested at 125–1000 Hz); ``refine_window_s`` below half the 200 ms refractory."""
    from scipy.ndimage import maximum_filter1d
    from scipy.signal import find_peaks

    signal = checked_ecg(signal, fs, refine_window_s)
    energy, squared_slope = qrs_energy(signal, fs)
    positions, peaks = find_peaks(energy, distance=max(1, round(REFRACTORY_S * fs)), prominence=0)
    if len(positions) == 0:
        return np.zeros(0, np.int64)
    slopes = maximum_filter1d(squared_slope, max(1, round(INTEGRATION_S * fs)))[positions]
    heights = peaks["prominences"]
    levels = initial_levels(energy, heights, fs)
    beats = positions[adaptive_threshold(positions, heights, slopes, fs, len(energy), levels)]
    return refine_to_dominant_extremum(signal, fs, beats, refine_window_s)
