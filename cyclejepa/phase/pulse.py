"""The ``"pulse"`` phase provider: one event per heartbeat of a pulse wave (PPG or arterial
pressure; docs/phase.md). On the 0.5–8 Hz zero-phase band-passed channel: polarity from the
share of rising samples (`orientation`), the cycle length from the autocorrelation of
max(slope, 0)² (`cycle_periods`), upstrokes as slope maxima a refractory span apart (a dicrotic
notch falls inside it), then the ``fiducial``: ``"foot"`` (intersecting tangent), ``"max-slope"``
or ``"peak"``. On a WFDB record: ``cyclejepa phase RECORD --provider pulse --lead ABP``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cyclejepa.phase.cycles import check_detector_options, cycle_periods, orientation, pick_with_refractory
from cyclejepa.phase.filters import bandpass
from cyclejepa.phase.provider import PhaseProvider, channel_row, fill_nonfinite
from cyclejepa.declarations.providers import PulseDeclaration
from cyclejepa.registry import PHASE_PROVIDERS

__all__ = ["FIDUCIALS", "POLARITIES", "PULSE_CHANNEL_NAME", "PulseProvider", "feet", "systolic_peaks", "upstrokes"]

FIDUCIALS = ("foot", "max-slope", "peak")
POLARITIES = ("auto", "upright", "inverted")
PULSE_CHANNEL_NAME = PulseDeclaration.channel_pattern
"""Pulse-wave channel names (whole name, any case): PPG (PLETH, PPG, BVP) and arterial pressure
(ABP, BP, ART1, IBP1, FAP)."""
TYPICAL_WINDOW_S = 5.0
"""Half-width of the neighbourhood whose median upstroke is the typical one (``min_slope``)."""


@PHASE_PROVIDERS.register("pulse")
class PulseProvider(PulseDeclaration, PhaseProvider):
    """Pulse phase: one event per beat of the ``lead`` channel (None: the first matching
    `PULSE_CHANNEL_NAME`), at the module's ``fiducial``, with ``polarity`` ``"auto"``,
    ``"upright"`` or ``"inverted"``; ``band_hz``: the order-2 Butterworth pass band; ``min_slope``:
    the smallest upstroke kept, × the median within ±5 s; ``refractory``: the shortest distance
    between upstrokes, × the local cycle length; ``**qc``: `PhaseProvider`'s thresholds."""

    cycle_band_hz: tuple[float, float]  # the value is PulseDeclaration's
    too_few_reason = "too_few_pulses"
    interval_reason = "implausible_pulse_interval"

    def __init__(
        self,
        lead: str | None = None,
        *,
        fiducial: str = "foot",
        polarity: str = "auto",
        band_hz: tuple[float, float] = (0.5, 8.0),
        min_slope: float = 0.3,
        refractory: float = 0.5,
        interval_range_s: tuple[float, float] = (0.27, 2.0),
        **qc: Any,
    ):
        super().__init__(interval_range_s=interval_range_s, **qc)
        check_detector_options(
            fiducial, FIDUCIALS, polarity, POLARITIES, band_hz, {"min_slope": min_slope, "refractory": refractory}
        )
        self.lead, self.fiducial, self.polarity = lead, fiducial, polarity
        self.band_hz = (float(band_hz[0]), float(band_hz[1]))
        self.min_slope, self.refractory = float(min_slope), float(refractory)

    @property
    def highest_hz(self) -> float:
        """The band's upper edge (8 Hz by default: a record needs 17.8 Hz, `min_fs`)."""
        return self.band_hz[1]

    def events(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> np.ndarray:
        """Sample indices of the fiducial point of each beat; none for a flat or short (< 3 s) channel."""
        return self.detect(signal, fs, channel_names)[0]

    def detect(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """The beats and the upright band-passed wave (None for a flat or short channel)."""
        row = channel_row(self, self.lead, channel_names)
        wave = fill_nonfinite(signal[[row]], [channel_names[row]])[0]
        if wave.size < 3 * fs or not np.ptp(wave) > 0:
            return np.zeros(0, dtype=np.int64), None
        y = bandpass(wave, fs, self.band_hz)
        slope = np.gradient(y) * fs
        sign = {"upright": 1.0, "inverted": -1.0}.get(self.polarity) or orientation(slope)
        y, slope = sign * y, sign * slope
        periods = cycle_periods(np.fmax(slope, 0.0) ** 2, fs, self.cycle_band_hz)
        periods = np.fmin(periods, np.median(periods))  # a window's estimate can only err long (two cycles)
        shortest = self.interval_range_s[0]
        refractory = np.fmax(self.refractory * periods, shortest) * fs  # NaN periods: the shortest interval
        rises = upstrokes(slope, fs, refractory, self.min_slope)
        if self.fiducial == "max-slope":
            return rises, y
        return (feet(y, slope, rises, fs) if self.fiducial == "foot" else systolic_peaks(slope, rises)), y


def upstrokes(slope: np.ndarray, fs: float, refractory: np.ndarray, min_slope: float) -> np.ndarray:
    """Steepest point of each upstroke: positive ``slope`` maxima kept highest first
    ``refractory[i]`` apart (`pick_with_refractory`), those under ``min_slope`` × the median of
    the kept maxima within ±`TYPICAL_WINDOW_S` dropped."""
    from scipy.signal import find_peaks

    peaks = find_peaks(slope, height=0.0)[0]
    peaks = pick_with_refractory(peaks, slope[peaks], refractory)
    heights = slope[peaks]
    reach = TYPICAL_WINDOW_S * fs
    starts, ends = np.searchsorted(peaks, peaks - reach, "left"), np.searchsorted(peaks, peaks + reach, "right")
    typical = np.array([np.median(heights[a:b]) for a, b in zip(starts, ends, strict=True)])
    return peaks[heights >= min_slope * typical]


def feet(wave: np.ndarray, slope: np.ndarray, rises: np.ndarray, fs: float) -> np.ndarray:
    """Foot of each upstroke, t = rise − (wave[rise] − wave[min]) / slope[rise], with min the
    lowest sample within half the median interval before it; strictly increasing."""
    reach = round(0.5 * np.median(np.diff(rises))) if len(rises) > 1 else round(0.5 * fs)
    out, previous = [], 0
    for rise in rises:
        start = max(previous, rise - reach)
        low = start + int(np.argmin(wave[start : rise + 1]))
        foot = rise - (wave[rise] - wave[low]) / slope[rise] * fs
        out.append(int(round(min(max(foot, low), rise))))
        previous = rise
    return np.unique(np.asarray(out, dtype=np.int64))


def systolic_peaks(slope: np.ndarray, rises: np.ndarray) -> np.ndarray:
    """Systolic peak: the first sample after each upstroke, before the next, with slope ≤ 0."""
    falling = np.flatnonzero(slope <= 0)
    ends = np.append(rises[1:], len(slope))
    first = np.searchsorted(falling, rises)
    found = first < len(falling)
    peaks = np.where(found, falling[np.minimum(first, len(falling) - 1)], len(slope))
    return peaks[found & (peaks < ends)].astype(np.int64)
