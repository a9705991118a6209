"""The ``"breath"`` phase provider: one event per breath of a respiration belt or impedance
channel (docs/phase.md). Median filter (0.4 s), zero-phase band-pass 0.05–0.7 Hz, the breath
length from the autocorrelation (`cycle_periods`), peaks prominent by ``min_prominence`` of the
5–95 % range a refractory span apart (``fiducial: "peak"``) or the trough before each
(``"onset"``). ``polarity: "inverted"`` turns a sensor whose inspiration goes down.
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
"""Respiration channel names (whole name, any case): RESP, breathing, belts (THOR, ABDO, chest),
airflow, nasal pressure, impedance, RIP."""
FIDUCIALS = ("peak", "onset")
POLARITIES = ("upright", "inverted")


@PHASE_PROVIDERS.register("breath")
class BreathProvider(BreathDeclaration, PhaseProvider):
    """Breathing phase: one event per breath of the ``lead`` channel (None: the first matching
    `BREATH_CHANNEL_NAME`), at the module's ``fiducial``; ``band_hz``: the order-2 Butterworth
    pass band; ``refractory``: the shortest distance between breaths, × the local breath length;
    ``**qc``: `PhaseProvider`'s thresholds (here 1.4–15 s, no ratio check)."""

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
        """The band's upper edge (0.7 Hz by default: a record needs 1.56 Hz, `min_fs`)."""
        return self.band_hz[1]

    def events(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> np.ndarray:
        """Sample indices of one point per breath; none for a flat or short (< 10 s) channel."""
        return self.detect(signal, fs, channel_names)[0]

    def detect(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """The breaths and the band-passed breathing signal (None for a flat or short channel)."""
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
    """Peaks prominent by ``min_prominence`` of the 5–95 % range, kept highest first
    ``refractory[i]`` samples apart."""
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
