"""The ``"pulse"`` phase provider: one event per heartbeat of a pulse wave (PPG or arterial pressure).

The channel is band-passed (0.5–8 Hz, zero phase: a constant offset or slow drift is gone), its
slope taken, and each beat's upstroke found as the steepest point of the rise:

1. **Polarity** per record (`orientation`): a pulse wave rises in systole, about a third of
   the cycle, so an upright wave has a positive slope in fewer than half of its samples; a wave
   that rises in more than half (an inverted camera PPG) is turned over first.
2. **The record's own cycle length** (`cycle_periods`): the autocorrelation peak, within the
   cycle band (0.5–3.5 Hz) and in 10 s windows, of the squared rising part of the slope
   (max(slope, 0)², a train of one sharp upstroke per beat; the wave itself also carries the
   slower swing of breathing, which can outweigh the beat, and squaring shrinks a dicrotic
   wave's share); never more than the record's median (in an irregular rhythm a window's
   peak can be two cycles).
3. **Upstrokes**: local maxima of the slope, taken highest first, each at least a refractory
   period (``refractory`` × the local cycle length, 0.5 by default, never under the shortest
   plausible interval) from those kept; then those under ``min_slope`` times the median
   upstroke of the surrounding 10 s dropped. A dicrotic notch follows its beat's upstroke by
   0.3–0.4 s and rises less steeply, so at 45–60 beats per minute (cycle 1–1.3 s) it falls
   inside the refractory period and is never a second beat.
4. **The fiducial point** (``fiducial``): ``"foot"`` (the default), where the tangent at the
   steepest point meets the level of the minimum before it (the intersecting-tangent foot);
   ``"max-slope"``, the steepest point itself; ``"peak"``, the systolic peak, the first maximum
   of the band-passed wave after the upstroke.

The shared quality control of `PhaseProvider` then judges each cycle of the band-passed upright
wave against the record's median cycle and the wave's periodicity (`PhaseProvider.detect`,
`cyclejepa.phase.cycles.assess_cycles`; an implausible interval marks its cycle bad), under this
provider's reason name ``too_few_pulses`` and the shared ``few_good_cycles``, ``aperiodic``,
``no_fundamental``, ``low_phase_yield``. On a WFDB record:
``cyclejepa phase RECORD --provider pulse --lead ABP``.
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
"""Channel names of pulse waves (the whole name, any case): photoplethysmograms (PLETH, Pleth,
PPG, BVP and names containing them) and arterial pressure (ABP, BP, ART, ART1, IBP1, FAP)."""
TYPICAL_WINDOW_S = 5.0
"""Half-width of the neighbourhood whose median upstroke is the typical one (``min_slope``)."""


@PHASE_PROVIDERS.register("pulse")
class PulseProvider(PulseDeclaration, PhaseProvider):
    """Pulse phase: one event per beat at the foot, steepest rise or systolic peak of a pulse wave.

    Parameters
    ----------
    lead
        The pulse-wave channel's name (`channel_indices`: ``PLETH`` finds ``PLETH,``), e.g. ``PLETH`` or ``ABP``; None takes
        the record's first channel named as a pulse wave (`PULSE_CHANNEL_NAME`).
    fiducial
        ``"foot"`` (intersecting tangent, the default), ``"max-slope"`` (steepest rise) or
        ``"peak"`` (systolic peak).
    polarity
        ``"auto"`` (per record, `orientation`), ``"upright"`` or ``"inverted"``.
    band_hz
        Pass band of the zero-phase Butterworth filter (order 2), in Hz.
    min_slope
        Smallest upstroke slope kept, as a fraction of the median upstroke within ±5 s.
    refractory
        Shortest distance between two upstrokes as a fraction of the local cycle length.
    **qc
        Quality-control thresholds of `PhaseProvider`, with pulse defaults (0.27–2 s intervals).
    """

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
        """The band-pass's upper edge (8 Hz by default: a record needs 17.8 Hz, `min_fs`)."""
        return self.band_hz[1]

    def events(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> np.ndarray:
        """Sample indices of the fiducial point of each beat; none for a flat or short (< 3 s) channel."""
        return self.detect(signal, fs, channel_names)[0]

    def detect(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """The beats (`events`) and the upright band-passed wave whose cycles quality control
        compares (None for a flat or short channel)."""
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
    """Sample indices of the steepest point of each upstroke of an upright wave's ``slope``.

    The positive local maxima of the slope, kept highest first at least ``refractory[i]``
    samples apart (`pick_with_refractory`), then those under ``min_slope`` times the median of
    the kept maxima within ±`TYPICAL_WINDOW_S` dropped (noise on a flat stretch, a notch).
    """
    from scipy.signal import find_peaks

    peaks = find_peaks(slope, height=0.0)[0]
    peaks = pick_with_refractory(peaks, slope[peaks], refractory)
    heights = slope[peaks]
    reach = TYPICAL_WINDOW_S * fs
    starts, ends = np.searchsorted(peaks, peaks - reach, "left"), np.searchsorted(peaks, peaks + reach, "right")
    typical = np.array([np.median(heights[a:b]) for a, b in zip(starts, ends, strict=True)])
    return peaks[heights >= min_slope * typical]


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


def systolic_peaks(slope: np.ndarray, rises: np.ndarray) -> np.ndarray:
    """The systolic peak after each upstroke: the first sample after ``rises[k]`` where the
    slope is no longer positive (the wave's first maximum), before the next upstroke."""
    falling = np.flatnonzero(slope <= 0)
    ends = np.append(rises[1:], len(slope))
    first = np.searchsorted(falling, rises)
    found = first < len(falling)
    peaks = np.where(found, falling[np.minimum(first, len(falling) - 1)], len(slope))
    return peaks[found & (peaks < ends)].astype(np.int64)
