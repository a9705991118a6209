"""The ``"ecg-rpeak"`` phase provider: cardiac phase from the R-peaks of a named detector
(`cyclejepa.phase.ecg.detectors`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from cyclejepa.data.channels import channel_key
from cyclejepa.phase.ecg.detectors import DEFAULT_DETECTOR, get_detector
from cyclejepa.phase.ecg.rpeak import QRS_BAND_HZ, detect_r_peaks
from cyclejepa.phase.provider import PhaseProvider, channel_indices, fill_nonfinite, provider_classes
from cyclejepa.declarations.providers import EcgRPeakDeclaration
from cyclejepa.registry import PHASE_PROVIDERS

__all__ = ["ECG_LEAD_NAME", "EcgRPeakProvider", "ecg_lead_rows"]

ECG_LEAD_NAME = re.compile(EcgRPeakDeclaration.channel_pattern or "", re.IGNORECASE)
"""Channel names of ECG leads (the whole `channel_key` of a name; `EcgRPeakDeclaration.channel_pattern`)."""


def ecg_lead_rows(channel_names: Sequence[str]) -> list[int]:
    """Rows named as ECG leads (`ECG_LEAD_NAME`); when none is, the rows no other registered
    provider claims. ValueError naming each channel and its provider when every one is claimed."""
    rows = [row for row, name in enumerate(channel_names) if ECG_LEAD_NAME.fullmatch(channel_key(name))]
    if rows:
        return rows
    claimed = {row: _reader_of(name) for row, name in enumerate(channel_names)}
    unclaimed = [row for row, reader in claimed.items() if reader is None]
    if not unclaimed:
        kinds = ", ".join(f"{channel_names[row]} (read by {reader!r})" for row, reader in claimed.items())
        raise ValueError(f"no ECG lead among the record's channels: {kinds}; the R-peak detector runs on ECG leads only")
    return unclaimed


def _reader_of(name: str) -> str | None:
    """The first other registered provider whose channel pattern matches ``name``."""
    readers = (key for key, cls in provider_classes() if cls is not EcgRPeakProvider and cls.reads_channel(name))
    return next(readers, None)


@PHASE_PROVIDERS.register("ecg-rpeak")
class EcgRPeakProvider(EcgRPeakDeclaration, PhaseProvider):
    """Cardiac phase from the R-peaks of a registered detector (default ``"cyclejepa"``).

    ``lead``: the lead timing the beats (None: ``II`` if present, else the first ECG lead); a
    list of names or ``"all"`` restricts detection to those leads and times on the first (``"all"``:
    the best quality). ``detector``: a name of `cyclejepa.phase.ecg.detectors`; only
    ``"cyclejepa"`` reads several leads. ``detection_leads``: with one ``lead``, ``"all"`` ECG
    leads (`ecg_lead_rows`: a pressure or respiration channel never votes) or a list of names.
    ``refine_window_s``: the ``"cyclejepa"`` detector's R-wave search half-width; ``**qc``:
    `PhaseProvider`'s thresholds.
    """

    too_few_reason = "too_few_beats"
    interval_reason = "implausible_rr"

    def __init__(
        self,
        lead: str | Sequence[str] | None = None,
        *,
        detector: str = DEFAULT_DETECTOR,
        detection_leads: str | Sequence[str] = "all",
        refine_window_s: float = 0.06,
        **qc: Any,
    ):
        super().__init__(**qc)
        get_detector(detector)  # unknown names fail at construction, listing the known ones
        if isinstance(detection_leads, str) and detection_leads.lower() != "all":
            raise ValueError(f"detection_leads must be 'all' or a list of names, got {detection_leads!r}")
        self.lead = lead
        self.detector = detector
        self.detection_leads = detection_leads
        self.refine_window_s = refine_window_s

    @property
    def highest_hz(self) -> float:
        """25 Hz, the QRS band's upper edge (`QRS_BAND_HZ`): a record needs 55.6 Hz (`min_fs`)."""
        return QRS_BAND_HZ[1]

    def lead_rows(self, channel_names: Sequence[str]) -> tuple[list[int], int | None]:
        """Detection rows and the timing lead's position among them (None: the detector picks)."""
        keys = [channel_key(name) for name in channel_names]
        leads = ecg_lead_rows(channel_names)
        if isinstance(self.lead, str) and self.lead.lower() == "all":
            return leads, None
        if self.lead is not None and not isinstance(self.lead, str):
            rows = channel_indices(channel_names, self.lead)
            return rows, 0
        if self.lead is None:
            timing = keys.index("ii") if keys.count("ii") == 1 else leads[0]
        else:
            timing = channel_indices(channel_names, self.lead)[0]
        if isinstance(self.detection_leads, str):
            rows = leads if timing in leads else [timing, *leads]
        else:
            rows = channel_indices(channel_names, self.detection_leads)
            rows = rows if timing in rows else [timing, *rows]
        return rows, rows.index(timing)

    def events(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> np.ndarray:
        """R-peak sample indices; non-finite samples are interpolated first."""
        rows, timing = self.lead_rows(channel_names)
        ecg = fill_nonfinite(signal[rows], [channel_names[row] for row in rows])
        if self.detector == "cyclejepa":
            return detect_r_peaks(ecg, fs, self.refine_window_s, timing_row=timing)
        return get_detector(self.detector)(ecg, fs, 0 if timing is None else timing)
