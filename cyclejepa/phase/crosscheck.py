"""Pulse events against the heartbeats of the same record's ECG: the real-data check of ``pulse``.

The reference is ``ecg-rpeak`` on the record's ECG (Se/PPV about 1.0 on MIT-BIH 100:
docs/phase.md). A pulse matches a QRS, one to one, within D ± `TOLERANCE_S` of it, D the
record's transit delay (`pulse_delay`). `VARIANTS` build a camera or finger PPG's failure cases
from the same records: inverted, offset by 1000 × its range, stretched to 50 beats per minute.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cyclejepa.data.wfdb_folder import adc_limits, unwrap
from cyclejepa.data.samples import read_samples
from cyclejepa.data.wfdb_format import read_header
from cyclejepa.phase.track import assessed_qc, match_events, score_events

__all__ = [
    "MAX_DELAY_S",
    "PAIRS",
    "TOLERANCE_S",
    "VARIANTS",
    "Channel",
    "check_pulses",
    "read_channel",
    "reference_windows",
    "score_breaths",
    "score_pulses",
    "stretch",
    "zero_crossing_breaths",
]

MAX_DELAY_S = 0.8
"""Longest QRS-to-pulse delay looked for: transit (0.1–0.45 s) plus a monitor's misalignment."""
QC_WINDOW_S = 10.0
"""Windows in which the reference ECG's own quality control is judged (`reference_windows`)."""
TOLERANCE_S = 0.15
"""Half-width of the matching window around the record's median delay."""
SLOW_RATE_PER_MIN = 50.0
"""The rate the slowed variant is stretched to."""

PAIRS = (
    ("v102s", "II", "PLETH"),
    ("a103l", "II", "PLETH"),
    ("03700181", "MCL1", "ABP"),
    ("mixedsignals", "II", "Pleth"),
    ("mixedsignals", "II", "ABP"),
)
"""(record, ECG channel, pulse channel) of the shared multiparameter records."""


@dataclass(frozen=True)
class Channel:
    """One channel of a record in physical units at its own rate, its first sample at ``start_s``."""

    samples: np.ndarray
    fs: float
    start_s: float = 0.0

    def times(self, indices: np.ndarray) -> np.ndarray:
        """Record times (s) of sample ``indices``."""
        return self.start_s + np.asarray(indices) / self.fs

    @property
    def end_s(self) -> float:
        """Record time (s) of the last sample."""
        return self.start_s + (len(self.samples) - 1) / self.fs


def read_channel(path: str | Path, name: str) -> Channel:
    """Channel ``name`` of the WFDB record ``path`` at its own rate, ADC wrap-around undone
    (`unwrap`), missing samples at either end cut off."""
    header = read_header(path)
    names = [spec.name for spec in header.signals]
    if name not in names:
        raise KeyError(f"channel {name!r} not in {path}; its channels are {names}")
    spec = header.signals[names.index(name)]
    physical = read_samples(path, rows=[names.index(name)], header=header).physical(0)
    finite = np.flatnonzero(np.isfinite(physical))
    samples = unwrap(physical[finite[0] : finite[-1] + 1], *adc_limits(spec))
    fs = header.fs * spec.samples_per_frame
    return Channel(samples, fs, finite[0] / fs)


def pulse_delay(qrs_s: np.ndarray, pulses_s: np.ndarray, longest_s: float, tolerance_s: float) -> float:
    """Delay (s) d in [0, ``longest_s``] (10 ms steps) matching the most QRS times q to a pulse
    within q + d ± ``tolerance_s``, refined to the median of the matched delays."""
    counts = [len(match_events(pulses_s - d, qrs_s, tolerance_s)[0]) for d in np.arange(0.0, longest_s + 1e-9, 0.01)]
    best = 0.01 * int(np.argmax(counts))
    detected, reference = match_events(pulses_s - best, qrs_s, tolerance_s)
    return float(np.median(pulses_s[detected] - qrs_s[reference])) if len(detected) else best


def score_pulses(
    qrs_s: np.ndarray,
    pulses_s: np.ndarray,
    stretch_factor: float = 1.0,
    reliable: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict[str, float | int]:
    """`score_events` of pulse against QRS times (s) within the delay ± `TOLERANCE_S` (both ×
    ``stretch_factor``), with ``delay_ms``; ``reliable`` (times as recorded → bool) keeps only
    where the reference can be trusted."""
    tolerance = TOLERANCE_S * stretch_factor
    delay = pulse_delay(qrs_s, pulses_s, MAX_DELAY_S * stretch_factor, tolerance)
    if reliable is not None:
        qrs_s = qrs_s[reliable(qrs_s / stretch_factor)]
        pulses_s = pulses_s[reliable((pulses_s - delay) / stretch_factor)]
    shifted = np.round((pulses_s - delay) * 1000.0)
    scores = score_events(shifted, np.round(qrs_s * 1000.0), 1000.0, tolerance)
    return {**scores, "delay_ms": round(delay * 1000.0, 1)}


def reference_windows(ecg: Channel, provider) -> Callable[[np.ndarray], np.ndarray]:
    """Times (s) → whether they fall in a `QC_WINDOW_S` window of ``ecg`` passing ``provider``'s QC."""
    length = int(round(QC_WINDOW_S * ecg.fs))
    passed = np.array(
        [
            provider.phase(ecg.samples[None, start : start + length], ecg.fs, [provider.lead]).qc.ok
            for start in range(0, len(ecg.samples) - length + 1, length)
        ],
        dtype=bool,
    )

    def reliable(times_s: np.ndarray) -> np.ndarray:
        window = np.floor((np.asarray(times_s) - ecg.start_s) / QC_WINDOW_S).astype(int)
        inside = (window >= 0) & (window < len(passed))
        return inside & passed[np.clip(window, 0, max(len(passed) - 1, 0))]

    return reliable


def check_pulses(path: str | Path, ecg_name: str, wave_name: str) -> list[dict]:
    """``pulse`` on ``wave_name`` against ``ecg-rpeak`` on ``ecg_name`` alone, one dict per
    `VARIANTS` entry: rates, counts, both QC verdicts, `score_pulses`; QRS outside the pulse
    channel's span left out."""
    from cyclejepa.phase.ecg.provider import EcgRPeakProvider
    from cyclejepa.phase.pulse import PulseProvider

    ecg, wave = read_channel(path, ecg_name), read_channel(path, wave_name)
    reference = EcgRPeakProvider(lead=ecg_name, detection_leads=[ecg_name])
    qrs = reference.phase(ecg.samples[None], ecg.fs, [ecg_name])
    reliable = reference_windows(ecg, reference)
    qrs_s = ecg.times(qrs.events)
    qrs_s = qrs_s[(qrs_s >= wave.start_s) & (qrs_s <= wave.end_s)]
    rate = 60.0 / float(np.median(np.diff(qrs_s)))
    rows = []
    for variant, make in VARIANTS.items():
        x, factor = make(wave.samples, rate)
        track = PulseProvider(lead=wave_name).phase(x[None], wave.fs, [wave_name])
        pulses_s = wave.start_s * factor + track.events / wave.fs
        scores = score_pulses(qrs_s * factor, pulses_s, factor)
        gated = score_pulses(qrs_s * factor, pulses_s, factor, reliable)
        rows.append(
            {
                "record": Path(path).name,
                "channels": f"{ecg_name} + {wave_name}",
                "variant": variant,
                "rate_per_min": round(rate / factor, 1),
                "qrs": len(qrs_s),
                "pulses": len(track.events),
                "reference_qc": ";".join(assessed_qc(qrs, "the ECG reference").reasons) or "ok",
                "pulse_qc": ";".join(assessed_qc(track, "the pulse provider").reasons) or "ok",
                **scores,
                "reliable_qrs": gated["tp"] + gated["fn"],
                "reliable_sensitivity": gated["sensitivity"],
                "reliable_ppv": gated["ppv"],
            }
        )
    return rows


def stretch(x: np.ndarray, factor: float) -> np.ndarray:
    """``x`` played ``factor`` times slower: y[n] = x(n / factor), linearly interpolated."""
    n = int(np.floor((len(x) - 1) * factor)) + 1
    return np.interp(np.arange(n) / factor, np.arange(len(x)), x)


def _slowed(x: np.ndarray, rate_per_min: float) -> tuple[np.ndarray, float]:
    factor = rate_per_min / SLOW_RATE_PER_MIN
    return stretch(x, factor), factor


VARIANTS: dict[str, Callable[[np.ndarray, float], tuple[np.ndarray, float]]] = {
    "as recorded": lambda x, rate: (x, 1.0),
    "inverted": lambda x, rate: (-x, 1.0),
    "offset": lambda x, rate: (x + 1000.0 * (np.nanmax(x) - np.nanmin(x)), 1.0),
    "slowed": _slowed,
}
"""Variant name -> f(wave, the record's rate per minute) = (new wave, time stretch factor)."""


def zero_crossing_breaths(resp: np.ndarray, fs: float) -> np.ndarray:
    """Independent breath reference: on the 0.1–1 Hz band-passed signal (order-2 Butterworth,
    zero phase), each upward zero crossing before a rise above +0.2 SD (hysteresis: a fall below
    −0.2 SD first)."""
    from scipy.signal import butter, sosfiltfilt

    resp = np.where(np.isfinite(resp), resp, np.nanmedian(resp))
    y = sosfiltfilt(butter(2, [0.1, 1.0], btype="bandpass", fs=fs, output="sos"), resp)
    level = 0.2 * np.std(y)
    onsets, rising, crossing = [], False, 0
    for k in range(1, len(y)):
        if y[k - 1] <= 0 < y[k]:
            crossing = k
        if not rising and y[k] > level:
            onsets.append(crossing)
            rising = True
        elif rising and y[k] < -level:
            rising = False
    return np.asarray(onsets, dtype=np.int64)


def score_breaths(reference: np.ndarray, breaths: np.ndarray) -> dict[str, float | int]:
    """Sensitivity = cycles between reference breaths holding ≥ 1 breath / cycles; PPV = first
    breaths of their cycle / breaths inside the reference's span."""
    inside = breaths[(breaths >= reference[0]) & (breaths < reference[-1])]
    cycles = np.searchsorted(reference, inside, side="right") - 1
    found = len(np.unique(cycles))
    n_cycles = len(reference) - 1
    return {
        "sensitivity": found / n_cycles if n_cycles else float("nan"),
        "ppv": found / len(inside) if len(inside) else float("nan"),
        "cycles": n_cycles,
        "breaths": len(inside),
    }
