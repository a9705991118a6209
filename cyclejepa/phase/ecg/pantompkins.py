"""The Pan–Tompkins-style single-lead core the paper names (detector ``"pan-tompkins"``).

It was the library's detector up to revision a9b2c42; `cyclejepa.phase.ecg.rpeak` is the default
now and this one stays selectable (``phase.options: {detector: pan-tompkins}``). Detection runs
at the record's native rate on one lead or on several leads at once:

1. QRS energy per lead: zero-phase 5–15 Hz band-pass, derivative, squaring, 150 ms centred
   moving-window integration (Pan & Tompkins, 1985). Centred, zero-phase filtering means
   the energy peaks inside the QRS, not one filter delay after it. Each lead's energy is
   divided by its 99th percentile and the leads are summed, so every lead votes equally.
2. Running thresholds over the local maxima of that energy (at least 200 ms apart), each
   measured by its prominence above the surrounding valleys (so the shoulder of a wide,
   notched QRS hump is not a second beat): signal and noise levels updated per peak,
   threshold = noise + ¼ (signal − noise), T-wave rejection within 360 ms of a beat by
   slope, and search-back at half threshold when no beat came for 1.66 mean RR intervals.
3. Refinement: each detection moves to the R-wave extremum of the 0.5–45 Hz band-passed
   lead within ±60 ms, on the record's dominant deflection (positive or negative, chosen per
   lead from the median beat; an inverted ectopic beat flips); with several leads the beat
   time is the median over leads.
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
    """Pan–Tompkins detection feature of a (leads, samples) ECG, combined over leads.

    Returns
    -------
    energy : np.ndarray
        (samples,) sum over leads of the normalised integrated squared slope.
    slope : np.ndarray
        (samples,) sum over leads of the normalised squared slope, before integration.
    """
    from scipy.ndimage import uniform_filter1d

    squared_slope = np.gradient(bandpass(signal, fs, QRS_BAND_HZ), axis=-1) ** 2
    width = max(1, round(INTEGRATION_S * fs))
    energy = uniform_filter1d(squared_slope, width, axis=-1, mode="nearest")
    scale = np.quantile(energy, 0.99, axis=-1, keepdims=True)
    weight = np.where(scale > FLAT_ENERGY, 1.0 / np.maximum(scale, FLAT_ENERGY), 0.0)
    return (energy * weight).sum(axis=0), (squared_slope * weight).sum(axis=0)


def initial_levels(energy: np.ndarray, heights: np.ndarray, fs: float) -> tuple[float, float]:
    """Starting (signal, noise) levels of the running thresholds, from the whole record.

    Signal: the median of the largest peak heights that a 30-bpm rhythm would give over the
    record; noise: the median energy. An offline stand-in for Pan–Tompkins' 2 s learning phase
    that one artefact at the start cannot derail.
    """
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
    """Indices of the candidate peaks accepted as QRS complexes by Pan–Tompkins' rules.

    Parameters
    ----------
    positions
        (P,) sample indices of the energy's local maxima, at least 200 ms apart.
    heights
        (P,) prominence of those maxima.
    slopes
        (P,) largest squared slope within the integration window of each maximum.
    fs
        Sampling rate in Hz.
    n_samples
        Record length (search-back also runs before the record end).
    levels
        Starting (signal, noise) levels, see `initial_levels`.
    """
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
    """Move each detection to the R-wave extremum within ±``window_s``.

    Each lead of the (leads, samples) ``signal`` is band-passed (0.5–45 Hz, zero phase: no
    baseline, no delay); its polarity is the sign of its dominant deflection over the record
    (median over beats of the window maximum vs. minus the window minimum). A beat whose
    opposite deflection is more than twice as large (an inverted ectopic beat) takes the
    opposite polarity. With several leads the beat time is the median of the per-lead extrema.
    """
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
    """R-peak sample indices of an ECG at its native rate.

    Parameters
    ----------
    signal
        (samples,) or (leads, samples) ECG in physical units, finite.
    fs
        Sampling rate in Hz (tested at 125–1000 Hz).
    refine_window_s
        Half-width of the R-wave extremum search around each detection;
        below half the 200 ms refractory period, so refined beats stay in order.

    Returns
    -------
    np.ndarray
        (beats,) int64 sample indices, strictly increasing.
    """
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
