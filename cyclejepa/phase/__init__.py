"""Cyclic coordinates (phase) from biosignals: providers, tracks, token assignment.

The signal-independent core (`provider`, `track`, `composite`, `records`) and one package per
signal's specifics: `cyclejepa.phase.ecg` (R-peaks), `cyclejepa.phase.pulse` (pulse waves),
`cyclejepa.phase.breath` (respiration).

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:  # each name's type for type checkers and editors (`X as X`: re-exported); nothing imported at run time
    from cyclejepa.phase.breath import BreathProvider as BreathProvider
    from cyclejepa.phase.composite import CompositePhaseProvider as CompositePhaseProvider, CompositeTrack as CompositeTrack
    from cyclejepa.phase.ecg import (
        DEFAULT_DETECTOR as DEFAULT_DETECTOR,
        EcgRPeakProvider as EcgRPeakProvider,
        NEUROKIT_METHODS as NEUROKIT_METHODS,
        detect_r_peaks as detect_r_peaks,
        detect_r_peaks_pan_tompkins as detect_r_peaks_pan_tompkins,
        detector_names as detector_names,
        get_detector as get_detector,
        read_beat_annotations as read_beat_annotations,
        register_detector as register_detector,
    )
    from cyclejepa.phase.provider import (
        PhaseProvider as PhaseProvider,
        channel_indices as channel_indices,
        fill_nonfinite as fill_nonfinite,
    )
    from cyclejepa.phase.pulse import PulseProvider as PulseProvider
    from cyclejepa.phase.records import phase_record as phase_record
    from cyclejepa.phase.track import (
        PHASE_MAX as PHASE_MAX,
        PhaseTrack as PhaseTrack,
        QCVerdict as QCVerdict,
        TWO_PI as TWO_PI,
        Track as Track,
        causal_phase as causal_phase,
        causal_phase_from_events as causal_phase_from_events,
        match_events as match_events,
        phase_from_events as phase_from_events,
        score_events as score_events,
        token_times as token_times,
    )

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
