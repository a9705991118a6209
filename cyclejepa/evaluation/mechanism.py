"""Mechanism validity: transport gain, gain fraction and the G1 shuffled-phase gate.

For two tokens t ≠ t' of one record with unit directions ẑ and phases φ,

    c_R = ⟨ρ(φ_t' − φ_t) ẑ_t, ẑ_t'⟩,    c_I = ⟨ẑ_t, ẑ_t'⟩,

the mean gain is ḡ = E[c_R − c_I] and the gain fraction g_f = E[c_R − c_I] / E[1 − c_I].
E runs over every ordered pair of phase-valid tokens of every record, so a record with n valid
tokens weighs n(n − 1). Per record, c_R and c_I come from the O(T·K) identity of
`cyclejepa.objectives.pairwise_similarities`, in float64.

The G1 gate recomputes the gain after permuting the phases among each record's valid tokens.
It passes when the patient-clustered 95 % bootstrap interval of the paired true − shuffled mean
gain excludes zero and the shuffled gain fraction satisfies |g_f| ≤ 0.02. With fewer than
two patients the interval is the point itself (every resample draws the one patient), so the
first condition tests nothing: the gate is then not testable (``passed`` None), not passed or
failed.

A collapsed representation makes both figures meaningless. When the tokens of a record point
the same way, E[c_I] → 1 and the denominator E[1 − c_I] → 0: g_f is a ratio of two small
numbers (−27 or −330 for runs whose tokens are 0.97 or 0.997 alike) and the shuffled g_f
cannot meet its tolerance. The gain is then ``collapsed`` when the mean untransported token
similarity E[c_I] is at least `COLLAPSE_SIMILARITY` (0.9: a denominator at most 0.1, ten times
below that of the quickstart's trained arms, whose E[c_I] is 0.02–0.05), and G1 is not testable
(``passed`` None, ``not_testable`` "collapsed").

On a torus of C cyclic coordinates (phases (N, T, C), a `TorusSymmetry`), the functions above
measure the whole representation; `coordinate_view` and `per_coordinate` (from
`cyclejepa.evaluation.tokens`, importable here too) measure each coordinate on its own.
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
"""Mean untransported token similarity E[c_I] from which the gain fraction's denominator
E[1 − c_I] ≤ 0.1 is too small for g_f and G1 to mean anything (see the module's docstring)."""


@dataclass(frozen=True)
class GainResult:
    """Pair-weighted transport gain of a set of records.

    Attributes
    ----------
    mean_gain : ḡ = E[c_R − c_I] over all valid ordered pairs of all records.
    gain_fraction : g_f = E[c_R − c_I] / E[1 − c_I].
    mean_c_r, mean_c_i : E[c_R] and E[c_I] over the same pairs.
    records : records with at least two valid tokens (the others have no pair).
    records_without_pairs : records with fewer than two valid tokens.
    pairs : total number of ordered pairs.
    collapsed : E[c_I] ≥ `COLLAPSE_SIMILARITY`: the tokens of a record point the same way and
        ``gain_fraction`` (a ratio over E[1 − c_I] ≈ 0) means nothing.
    """

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
        """Per-record mean gain c_R − c_I (NaN below two valid tokens)."""
        return self.c_r - self.c_i

    def pair_sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-record sums over pairs of c_R − c_I, of 1 − c_I, and of 1 (0 without pairs)."""
        weight = self.pairs.astype(np.float64)
        has_pairs = self.pairs > 0
        gain = np.where(has_pairs, weight * self.gain, 0.0)
        headroom = np.where(has_pairs, weight * (1.0 - self.c_i), 0.0)
        return gain, headroom, weight

    def summary(self) -> GainResult:
        """Pair-weighted ḡ, g_f, E[c_R] and E[c_I]."""
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
    """Per-record mean transported and untransported cosine similarity, in float64.

    Parameters
    ----------
    tokens : (N, T, K) projected tokens z (numpy or torch; any device).
    phases : (N, T) token phases in radians, or (N, T, C) on a torus; NaN where undefined.
    symmetry : a `PhaseSymmetry` (``canonicalize(z, g)`` = ρ(g)⁻¹ z) of rank C.
    """
    tokens, phases = token_tensors(tokens, phases, "record_similarities")
    with torch.no_grad():
        parts = [pairwise_similarities(tokens[s].double(), phases[s].double(), symmetry) for s in record_chunks(len(tokens))]
    c_r, c_i, pairs = (torch.cat(part).cpu().numpy() for part in zip(*parts, strict=True))
    return RecordSimilarities(c_r, c_i, pairs)


def transport_gain(tokens: ArrayLike, phases: ArrayLike, symmetry: Canonicalizer) -> GainResult:
    """Mean gain ḡ and gain fraction g_f over all valid pairs of all records (pair-weighted).

    See `record_similarities` for the arguments.
    """
    return record_similarities(tokens, phases, symmetry).summary()


def shuffle_phases(phases: ArrayLike, seed: Seed) -> ArrayLike:
    """Permute the phase values among the valid tokens of each record, independently per record.

    A token is valid when its phase is finite (all coordinates on a torus). Invalid tokens keep
    their values, so NaN positions stay NaN; each record keeps its multiset of valid phases.

    Parameters
    ----------
    phases : (N, T) or (N, T, d) array or tensor.
    seed : seeds `numpy.random.default_rng`.

    Returns
    -------
    The shuffled phases, of the input's type (and device).
    """
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
    """The G1 shuffled-phase gate.

    Attributes
    ----------
    true, shuffled : gain under the true phases and under phases shuffled within records.
    paired_difference : pair-weighted mean of the per-record true − shuffled gain, with its
        patient-clustered interval (same resamples as ``mean_gain``).
    mean_gain : ḡ under the true phases with its patient-clustered interval.
    interval_excludes_zero : the ``paired_difference`` interval lies above or below zero; None
        when not testable (fewer than two patients).
    shuffled_fraction_within_tolerance : |shuffled g_f| ≤ ``tolerance``.
    passed : both conditions; None when not testable (``not_testable`` says why).
    not_testable : None, "collapsed" (``true.collapsed``) or "N patient(s)" (fewer than two).
    """

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
    """Shuffled-phase gate: does the gain depend on the declared clock?

    The phases are shuffled with `shuffle_phases` seeded by the first child of
    ``numpy.random.SeedSequence(seed).spawn(2)``; the bootstrap draws patients with the second
    (`patient_bootstrap_weights`). Shuffling keeps the valid positions, so both conditions weigh
    every record by the same n(n − 1) pairs.

    With fewer than two patients the gate is not testable: ``passed`` and
    ``interval_excludes_zero`` are None and both intervals are marked (`BootstrapCI.testable`).
    Nor is it on a collapsed representation (``true.collapsed``): ``passed`` is None and
    ``not_testable`` "collapsed".

    Parameters
    ----------
    tokens, phases, symmetry : as in `record_similarities`.
    patient_ids : (N,) patient of each record; the bootstrap resamples patients.
    seed, replicates, tolerance : shuffle/bootstrap seed, number of bootstrap replicates,
        bound on |shuffled g_f|.
    """
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
