"""Beat times of a batch of records and the causal phase tracker the anomaly detectors read.

Phases come from a causal tracker on the clean record's R-peaks (`causal_token_phases`): the
phase of token t uses only the beats at or before the token's last sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np
import torch
from torch import Tensor

from cyclejepa.phase import causal_phase_from_events, token_times

FS = 100.0
"""Rate of the z-scored signals (Hz)."""
PATCH = 8
"""Samples per token; one token is PATCH / FS = 80 ms."""
TOKEN_MS = 1000.0 * PATCH / FS
RPEAK_FS = 500.0
"""Rate of the cached R-peak indices (Hz)."""
SEVERITIES = (0.0, 0.5, 1.0, 1.5, 2.0)
MAX_SEVERITY = 2.0

ArrayLike = Union[np.ndarray, Tensor]


@dataclass(frozen=True, eq=False)
class BeatTimes:
    """R-peak times of N records, padded: ``peaks`` (N, B + 1) float64, +inf after the last.

    Times are in samples of the signal they index (100 Hz by default), possibly fractional.
    The extra +inf column makes "the beat after" defined for every time.
    """

    peaks: Tensor

    @classmethod
    def from_rpeaks(
        cls, rpeaks: Sequence[np.ndarray], *, rpeak_fs: float = RPEAK_FS, fs: float = FS
    ) -> BeatTimes:
        """From one array of R-peak indices at ``rpeak_fs`` per record, rescaled to ``fs``."""
        lengths = np.array([len(r) for r in rpeaks], dtype=np.int64)
        flat = np.concatenate([np.asarray(r, dtype=np.float64) for r in rpeaks] + [np.zeros(0)])
        rows = np.repeat(np.arange(len(lengths)), lengths)
        starts = np.cumsum(lengths) - lengths
        columns = np.arange(len(flat)) - np.repeat(starts, lengths)
        same_record = rows[1:] == rows[:-1]
        unsorted = same_record & (np.diff(flat) <= 0)
        if unsorted.any():
            raise ValueError(f"R-peaks of record {rows[1:][unsorted][0]} are not strictly increasing")
        peaks = np.full((len(lengths), lengths.max(initial=0) + 1), np.inf)
        peaks[rows, columns] = flat * (fs / rpeak_fs)
        return cls(torch.from_numpy(peaks))

    def __len__(self) -> int:
        return self.peaks.shape[0]

    def records(self) -> list[np.ndarray]:
        """Each record's beat times, without the padding."""
        counts = torch.isfinite(self.peaks).sum(1).tolist()
        return [row[:count].numpy() for row, count in zip(self.peaks, counts)]

    def count_at(self, times: Tensor) -> Tensor:
        """Number of beats at or before each of ``times`` (N, Q), int64."""
        return torch.searchsorted(self.peaks, times.to(self.peaks).contiguous(), right=True)

    def take(self, index: Tensor) -> Tensor:
        """Beat times at per-record ``index`` (N, Q): NaN where index < 0, +inf past the last."""
        times = self.peaks.gather(1, index.clamp(0, self.peaks.shape[1] - 1))
        return times.masked_fill(index < 0, math.nan)


def causal_token_phases(
    rpeaks: Sequence[np.ndarray] | BeatTimes,
    n_tokens: int = 125,
    *,
    patch: int = PATCH,
    fs: float = FS,
    rpeak_fs: float = RPEAK_FS,
) -> np.ndarray:
    """Causal phase of every token: φ = 2π (τ − R_last) / (R_last − R_prev), clipped below 2π.

    τ is the token's last sample (the causal convention); R_last, R_prev are the last two
    R-peaks at or before τ, so no later beat is read: the previous RR interval stands in for the
    current cycle length, as on a bedside monitor. Each record's phases are
    `cyclejepa.phase.causal_phase_from_events` of its beats at the token times. For a perfectly
    regular rhythm this equals the offline phase map.

    Parameters
    ----------
    rpeaks
        One array of R-peak indices at ``rpeak_fs`` per record, or `BeatTimes` at ``fs``.

    Returns
    -------
    (N, n_tokens) float64 radians in [0, 2π), NaN until two beats have been seen.
    """
    beats = rpeaks if isinstance(rpeaks, BeatTimes) else BeatTimes.from_rpeaks(rpeaks, rpeak_fs=rpeak_fs, fs=fs)
    times = token_times(n_tokens, patch, "causal")
    phases = [causal_phase_from_events(record, times) for record in beats.records()]
    return np.array(phases, dtype=np.float64).reshape(len(beats), n_tokens)
