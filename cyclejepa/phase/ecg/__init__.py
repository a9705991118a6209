"""Cardiac phase from the ECG: the ``ecg-rpeak`` provider and its R-peak detectors.

- `provider`: `EcgRPeakProvider`, registered as ``"ecg-rpeak"``;
- `rpeak`: the default detector `detect_r_peaks` (every lead fused);
- `pantompkins`: the paper's Pan–Tompkins-style single-lead core;
- `detectors`: the registry of named detectors (`cyclejepa.registry.RPEAK_DETECTORS`);
- `annotations`, `reference_sets`: annotated real records for validating them.
"""

from cyclejepa.phase.ecg.annotations import read_beat_annotations
from cyclejepa.phase.ecg.detectors import (
    DEFAULT_DETECTOR,
    NEUROKIT_METHODS,
    detector_names,
    get_detector,
    register_detector,
)
from cyclejepa.phase.ecg.pantompkins import detect_r_peaks_pan_tompkins
from cyclejepa.phase.ecg.provider import EcgRPeakProvider
from cyclejepa.phase.ecg.rpeak import detect_r_peaks

__all__ = [
    "DEFAULT_DETECTOR",
    "NEUROKIT_METHODS",
    "EcgRPeakProvider",
    "detect_r_peaks",
    "detect_r_peaks_pan_tompkins",
    "detector_names",
    "get_detector",
    "read_beat_annotations",
    "register_detector",
]
