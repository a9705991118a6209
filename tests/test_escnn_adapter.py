"""escnn's SO(2) representation matrices equal the closed-form U(1) action (optional extra)."""

import numpy as np
import pytest
import torch

pytest.importorskip("escnn")

from cyclejepa.symmetry import U1Symmetry  # noqa: E402
from cyclejepa.symmetry.escnn_adapter import escnn_matrix, escnn_representation  # noqa: E402

PAPER = "4x0+24x1+24x2+20x3+16x4+12x5+10x6+8x7+6x8+4x9+2x10"
GAPPED = "8x0+40x1+40x4+40x7"


@pytest.mark.parametrize("spec", [PAPER, GAPPED, "1x3+2x0+1x1"])
@pytest.mark.parametrize("phi", [0.0, 0.3, 1.7, np.pi, 5.9])
def test_escnn_matrix_equals_closed_form(spec, phi):
    ours = U1Symmetry(spec).matrix(torch.tensor(phi, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(escnn_matrix(spec, phi), ours, atol=1e-10)


def test_escnn_representation_size_and_irreps():
    representation = escnn_representation(GAPPED)
    assert representation.size == 8 + 2 * 120
    frequencies = [irrep[0] for irrep in representation.irreps]
    assert frequencies == [0] * 8 + [1] * 40 + [4] * 40 + [7] * 40


def test_escnn_adapter_rejects_torus_spectrum():
    with pytest.raises(ValueError, match="U\\(1\\) only"):
        escnn_representation("2x(0,0)+1x(1,0)")
