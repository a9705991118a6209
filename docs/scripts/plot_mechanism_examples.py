"""Example mechanism and geometry figures from two toy encoders (docs/img/mechanism-*.png).

Phases follow a beat-to-beat sawtooth (80 ms tokens, RR 0.6–1.1 s, undefined before the first
and after the last beat). The *equivariant* encoder emits z_t = ρ(φ_t) v_r + noise, with v_r a
common vector plus a per-record perturbation; the *phase-locked* one v_r + W f(φ_t) + noise
with a fixed random W and f(φ) = (cos kφ, sin kφ), k = 1..3 (it carries the phase, but not
through ρ); the *phase-blind* one v_r + noise. Run from
the repository root:

    .venv/bin/python docs/scripts/plot_mechanism_examples.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from cyclejepa.evaluation import (
    fundamental_amplitude,
    g1_gate,
    orbit_coherence,
    phase_ring_figure,
    umap_figure,
)
from cyclejepa.symmetry import U1Symmetry

SPECTRUM = "4x0+24x1+24x2+20x3+16x4+12x5+10x6+8x7+6x8+4x9+2x10"
RECORDS, TOKENS, TOKEN_SECONDS = 64, 125, 0.08
OUT = Path(__file__).resolve().parents[1] / "img"


def sawtooth_phases(rng: np.random.Generator) -> np.ndarray:
    """(RECORDS, TOKENS) phases, linear between beats, NaN outside the first and last beat."""
    times = (np.arange(TOKENS) + 0.5) * TOKEN_SECONDS
    phases = np.full((RECORDS, TOKENS), np.nan)
    for row in phases:
        beats = rng.uniform(0, 0.8) + np.cumsum(rng.uniform(0.6, 1.1, 16))
        inside = (times >= beats[0]) & (times < beats[-1])
        beat = np.searchsorted(beats, times[inside], side="right") - 1
        fraction = (times[inside] - beats[beat]) / (beats[beat + 1] - beats[beat])
        row[inside] = 2 * np.pi * fraction
    return phases


def toy_runs(symmetry: U1Symmetry, rng: np.random.Generator) -> dict[str, tuple]:
    """Three encoders of the same phases: equivariant, phase-locked but not equivariant
    (a fixed random map of (cos kφ, sin kφ), k = 1..3), and phase-blind."""
    dim = symmetry.dim
    record_vectors = rng.normal(size=dim) + 0.3 * rng.normal(size=(RECORDS, 1, dim))
    phases = sawtooth_phases(rng)
    noise = 0.3 * rng.normal(size=(RECORDS, TOKENS, dim))
    with torch.no_grad():
        angles = torch.from_numpy(np.nan_to_num(phases))
        rotated = symmetry.act(torch.from_numpy(record_vectors), angles).numpy()
    k = np.arange(1, 4)
    waveform = np.concatenate([np.cos(k * phases[..., None]), np.sin(k * phases[..., None])], -1)
    locked = np.nan_to_num(waveform) @ rng.normal(size=(6, dim))
    encoders = {"equivariant": rotated, "phase-locked": record_vectors + locked}
    encoders["phase-blind"] = np.broadcast_to(record_vectors, rotated.shape)
    return {name: ((z + noise).astype(np.float32), phases) for name, z in encoders.items()}


def main() -> None:
    rng = np.random.default_rng(0)
    symmetry = U1Symmetry(SPECTRUM)
    runs = toy_runs(symmetry, rng)
    patients = np.arange(RECORDS)
    print("| encoder | g_f | true − shuffled gain | shuffled g_f | G1 | amplitude | coherence |")
    for name, (tokens, phases) in runs.items():
        gate = g1_gate(tokens, phases, symmetry, patients)
        paired = gate.paired_difference
        print(
            f"| {name} | {gate.true.gain_fraction:.4f} "
            f"| {paired.point:.4f} [{paired.low:.4f}, {paired.high:.4f}] "
            f"| {gate.shuffled.gain_fraction:.4f} | {'pass' if gate.passed else 'fail'} "
            f"| {fundamental_amplitude(tokens, phases, symmetry):.4f} "
            f"| {orbit_coherence(tokens, phases, symmetry).mean_kappa:.4f} |"
        )
    OUT.mkdir(exist_ok=True)
    ring = phase_ring_figure({name: (*run, symmetry) for name, run in runs.items()})
    ring.savefig(OUT / "mechanism-phase-ring.png", dpi=80)
    umap = umap_figure(runs, max_points=2000)
    umap.savefig(OUT / "mechanism-umap.png", dpi=80)


if __name__ == "__main__":
    main()
