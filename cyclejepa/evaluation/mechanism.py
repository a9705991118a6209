"""Mechanism validity: transport gain, gain fraction and the G1 shuffled-phase gate.

For two tokens t ≠ t' of one record with unit directions ẑ and phases φ,

    c_R = ⟨ρ(φ_t' − φ_t) ẑ_t, ẑ_t'⟩,    c_I = ⟨ẑ_t, ẑ_t'⟩,

the mean gain is ḡ = E[c_R − c_I] and the gain fraction g_f = E[c_R − c_I] / E[1 − c_I], E over
every ordered pair of phase-valid tokens of every record (a record of n valid tokens weighs
n(n − 1)); c_R and c_I per record come from the O(T·K) identity
(`cyclejepa.objectives.pairwise_similarities`), in float64.

G1 recomputes the gain with the phases permuted among each record's valid tokens. It passes when
the patient-clustered 95 % interval of the paired true − shuffled gain excludes zero and the
shuffled |g_f| ≤ 0.02. It is not testable (``passed`` None) with fewer than two patients, or on
a collapsed representation: E[c_I] ≥ `COLLAPSE_SIMILARITY` (0.9), where g_f is a ratio of two
small numbers (−27 or −330 for tokens 0.97 or 0.997 alike; the quickstart's trained arms have
E[c_I] 0.02–0.05).

On a torus (phases (N, T, C)) these measure the whole representation; `coordinate_view` and
`per_coordinate` measure each coordinate on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from cyclejepa.evaluation.bootstrap import BootstrapCI, Seed, n_clusters, patient_bootstrap_weights, ratio_interval
from cyclejepa.evaluation.tokens import ArrayLike, CoordinateView, coordinate_view, per_coordinate, record_chunks, token_tensors
from cyclejepa.objectives import pairwise_similarities
from cyclejepa.objectives.transport import Canonicalizer

__all__ = [
    "CoordinateView",
    "G1Result",
    "GainResult",
    "RecordSimilarities",
    "coordinate_view",
    "g1_gate",
    "per_coordinate",
    "record_similarities",
    "shuffle_phases",
    "transport_gain",
]

COLLAPSE_SIMILARITY = 0.9
"""E[c_I] from which g_f's denominator E[1 − c_I] ≤ 0.1 is too small for g_f and G1 to mean anything."""


@dataclass(frozen=True)
class GainResult:
    """Pair-weighted ḡ, g_f, E[c_R] and E[c_I] of a set of records; ``records`` have at least
    two valid tokens; ``collapsed``: E[c_I] ≥ `COLLAPSE_SIMILARITY` (g_f means nothing)."""

    mean_gain: float
    gain_fraction: float
    mean_c_r: float
    mean_c_i: float
    records: int
    records_without_pairs: int
    pairs: int
    collapsed: bool = False


@dataclass(frozen=True)
class RecordSimilarities:
    """Per-record mean c_R, c_I (NaN below two valid tokens) and ordered-pair counts n(n − 1)."""

    c_r: np.ndarray
    c_i: np.ndarray
    pairs: np.ndarray

    @property
    def gain(self) -> np.ndarray:
        return self.c_r - self.c_i

    def pair_sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-record sums over pairs of c_R − c_I, of 1 − c_I, and of 1 (0 without pairs)."""
        weight = self.pairs.astype(np.float64)
        has_pairs = self.pairs > 0
        gain = np.where(has_pairs, weight * self.gain, 0.0)
        headroom = np.where(has_pairs, weight * (1.0 - self.c_i), 0.0)
        return gain, headroom, weight

    def summary(self) -> GainResult:
        gain, headroom, weight = self.pair_sums()
        total = weight.sum()
        if total == 0:
            raise ValueError("transport gain: no record has two tokens with a defined phase")
        has_pairs = self.pairs > 0
        mean_c_i = float((weight * self.c_i)[has_pairs].sum() / total)
        return GainResult(
            mean_gain=float(gain.sum() / total),
            gain_fraction=float(gain.sum() / headroom.sum()),
            mean_c_r=float((weight * self.c_r)[has_pairs].sum() / total),
            mean_c_i=mean_c_i,
            records=int(has_pairs.sum()),
            records_without_pairs=int((~has_pairs).sum()),
            pairs=int(self.pairs.sum()),
            collapsed=mean_c_i >= COLLAPSE_SIMILARITY,
        )


def record_similarities(tokens: ArrayLike, phases: ArrayLike, symmetry: Canonicalizer) -> RecordSimilarities:
    """Per-record mean c_R and c_I in float64, of tokens (N, T, K) and phases (N, T) in radians
    ((N, T, C) on a torus of rank C; NaN where undefined)."""
    tokens, phases = token_tensors(tokens, phases, "record_similarities")
    with torch.no_grad():
        parts = [pairwise_similarities(tokens[s].double(), phases[s].double(), symmetry) for s in record_chunks(len(tokens))]
    c_r, c_i, pairs = (torch.cat(part).cpu().numpy() for part in zip(*parts, strict=True))
    return RecordSimilarities(c_r, c_i, pairs)


def transport_gain(tokens: ArrayLike, phases: ArrayLike, symmetry: Canonicalizer) -> GainResult:
    """Pair-weighted ḡ and g_f over all valid pairs of all records (arguments: `record_similarities`)."""
    return record_similarities(tokens, phases, symmetry).summary()


def shuffle_phases(phases: ArrayLike, seed: Seed) -> ArrayLike:
    """``phases`` (N, T) or (N, T, d), array or tensor, permuted among each record's valid
    (finite) tokens; invalid tokens keep their values."""
    values = phases.detach().cpu().numpy() if isinstance(phases, Tensor) else np.asarray(phases)
    if values.ndim not in (2, 3):
        raise ValueError(f"shuffle_phases: phases must be (N, T) or (N, T, d), got {values.shape}")
    valid = np.isfinite(values).reshape(*values.shape[:2], -1).all(-1)
    keys = np.where(valid, np.random.default_rng(seed).random(valid.shape), np.inf)
    # Valid tokens in random order then the invalid ones in place order, into the valid
    # positions in place order then the invalid ones: a random permutation of the valid values.
    donors = np.argsort(keys, axis=1, kind="stable")
    slots = np.argsort(~valid, axis=1, kind="stable")
    rows = np.arange(len(values))[:, None]
    shuffled = values.copy()
    shuffled[rows, slots] = values[rows, donors]
    if isinstance(phases, Tensor):
        return torch.from_numpy(shuffled).to(phases.device)
    return shuffled


@dataclass(frozen=True)
class G1Result:
    """The G1 gate: ``paired_difference`` is the pair-weighted true − shuffled gain with its
    interval; ``passed`` is None when ``not_testable`` ("collapsed" or "N patient(s)") says why."""

    true: GainResult
    shuffled: GainResult
    paired_difference: BootstrapCI
    mean_gain: BootstrapCI
    interval_excludes_zero: bool | None
    shuffled_fraction_within_tolerance: bool
    passed: bool | None
    tolerance: float
    replicates: int
    seed: int
    patients: int
    not_testable: str | None = None


def g1_gate(
    tokens: ArrayLike,
    phases: ArrayLike,
    symmetry: Canonicalizer,
    patient_ids: ArrayLike,
    *,
    seed: int = 0,
    replicates: int = 1000,
    tolerance: float = 0.02,
) -> G1Result:
    """Does the gain depend on the declared clock? The shuffle and the patient bootstrap draw
    from the two children of ``SeedSequence(seed)``; ``tolerance`` bounds |shuffled g_f|."""
    n_records = len(tokens)
    if len(patient_ids) != n_records:
        raise ValueError(f"g1_gate: {len(patient_ids)} patient ids for {n_records} records")
    patient_ids = np.asarray(patient_ids)
    shuffle_seed, bootstrap_seed = np.random.SeedSequence(seed).spawn(2)
    true = record_similarities(tokens, phases, symmetry)
    shuffled = record_similarities(tokens, shuffle_phases(phases, shuffle_seed), symmetry)
    true_gain, _, pairs = true.pair_sums()
    shuffled_gain, _, _ = shuffled.pair_sums()
    weights = patient_bootstrap_weights(patient_ids, replicates, bootstrap_seed)
    patients = n_clusters(patient_ids)
    paired = ratio_interval(weights, true_gain - shuffled_gain, pairs, patients)
    shuffled_summary, true_summary = shuffled.summary(), true.summary()
    excludes_zero = bool(paired.low > 0 or paired.high < 0) if paired.testable else None
    within = bool(abs(shuffled_summary.gain_fraction) <= tolerance)
    not_testable = "collapsed" if true_summary.collapsed else None
    if excludes_zero is None:
        not_testable = not_testable or f"{patients} patient{'s' if patients != 1 else ''}"
    return G1Result(
        true=true_summary,
        shuffled=shuffled_summary,
        paired_difference=paired,
        mean_gain=ratio_interval(weights, true_gain, pairs, patients),
        interval_excludes_zero=excludes_zero,
        shuffled_fraction_within_tolerance=within,
        passed=None if not_testable else excludes_zero and within,
        tolerance=tolerance,
        replicates=replicates,
        seed=seed,
        patients=patients,
        not_testable=not_testable,
    )
