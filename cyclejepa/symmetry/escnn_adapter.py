"""Cross-check of the closed-form U(1) action against escnn's SO(2) representations.

escnn is an optional extra (``pip install cyclejepa[escnn]``: numpy < 2, a Fortran compiler),
imported inside the functions only. escnn's ``so2_group().irrep(n)`` is ``[[cos n t, -sin n t],
[sin n t, cos n t]]`` for n > 0 and the 1 x 1 identity for n = 0: the paper's rho(n t) on an
``(x, y)`` pair, so the direct sum in spectrum order equals ``U1Symmetry(spectrum).matrix(t)``
exactly, with no sign flip or permutation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cyclejepa.symmetry.spectrum import HarmonicSpectrum


def escnn_representation(spectrum: str | HarmonicSpectrum) -> Any:
    """escnn ``Representation`` of SO(2): one irrep per copy, in the spectrum's layout order."""
    from escnn.group import directsum, so2_group

    spectrum = HarmonicSpectrum(spectrum)
    if spectrum.rank != 1:
        raise ValueError(f"the escnn adapter covers U(1) only; {spectrum} has rank {spectrum.rank}")
    group = so2_group(maximum_frequency=spectrum.n_max)
    irreps = [group.irrep(t.frequency) for t in spectrum.terms for _ in range(t.multiplicity)]
    return directsum(irreps, name=f"cyclejepa[{spectrum}]")


def escnn_matrix(spectrum: str | HarmonicSpectrum, phi: float) -> np.ndarray:
    """The (K, K) matrix escnn assigns to the rotation by ``phi`` radians."""
    representation = escnn_representation(spectrum)
    return np.asarray(representation(representation.group.element(float(phi))))
