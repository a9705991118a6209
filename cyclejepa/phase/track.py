"""Phase tracks: events of a cycle, the phase map between them, QC verdict, token phases.

`Track` is what a provider returns and what the cache and the ``phase`` command read:
`PhaseTrack` for one cyclic coordinate, `CompositeTrack` (`cyclejepa.phase.composite`) for
several on one time axis.

The phase map (paper, eq. "phase-map") sends a time t in [R_i, R_{i+1}) to
φ(t) = 2π (t − R_i) / (R_{i+1} − R_i); it is undefined (NaN) before the first event and at or
after the last one. Its causal form, for a monitor that has not yet seen R_{i+1}, is
φ(t) = 2π (t − R_last) / (R_last − R_prev) from the last two events at or before t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeVar, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import torch

TWO_PI = 2.0 * math.pi
PHASE_MAX = float(np.nextafter(TWO_PI, 0.0))
"""Largest float64 below 2π: phases are clipped to it so that they stay in [0, 2π)."""

Convention = Literal["centre", "causal"]
ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, "torch.Tensor")


def phase_from_events(events: np.ndarray, times: np.ndarray | float) -> np.ndarray:
    """Phase in [0, 2π) at ``times`` (any shape) by linear interpolation between the (E,)
    strictly increasing ``events`` (same unit); NaN before the first event and from the last on."""
    events = np.asarray(events, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    if len(events) < 2:
        return np.full(times.shape, np.nan)
    cycle = np.searchsorted(events, times, side="right") - 1
    defined = (cycle >= 0) & (cycle < len(events) - 1)
    start = np.clip(cycle, 0, len(events) - 2)
    fraction = (times - events[start]) / (events[start + 1] - events[start])
    phase = np.minimum(TWO_PI * fraction, PHASE_MAX)
    return np.where(defined, phase, np.nan)


def causal_phase(times: ArrayOrTensor, last: ArrayOrTensor, previous: ArrayOrTensor) -> ArrayOrTensor:
    """Causal phase φ = 2π (t − R_last) / (R_last − R_prev), clipped to `PHASE_MAX`.

    Broadcasting, on numpy arrays or torch tensors alike. A NaN ``last`` or ``previous`` (fewer
    than two events seen) gives NaN; past the previous cycle's length the phase saturates.
    """
    return (TWO_PI * (times - last) / (last - previous)).clip(max=PHASE_MAX)


def causal_phase_from_events(events: np.ndarray, times: np.ndarray | float) -> np.ndarray:
    """`causal_phase` at ``times`` (any shape) from the (E,) ``events`` at or before each time.

    Equal to `phase_from_events` for a regular train; extrapolated after the last event; NaN
    until two events are seen.
    """
    times = np.asarray(times, dtype=np.float64)
    # Two NaN in front: index k + 1 is the k-th event (NaN for k < 0).
    padded = np.concatenate(([np.nan, np.nan], np.asarray(events, dtype=np.float64)))
    seen = np.searchsorted(padded[2:], times, side="right")
    return np.asarray(causal_phase(times, padded[seen + 1], padded[seen]))


def token_times(n_tokens: int, patch: int, convention: Convention = "centre") -> np.ndarray:
    """Times (in output samples) that stand for each token of ``patch`` samples.

    ``"centre"``: (patch − 1)/2 sample intervals after the patch start (3.5 for patch 8);
    ``"causal"``: the patch's last sample, patch − 1 intervals after its start.
    """
    offsets = {"centre": (patch - 1) / 2.0, "causal": float(patch - 1)}
    if convention not in offsets:
        raise ValueError(f"unknown token phase convention {convention!r}; use 'centre' or 'causal'")
    return np.arange(n_tokens, dtype=np.float64) * patch + offsets[convention]


@dataclass
class QCVerdict:
    """Outcome of phase quality control.

    ``reasons``: stable names (`PhaseProvider.too_few_reason`, `PhaseProvider.interval_reason`,
    ``"low_phase_yield"``); ``details``: each reason in words (value, threshold, where);
    ``metrics``: the measured values (None where undefined).
    """

    ok: bool
    reasons: list[str] = field(default_factory=list)
    metrics: dict[str, float | int | None] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """``{"ok", "reasons", "details", **metrics}`` with plain Python types (JSON-ready)."""
        return {
            "ok": bool(self.ok),
            "reasons": list(self.reasons),
            "details": list(self.details),
            **self.metrics,
        }


@runtime_checkable
class Track(Protocol):
    """The phase of one record in C ≥ 1 cyclic coordinates (what a provider's ``phase`` returns).

    ``tracks``: one `PhaseTrack` per coordinate, in torus order; ``names``: theirs, () for one
    unnamed coordinate; ``qc``: the verdict on the record (None: not assessed);
    ``phase_yield``: the fraction of native samples where every coordinate's phase is defined.
    """

    qc: QCVerdict | None

    @property
    def fs(self) -> float: ...

    @property
    def n_samples(self) -> int: ...

    @property
    def names(self) -> tuple[str, ...]: ...

    @property
    def tracks(self) -> tuple[PhaseTrack, ...]: ...

    @property
    def phase(self) -> np.ndarray: ...

    @property
    def phase_yield(self) -> float: ...

    def at_tokens(
        self,
        patch: int,
        fs_out: float,
        convention: Convention = "centre",
        n_tokens: int | None = None,
    ) -> np.ndarray:
        """Token phases: (n_tokens,) for a `PhaseTrack`, (n_tokens, C) for a `CompositeTrack`."""
        ...


def assessed_qc(track: Track, source: str) -> QCVerdict:
    """``track.qc``; ValueError naming ``source`` (the provider) for a track never assessed."""
    if track.qc is None:
        raise ValueError(f"{source} returned a track without a QC verdict")
    return track.qc


class Rates(NamedTuple):
    """Cycle rate over time (`PhaseTrack.rates`): one entry per cycle."""

    time_s: np.ndarray
    """(cycles,) start of each cycle, seconds from the record start: events[i] / fs."""
    per_min: np.ndarray
    """(cycles,) cycles per minute: 60 fs / (events[i+1] − events[i])."""


@dataclass(eq=False)
class PhaseTrack:
    """Cycle events of one record (strictly increasing native sample indices, ``fs`` in Hz)
    and the phase they define.

    ``cycle_quality`` (float in [0, 1], NaN: not assessed) and ``cycle_ok`` (bool) hold one entry
    per cycle, shape (len(events) − 1,); None when the provider assesses no cycle
    (`cyclejepa.phase.cycles.assess_cycles`).
    """

    events: np.ndarray
    fs: float
    n_samples: int
    qc: QCVerdict | None = None
    cycle_quality: np.ndarray | None = None
    cycle_ok: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.events = np.asarray(self.events)
        if self.events.ndim != 1 or not np.issubdtype(self.events.dtype, np.integer):
            raise ValueError(
                f"events must be a 1-D integer array of sample indices, got shape {self.events.shape} dtype {self.events.dtype}"
            )
        self.events = self.events.astype(np.int64)
        if not self.fs > 0:
            raise ValueError(f"fs must be positive, got {self.fs}")
        if np.any(np.diff(self.events) <= 0):
            raise ValueError("events must be strictly increasing")
        if len(self.events) and (self.events[0] < 0 or self.events[-1] >= self.n_samples):
            raise ValueError(f"events must lie in [0, {self.n_samples}), got [{self.events[0]}, {self.events[-1]}]")
        cycles = max(len(self.events) - 1, 0)
        for name, dtype in (("cycle_quality", np.float64), ("cycle_ok", np.bool_)):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, dtype=dtype)
                if value.shape != (cycles,):
                    raise ValueError(f"{name} must have one entry per cycle, shape ({cycles},), got {value.shape}")
                setattr(self, name, value)

    @property
    def names(self) -> tuple[str, ...]:
        """No names: one unnamed coordinate (see `Track`)."""
        return ()

    @property
    def tracks(self) -> tuple[PhaseTrack, ...]:
        """This track as the one coordinate of a `Track`."""
        return (self,)

    @property
    def phase(self) -> np.ndarray:
        """(n_samples,) phase of every native sample; NaN where undefined."""
        return phase_from_events(self.events, np.arange(self.n_samples))

    @property
    def phase_yield(self) -> float:
        """Fraction of samples with a defined phase: those in [first event, last event)."""
        if len(self.events) < 2 or self.n_samples == 0:
            return 0.0
        return float(self.events[-1] - self.events[0]) / self.n_samples

    @property
    def intervals_s(self) -> np.ndarray:
        """Inter-event intervals in seconds (the cycle lengths)."""
        return np.diff(self.events) / self.fs

    def rates(self) -> Rates:
        """Rate of each cycle: start events[i] / fs and 60 / interval_s[i] per minute."""
        return Rates(time_s=self.events[:-1] / self.fs, per_min=60.0 / self.intervals_s)

    def mean_rate(self) -> float:
        """Mean ``rates().per_min`` over the good cycles (all when not assessed); NaN if none."""
        per_min = self.rates().per_min
        kept = per_min if self.cycle_ok is None else per_min[self.cycle_ok]
        return float(np.mean(kept)) if len(kept) else float("nan")

    def at_tokens(
        self,
        patch: int,
        fs_out: float,
        convention: Convention = "centre",
        n_tokens: int | None = None,
    ) -> np.ndarray:
        """(n_tokens,) phase in [0, 2π) (NaN: undefined) of each token of ``patch`` samples at
        ``fs_out`` (100 Hz in the paper), at the time `token_times` gives for ``convention``.

        Output sample n lies at native time n · fs / fs_out (continuous, not rounded).
        ``n_tokens`` defaults to the whole patches that fit in the record.
        """
        if n_tokens is None:
            n_out = math.floor(self.n_samples * fs_out / self.fs + 1e-9)  # 1e-9: float rounding
            n_tokens = n_out // patch
        times_out = token_times(n_tokens, patch, convention)
        return phase_from_events(self.events, times_out * (self.fs / fs_out))


def match_events(detected: np.ndarray, reference: np.ndarray, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """Indices (into ``detected``, into ``reference``) of one-to-one matches within ``tolerance``.

    Each reference takes its nearest detection; the closest of several claimants keeps it
    (optimal whenever ``tolerance`` is under half the spacing of either train).
    """
    detected = np.asarray(detected, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    if len(detected) == 0 or len(reference) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    right = np.minimum(np.searchsorted(detected, reference), len(detected) - 1)
    left = np.maximum(right - 1, 0)
    nearest = np.where(np.abs(detected[left] - reference) <= np.abs(detected[right] - reference), left, right)
    error = np.abs(detected[nearest] - reference)
    ref_index = np.flatnonzero(error <= tolerance)
    ref_index = ref_index[np.argsort(error[ref_index], kind="stable")]
    det_index, first = np.unique(nearest[ref_index], return_index=True)
    return det_index, ref_index[first]


def score_events(detected: np.ndarray, reference: np.ndarray, fs: float, tolerance_s: float = 0.05) -> dict[str, float | int]:
    """``{"sensitivity", "ppv", "tp", "fn", "fp", "median_abs_error_ms"}`` of sorted detections
    against a reference (sample indices at ``fs``), matched within ± ``tolerance_s`` (50 ms:
    the usual QRS-detection tolerance)."""
    det_index, ref_index = match_events(detected, reference, tolerance_s * fs)
    tp = len(det_index)
    errors = (np.asarray(detected)[det_index] - np.asarray(reference)[ref_index]) / fs
    error_ms = float(np.median(np.abs(errors)) * 1e3) if tp else float("nan")
    return detection_rates(tp, len(reference) - tp, len(detected) - tp, median_abs_error_ms=error_ms)


def detection_rates(tp: int, fn: int, fp: int, **extra: Any) -> dict:
    """``{"sensitivity": TP / (TP + FN), "ppv": TP / (TP + FP), "tp", "fn", "fp", **extra}``
    (NaN for an empty denominator)."""
    return {
        "sensitivity": tp / (tp + fn) if tp + fn else float("nan"),
        "ppv": tp / (tp + fp) if tp + fp else float("nan"),
        "tp": tp,
        "fn": fn,
        "fp": fp,
        **extra,
    }
