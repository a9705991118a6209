"""Latent geometry: fundamental-harmonic amplitude, orbit-subspace coherence and two figures.

The *fundamental amplitude* is the mean norm of the c_1 n = 1 pairs of each record's mean dephased
latent z̃_t = R_{−φ_t} z_t. The *orbit-subspace coherence* takes the mean n = 1 part v_b of the raw
tokens of each phase bin and measures how much of it lies in the plane of u = v_0 / ‖v_0‖ and J u:

    C_b = ⟨u, v_b⟩,   S_b = ⟨J u, v_b⟩,   κ_b = sqrt(C_b² + S_b²) / ‖v_b‖ ∈ [0, 1].

Harmonic blocks are read in the canonical coordinates Qᵀ z, where R_φ rotates each pair of
harmonic n by nφ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from cyclejepa.evaluation.tokens import ArrayLike, record_chunks, token_tensors
from cyclejepa.symmetry import PhaseSymmetry

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CoherenceResult",
    "dephase",
    "fundamental_amplitude",
    "loop_geometry",
    "orbit_coherence",
    "phase_ring_figure",
    "umap_figure",
]

CYCLIC_COLOURMAP = "twilight"


def _harmonic_block(symmetry: PhaseSymmetry, harmonic: int, caller: str) -> slice:
    """Canonical coordinate slice of the c_n pairs at ``harmonic`` of a U(1) symmetry."""
    spectrum = symmetry.spectrum
    if spectrum.rank != 1:
        raise ValueError(f"{caller}: needs a U(1) symmetry; spectrum {spectrum} has rank {spectrum.rank}")
    if harmonic == 0 or harmonic not in spectrum.harmonic_slices:
        raise ValueError(
            f"{caller}: spectrum {spectrum} has no block at harmonic {harmonic}; "
            f"harmonics present: {sorted(spectrum.multiplicities)}"
        )
    return spectrum.harmonic_slices[harmonic]


def _canonical_block(z: Tensor, symmetry: PhaseSymmetry, block: slice) -> Tensor:
    """The ``block`` coordinates of Qᵀ z, without forming the other coordinates."""
    q = symmetry.basis.matrix()
    return z[..., block] if q is None else z @ q[:, block].to(z)


def dephase(tokens: ArrayLike, phases: ArrayLike, symmetry: PhaseSymmetry) -> Tensor:
    """(N, T, K) float64 R_{−φ_t} z_t of tokens (N, T, K) and phases (N, T) in radians, on the
    tokens' device; NaN where the phase is undefined."""
    return _dephased(*token_tensors(tokens, phases, "dephase"), symmetry)


def _dephased(tokens: Tensor, phases: Tensor, symmetry: PhaseSymmetry) -> Tensor:
    """`dephase` of tensors already checked by `token_tensors`."""
    valid = torch.isfinite(phases)
    with torch.no_grad():
        dephased = symmetry.canonicalize(tokens.double(), phases.double().nan_to_num(0.0))
    return dephased.masked_fill(~valid.unsqueeze(-1), math.nan)


def fundamental_amplitude(tokens: ArrayLike, phases: ArrayLike, symmetry: PhaseSymmetry, harmonic: int = 1) -> float:
    """Mean over records (equal weight; those without a valid token skipped) of the mean norm of
    the c_n pairs at ``harmonic`` of the record's mean z̃ over its phase-valid tokens."""
    block = _harmonic_block(symmetry, harmonic, "fundamental_amplitude")
    return _amplitude(*token_tensors(tokens, phases, "fundamental_amplitude"), symmetry, block)


def _amplitude(tokens: Tensor, phases: Tensor, symmetry: PhaseSymmetry, block: slice) -> float:
    """`fundamental_amplitude` of checked tensors, over the canonical coordinates ``block``."""
    norms = []
    for chunk in record_chunks(len(tokens)):
        record_mean = _dephased(tokens[chunk], phases[chunk], symmetry).nanmean(1)
        with torch.no_grad():
            pairs = _canonical_block(record_mean, symmetry, block).unflatten(-1, (-1, 2))
        norms.append(pairs.norm(dim=-1).mean(-1))
    per_record = torch.cat(norms)
    per_record = per_record[~per_record.isnan()]
    if per_record.numel() == 0:
        raise ValueError("fundamental_amplitude: no record has a token with a defined phase")
    return float(per_record.mean())


@dataclass(frozen=True)
class CoherenceResult:
    """κ_b, C_b, S_b, ‖v_b‖ and token count per phase bin b = [2πb/B, 2π(b+1)/B) (bin 0 the
    reference, κ_0 = 1); ``mean_kappa`` over the B − 1 other bins."""

    bins: int
    kappa: list[float]
    cosine: list[float]
    sine: list[float]
    norms: list[float]
    tokens: list[int]
    mean_kappa: float


def _phase_bin_means(tokens: Tensor, phases: Tensor, symmetry: PhaseSymmetry, bins: int, block: slice) -> tuple[Tensor, Tensor]:
    """Mean canonical ``block`` of the tokens of each phase bin, pooled over records."""
    width = 2 * math.pi / bins
    sums = torch.zeros(bins, block.stop - block.start, dtype=torch.float64, device=tokens.device)
    counts = torch.zeros(bins, dtype=torch.long, device=tokens.device)
    with torch.no_grad():
        for chunk in record_chunks(len(tokens)):
            phi = phases[chunk].double()
            valid = torch.isfinite(phi)
            index = torch.floor(phi[valid].remainder(2 * math.pi) / width).long()
            index = index.clamp(max=bins - 1)  # the remainder may round up to 2π
            y = _canonical_block(tokens[chunk][valid].double(), symmetry, block)
            sums.index_add_(0, index, y)
            counts += torch.bincount(index, minlength=bins)
    if (counts == 0).any():
        empty = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(f"orbit_coherence: phase bins {empty} of {bins} hold no token")
    return sums / counts.unsqueeze(-1), counts


def _quarter_turn(v: Tensor) -> Tensor:
    """J v with J = I ⊗ [[0, −1], [1, 0]]: each (x, y) pair becomes (−y, x)."""
    pairs = v.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), -1).flatten(-2)


def orbit_coherence(
    tokens: ArrayLike,
    phases: ArrayLike,
    symmetry: PhaseSymmetry,
    bins: int = 8,
    harmonic: int = 1,
) -> CoherenceResult:
    """κ_b of the raw phase-valid tokens' mean n = ``harmonic`` part per phase bin (each bin hit)."""
    if bins < 2:
        raise ValueError(f"orbit_coherence: need at least 2 phase bins, got {bins}")
    block = _harmonic_block(symmetry, harmonic, "orbit_coherence")
    return _coherence(*token_tensors(tokens, phases, "orbit_coherence"), symmetry, bins, block)


def _coherence(tokens: Tensor, phases: Tensor, symmetry: PhaseSymmetry, bins: int, block: slice) -> CoherenceResult:
    """`orbit_coherence` of checked tensors, over the canonical coordinates ``block``."""
    means, counts = _phase_bin_means(tokens, phases, symmetry, bins, block)
    norms = means.norm(dim=-1)
    u = means[0] / norms[0]
    cosine, sine = means @ u, means @ _quarter_turn(u)
    kappa = torch.hypot(cosine, sine) / norms
    return CoherenceResult(
        bins=bins,
        kappa=kappa.tolist(),
        cosine=cosine.tolist(),
        sine=sine.tolist(),
        norms=norms.tolist(),
        tokens=counts.tolist(),
        mean_kappa=float(kappa[1:].mean()),
    )


def effective_rank(tokens: ArrayLike, phases: ArrayLike | None = None) -> float:
    """exp(H(p)), p the normalised singular values of the centred tokens (Roy & Vetterli, 2007),
    phase-valid ones only when ``phases`` is given: 1 on a line, K for isotropic tokens."""
    z = torch.as_tensor(np.asarray(tokens), dtype=torch.float64)
    z = z.reshape(-1, z.shape[-1])
    if phases is not None:
        undefined = torch.as_tensor(np.asarray(phases)).isnan()
        z = z[~(undefined.any(-1) if undefined.dim() == 3 else undefined).reshape(-1)]
    if len(z) < 2:
        raise ValueError(f"effective_rank needs at least two tokens, got {len(z)}")
    singular = torch.linalg.svdvals(z - z.mean(0))
    p = singular / singular.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def loop_geometry(tokens: ArrayLike, phases: ArrayLike, symmetry: PhaseSymmetry, bins: int = 8) -> dict[str, Any]:
    """``effective_rank``, and with an n = 1 block the loop ``amplitude`` and ``coherence`` (a dict)."""
    geometry: dict[str, Any] = {"effective_rank": effective_rank(tokens, phases)}
    if symmetry.spectrum.multiplicities.get(1):
        block = _harmonic_block(symmetry, 1, "loop_geometry")
        tokens, phases = token_tensors(tokens, phases, "loop_geometry")
        geometry["amplitude"] = _amplitude(tokens, phases, symmetry, block)
        geometry["coherence"] = asdict(_coherence(tokens, phases, symmetry, bins, block))
    return geometry


def _figure(rows: int, columns: int, panel: float) -> tuple[Figure, np.ndarray]:
    """A pyplot-free Figure (renders with Agg, leaves the user's backend alone) and its axes."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(panel * columns + 1.0, panel * rows), layout="constrained")
    return figure, figure.subplots(rows, columns, squeeze=False)


def _finish(figure: Figure, axes: np.ndarray, path: str | Path | None) -> Figure:
    """The phase colour bar added; the figure saved as PNG to ``path`` if given."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    mappable = ScalarMappable(Normalize(0, 2 * math.pi), CYCLIC_COLOURMAP)
    bar = figure.colorbar(mappable, ax=axes.ravel().tolist(), shrink=0.8, label="phase φ (rad)")
    bar.set_ticks([0, math.pi, 2 * math.pi], labels=["0", "π", "2π"])
    if path is not None:
        figure.savefig(path, dpi=110)
    return figure


def _phase_scatter(axis, x: np.ndarray, y: np.ndarray, phase: np.ndarray, **style) -> None:
    axis.scatter(x, y, c=phase, cmap=CYCLIC_COLOURMAP, vmin=0, vmax=2 * math.pi, **style)


def _draw_loop(axis, cosine: np.ndarray, sine: np.ndarray, phase: np.ndarray, limit: float) -> None:
    """Bin means joined in bin order into a closed loop, coloured by bin phase."""
    axis.plot(np.append(cosine, cosine[0]), np.append(sine, sine[0]), color="0.6", lw=0.8)
    _phase_scatter(axis, cosine, sine, phase, s=28, zorder=2)
    axis.axhline(0, color="0.85", lw=0.5, zorder=0)
    axis.axvline(0, color="0.85", lw=0.5, zorder=0)
    axis.set_xlim(-limit, limit)
    axis.set_ylim(-limit, limit)
    axis.set_aspect("equal")


def phase_ring_figure(
    runs: Mapping[str, tuple[ArrayLike, ArrayLike, PhaseSymmetry]],
    bins: int = 24,
    path: str | Path | None = None,
) -> Figure:
    """(C_b, S_b) loops of ``runs`` (name → (tokens, phases, symmetry)), one column each: top
    row on shared axes, bottom row divided by each run's RMS radius; saved as PNG to ``path``."""
    loops = {}
    for name, (tokens, phases, symmetry) in runs.items():
        result = orbit_coherence(tokens, phases, symmetry, bins=bins)
        loops[name] = np.column_stack([result.cosine, result.sine])
    normalised = {name: xy / np.sqrt(np.mean(np.sum(xy**2, -1))) for name, xy in loops.items()}
    top = 1.1 * max(np.abs(xy).max() for xy in loops.values())
    bottom = 1.1 * max(np.abs(xy).max() for xy in normalised.values())
    centres = 2 * math.pi * (np.arange(bins) + 0.5) / bins
    figure, axes = _figure(2, len(runs), 2.6)
    for column, name in enumerate(loops):
        cosine, sine = loops[name].T
        _draw_loop(axes[0, column], cosine, sine, centres, top)
        cosine, sine = normalised[name].T
        _draw_loop(axes[1, column], cosine, sine, centres, bottom)
        axes[0, column].set_title(name)
        axes[1, column].set_xlabel("$C_b$")
    axes[0, 0].set_ylabel("$S_b$ (shared scale)")
    axes[1, 0].set_ylabel("$S_b$ / RMS radius")
    return _finish(figure, axes, path)


def _valid_token_sample(tokens: ArrayLike, phases: ArrayLike, max_points: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` phase-valid tokens (float32) and their phases, drawn by ``seed``."""
    tokens, phases = token_tensors(tokens, phases, "umap_figure")
    flat_phases = phases.reshape(-1).cpu().numpy()
    candidates = np.flatnonzero(np.isfinite(flat_phases))
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(candidates, size=min(max_points, len(candidates)), replace=False))
    points = tokens.reshape(-1, tokens.shape[-1])[torch.from_numpy(chosen).to(tokens.device)]
    return points.float().cpu().numpy(), flat_phases[chosen]


def _planar_embedding(points: np.ndarray, seed: int) -> tuple[np.ndarray, str]:
    """UMAP of the points to 2-D; the top two principal components if umap-learn is missing."""
    try:
        from umap import UMAP
    except ImportError:
        centred = points - points.mean(0)
        _, _, components = np.linalg.svd(centred, full_matrices=False)
        return centred @ components[:2].T, "PCA (umap-learn not installed)"
    return UMAP(n_components=2, random_state=seed, n_jobs=1).fit_transform(points), "UMAP"


def umap_figure(
    runs: Mapping[str, tuple[ArrayLike, ArrayLike]],
    *,
    max_points: int = 20000,
    seed: int = 0,
    path: str | Path | None = None,
) -> Figure:
    """UMAP of at most ``max_points`` phase-valid tokens per run (name → (tokens, phases); the
    same draw for the same records), coloured afterwards by phase; saved as PNG to ``path``."""
    figure, axes = _figure(1, len(runs), 3.2)
    for axis, (name, (tokens, phases)) in zip(axes[0], runs.items(), strict=True):
        points, phi = _valid_token_sample(tokens, phases, max_points, seed)
        xy, method = _planar_embedding(points, seed)
        _phase_scatter(axis, xy[:, 0], xy[:, 1], phi, s=2, lw=0)
        axis.set_title(f"{name} — {method}")
        axis.set_xticks([])
        axis.set_yticks([])
    return _finish(figure, axes, path)
