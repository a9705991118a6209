"""Named R-peak detectors of the registry `cyclejepa.registry.RPEAK_DETECTORS`, chosen with
``phase.options: {detector: NAME}`` (docs/phase.md has the table): ``cyclejepa`` (default,
`detect_r_peaks`, every lead fused), ``pan-tompkins``, ``neurokit2:METHOD`` for METHOD in
`NEUROKIT_METHODS`, ``wfdb-xqrs``; the others run on the timing lead. A plugin adds one with
`register_detector`. Each is called as ``detect(signal, fs, timing_row)`` on a finite float64
(leads, samples) ECG and returns strictly increasing int64 sample indices at the native rate.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cyclejepa.phase.ecg.pantompkins import detect_r_peaks_pan_tompkins
from cyclejepa.phase.ecg.rpeak import detect_r_peaks
from cyclejepa.declarations.providers import NEUROKIT_METHODS
from cyclejepa.registry import RPEAK_DETECTORS

Detector = Callable[[np.ndarray, float, int], np.ndarray]


DEFAULT_DETECTOR = "cyclejepa"


def register_detector(name: str) -> Callable[[Detector], Detector]:
    """Decorator registering ``detect(signal, fs, timing_row)`` under ``name`` in
    `cyclejepa.registry.RPEAK_DETECTORS`."""
    return RPEAK_DETECTORS.register(name)


def detector_names() -> list[str]:
    """Every registered detector name, the default first."""
    return sorted(RPEAK_DETECTORS.names(), key=lambda name: (name != DEFAULT_DETECTOR, name))


def get_detector(name: str) -> Detector:
    """The detector registered as ``name``; `UnknownComponentError` (a KeyError) naming the
    closest match."""
    return RPEAK_DETECTORS.get(name)


def _clean_peaks(peaks: np.ndarray, n_samples: int) -> np.ndarray:
    """Unique in-range int64 indices, ascending."""
    peaks = np.unique(np.asarray(peaks, dtype=np.int64))
    return peaks[(peaks >= 0) & (peaks < n_samples)]


@register_detector("cyclejepa")
def _cyclejepa(signal: np.ndarray, fs: float, timing_row: int) -> np.ndarray:
    return detect_r_peaks(signal, fs, timing_row=timing_row)


@register_detector("pan-tompkins")
def _pan_tompkins(signal: np.ndarray, fs: float, timing_row: int) -> np.ndarray:
    return detect_r_peaks_pan_tompkins(signal[timing_row], fs)


def _neurokit(method: str) -> Detector:
    def detect(signal: np.ndarray, fs: float, timing_row: int) -> np.ndarray:
        try:
            import neurokit2 as nk
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError(f"detector 'neurokit2:{method}' needs neurokit2 (pip install neurokit2)") from error
        cleaned = nk.ecg_clean(signal[timing_row], sampling_rate=fs, method=method)
        found = nk.ecg_findpeaks(cleaned, sampling_rate=fs, method=method)["ECG_R_Peaks"]
        return _clean_peaks(found, signal.shape[-1])

    return detect


for _method in NEUROKIT_METHODS:
    register_detector(f"neurokit2:{_method}")(_neurokit(_method))


@register_detector("wfdb-xqrs")
def _xqrs(signal: np.ndarray, fs: float, timing_row: int) -> np.ndarray:
    import logging

    from wfdb.processing import xqrs_detect

    logging.getLogger("wfdb").setLevel(logging.WARNING)
    found = xqrs_detect(signal[timing_row], fs=fs, verbose=False)
    return _clean_peaks(found, signal.shape[-1])
