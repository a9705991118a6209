"""`PhaseProvider`: the interface that turns a multichannel signal into a `PhaseTrack`.

A provider for a new cyclic signal (respiration, PPG pulse, gait) implements one method,
`PhaseProvider.events`, returning the sample index of one fiducial point per cycle, and
registers a name::

    from cyclejepa.registry import PHASE_PROVIDERS

    @PHASE_PROVIDERS.register("ppg-pulse")
    class PulsePhase(PhaseProvider):
        def __init__(self, lead="PLETH", **qc):
            super().__init__(**qc)
            self.lead = lead

        def events(self, signal, fs, channel_names):
            pleth = signal[channel_indices(channel_names, self.lead)[0]]
            return scipy.signal.find_peaks(pleth, distance=int(0.3 * fs))[0]

`PhaseProvider.phase` validates the input, builds the track and applies the shared quality
control. Options follow one convention across providers: ``lead`` (first parameter) names the
channel(s) read; the QC thresholds keep `PhaseProvider`'s names, passed on through ``**qc``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from cyclejepa.data.channels import channel_key, match_channels
from cyclejepa.data.preprocess import fill_nonfinite
from cyclejepa.declarations.kinds import ProviderDeclaration
from cyclejepa.declarations.providers import (
    MIN_CYCLE_QUALITY,
    MIN_FUNDAMENTAL_SHARE,
    MIN_GOOD_SHARE,
    MIN_PERIODICITY,
    MIN_TEMPLATE_SHARE,
)
from cyclejepa.phase.cycles import CycleAssessment, assess_cycles
from cyclejepa.phase.filters import UPPER_EDGE_FRACTION
from cyclejepa.phase.track import PhaseTrack, QCVerdict
from cyclejepa.registry import PHASE_PROVIDERS

__all__ = ["PhaseProvider", "channel_indices", "channel_row", "fill_nonfinite"]


def channel_indices(channel_names: Sequence[str], wanted: str | Sequence[str]) -> list[int]:
    """Rows of the ``wanted`` channel name(s), matched by `cyclejepa.data.channels.channel_key`
    (``II`` finds ``II,``); KeyError naming a missing or ambiguous channel."""
    return match_channels(wanted, channel_names)


def channel_row(provider: PhaseProvider, lead: str | None, channel_names: Sequence[str]) -> int:
    """Row of the channel ``lead`` names, or when None of the first channel ``provider`` reads
    (`PhaseProvider.reads_channel`). KeyError naming the record's channels when there is none."""
    if lead is not None:
        return channel_indices(channel_names, lead)[0]
    rows = [row for row, name in enumerate(channel_names) if provider.reads_channel(name)]
    if not rows:
        raise KeyError(
            f"no channel named as {' or '.join(provider.channel_kinds)} in the record; its channels are "
            f"{list(channel_names)}: name one with the option lead"
        )
    return rows[0]


def registered_name(provider: object) -> str:
    """The name ``provider``'s class is registered under, else the class name."""
    return next((key for key in PHASE_PROVIDERS.names() if PHASE_PROVIDERS.get(key) is type(provider)), type(provider).__name__)


def provider_classes() -> list[tuple[str, type[PhaseProvider]]]:
    """(name, class) of each registered `PhaseProvider` subclass, in registry order."""
    classes = ((name, PHASE_PROVIDERS.get(name)) for name in PHASE_PROVIDERS.names())
    return [(name, cls) for name, cls in classes if isinstance(cls, type) and issubclass(cls, PhaseProvider)]


def _as_signal(signal: np.ndarray, fs: float, channel_names: Sequence[str]) -> np.ndarray:
    """``signal`` as float64 (channels, samples), checked against ``fs`` and ``channel_names``."""
    signal = np.asarray(signal, dtype=np.float64)
    if signal.ndim != 2:
        raise ValueError(f"signal must be (channels, samples), got shape {signal.shape}; use signal[None] for a single channel")
    if len(channel_names) != signal.shape[0]:
        raise ValueError(f"{len(channel_names)} channel names for {signal.shape[0]} channels: {list(channel_names)}")
    if not fs > 0:
        raise ValueError(f"fs must be positive, got {fs}")
    return signal


class PhaseProvider(ProviderDeclaration, ABC):
    """Turns a (channels, samples) signal into a `PhaseTrack` with a QC verdict.

    QC fails a track with fewer than ``min_events`` events (`too_few_reason`), an interval outside
    ``interval_range_s`` (0.25–2.0 s: 30–240 per minute) or a successive-interval ratio above
    ``max_interval_ratio`` (None: unchecked; `interval_reason`), or a phase yield below
    ``min_phase_yield`` (``"low_phase_yield"``). Where `detect` hands back its waveform, the cycle
    QC replaces the interval checks (`cycle_verdict`, `cyclejepa.phase.cycles.CycleAssessment`):
    a cycle is good when its template correlation reaches ``min_cycle_quality`` and its interval
    is plausible; the record fails as ``"few_good_cycles"`` below ``min_good_share`` good
    cycles, ``"aperiodic"`` below ``min_template_share`` or ``min_periodicity``,
    ``"no_fundamental"`` below ``min_fundamental_share``.

    Class attributes: ``signal``, the kind read (``"ecg"``, ``"ppg"``, ``"resp"``; ``"any"``
    claims none; kind-specific evaluation runs where it matches); ``event_name``, one cycle's
    word in reports (``"beat"``); ``cycle_band_hz``, the (lowest, highest) cycle rate in Hz
    (``(0.5, 3.5)`` for a heartbeat), from which datasets derive their rates; ``channel_kinds``,
    the channel kinds in words, for messages; ``channel_pattern``, a regex matching the whole
    name (any case) of a channel read (`reads_channel`); ``too_few_reason`` and
    ``interval_reason``, the provider's names of those QC reasons.
    """

    too_few_reason: str = "too_few_events"
    interval_reason: str = "implausible_interval"

    def __init__(
        self,
        *,
        min_events: int = 4,
        interval_range_s: tuple[float, float] = (0.25, 2.0),
        max_interval_ratio: float | None = 2.5,
        min_phase_yield: float = 0.5,
        min_cycle_quality: float = MIN_CYCLE_QUALITY,
        min_good_share: float = MIN_GOOD_SHARE,
        min_template_share: float = MIN_TEMPLATE_SHARE,
        min_periodicity: float = MIN_PERIODICITY,
        min_fundamental_share: float = MIN_FUNDAMENTAL_SHARE,
    ):
        low, high = interval_range_s
        if not 0 < low < high:
            raise ValueError(f"interval_range_s must satisfy 0 < low < high, got {interval_range_s}")
        if max_interval_ratio is not None and max_interval_ratio < 1:
            raise ValueError(f"max_interval_ratio must be >= 1, got {max_interval_ratio}")
        self.min_events = min_events
        self.interval_range_s = (float(low), float(high))
        self.max_interval_ratio = max_interval_ratio
        self.min_phase_yield = min_phase_yield
        self.min_cycle_quality, self.min_good_share = min_cycle_quality, min_good_share
        self.min_template_share, self.min_periodicity = min_template_share, min_periodicity
        self.min_fundamental_share = min_fundamental_share

    @classmethod
    def reads_channel(cls, name: str) -> bool:
        """Whether a channel called ``name`` is of a kind this provider reads (`channel_pattern`)."""
        if cls.channel_pattern is None:
            return False
        return bool(re.fullmatch(cls.channel_pattern, channel_key(name), re.IGNORECASE))

    @property
    def highest_hz(self) -> float | None:
        """Highest frequency (Hz) the detection uses: the upper edge of `cycle_band_hz` by default."""
        return self.cycle_band_hz[1] if self.cycle_band_hz else None

    @property
    def min_fs(self) -> float | None:
        """Lowest sampling rate (Hz) read: `highest_hz` / 0.45 (`UPPER_EDGE_FRACTION`); None
        when no frequency is declared."""
        highest = self.highest_hz
        return None if highest is None else highest / UPPER_EDGE_FRACTION

    def rate_problem(self, fs: float) -> str | None:
        """Why a record sampled at ``fs`` Hz is below `min_fs`, in words; None when it is not."""
        need = self.min_fs
        if need is None or fs >= need:
            return None
        return (
            f"sampled at {fs:g} Hz, below the {need:.3g} Hz phase provider {registered_name(self)!r} needs (its detection reaches "
            f"{self.highest_hz:g} Hz, which must lie below {UPPER_EDGE_FRACTION:g} x the rate)"
        )

    @abstractmethod
    def events(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> np.ndarray:
        """Strictly increasing sample indices of one fiducial point per cycle, from a float64
        (channels, samples) ``signal`` in physical units at ``fs`` Hz."""

    def detect(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """The `events` and the (samples,) waveform whose cycles QC compares (None: not assessed)."""
        return self.events(signal, fs, channel_names), None

    def phase(self, signal: np.ndarray, fs: float, channel_names: Sequence[str]) -> PhaseTrack:
        """The `PhaseTrack` (events, QC verdict) of a (channels, samples) signal at ``fs`` Hz.

        ValueError for a malformed input or ``fs`` below `min_fs` (`rate_problem`).
        """
        signal = _as_signal(signal, fs, channel_names)
        problem = self.rate_problem(fs)
        if problem:
            raise ValueError(f"a signal {problem}: a trend this slow is no waveform; read the waveform at its native rate")
        events, wave = self.detect(signal, fs, list(channel_names))
        track = PhaseTrack(np.asarray(events, dtype=np.int64), fs, signal.shape[1])
        cycles = None
        if wave is not None:
            cycles = assess_cycles(wave, track.events, fs, self.interval_range_s, self.max_interval_ratio)
            track.cycle_quality = cycles.quality
            track.cycle_ok = cycles.plausible & (cycles.quality >= self.min_cycle_quality)
        track.qc = self.qc_track(track, cycles)
        return track

    def qc_track(self, track: PhaseTrack, cycles: CycleAssessment | None = None) -> QCVerdict:
        """QC verdict of ``track``; with ``cycles`` the cycle QC (`cycle_verdict`) replaces the
        interval checks."""
        if cycles is not None and track.cycle_ok is not None:
            return self.cycle_verdict(track, cycles)
        intervals = track.intervals_s
        ratios = _successive_ratios(intervals)
        low, high = self.interval_range_s
        reasons, details = [], []
        if len(track.events) < self.min_events:
            reasons.append(self.too_few_reason)
            details.append(f"{self.too_few_reason}: {len(track.events)} events detected, at least {self.min_events} needed")
        starts = track.events[:-1] / track.fs
        short, long_ = np.flatnonzero(intervals < low), np.flatnonzero(intervals > high)
        erratic = (
            np.flatnonzero(ratios > self.max_interval_ratio) if self.max_interval_ratio is not None else np.zeros(0, np.int64)
        )
        if len(short) or len(long_) or len(erratic):
            reasons.append(self.interval_reason)
            if len(short):
                i = short[np.argmin(intervals[short])]
                details.append(
                    f"{self.interval_reason}: {len(short)} interval(s) shorter than {low:g} s, the "
                    f"shortest {intervals[i]:.3f} s from {starts[i]:.2f} s"
                )
            if len(long_):
                i = long_[np.argmax(intervals[long_])]
                details.append(
                    f"{self.interval_reason}: {len(long_)} interval(s) longer than {high:g} s, the "
                    f"longest {intervals[i]:.3f} s from {starts[i]:.2f} s"
                )
            if len(erratic):
                i = erratic[np.argmax(ratios[erratic])]
                details.append(
                    f"{self.interval_reason}: successive intervals {intervals[i]:.3f} s and "
                    f"{intervals[i + 1]:.3f} s (from {starts[i]:.2f} s) differ by "
                    f"{ratios[i]:.2f}x, above {self.max_interval_ratio:g}x"
                )
        if track.phase_yield < self.min_phase_yield:
            reasons.append("low_phase_yield")
            details.append(
                f"low_phase_yield: phase defined on {track.phase_yield:.1%} of the record, below {self.min_phase_yield:.0%}"
            )
        return QCVerdict(ok=not reasons, reasons=reasons, metrics=interval_metrics(track), details=details)

    def cycle_verdict(self, track: PhaseTrack, cycles: CycleAssessment) -> QCVerdict:
        """Verdict from event count, good-cycle share, periodicity (`CycleAssessment`) and yield."""
        assert track.cycle_ok is not None
        checks = [
            (
                len(track.events) >= self.min_events,
                self.too_few_reason,
                f"{len(track.events)} events detected, at least {self.min_events} needed",
            ),
            (
                _share(track.cycle_ok) >= self.min_good_share,
                "few_good_cycles",
                f"{int(track.cycle_ok.sum())} of {len(track.cycle_ok)} cycles good ({_share(track.cycle_ok):.1%}), "
                f"below {self.min_good_share:.0%}",
            ),
            (
                cycles.template_share >= self.min_template_share,
                "aperiodic",
                f"the template explains {cycles.template_share:.2f} of the cycles' variance, below {self.min_template_share:g}",
            ),
            (
                cycles.periodicity >= self.min_periodicity,
                "aperiodic",
                f"autocorrelation {cycles.periodicity:.2f} at the median interval, below {self.min_periodicity:g}",
            ),
            (
                cycles.fundamental_share >= self.min_fundamental_share,
                "no_fundamental",
                f"the first harmonic carries {cycles.fundamental_share:.2f} of the template's power, "
                f"below {self.min_fundamental_share:g}: one cycle holds several",
            ),
            (
                track.phase_yield >= self.min_phase_yield,
                "low_phase_yield",
                f"phase defined on {track.phase_yield:.1%} of the record, below {self.min_phase_yield:.0%}",
            ),
        ]
        reasons, details = [], []
        for passed, reason, detail in checks:
            if not passed:  # a NaN measure (too few cycles) fails too
                reasons += [] if reason in reasons else [reason]
                details.append(f"{reason}: {detail}")
        metrics = {
            **interval_metrics(track),
            "n_cycles": len(track.cycle_ok),
            "n_implausible_intervals": int((~cycles.plausible).sum()),
            "good_cycle_share": _nan_none(_share(track.cycle_ok)),
            "cycle_quality_median": _stat(np.nanmedian, cycles.quality) if np.isfinite(cycles.quality).any() else None,
            "template_share": _nan_none(cycles.template_share),
            "periodicity": _nan_none(cycles.periodicity),
            "fundamental_share": _nan_none(cycles.fundamental_share),
        }
        return QCVerdict(ok=not reasons, reasons=reasons, metrics=metrics, details=details)


def interval_metrics(track: PhaseTrack) -> dict[str, float | int | None]:
    """Event count, min/median/max interval (s), largest successive-interval ratio, rate per
    minute (60 / median interval) and phase yield of ``track``; None where undefined."""
    intervals = track.intervals_s
    ratios = _successive_ratios(intervals)
    return {
        "n_events": len(track.events),
        "interval_min_s": _stat(np.min, intervals),
        "interval_median_s": _stat(np.median, intervals),
        "interval_max_s": _stat(np.max, intervals),
        "interval_ratio_max": _stat(np.max, ratios),
        "rate_per_min": _stat(lambda x: 60.0 / np.median(x), intervals),
        "phase_yield": track.phase_yield,
    }


def _successive_ratios(intervals: np.ndarray) -> np.ndarray:
    """max(I[i+1] / I[i], I[i] / I[i+1]) of successive intervals."""
    return np.maximum(intervals[1:] / intervals[:-1], intervals[:-1] / intervals[1:])


def _share(flags: np.ndarray) -> float:
    """Fraction of True in ``flags``; NaN when empty."""
    return float(np.mean(flags)) if len(flags) else float("nan")


def _nan_none(value: float) -> float | None:
    """``value``, None when NaN (JSON has no NaN)."""
    return None if np.isnan(value) else float(value)


def _stat(statistic, values: np.ndarray) -> float | None:
    """``statistic(values)`` as a plain float, None for an empty array."""
    return float(statistic(values)) if len(values) else None
