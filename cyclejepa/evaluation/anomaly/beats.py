"""Beat times of a batch of records (the phase provider's events at the model's rate) and the
causal phase tracker the anomaly detectors read."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from cyclejepa.phase import causal_phase_from_events, token_times

if TYPE_CHECKING:
    from cyclejepa.data.cache import PreparedCache


@dataclass(frozen=True, eq=False)
class BeatTimes:
    """Beat times of N records in (possibly fractional) samples at ``fs`` Hz: ``peaks`` (N, B + 1)
    float64, padded with +inf so that "the beat after" is defined for every time."""

    peaks: Tensor
    fs: float

    @classmethod
    def from_events(cls, events: Sequence[np.ndarray], *, event_fs: float, fs: float) -> BeatTimes:
        """From event indices at ``event_fs`` per record: t = index · fs / event_fs."""
        if not (event_fs > 0 and fs > 0):
            raise ValueError(f"rates must be positive, got event_fs {event_fs} and fs {fs}")
        lengths = np.array([len(r) for r in events], dtype=np.int64)
        flat = np.concatenate([np.asarray(r, dtype=np.float64) for r in events] + [np.zeros(0)])
        rows = np.repeat(np.arange(len(lengths)), lengths)
        starts = np.cumsum(lengths) - lengths
        columns = np.arange(len(flat)) - np.repeat(starts, lengths)
        same_record = rows[1:] == rows[:-1]
        unsorted = same_record & (np.diff(flat) <= 0)
        if unsorted.any():
            raise ValueError(f"events of record {rows[1:][unsorted][0]} are not strictly increasing")
        peaks = np.full((len(lengths), lengths.max(initial=0) + 1), np.inf)
        peaks[rows, columns] = flat * (fs / event_fs)
        return cls(torch.from_numpy(peaks), float(fs))

    @classmethod
    def from_cache(cls, cache: PreparedCache, rows: Iterable[int]) -> BeatTimes:
        """The events of the cache's ``rows`` in samples of its signals (manifest rates)."""
        return cls.from_events([cache.events(i) for i in rows], event_fs=cache.cache_fs, fs=cache.model_fs)

    def __len__(self) -> int:
        return self.peaks.shape[0]

    def samples(self, milliseconds: float) -> float:
        """A duration in samples of the signals: ms · fs / 1000."""
        return milliseconds * self.fs / 1000.0

    def records(self) -> list[np.ndarray]:
        """Each record's beat times, without the padding."""
        counts = torch.isfinite(self.peaks).sum(1).tolist()
        return [row[:count].numpy() for row, count in zip(self.peaks, counts, strict=True)]

    def count_at(self, times: Tensor) -> Tensor:
        """Number of beats at or before each of ``times`` (N, Q), int64."""
        return torch.searchsorted(self.peaks, times.to(self.peaks).contiguous(), right=True)

    def take(self, index: Tensor) -> Tensor:
        """Beat times at per-record ``index`` (N, Q): NaN where index < 0, +inf past the last."""
        times = self.peaks.gather(1, index.clamp(0, self.peaks.shape[1] - 1))
        return times.masked_fill(index < 0, math.nan)


def causal_token_phases(beats: BeatTimes, n_tokens: int, patch: int) -> np.ndarray:
    """(N, n_tokens) causal phase φ = 2π (τ − R_last) / (R_last − R_prev) in [0, 2π), NaN until two beats.

    τ is the token's last sample; R_last, R_prev the last two beats at or before it (the previous
    interval stands in for the current cycle, as on a bedside monitor): `causal_phase_from_events`.
    """
    times = token_times(n_tokens, patch, "causal")
    phases = [causal_phase_from_events(record, times) for record in beats.records()]
    return np.array(phases, dtype=np.float64).reshape(len(beats), n_tokens)
