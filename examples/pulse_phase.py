"""A phase provider for the pulse wave: one event per heartbeat at the foot of a PPG or arterial
pressure pulse.

Registered as ``pulse-phase`` once this module is imported, which a plugin entry point does
(``[project.entry-points."cyclejepa.plugins"]`` ``pulse-phase = "pulse_phase"``; see
docs/own-signal.md). In a config::

    phase:
      provider: pulse-phase
      options: {lead: PLETH}

The pulse wave rises steeply in systole and decays slowly in diastole. The channel is
band-passed (0.5–8 Hz, zero phase), its slope taken, and the steepest point of each upstroke
found (`upstrokes`): a local maximum of the slope, at least the shortest plausible beat interval
from the previous one, at least ``min_slope`` times the typical upstroke slope of the
surrounding 10 s. The event is that point (``fiducial: max-slope``) or the pulse's foot
(``fiducial: foot``, the default): where the tangent at the steepest point crosses the level of
the minimum before it (the intersecting-tangent foot, `feet`). The polarity is found from the
slope (`orientation`): an upstroke is steeper than the decay, so a wave whose steepest slopes
fall is inverted first. The shared quality control (`PhaseProvider`) then judges the beat
intervals (30–220 beats/min); a flat channel yields no events (``too_few_beats``). On a WFDB
record: ``cyclejepa phase RECORD --provider pulse-phase --lead ABP``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cyclejepa.phase import PhaseProvider, channel_indices, fill_nonfinite
from cyclejepa.registry import PHASE_PROVIDERS

FIDUCIALS = ("foot", "max-slope")
POLARITIES = ("auto", "upright", "inverted")


@PHASE_PROVIDERS.register("pulse-phase")
class PulsePhase(PhaseProvider):
    """Pulse phase: one event per beat at the foot (or steepest rise) of a pulse wave.

    Parameters
    ----------
    lead
        The pulse-wave channel's name (case-insensitive), e.g. ``PLETH`` or ``ABP``.
    fiducial
        ``"foot"`` (intersecting tangent, the default) or ``"max-slope"`` (steepest rise).
    polarity
        ``"auto"`` (from the slope, `orientation`), ``"upright"`` or ``"inverted"``.
    band_hz
        Pass band of the zero-phase Butterworth filter (order 2), in Hz.
    min_slope
        Smallest upstroke slope kept, as a fraction of the typical one within ±5 s.
    **qc
        Quality-control thresholds of `PhaseProvider`, with pulse defaults (0.27–2 s intervals).
    """

    signal = "pulse"
    """Anomaly families meant for other signals (ECG morphology) do not apply."""

    def __init__(
        self,
        lead: str = "PLETH",
        *,
        fiducial: str = "foot",
        polarity: str = "auto",
        band_hz: tuple[float, float] = (0.5, 8.0),
        min_slope: float = 0.4,
        interval_range_s: tuple[float, float] = (0.27, 2.0),
        **qc: Any,
    ):
        super().__init__(interval_range_s=interval_range_s, **qc)
        if fiducial not in FIDUCIALS:
            raise ValueError(f"fiducial must be one of {', '.join(FIDUCIALS)}, got {fiducial!r}")
        if polarity not in POLARITIES:
            raise ValueError(f"polarity must be one of {', '.join(POLARITIES)}, got {polarity!r}")
        if not 0 < band_hz[0] < band_hz[1] or not 0 < min_slope < 1:
            raise ValueError(f"band_hz must be 0 < low < high and 0 < min_slope < 1, got {band_hz}, {min_slope}")
        self.lead, self.fiducial, self.polarity = lead, fiducial, polarity
        self.band_hz, self.min_slope = (float(band_hz[0]), float(band_hz[1])), float(min_slope)

    def events(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> np.ndarray:
        from scipy.signal import butter, sosfiltfilt

        row = channel_indices(channel_names, self.lead)[0]
        wave = fill_nonfinite(signal[[row]], [channel_names[row]])[0]
        high = min(self.band_hz[1], 0.45 * fs)
        if wave.size < 3 * round(fs) or not np.ptp(wave) > 0:
            return np.zeros(0, dtype=np.int64)  # too short to filter, or flat
        y = sosfiltfilt(butter(2, [self.band_hz[0], high], btype="bandpass", fs=fs, output="sos"), wave)
        slope = np.gradient(y) * fs
        sign = {"upright": 1.0, "inverted": -1.0}.get(self.polarity) or orientation(slope)
        rises = upstrokes(sign * slope, fs, self.interval_range_s[0], self.min_slope)
        return rises if self.fiducial == "max-slope" else feet(sign * y, sign * slope, rises, fs)


def orientation(slope: np.ndarray) -> float:
    """+1 for an upright pulse wave, -1 for an inverted one: an upstroke is steeper than the
    decay, so the larger of the 99th slope percentile and minus the 1st is the upstroke's."""
    return 1.0 if np.percentile(slope, 99) >= -np.percentile(slope, 1) else -1.0


def upstrokes(slope: np.ndarray, fs: float, shortest_s: float, min_slope: float) -> np.ndarray:
    """Sample indices of the steepest point of each upstroke of an upright wave's ``slope``.

    Local maxima of the slope at least ``shortest_s`` apart (`scipy.signal.find_peaks`), kept
    when at least ``min_slope`` times the median of the upper half of the maxima within ±5 s
    (the typical upstroke there: noise and dicrotic notches are smaller).
    """
    from scipy.signal import find_peaks

    peaks, _ = find_peaks(slope, distance=max(1, round(shortest_s * fs)))
    heights = slope[peaks]
    kept = np.zeros(len(peaks), dtype=bool)
    for i, peak in enumerate(peaks):
        near = heights[np.abs(peaks - peak) <= 5.0 * fs]
        typical = np.median(near[near >= np.median(near)])
        kept[i] = heights[i] > 0 and heights[i] >= min_slope * typical
    return peaks[kept]


def feet(wave: np.ndarray, slope: np.ndarray, rises: np.ndarray, fs: float) -> np.ndarray:
    """The foot of each upstroke: where the tangent at its steepest point ``rises[k]`` meets the
    level of the wave's minimum before it (within half the median beat interval, after the
    previous upstroke), t = rise - (wave[rise] - wave[min]) / slope[rise]; strictly increasing."""
    reach = round(0.5 * np.median(np.diff(rises))) if len(rises) > 1 else round(0.5 * fs)
    out, previous = [], 0
    for rise in rises:
        start = max(previous, rise - reach)
        low = start + int(np.argmin(wave[start : rise + 1]))
        foot = rise - (wave[rise] - wave[low]) / slope[rise] * fs
        out.append(int(round(min(max(foot, low), rise))))
        previous = rise
    return np.unique(np.asarray(out, dtype=np.int64))
