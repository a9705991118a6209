"""The ``"breath"`` phase provider: one event per breath of a respiration belt or impedance channel.

1. The channel is median-filtered (0.4 s: electrode and motion spikes go) and band-passed
   (0.05–0.7 Hz, zero phase: up to 42 breaths per minute; offset and drift go).
2. **The record's own breath length** (`cycle_periods`): the autocorrelation peak of the
   band-passed signal within the cycle band (0.1–0.7 Hz), in 30 s windows, never more than
   the record's median.
3. **Breaths**: the peaks of the band-passed signal (end of inspiration, ``fiducial: "peak"``,
   the default) at least a refractory period apart (``refractory`` × the local breath length,
   0.4 by default, never under the shortest plausible interval) and standing out by at least
   ``min_prominence`` of the signal's 5–95 % range; or the trough before each such peak
   (start of inspiration, ``fiducial: "onset"``).

Which way inspiration goes depends on the sensor (a belt stretches, a thermistor cools, an
impedance rises): ``polarity: "inverted"`` turns a signal whose inspiration goes down. The
number of breaths does not depend on it, only which end of a breath is the event. Breathing is
irregular (sighs, pauses), so the successive-interval ratio check is off by default. Quality
control judges each cycle of the band-passed signal against the record's median breath and the
signal's periodicity (`PhaseProvider.detect`, `cyclejepa.phase.cycles.assess_cycles`); reasons:
``too_few_breaths``, ``few_good_cycles``, ``aperiodic``, ``no_fundamental``, ``low_phase_yield``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cyclejepa.phase.cycles import check_detector_options, cycle_periods, pick_with_refractory
from cyclejepa.phase.filters import bandpass
from cyclejepa.phase.provider import PhaseProvider, channel_row, fill_nonfinite
from cyclejepa.declarations.providers import BreathDeclaration
from cyclejepa.registry import PHASE_PROVIDERS

__all__ = ["BREATH_CHANNEL_NAME", "BreathProvider", "breath_peaks", "onsets_before"]

BREATH_CHANNEL_NAME = BreathDeclaration.channel_pattern
"""Channel names of respiration (the whole name, any case): RESP, Resp, respiration, breathing,
thoracic or abdominal belts (THOR, ABDO, chest), airflow, nasal pressure, impedance, RIP."""
FIDUCIALS = ("peak", "onset")
POLARITIES = ("upright", "inverted")


@PHASE_PROVIDERS.register("breath")
class BreathProvider(BreathDeclaration, PhaseProvider):
    """Breathing phase: one event per breath, at the end (peak) or start (onset) of inspiration.

    Parameters
    ----------
    lead
        The respiration channel's name (`channel_indices`: ``RESP`` finds ``RESP,``); None takes the record's first channel
        named as respiration (`BREATH_CHANNEL_NAME`).
    fiducial
        ``"peak"`` (end of inspiration, the default) or ``"onset"`` (the trough before it).
    polarity
        ``"upright"`` (inspiration goes up, the default) or ``"inverted"``.
    band_hz
        Pass band of the zero-phase Butterworth filter (order 2), in Hz.
    min_prominence
        Smallest prominence of a breath's peak, as a fraction of the 5–95 % range.
    refractory
        Shortest distance between two breaths as a fraction of the local breath length.
    **qc
        Quality-control thresholds of `PhaseProvider`, with breathing defaults (1.4–15 s
        intervals, no successive-interval ratio check).
    """

    cycle_band_hz: tuple[float, float]  # the value is BreathDeclaration's
    too_few_reason = "too_few_breaths"
    interval_reason = "implausible_breath_interval"

    def __init__(
        self,
        lead: str | None = None,
        *,
        fiducial: str = "peak",
        polarity: str = "upright",
        band_hz: tuple[float, float] = (0.05, 0.7),
        min_prominence: float = 0.25,
        refractory: float = 0.4,
        interval_range_s: tuple[float, float] = (1.4, 15.0),
        max_interval_ratio: float | None = None,
        **qc: Any,
    ):
        super().__init__(interval_range_s=interval_range_s, max_interval_ratio=max_interval_ratio, **qc)
        check_detector_options(
            fiducial, FIDUCIALS, polarity, POLARITIES, band_hz, {"min_prominence": min_prominence, "refractory": refractory}
        )
        self.lead, self.fiducial, self.polarity = lead, fiducial, polarity
        self.band_hz = (float(band_hz[0]), float(band_hz[1]))
        self.min_prominence, self.refractory = float(min_prominence), float(refractory)

    @property
    def highest_hz(self) -> float:
        """The band-pass's upper edge (0.7 Hz by default: a record needs 1.56 Hz, `min_fs`; a
        monitor's 1 Hz numerics are refused)."""
        return self.band_hz[1]

    def events(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> np.ndarray:
        """Sample indices of one point per breath; none for a flat or short (< 10 s) channel."""
        return self.detect(signal, fs, channel_names)[0]

    def detect(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """The breaths (`events`) and the band-passed breathing signal whose cycles quality
        control compares (None for a flat or short channel)."""
        from scipy.ndimage import median_filter

        row = channel_row(self, self.lead, channel_names)
        resp = fill_nonfinite(signal[[row]], [channel_names[row]])[0]
        if resp.size < 10 * fs or not np.ptp(resp) > 0:
            return np.zeros(0, dtype=np.int64), None
        resp = median_filter(resp, size=round(0.2 * fs) * 2 + 1, mode="nearest")
        breathing = bandpass(resp, fs, self.band_hz) * (1.0 if self.polarity == "upright" else -1.0)
        periods = cycle_periods(breathing, fs, self.cycle_band_hz)
        periods = np.fmin(periods, np.median(periods))
        refractory = np.fmax(self.refractory * periods, self.interval_range_s[0]) * fs
        peaks = breath_peaks(breathing, refractory, self.min_prominence)
        return (peaks if self.fiducial == "peak" else onsets_before(breathing, peaks)), breathing


def breath_peaks(breathing: np.ndarray, refractory: np.ndarray, min_prominence: float) -> np.ndarray:
    """Peaks of ``breathing`` standing out by ``min_prominence`` of its 5–95 % range
    (`scipy.signal.find_peaks`), kept highest first at least ``refractory[i]`` samples apart."""
    from scipy.signal import find_peaks

    spread = np.subtract(*np.percentile(breathing, [95, 5]))
    peaks = find_peaks(breathing, prominence=min_prominence * spread)[0]
    return pick_with_refractory(peaks, breathing[peaks], refractory)


def onsets_before(breathing: np.ndarray, peaks: np.ndarray) -> np.ndarray:
    """The lowest sample between each peak and the one before it (the record start for the first)."""
    starts = np.concatenate([[0], peaks[:-1]])
    return np.array(
        [start + int(np.argmin(breathing[start : peak + 1])) for start, peak in zip(starts, peaks, strict=True)], dtype=np.int64
    )
