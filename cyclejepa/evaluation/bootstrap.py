"""Patient-clustered bootstrap: record multiplicities per replicate and percentile intervals.

A patient's records are not independent draws, so every interval resamples patients. With fewer
than two patients every replicate is the sample itself, and the interval is marked not testable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BootstrapCI", "n_clusters", "patient_bootstrap_weights", "percentile_interval", "ratio_interval", "record_weights"]

Seed = int | np.random.SeedSequence


@dataclass
class BootstrapCI:
    """A point estimate and its percentile interval; not ``testable`` below two clusters."""

    point: float
    low: float
    high: float
    replicates: int
    level: float
    testable: bool = True


def patient_bootstrap_weights(patient_ids: np.ndarray, replicates: int, seed: Seed) -> np.ndarray:
    """(replicates, N) float64: how often each record enters each resample. A replicate draws as
    many patients as there are, with replacement (`numpy.random.default_rng(seed)`); a record
    counts once per draw of its patient ``patient_ids`` (N,)."""
    _, patient = np.unique(np.asarray(patient_ids), return_inverse=True)
    n_patients = int(patient.max()) + 1
    draws = np.random.default_rng(seed).integers(0, n_patients, size=(replicates, n_patients))
    flat = (np.arange(replicates)[:, None] * n_patients + draws).ravel()
    counts = np.bincount(flat, minlength=replicates * n_patients).reshape(replicates, n_patients)
    return counts[:, patient.ravel()].astype(np.float64)


def record_weights(weights: np.ndarray | None, n: int) -> np.ndarray:
    """(R, n) float64 non-negative record weights (None: one row of ones), shape checked."""
    weights = np.ones((1, n)) if weights is None else np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or weights.shape[1] != n or (weights < 0).any():
        raise ValueError(f"weights must be non-negative (R, {n}), got shape {weights.shape}")
    return weights


def percentile_interval(point: float, values: np.ndarray, level: float = 0.95, clusters: int | None = None) -> BootstrapCI:
    """Percentile interval of replicate ``values`` (NaN ignored) around ``point``; not testable
    below two ``clusters``."""
    if not 0 < level < 1 or len(values) == 0:
        raise ValueError(f"need level in (0, 1) and replicates, got {level=} and {len(values)} replicates")
    tail = 50 * (1 - level)
    low, high = np.nanpercentile(values, [tail, 100 - tail])
    testable = clusters is None or clusters >= 2
    return BootstrapCI(float(point), float(low), float(high), len(values), level, testable)


def ratio_interval(
    weights: np.ndarray, numerators: np.ndarray, denominators: np.ndarray, clusters: int | None = None
) -> BootstrapCI:
    """Σ numerators / Σ denominators with its 95 % percentile interval over the weight rows."""
    replicate_ratios = (weights @ numerators) / (weights @ denominators)
    return percentile_interval(numerators.sum() / denominators.sum(), replicate_ratios, clusters=clusters)


def n_clusters(patient_ids: np.ndarray) -> int:
    """The number of distinct patients (bootstrap clusters)."""
    return len(np.unique(np.asarray(patient_ids)))
