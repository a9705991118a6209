"""Patient-clustered bootstrap: resample weights and percentile intervals.

PTB-XL patients contribute several records, which are not independent draws, so every interval
of the evaluation resamples patients: a replicate is a vector of record multiplicities
(`patient_bootstrap_weights`), the statistic is recomputed under each row, and the interval is
the percentile interval of the replicates (`percentile_interval`; for a ratio of sums,
`ratio_interval`). With fewer than two patients every replicate is the sample itself: the
interval collapses to the point and tests nothing, so it is marked not testable
(``BootstrapCI.testable``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BootstrapCI", "n_clusters", "patient_bootstrap_weights", "percentile_interval", "ratio_interval"]

Seed = int | np.random.SeedSequence


@dataclass
class BootstrapCI:
    """A point estimate and its percentile bootstrap interval; ``testable`` is False when it
    resampled fewer than two clusters (the interval is then the point and tests nothing)."""

    point: float
    low: float
    high: float
    replicates: int
    level: float
    testable: bool = True


def patient_bootstrap_weights(patient_ids: np.ndarray, replicates: int, seed: Seed) -> np.ndarray:
    """How often each record enters each patient-clustered bootstrap resample.

    Each replicate draws as many patients as there are, uniformly with replacement; a record
    counts once per draw of its patient.

    Parameters
    ----------
    patient_ids : (N,) patient of each record (numpy array or tensor).
    replicates : number of resamples R.
    seed : seeds `numpy.random.default_rng`.

    Returns
    -------
    (replicates, N) float64 multiplicities.
    """
    _, patient = np.unique(np.asarray(patient_ids), return_inverse=True)
    n_patients = int(patient.max()) + 1
    draws = np.random.default_rng(seed).integers(0, n_patients, size=(replicates, n_patients))
    flat = (np.arange(replicates)[:, None] * n_patients + draws).ravel()
    counts = np.bincount(flat, minlength=replicates * n_patients).reshape(replicates, n_patients)
    return counts[:, patient.ravel()].astype(np.float64)


def percentile_interval(point: float, values: np.ndarray, level: float = 0.95, clusters: int | None = None) -> BootstrapCI:
    """Percentile interval of replicate ``values`` (NaN replicates ignored) around ``point``;
    ``clusters``, the number of patients resampled, marks it not testable below two."""
    if not 0 < level < 1 or len(values) == 0:
        raise ValueError(f"need level in (0, 1) and replicates, got {level=} and {len(values)} replicates")
    tail = 50 * (1 - level)
    low, high = np.nanpercentile(values, [tail, 100 - tail])
    testable = clusters is None or clusters >= 2
    return BootstrapCI(float(point), float(low), float(high), len(values), level, testable)


def ratio_interval(
    weights: np.ndarray, numerators: np.ndarray, denominators: np.ndarray, clusters: int | None = None
) -> BootstrapCI:
    """Σ numerators / Σ denominators with its 95 % percentile interval over the weight rows
    (not testable when ``clusters``, the patients resampled, are fewer than two)."""
    replicate_ratios = (weights @ numerators) / (weights @ denominators)
    return percentile_interval(numerators.sum() / denominators.sum(), replicate_ratios, clusters=clusters)


def n_clusters(patient_ids: np.ndarray) -> int:
    """The number of distinct patients (bootstrap clusters) in ``patient_ids``."""
    return len(np.unique(np.asarray(patient_ids)))
