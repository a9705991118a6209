"""Signal-neutral filters shared by the phase providers."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["UPPER_EDGE_FRACTION", "bandpass"]

UPPER_EDGE_FRACTION = 0.45
"""Highest upper band edge / fs: Nyquist with a 10 % margin (`bandpass` clips to it; `PhaseProvider.min_fs`)."""


@lru_cache(maxsize=32)
def _butter_bandpass(fs: float, low: float, high: float) -> tuple[np.ndarray, np.ndarray, int]:
    """Second-order sections, their step-response initial state and scipy's pad length."""
    from scipy.signal import butter, sosfilt_zi

    sos = butter(2, [low, min(high, UPPER_EDGE_FRACTION * fs)], btype="bandpass", fs=fs, output="sos")
    ntaps = 2 * len(sos) + 1 - min((sos[:, 2] == 0).sum(), (sos[:, 5] == 0).sum())
    return sos, sosfilt_zi(sos), 3 * ntaps


def bandpass(signal: np.ndarray, fs: float, band: tuple[float, float]) -> np.ndarray:
    """Zero-phase 2nd-order Butterworth band-pass along the last axis (upper edge ≤ 0.45 fs):
    ``scipy.signal.sosfiltfilt``'s computation, the design cached per rate and band."""
    from scipy.signal import sosfilt

    sos, zi, padlen = _butter_bandpass(float(fs), *map(float, band))
    x = np.asarray(signal, dtype=np.float64)
    if x.shape[-1] <= padlen:
        from scipy.signal import sosfiltfilt

        return sosfiltfilt(sos, x, axis=-1)
    first, last = x[..., :1], x[..., -1:]
    extended = np.concatenate((2 * first - x[..., padlen:0:-1], x, 2 * last - x[..., -2 : -padlen - 2 : -1]), axis=-1)
    state = zi.reshape(len(sos), *([1] * (x.ndim - 1)), 2)
    y, _ = sosfilt(sos, extended, axis=-1, zi=state * extended[..., :1])
    y, _ = sosfilt(sos, y[..., ::-1], axis=-1, zi=state * y[..., -1:])
    return y[..., ::-1][..., padlen:-padlen]
