"""Heart-rate context: does the gap between two arms survive within heart-rate strata?

The paper's post-hoc heart-rate stratification: records are binned by heart rate (median RR
interval of the detected R-peaks, at the rate the cache stored them), and within each bin the macro-AUROC of each arm and their
gap are recomputed. A gap that persists inside every stratum is not explained by the arms
ranking heart rate differently; it weakens, without excluding, a heart-rate explanation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cyclejepa.evaluation.bootstrap import BootstrapCI, n_clusters, patient_bootstrap_weights, percentile_interval
from cyclejepa.evaluation.probe import replicate_macro_auroc, weighted_auroc

if TYPE_CHECKING:
    from cyclejepa.data.cache import PreparedCache

__all__ = ["HRStratification", "HRStratum", "heart_rate", "hr_stratified_auroc", "record_heart_rates"]

NO_HEART_RATE = "no_heart_rate"
"""Exclusion reason: fewer than two R-peaks."""
OUTSIDE_BINS = "outside_bins"
"""Exclusion reason: heart rate outside the given bin edges."""


def heart_rate(rpeaks: np.ndarray, fs: float) -> float:
    """Heart rate in beats per minute from the median RR interval, 60 · fs / median(ΔR); NaN
    with fewer than two peaks.

    Parameters
    ----------
    rpeaks : R-peak sample indices, strictly increasing.
    fs : their sampling rate in Hz (a cache's `PreparedCache.cache_fs`).
    """
    rr = np.diff(np.asarray(rpeaks, dtype=np.float64))
    if (rr <= 0).any():
        raise ValueError("rpeaks must be strictly increasing sample indices")
    return 60.0 * fs / float(np.median(rr)) if len(rr) else float("nan")


def record_heart_rates(cache: PreparedCache, rows: Iterable[int]) -> np.ndarray:
    """(len(rows),) heart rate of each row of ``cache`` from its events (`PreparedCache.events`)
    at the rate they were detected at (`PreparedCache.cache_fs`)."""
    return np.array([heart_rate(cache.events(i), cache.cache_fs) for i in rows], dtype=np.float64)


@dataclass
class HRStratum:
    """One heart-rate bin [low, high) (the last bin includes ``high``).

    ``auroc``: arm → macro-AUROC over the classes with positives and negatives in the bin
    (``classes`` of them); ``gap`` = first arm − second arm, ``gap_ci`` its paired
    patient-clustered interval (None without patients).
    """

    low: float
    high: float
    records: int
    classes: int
    auroc: dict[str, float]
    gap: float
    gap_ci: BootstrapCI | None


@dataclass
class HRStratification:
    """Per-stratum and overall AUROC of two arms; ``excluded`` counts records by reason."""

    arms: list[str]
    strata: list[HRStratum]
    overall: HRStratum
    excluded: dict[str, int]


def hr_stratified_auroc(
    scores_by_arm: Mapping[str, np.ndarray],
    Y: np.ndarray,
    hr: np.ndarray,
    bins: int | Sequence[float] = 3,
    *,
    groups: np.ndarray | None = None,
    replicates: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> HRStratification:
    """Macro-AUROC of each arm and their gap within heart-rate strata.

    Parameters
    ----------
    scores_by_arm : exactly two arms, name → (N, C) probe scores on the same records
        (gap = first − second, in mapping order).
    Y : (N, C) multi-hot labels; hr : (N,) heart rate (NaN = unknown, excluded and counted).
    bins : number of equal-count bins (quantiles of ``hr``; 3 = tertiles) or increasing edges.
    groups : (N,) patients for the paired bootstrap of each gap; None skips the intervals.
    replicates, seed, level : the bootstrap.
    """
    arms = list(scores_by_arm)
    if len(arms) != 2:
        raise ValueError(f"scores_by_arm must hold exactly two arms, got {arms}")
    Y, hr = np.asarray(Y), np.asarray(hr, dtype=np.float64)
    if hr.shape != (len(Y),):
        raise ValueError(f"hr must be ({len(Y)},), one heart rate per record, got {hr.shape}")
    known = ~np.isnan(hr)
    edges = _edges(bins, hr[known])
    stratum = np.full(len(hr), -1)
    stratum[known] = np.searchsorted(edges, hr[known], side="right") - 1
    stratum[known & (hr == edges[-1])] = len(edges) - 2
    inside = (stratum >= 0) & (stratum < len(edges) - 1)

    def summarise(mask: np.ndarray, low: float, high: float) -> HRStratum:
        return _stratum(scores_by_arm, Y, mask, low, high, groups, replicates, seed, level)

    return HRStratification(
        arms=arms,
        strata=[summarise(stratum == b, edges[b], edges[b + 1]) for b in range(len(edges) - 1)],
        overall=summarise(inside, edges[0], edges[-1]),
        excluded={NO_HEART_RATE: int((~known).sum()), OUTSIDE_BINS: int((known & ~inside).sum())},
    )


def _edges(bins: int | Sequence[float], hr: np.ndarray) -> np.ndarray:
    if isinstance(bins, (int, np.integer)):
        if bins < 1 or not len(hr):
            raise ValueError(f"need bins >= 1 and heart rates, got {bins} bins and {len(hr)} heart rates")
        edges = np.quantile(hr, np.linspace(0, 1, bins + 1))
    else:
        edges = np.asarray(bins, dtype=np.float64)
    if edges.ndim != 1 or len(edges) < 2 or (np.diff(edges) <= 0).any():
        raise ValueError(f"heart-rate bin edges must be strictly increasing (at least two), got {edges}")
    return edges


def _stratum(
    scores_by_arm: Mapping[str, np.ndarray],
    Y: np.ndarray,
    mask: np.ndarray,
    low: float,
    high: float,
    groups: np.ndarray | None,
    replicates: int,
    seed: int,
    level: float,
) -> HRStratum:
    """Macro-AUROC of each arm on the records of ``mask`` (classes defined there), and the gap."""
    y = Y[mask]
    positives = y.sum(axis=0)
    defined = (positives > 0) & (positives < len(y))
    scores = {arm: np.asarray(s)[mask][:, defined] for arm, s in scores_by_arm.items()}
    auroc = {
        arm: float(weighted_auroc(y[:, defined], s)[0].mean()) if defined.any() else float("nan") for arm, s in scores.items()
    }
    first, second = scores
    gap = auroc[first] - auroc[second]
    gap_ci = None
    if groups is not None and defined.any():
        weights = patient_bootstrap_weights(np.asarray(groups)[mask], replicates, seed)
        paired = replicate_macro_auroc(y[:, defined], scores[first], weights) - replicate_macro_auroc(
            y[:, defined], scores[second], weights
        )
        gap_ci = percentile_interval(gap, paired, level, n_clusters(np.asarray(groups)[mask]))
    return HRStratum(float(low), float(high), int(mask.sum()), int(defined.sum()), auroc, gap, gap_ci)
