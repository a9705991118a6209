"""Cyclic coordinates (phase) from biosignals: providers, tracks, token assignment.

The signal-independent core (`provider`, `track`, `composite`, `records`) and one package per
signal's specifics: `cyclejepa.phase.ecg` (R-peaks), `cyclejepa.phase.pulse` (pulse waves),
`cyclejepa.phase.breath` (respiration).

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from cyclejepa.registry import lazy_names

_HOMES = {
    "BreathProvider": "breath",
    "CompositePhaseProvider": "composite",
    "CompositeTrack": "composite",
    "DEFAULT_DETECTOR": "ecg",
    "EcgRPeakProvider": "ecg",
    "NEUROKIT_METHODS": "ecg",
    "detect_r_peaks": "ecg",
    "detect_r_peaks_pan_tompkins": "ecg",
    "detector_names": "ecg",
    "get_detector": "ecg",
    "read_beat_annotations": "ecg",
    "register_detector": "ecg",
    "PhaseProvider": "provider",
    "channel_indices": "provider",
    "fill_nonfinite": "provider",
    "PulseProvider": "pulse",
    "phase_record": "records",
    "PHASE_MAX": "track",
    "PhaseTrack": "track",
    "QCVerdict": "track",
    "TWO_PI": "track",
    "Track": "track",
    "causal_phase": "track",
    "causal_phase_from_events": "track",
    "match_events": "track",
    "phase_from_events": "track",
    "score_events": "track",
    "token_times": "track",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
