"""The ``"ecg-rpeak"`` phase provider: cardiac phase from R-peaks.

The detection itself lives in `cyclejepa.phase.ecg.rpeak` (the default detector, every lead
fused), `cyclejepa.phase.ecg.pantompkins` (the paper's single-lead core) and the named detectors
of `cyclejepa.phase.ecg.detectors` (NeuroKit2's methods, WFDB's XQRS), chosen with ``detector=``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from cyclejepa.data.channels import channel_key
from cyclejepa.phase.ecg.detectors import DEFAULT_DETECTOR, get_detector
from cyclejepa.phase.ecg.rpeak import QRS_BAND_HZ, detect_r_peaks
from cyclejepa.phase.provider import PhaseProvider, channel_indices, fill_nonfinite
from cyclejepa.declarations.providers import EcgRPeakDeclaration
from cyclejepa.registry import PHASE_PROVIDERS

__all__ = ["ECG_LEAD_NAME", "EcgRPeakProvider", "ecg_lead_rows"]

ECG_LEAD_NAME = re.compile(EcgRPeakDeclaration.channel_pattern or "", re.IGNORECASE)
"""Channel names of ECG leads (the whole `channel_key` of a name; `EcgRPeakDeclaration.channel_pattern`)."""


def ecg_lead_rows(channel_names: Sequence[str]) -> list[int]:
    """Rows of the channels named as ECG leads (`ECG_LEAD_NAME`); when none is, the rows whose
    names no registered provider claims (``ch0``: the names say nothing about which channels
    are leads), never a channel another provider reads (a pulse wave, a respiration).

    Raises
    ------
    ValueError
        When every channel is of a kind another provider reads, naming each and its provider.
    """
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
    """The first registered provider (other than this one) whose channel pattern matches ``name``."""
    for provider_name in PHASE_PROVIDERS.names():
        provider = PHASE_PROVIDERS.get(provider_name)
        other = provider is not EcgRPeakProvider and isinstance(provider, type) and issubclass(provider, PhaseProvider)
        if other and provider.reads_channel(name):
            return provider_name
    return None


@PHASE_PROVIDERS.register("ecg-rpeak")
class EcgRPeakProvider(EcgRPeakDeclaration, PhaseProvider):
    """Cardiac phase from the R-peaks of a registered detector (default ``"cyclejepa"``).

    Parameters
    ----------
    lead
        The lead whose R wave times the beats: a channel name (`channel_indices`: ``II`` finds ``II,``); None picks
        ``"II"`` when the record has it, else its first ECG lead. A list of names or ``"all"``
        restricts detection to those leads (every ECG lead for ``"all"``) and times the beats
        on the first of them (``"all"``: the best-quality lead, chosen by the detector).
    detector
        A name of `cyclejepa.phase.ecg.detectors` (``"cyclejepa"``, ``"pan-tompkins"``,
        ``"neurokit2:neurokit"``, ``"wfdb-xqrs"``, ...). Only ``"cyclejepa"`` reads several
        leads; the others run on the timing lead alone.
    detection_leads
        Leads that take part in detection when ``lead`` is one name or None: ``"all"`` (every
        ECG lead, the default) or a list of names. The ECG leads are the channels whose names
        `ECG_LEAD_NAME` recognises, so that an arterial pressure or respiration channel of a
        multiparameter record never votes (its pulses would be counted as beats); when no name
        is recognised, the channels no other provider reads (`ecg_lead_rows`).
    refine_window_s
        Half-width of the R-wave extremum search of the ``"cyclejepa"`` detector.
    **qc
        Quality-control thresholds of `PhaseProvider`.
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
        """The upper edge of the QRS detection band (25 Hz, `QRS_BAND_HZ`): a record needs 55.6 Hz
        (`min_fs`)."""
        return QRS_BAND_HZ[1]

    def lead_rows(self, channel_names: Sequence[str]) -> tuple[list[int], int | None]:
        """Rows taking part in detection, and the position among them of the timing lead.

        The timing position is None when the detector is to choose the best-quality lead.
        """
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
