"""Harmonic spectra, closed-form group actions, learned bases and admissible covariances."""

import math

import numpy as np
import pytest
import torch
from scipy.linalg import block_diag

from cyclejepa.registry import BASES, SYMMETRIES
from cyclejepa.symmetry import (
    HarmonicSpectrum,
    TorusSymmetry,
    U1Symmetry,
    admissible_covariance_projection,
    is_admissible,
    manifold_parameters,
)

PAPER = "4x0+24x1+24x2+20x3+16x4+12x5+10x6+8x7+6x8+4x9+2x10"
GAPPED = "8x0+40x1+40x4+40x7"
TORUS = "4x(0,0)+8x(1,0)+8x(0,1)+4x(1,-1)"
SMALL = "2x0+3x1+2x2+1x5"
CARDIO_RESPIRATORY = "4x(0,0)+8x(1,0)+8x(0,1)+4x(1,1)"  # examples/cardio_respiratory.yaml


# ----------------------------------------------------------------------------- references


def rotation(angle: float) -> np.ndarray:
    return np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])


def reference_matrix(spec: str, g) -> np.ndarray:
    """Naive float64 block-diagonal rho(g): I_m per invariant term, I_m (x) rho(<n, g>) else."""
    g = np.atleast_1d(np.asarray(g, dtype=np.float64))
    blocks = []
    for term in HarmonicSpectrum(spec).terms:
        n = np.asarray(term.vector)
        if not n.any():
            blocks.append(np.eye(term.multiplicity))
        else:
            blocks += [rotation(float(n @ g))] * term.multiplicity
    return block_diag(*blocks)


def random_orthogonal(k: int, seed: int) -> torch.Tensor:
    a = torch.randn(k, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    return q * torch.sign(torch.diagonal(r))


def make_symmetry(spec: str, basis: str, dtype=torch.float64):
    cls = TorusSymmetry if "(" in spec else U1Symmetry
    kwargs = {"generator": torch.Generator().manual_seed(3)} if basis == "householder" else {}
    symmetry = cls(spec, basis, **kwargs).to(dtype)
    if basis == "stiefel":  # move off the identity so the basis actually matters
        with torch.no_grad():
            symmetry.basis.weight.copy_(random_orthogonal(symmetry.dim, seed=4))
    return symmetry


def random_elements(symmetry, shape, seed=0, dtype=torch.float64):
    extra = (symmetry.rank,) if isinstance(symmetry, TorusSymmetry) else ()
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, *extra, generator=gen, dtype=dtype) - 0.5) * 8 * math.pi


# ----------------------------------------------------------------------------- spectrum


@pytest.mark.parametrize(
    "text",
    [PAPER, GAPPED, TORUS, SMALL, "1x3+2x0+1x1", "5x0", "2x7", "3x(0,0,0)+2x(0,1,-2)+1x(2,-1,0)"],
)
def test_spectrum_round_trips(text):
    spectrum = HarmonicSpectrum(text)
    assert str(spectrum) == text
    assert HarmonicSpectrum(spectrum) == spectrum
    assert HarmonicSpectrum([(t.multiplicity, t.frequency) for t in spectrum.terms]) == spectrum
    assert eval(repr(spectrum), {"HarmonicSpectrum": HarmonicSpectrum}) == spectrum


def test_spectrum_canonicalises_whitespace():
    assert str(HarmonicSpectrum(" 4x0 + 24 x 1 ")) == "4x0+24x1"
    assert str(HarmonicSpectrum("2x( 1 , -1 )+1x(0,0)")) == "2x(1,-1)+1x(0,0)"


def test_paper_spectrum_properties():
    spectrum = HarmonicSpectrum(PAPER)
    assert (spectrum.dim, spectrum.invariant_dim, spectrum.n_max, spectrum.rank) == (256, 4, 10, 1)
    assert spectrum.multiplicities == {1: 24, 2: 24, 3: 20, 4: 16, 5: 12, 6: 10, 7: 8, 8: 6, 9: 4, 10: 2}
    assert spectrum.dim == spectrum.invariant_dim + 2 * sum(spectrum.multiplicities.values())


def test_gapped_and_torus_properties():
    gapped = HarmonicSpectrum(GAPPED)
    assert (gapped.dim, gapped.invariant_dim, gapped.n_max) == (248, 8, 7)
    assert gapped.multiplicities == {1: 40, 4: 40, 7: 40}
    torus = HarmonicSpectrum(TORUS)
    assert (torus.dim, torus.invariant_dim, torus.n_max, torus.rank) == (44, 4, 1, 2)
    assert torus.multiplicities == {(1, 0): 8, (0, 1): 8, (1, -1): 4}


def test_layout_follows_term_order():
    spectrum = HarmonicSpectrum("3x2+2x0+1x5")
    assert spectrum.term_slices == (slice(0, 6), slice(6, 8), slice(8, 10))
    assert spectrum.harmonic_slices == {2: slice(0, 6), 0: slice(6, 8), 5: slice(8, 10)}
    assert spectrum.coordinate_frequencies() == [(2,)] * 6 + [(0,)] * 2 + [(5,)] * 2


def test_from_multiplicities():
    built = HarmonicSpectrum.from_multiplicities(4, {1: 24, 2: 0, 3: 8})
    assert str(built) == "4x0+24x1+8x3"
    torus = HarmonicSpectrum.from_multiplicities(2, {(1, 0): 3})
    assert str(torus) == "2x(0,0)+3x(1,0)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("4x0+", "term 2"),
        ("4x0+24y1", "term 2 \\('24y1'\\)"),
        ("4x0+x1", "term 2"),
        ("4x0+2.5x1", "term 2"),
        ("4x-1", "non-negative"),
        ("4x0+0x1", "term 2 .*multiplicity"),
        ("4x(-1,0)", "use \\(1,0\\)"),
        ("4x(0,-2,1)", "use \\(0,2,-1\\)"),
        ("4x(1,a)", "integers"),
        ("4x0+2x(1,0)", "same rank"),
        ("4x1+2x1", "more than one term"),
    ],
)
def test_malformed_spectra_are_rejected(text, message):
    with pytest.raises(ValueError, match=message):
        HarmonicSpectrum(text)


def test_spectrum_equality_and_hash():
    assert HarmonicSpectrum("4x0 + 8x1") == HarmonicSpectrum("4x0+8x1")
    assert HarmonicSpectrum("4x0+8x1") != HarmonicSpectrum("8x1+4x0")  # layout differs
    spectra = {HarmonicSpectrum("4x0+8x1"), HarmonicSpectrum(" 4x0+8x1"), HarmonicSpectrum("8x1")}
    assert len(spectra) == 2


# ----------------------------------------------------------------------------- group action


@pytest.mark.parametrize("spec", [PAPER, GAPPED, "1x3+2x0+1x1", TORUS, CARDIO_RESPIRATORY])
def test_matrix_matches_naive_block_diagonal(spec):
    symmetry = make_symmetry(spec, "canonical")
    for g in random_elements(symmetry, (4,), seed=1):
        expected = reference_matrix(spec, g.numpy())
        np.testing.assert_allclose(symmetry.matrix(g).numpy(), expected, atol=1e-12)


BASIS_CASES = [
    (SMALL, "canonical"),
    (SMALL, "householder"),
    (SMALL, "stiefel"),
    (TORUS, "canonical"),
    (TORUS, "householder"),
    (TORUS, "stiefel"),
]


@pytest.mark.parametrize(("spec", "basis"), BASIS_CASES)
def test_representation_is_orthogonal_homomorphism(spec, basis):
    symmetry = make_symmetry(spec, basis)
    a, b = random_elements(symmetry, (2, 6), seed=2)
    ra, rb = symmetry.matrix(a), symmetry.matrix(b)
    eye = torch.eye(symmetry.dim, dtype=torch.float64)
    torch.testing.assert_close(ra @ rb, symmetry.matrix(a + b), atol=1e-10, rtol=0)
    torch.testing.assert_close(ra.mT @ ra, eye.expand_as(ra), atol=1e-10, rtol=0)
    full_turn = torch.full_like(a[0], 2 * math.pi)
    torch.testing.assert_close(symmetry.matrix(full_turn), eye, atol=1e-10, rtol=0)
    # the basis really enters rho: Q B Q^T with the naive B
    q = symmetry.basis.matrix()
    q = eye if q is None else q.detach()
    naive = torch.from_numpy(reference_matrix(spec, a[0].numpy()))
    torch.testing.assert_close(symmetry.matrix(a[0]), q @ naive @ q.T, atol=1e-10, rtol=0)


@pytest.mark.parametrize(("spec", "basis"), BASIS_CASES + [(PAPER, "householder")])
def test_act_equals_explicit_matrix_on_batched_leading_dims(spec, basis):
    symmetry = make_symmetry(spec, basis, dtype=torch.float32)
    z = torch.randn(3, 5, symmetry.dim, generator=torch.Generator().manual_seed(5))
    g = random_elements(symmetry, (3, 5), seed=6, dtype=torch.float32)
    expected = (symmetry.matrix(g) @ z.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(symmetry.act(z, g), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(symmetry.canonicalize(symmetry.act(z, g), g), z, atol=1e-5, rtol=0)
    inverse = (symmetry.matrix(g).mT @ z.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(symmetry.canonicalize(z, g), inverse, atol=1e-5, rtol=0)


def test_group_element_broadcasts_against_leading_dims():
    symmetry = U1Symmetry(SMALL)
    z = torch.randn(3, 5, symmetry.dim)
    expected = (symmetry.matrix(0.7) @ z.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(symmetry.act(z, 0.7), expected)
    torch.testing.assert_close(symmetry.act(z, torch.full((5,), 0.7)), expected)


def test_act_keeps_dtype_and_device_and_computes_angles_accurately():
    symmetry = U1Symmetry(PAPER)
    z = torch.randn(4, 125, 256, dtype=torch.float64)
    g = torch.rand(4, 125, dtype=torch.float64) * 2 * math.pi
    exact = symmetry.act(z, g)
    assert exact.dtype == torch.float64 and exact.device == z.device
    low = symmetry.act(z.to(torch.bfloat16), g.to(torch.float32))
    assert low.dtype == torch.bfloat16
    # angles up to 10 * 2 pi are formed in float32, so only the bfloat16 rounding of z remains
    torch.testing.assert_close(low.double(), exact, atol=0.05, rtol=0.02)


def test_act_gradcheck_float64():
    symmetry = make_symmetry("1x0+1x1+2x3", "householder")
    z = torch.randn(2, symmetry.dim, dtype=torch.float64, requires_grad=True)
    g = torch.rand(2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(symmetry.act, (z, g))
    assert torch.autograd.gradcheck(symmetry.canonicalize, (z, g))
    torus = make_symmetry("1x(0,0)+1x(1,0)+1x(2,-1)", "canonical")
    zt = torch.randn(2, torus.dim, dtype=torch.float64, requires_grad=True)
    gt = torch.rand(2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(torus.act, (zt, gt))


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match="expected \\(\\.\\.\\., 14\\)"):
        U1Symmetry(SMALL).act(torch.zeros(3, 13), torch.zeros(3))
    with pytest.raises(ValueError, match="expected \\(\\.\\.\\., 2\\) angles"):
        TorusSymmetry(TORUS).act(torch.zeros(3, 44), torch.zeros(3))
    with pytest.raises(ValueError, match="use TorusSymmetry"):
        U1Symmetry(TORUS)


def test_element_maps_per_token_phase_coordinates_to_group_elements():
    phases = torch.rand(3, 5, 2, dtype=torch.float64) * 2 * math.pi
    torus = TorusSymmetry(CARDIO_RESPIRATORY)
    assert torch.equal(torus.element(phases), phases)
    u1 = U1Symmetry(SMALL)
    assert torch.equal(u1.element(phases[..., :1]), phases[..., 0])  # (..., T, 1) acts as (..., T)
    z = torch.randn(3, 5, torus.dim, dtype=torch.float64)
    g = torus.element(phases)
    # the torus acts coordinate-wise: rho(phi1 + psi1, phi2 + psi2) = rho(phi1, phi2) rho(psi1, psi2)
    shift = torch.tensor([0.3, 1.1], dtype=torch.float64)
    torch.testing.assert_close(torus.act(torus.act(z, g), shift), torus.act(z, g + shift), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match=r"rank 1, so expected \(\.\.\., 1\)"):
        u1.element(phases)
    with pytest.raises(ValueError, match=r"rank 2, so expected \(\.\.\., 2\)"):
        torus.element(phases[..., :1])


# ----------------------------------------------------------------------------- bases


def test_registered_names():
    assert SYMMETRIES.get("u1") is U1Symmetry and SYMMETRIES.get("torus") is TorusSymmetry
    assert {"canonical", "householder", "stiefel"} <= set(BASES.names())
    built = SYMMETRIES.build("torus", spectrum=TORUS, basis="householder", reflections=3)
    assert built.basis.vectors.shape == (3, 44)


def test_canonical_basis_has_no_parameters():
    symmetry = U1Symmetry(PAPER)
    assert list(symmetry.parameters()) == [] and symmetry.state_dict() == {}
    assert symmetry.basis.matrix() is None


def test_householder_default_reflections_and_seeding():
    first = U1Symmetry(SMALL, "householder", generator=torch.Generator().manual_seed(0))
    again = U1Symmetry(SMALL, "householder", generator=torch.Generator().manual_seed(0))
    assert first.basis.vectors.shape == (14, 14)
    torch.testing.assert_close(first.basis.matrix(), again.basis.matrix())


@pytest.mark.parametrize("reflections", [1, 5, 14, 40])
def test_householder_matrix_is_the_product_of_reflections(reflections):
    symmetry = U1Symmetry(SMALL, "householder", reflections=reflections).double()
    expected = np.eye(symmetry.dim)
    for v in symmetry.basis.vectors.detach().numpy():
        expected = expected @ (np.eye(symmetry.dim) - 2 * np.outer(v, v) / (v @ v))
    np.testing.assert_allclose(symmetry.basis.matrix().detach().numpy(), expected, atol=1e-12)


def test_basis_round_trip_to_canonical():
    symmetry = make_symmetry(SMALL, "householder")
    z = torch.randn(3, 5, symmetry.dim, dtype=torch.float64)
    q = symmetry.basis.matrix()
    torch.testing.assert_close(symmetry.basis.to_canonical(z), (q.T @ z.unsqueeze(-1)).squeeze(-1))
    torch.testing.assert_close(symmetry.basis.from_canonical(symmetry.basis.to_canonical(z)), z)


def test_manifold_parameters_finds_only_stiefel():
    stiefel = U1Symmetry(SMALL, "stiefel")
    assert [p.shape for p in manifold_parameters(stiefel)] == [(14, 14)]
    assert manifold_parameters(U1Symmetry(SMALL, "householder")) == []


def fit_basis(symmetry, optimiser, steps=100):
    """Fit the basis so that rho(g) z matches a target action; returns the first and last loss."""
    target = U1Symmetry(SMALL, "householder", generator=torch.Generator().manual_seed(9))
    gen = torch.Generator().manual_seed(10)
    losses = []
    for _ in range(steps):
        z = torch.randn(32, symmetry.dim, generator=gen)
        g = torch.rand(32, generator=gen) * 2 * math.pi
        with torch.no_grad():
            wanted = target.act(z, g)
        loss = (symmetry.act(z, g) - wanted).pow(2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses[0], losses[-1]


def orthogonality_error(symmetry) -> float:
    q = symmetry.basis.matrix().detach()
    return torch.linalg.matrix_norm(q.T @ q - torch.eye(q.shape[0])).item()


def test_householder_stays_orthogonal_under_adam():
    symmetry = U1Symmetry(SMALL, "householder", generator=torch.Generator().manual_seed(1))
    first, last = fit_basis(symmetry, torch.optim.Adam(symmetry.parameters(), lr=0.05))
    assert last < 0.5 * first  # the basis moved
    assert orthogonality_error(symmetry) < 1e-5


def test_stiefel_stays_orthogonal_under_riemannian_adam():
    geoopt = pytest.importorskip("geoopt")
    symmetry = U1Symmetry(SMALL, "stiefel")
    optimiser = geoopt.optim.RiemannianAdam(manifold_parameters(symmetry), lr=0.05)
    first, last = fit_basis(symmetry, optimiser)
    assert last < 0.5 * first
    assert orthogonality_error(symmetry) < 1e-5


# ----------------------------------------------------------------------------- admissibility


def random_spd(k: int, seed: int) -> torch.Tensor:
    a = torch.randn(k, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return a @ a.T / k + torch.eye(k, dtype=torch.float64)


def quadrature_average(sigma: torch.Tensor, symmetry) -> torch.Tensor:
    """Reference Reynolds operator: mean of R Sigma R^T over (2 n_max + 1)^rank grid angles."""
    count = 2 * symmetry.spectrum.n_max + 1
    axis = torch.arange(count, dtype=torch.float64) * 2 * math.pi / count
    if isinstance(symmetry, TorusSymmetry):
        axis = torch.cartesian_prod(*[axis] * symmetry.rank).reshape(-1, symmetry.rank)
    r = symmetry.matrix(axis)
    return (r @ sigma @ r.mT).mean(0)


ADMISSIBLE_CASES = [(PAPER, "canonical"), (SMALL, "householder"), (GAPPED, "canonical"), (TORUS, "stiefel")]


@pytest.mark.parametrize(("spec", "basis"), ADMISSIBLE_CASES)
def test_identity_admissible_random_spd_not(spec, basis):
    symmetry = make_symmetry(spec, basis)
    assert is_admissible(torch.eye(symmetry.dim, dtype=torch.float64), symmetry)
    assert not is_admissible(random_spd(symmetry.dim, seed=11), symmetry)


@pytest.mark.parametrize(
    ("spec", "basis"), [(SMALL, "canonical"), (SMALL, "householder"), (GAPPED, "canonical"), (TORUS, "stiefel")]
)
def test_projection_is_the_group_average(spec, basis):
    symmetry = make_symmetry(spec, basis)
    sigma = random_spd(symmetry.dim, seed=12)
    projected = admissible_covariance_projection(sigma, symmetry)
    torch.testing.assert_close(projected, quadrature_average(sigma, symmetry), atol=1e-10, rtol=0)
    assert is_admissible(projected, symmetry)
    torch.testing.assert_close(admissible_covariance_projection(projected, symmetry), projected)


def paper_block_form(s0, blocks) -> np.ndarray:
    """S0 (+) sum_n [A_n (x) I + C_n (x) J] with J = [[0, -1], [1, 0]]."""
    j = np.array([[0.0, -1.0], [1.0, 0.0]])
    return block_diag(s0, *[np.kron(a, np.eye(2)) + np.kron(c, j) for a, c in blocks])


def test_projection_has_the_paper_block_form():
    spec = "3x0+4x1+1x2+2x5"  # canonical ordering: invariants first, harmonics ascending
    symmetry = U1Symmetry(spec).double()
    sigma = random_spd(symmetry.dim, seed=13)
    projected = admissible_covariance_projection(sigma, symmetry).numpy()
    s0 = projected[:3, :3]
    blocks = []
    for span in HarmonicSpectrum(spec).term_slices[1:]:
        block = projected[span, span]
        a, c = block[0::2, 0::2], block[1::2, 0::2]  # x-x entries give A, y-x entries give C
        np.testing.assert_allclose(a, a.T, atol=1e-12)
        np.testing.assert_allclose(c, -c.T, atol=1e-12)
        blocks.append((a, c))
    assert np.abs(blocks[1][1]).max() < 1e-15  # c_n = 1 forces C_n = 0
    np.testing.assert_allclose(projected, paper_block_form(s0, blocks), atol=1e-12)


def test_paper_block_form_is_admissible_and_fixed_by_projection():
    spec = "2x0+3x1+2x4"
    symmetry = U1Symmetry(spec).double()
    rng = np.random.default_rng(14)
    sym = lambda m: (m + m.T) / 2  # noqa: E731
    skew = lambda m: (m - m.T) / 2  # noqa: E731
    s0 = sym(rng.normal(size=(2, 2)))
    blocks = [(sym(rng.normal(size=(c, c))), skew(rng.normal(size=(c, c)))) for c in (3, 2)]
    sigma = torch.from_numpy(paper_block_form(s0, blocks))
    assert is_admissible(sigma, symmetry)
    torch.testing.assert_close(admissible_covariance_projection(sigma, symmetry), sigma)
    coupled = sigma.clone()
    coupled[0, 2] = coupled[2, 0] = 0.3  # invariant coordinate correlated with a harmonic-1 one
    assert not is_admissible(coupled, symmetry)
