"""Macro-AUROC and sample-centric Fmax of a multi-label classifier (as the PTB-XL benchmark
reports them), each with a patient-clustered bootstrap interval.

Fmax (CAFA; Radivojac et al., 2013, Nat. Methods 10:221): at threshold t record i predicts
P_i(t) = {c : p_ic ≥ t}; with its true classes T_i,

    precision(t) = Σ_{i ∈ S_t} w_i |P_i ∩ T_i| / |P_i|  /  Σ_{i ∈ S_t} w_i,   S_t = {i : P_i(t) ≠ ∅}
    recall(t)    = Σ_i w_i |P_i ∩ T_i| / |T_i|  /  Σ_i w_i
    Fmax         = max_t 2 precision(t) recall(t) / (precision(t) + recall(t)),

over t = 0, 0.01, …, 1 (w_i = 1, or bootstrap multiplicities). Every record needs a label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from cyclejepa.evaluation.bootstrap import BootstrapCI, patient_bootstrap_weights, percentile_interval, record_weights
from cyclejepa.evaluation.probe import replicate_macro_auroc, weighted_auroc

__all__ = ["THRESHOLDS", "MultilabelScores", "sample_fmax", "score_multilabel"]

THRESHOLDS = np.linspace(0.0, 1.0, 101)
"""Probability thresholds of Fmax: 0, 0.01, …, 1."""


def sample_fmax(
    Y: np.ndarray, probabilities: np.ndarray, weights: np.ndarray | None = None, thresholds: np.ndarray = THRESHOLDS
) -> np.ndarray:
    """(R,) Fmax of labels Y (N, C) by ``probabilities`` (N, C) under each row of record
    ``weights`` (R, N; None: one row of ones); 0 where no threshold gives positive precision and recall."""
    Y, probabilities = np.asarray(Y), np.asarray(probabilities, dtype=np.float64)
    if Y.ndim != 2 or probabilities.shape != Y.shape or not np.isin(Y, (0, 1)).all():
        raise ValueError(f"Y must be (N, C) multi-hot and probabilities (N, C) alike; got {Y.shape} and {probabilities.shape}")
    if not Y.any(axis=1).all():
        raise ValueError(f"{int((~Y.any(axis=1)).sum())} records carry no label; Fmax needs at least one per record")
    if not (np.isfinite(probabilities).all() and probabilities.min() >= 0 and probabilities.max() <= 1):
        raise ValueError("probabilities must lie in [0, 1]")
    weights = record_weights(weights, len(Y))
    positive = Y.astype(bool)
    thresholds = np.asarray(thresholds, dtype=np.float64)
    hits, counts = np.empty((2, len(thresholds), len(Y)))  # (T, N): true and all predicted classes
    for k, t in enumerate(thresholds):
        predicted = probabilities >= t
        hits[k], counts[k] = (predicted & positive).sum(axis=1), predicted.sum(axis=1)
    covered = counts > 0
    precision_sum = weights @ np.where(covered, hits / np.maximum(counts, 1), 0.0).T  # (R, T)
    recall = weights @ (hits / Y.sum(axis=1)).T / weights.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = precision_sum / (weights @ covered.T)
        f = 2 * precision * recall / (precision + recall)
    return np.nan_to_num(f, nan=0.0).max(axis=1)


@dataclass
class MultilabelScores:
    """One classifier on one task's scored records; ``per_class`` leaves out the ``skipped``
    classes (no positive or no negative record)."""

    classes: list[str]
    macro_auroc: BootstrapCI
    fmax: BootstrapCI
    per_class: dict[str, float]
    skipped: list[str]
    positives: dict[str, int]
    records: int
    patients: int


def score_multilabel(
    Y: np.ndarray,
    logits: np.ndarray,
    patients: np.ndarray,
    *,
    classes: Sequence[str],
    replicates: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> MultilabelScores:
    """Macro-AUROC (over the defined classes) and Fmax of sigmoid(logits), with percentile
    intervals over the same patient-clustered replicates."""
    Y, logits, patients = np.asarray(Y), np.asarray(logits, dtype=np.float64), np.asarray(patients)
    if logits.shape != Y.shape or patients.shape != (len(Y),) or len(classes) != Y.shape[1]:
        raise ValueError(f"Y {Y.shape}, logits {logits.shape}, patients {patients.shape} and {len(classes)} classes disagree")
    per_class = weighted_auroc(Y, logits)[0]
    defined = ~np.isnan(per_class)
    if not defined.any():
        raise ValueError("no class has both positive and negative records; macro-AUROC is undefined")
    weights = patient_bootstrap_weights(patients, replicates, seed)
    auroc = replicate_macro_auroc(Y[:, defined], logits[:, defined], weights)
    probabilities = expit(logits)
    fmax = sample_fmax(Y, probabilities, weights)
    names = list(classes)
    return MultilabelScores(
        classes=names,
        macro_auroc=percentile_interval(float(per_class[defined].mean()), auroc, level),
        fmax=percentile_interval(float(sample_fmax(Y, probabilities)[0]), fmax, level),
        per_class={c: float(a) for c, a, ok in zip(names, per_class, defined, strict=True) if ok},
        skipped=[c for c, ok in zip(names, defined, strict=True) if not ok],
        positives={c: int(n) for c, n in zip(names, Y.sum(axis=0), strict=True)},
        records=len(Y),
        patients=len(np.unique(patients)),
    )
