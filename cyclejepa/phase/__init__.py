"""Cyclic coordinates (phase) from biosignals: providers, tracks, token assignment.

The signal-independent core (`provider`, `track`, `composite`, `records`) and one package per
signal's specifics: `cyclejepa.phase.ecg` (R-peaks), `cyclejepa.phase.pulse` (pulse waves),
`cyclejepa.phase.breath` (respiration).
"""

from cyclejepa.phase.breath import BreathProvider
from cyclejepa.phase.composite import CompositePhaseProvider, CompositeTrack
from cyclejepa.phase.ecg import (
    DEFAULT_DETECTOR,
    NEUROKIT_METHODS,
    EcgRPeakProvider,
    detect_r_peaks,
    detect_r_peaks_pan_tompkins,
    detector_names,
    get_detector,
    read_beat_annotations,
    register_detector,
)
from cyclejepa.phase.provider import PhaseProvider, channel_indices, fill_nonfinite
from cyclejepa.phase.pulse import PulseProvider
from cyclejepa.phase.records import phase_record
from cyclejepa.phase.track import (
    PHASE_MAX,
    TWO_PI,
    PhaseTrack,
    QCVerdict,
    Track,
    causal_phase,
    causal_phase_from_events,
    match_events,
    phase_from_events,
    score_events,
    token_times,
)

__all__ = [
    "DEFAULT_DETECTOR",
    "NEUROKIT_METHODS",
    "detect_r_peaks_pan_tompkins",
    "detector_names",
    "get_detector",
    "register_detector",
    "PHASE_MAX",
    "TWO_PI",
    "BreathProvider",
    "CompositePhaseProvider",
    "CompositeTrack",
    "EcgRPeakProvider",
    "PhaseProvider",
    "PhaseTrack",
    "PulseProvider",
    "QCVerdict",
    "Track",
    "causal_phase",
    "causal_phase_from_events",
    "channel_indices",
    "detect_r_peaks",
    "fill_nonfinite",
    "match_events",
    "phase_from_events",
    "phase_record",
    "read_beat_annotations",
    "score_events",
    "token_times",
]
