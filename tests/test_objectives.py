"""Objectives against independent float64 references (numpy/scipy, naive pairwise loops)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.integrate import quad
from scipy.linalg import block_diag
from torch import Tensor, nn

from cyclejepa.config import ConfigError, parse_config
from cyclejepa.objectives import (
    EppsPulley,
    Moments,
    Regulariser,
    SIGReg,
    SlicingTest,
    VICReg,
    pairwise_similarities,
    prediction_loss,
    sample_cutoffs,
    sample_directions,
    sigreg,
    transport_loss,
    vicreg,
)
from cyclejepa.pipeline.checks import consistency_problems
from cyclejepa.registry import OBJECTIVES, REGULARISERS, STATISTICS
from cyclejepa.symmetry import U1Symmetry

SPECTRUM = "2x0+2x1+1x3"  # K = 2 + 4 + 2 = 8
BLOCKS = [(0, 2), (1, 2), (3, 1)]  # (harmonic, multiplicity), in layout order


# ---------------------------------------------------------------- references


def epps_pulley_numpy(x: np.ndarray, t: np.ndarray, n: int | None = None) -> float:
    """N ∫ |φ̂(t) − e^{−t²/2}|² e^{−t²/2} dt by numpy's trapezoid on the given knots; φ̂ is the
    mean over all of ``x``, N is ``n`` (default: the length of ``x``)."""
    phases = np.outer(t, x)
    gaussian = np.exp(-0.5 * t**2)
    integrand = ((np.cos(phases).mean(1) - gaussian) ** 2 + np.sin(phases).mean(1) ** 2) * gaussian
    return (len(x) if n is None else n) * np.trapezoid(integrand, t)


def epps_pulley_exact(x: np.ndarray, t_max: float = 3.0) -> float:
    """The same integral over [−t_max, t_max] by adaptive quadrature (scipy.integrate.quad)."""

    def integrand(t: float) -> float:
        ecf = np.exp(1j * t * x).mean()
        return abs(ecf - np.exp(-0.5 * t**2)) ** 2 * np.exp(-0.5 * t**2)

    value, _ = quad(integrand, -t_max, t_max, limit=400, epsabs=1e-12, epsrel=1e-12)
    return len(x) * value


def rho(phi: float) -> np.ndarray:
    """ρ(φ) for SPECTRUM: invariants, then 2×2 rotations by nφ, built from scratch."""
    blocks = []
    for n, copies in BLOCKS:
        c, s = np.cos(n * phi), np.sin(n * phi)
        blocks += [np.eye(1)] * copies if n == 0 else [np.array([[c, -s], [s, c]])] * copies
    return block_diag(*blocks)


def naive_similarities(z: np.ndarray, phi: np.ndarray):
    """Per record: mean c_R, mean c_I over ordered valid pairs (explicit loops), pair count."""
    c_r, c_i, pairs = [], [], []
    for record, phases in zip(z, phi, strict=True):
        unit = record / np.linalg.norm(record, axis=1, keepdims=True)
        valid = [t for t in range(len(phases)) if np.isfinite(phases[t])]
        transported, plain = [], []
        for t in valid:
            for u in valid:
                if t != u:
                    transported.append(rho(phases[u] - phases[t]) @ unit[t] @ unit[u])
                    plain.append(unit[t] @ unit[u])
        c_r.append(np.mean(transported) if transported else np.nan)
        c_i.append(np.mean(plain) if plain else np.nan)
        pairs.append(len(transported))
    return np.array(c_r), np.array(c_i), np.array(pairs)


@pytest.fixture
def symmetry() -> U1Symmetry:
    return U1Symmetry(SPECTRUM)


@pytest.fixture
def masked_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """float64 z (6, 7, 8), phases with random NaNs; record 0 has no valid token, record 1 one."""
    rng = np.random.default_rng(3)
    z = rng.normal(size=(6, 7, 8))
    phi = rng.uniform(0, 2 * np.pi, size=(6, 7))
    phi[rng.random(phi.shape) < 0.3] = np.nan
    phi[0] = np.nan
    phi[1, 1:] = np.nan
    return torch.from_numpy(z), torch.from_numpy(phi)


# ---------------------------------------------------------------- SIGReg


def test_sigreg_matches_numpy_trapezoid_on_symmetric_knots():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(300, 6, generator=gen, dtype=torch.float64) * 1.3 + 0.2
    directions = sample_directions(6, 5, gen, dtype=torch.float64)
    x = (z @ directions).numpy()
    knots = np.linspace(-3.0, 3.0, 33)  # the 17 knots on [0, 3] mirrored
    expected = np.mean([epps_pulley_numpy(x[:, m], knots) for m in range(5)])
    assert sigreg(z, directions).item() == pytest.approx(expected, rel=1e-12)
    coarse = np.mean([epps_pulley_numpy(x[:, m], np.linspace(-2, 2, 9)) for m in range(5)])
    assert sigreg(z, directions, knots=5, t_max=2.0).item() == pytest.approx(coarse, rel=1e-12)


@pytest.mark.parametrize("scale", [1.0, 3.0, 0.3])
def test_sigreg_17_knots_matches_exact_integral(scale):
    # Documented tolerance: the integrand is even and smooth, so the trapezoid error comes from
    # the t = 3 endpoint (weight e^{-4.5}) and aliasing; observed relative error <= 4e-4.
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(400, 4, generator=gen, dtype=torch.float64) * scale
    directions = sample_directions(4, 3, gen, dtype=torch.float64)
    x = (z @ directions).numpy()
    exact = np.mean([epps_pulley_exact(x[:, m]) for m in range(3)])
    assert sigreg(z, directions).item() == pytest.approx(exact, rel=1e-3)


def test_sigreg_scores_gaussian_low_and_degenerate_batches_high():
    gen = torch.Generator().manual_seed(2)
    n, k = 2000, 32
    gaussian = torch.randn(n, k, generator=gen)
    directions = sample_directions(k, 64, gen)
    score = sigreg(gaussian, directions).item()
    assert score < 3.0  # E[EP] under H0 is ∫(1 − e^{−t²}) e^{−t²/2} dt ≈ 1.05 on [−3, 3]
    collapsed = torch.full((n, k), 0.3)
    rank_one = torch.randn(n, 1, generator=gen) * torch.randn(1, k, generator=gen)
    for degenerate in (collapsed, rank_one, 3 * gaussian):
        assert sigreg(degenerate, directions).item() > 20 * score


def test_sigreg_reduce_hook_combines_shards_into_the_full_batch_value():
    gen = torch.Generator().manual_seed(4)
    z = torch.randn(700, 5, generator=gen, dtype=torch.float64) * 1.5
    directions = sample_directions(5, 16, gen, dtype=torch.float64)
    first, second = z[:300], z[300:]
    captured = {}

    def capture(ecf, n):
        captured.update(ecf=ecf, n=n)
        return ecf, n

    def combine(ecf, n):  # what an all-reduce of (n · ecf, n) computes on every rank
        total = n + captured["n"]
        return (n * ecf + captured["n"] * captured["ecf"]) / total, total

    sigreg(first, directions, reduce=capture)
    combined = sigreg(second, directions, reduce=combine)
    torch.testing.assert_close(combined, sigreg(z, directions), rtol=1e-13, atol=0)


def test_sigreg_module_flattens_tokens_and_draws_fresh_directions():
    assert REGULARISERS.get("sigreg") is SIGReg
    z = torch.randn(3, 10, 6, generator=torch.Generator().manual_seed(5))
    module = SIGReg(num_directions=7, sample_size="tokens")
    gen = torch.Generator().manual_seed(9)
    first, second = module(z, generator=gen), module(z, generator=gen)
    directions = sample_directions(6, 7, torch.Generator().manual_seed(9))
    torch.testing.assert_close(first, sigreg(z.reshape(30, 6), directions))
    assert first.item() != second.item()  # the generator advanced: new directions
    torch.testing.assert_close(directions.norm(dim=0), torch.ones(7))


@pytest.mark.parametrize("sample_size", ["records", "tokens"])
def test_sigreg_sample_size_counts_records_or_tokens(sample_size):
    """φ̂ always pools the B × T tokens; N in front of the integral is B (records) or B × T."""
    gen = torch.Generator().manual_seed(4)
    z = torch.randn(5, 12, 6, generator=gen, dtype=torch.float64) * 1.4 + 0.3
    directions = sample_directions(6, 4, gen, dtype=torch.float64)
    x = (z.reshape(60, 6) @ directions).numpy()
    n = 5 if sample_size == "records" else 60
    expected = np.mean([epps_pulley_numpy(x[:, m], np.linspace(-3.0, 3.0, 33), n=n) for m in range(4)])
    value = SIGReg(num_directions=4, sample_size=sample_size)(z, directions)
    assert value.item() == pytest.approx(expected, rel=1e-12)


def test_sigreg_records_under_a_split_batch_uses_the_global_record_count():
    """Two shards of 2 and 3 records through the DDP reduction give the statistic of all 5."""
    gen = torch.Generator().manual_seed(6)
    z = torch.randn(5, 8, 4, generator=gen, dtype=torch.float64)
    directions = sample_directions(4, 3, gen, dtype=torch.float64)
    module, captured = SIGReg(num_directions=3), {}

    def capture(ecf, rows):
        captured.update(ecf=ecf, rows=rows)
        return ecf, rows

    def combine(ecf, rows):  # the all-reduce of (rows · ecf, rows), as Distributed.ecf_reduce
        total = rows + captured["rows"]
        return (rows * ecf + captured["rows"] * captured["ecf"]) / total, total

    module(z[:2], directions, reduce=capture)
    torch.testing.assert_close(module(z[2:], directions, reduce=combine), module(z, directions), rtol=1e-13, atol=0)


def test_sigreg_rejects_an_unknown_sample_size():
    with pytest.raises(ValueError, match="sample_size must be one of"):
        SIGReg(sample_size="batches")


def test_sigreg_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="directions must have shape"):
        sigreg(torch.randn(10, 4), torch.randn(5, 3))
    with pytest.raises(ValueError, match="knots >= 2"):
        SIGReg(statistic=EppsPulley(knots=1))
    with pytest.raises(TypeError, match="statistic must be a UnivariateStatistic object, got 'moments'"):
        SIGReg(statistic="moments")  # a name is the config's; the regulariser takes the object


# ---------------------------------------------------------------- the regulariser interface


def fused_sigreg(z: Tensor, directions: Tensor, knots: int = 17, t_max: float = 3.0, rows_per_sample: int = 1) -> Tensor:
    """SIGReg as one fused function, operation for operation the implementation before the
    statistic became a component of the slicing test (the bit-for-bit reference)."""
    dtype = torch.promote_types(torch.promote_types(z.dtype, directions.dtype), torch.float32)
    t = torch.linspace(0.0, t_max, knots, dtype=dtype)
    weights = torch.full_like(t, 2.0 * t_max / (knots - 1))
    weights[0] /= 2
    weights[-1] /= 2
    phases = (z.to(dtype) @ directions.to(dtype)).unsqueeze(-1) * t
    ecf = torch.stack((phases.cos().mean(0), phases.sin().mean(0))).transpose(1, 2)
    target = torch.exp(-0.5 * t.square()).unsqueeze(-1)
    squared_error = (ecf[0] - target).square() + ecf[1].square()
    return ((z.shape[0] / rows_per_sample) * ((weights.unsqueeze(-1) * target) * squared_error).sum(0)).mean()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sliced_epps_pulley_equals_the_fused_sigreg_bit_for_bit(dtype):
    """Value and gradient of SIGReg = slicing ∘ Epps–Pulley are the fused function's, exactly."""
    gen = torch.Generator().manual_seed(11)
    z = (torch.randn(4, 25, 16, generator=gen, dtype=dtype) * 1.7 + 0.4).requires_grad_(True)
    directions = sample_directions(16, 64, gen, dtype=dtype)
    for module, per_record in ((SIGReg(num_directions=64), 25), (SIGReg(num_directions=64, sample_size="tokens"), 1)):
        composed = module(z, directions)
        (composed_grad,) = torch.autograd.grad(composed, z)
        fused = fused_sigreg(z.reshape(100, 16), directions, rows_per_sample=per_record)
        (fused_grad,) = torch.autograd.grad(fused, z)
        assert torch.equal(composed, fused) and torch.equal(composed_grad, fused_grad)
    assert torch.equal(sigreg(z.reshape(100, 16), directions, knots=5, t_max=2.0),
                       fused_sigreg(z.reshape(100, 16), directions, knots=5, t_max=2.0))  # fmt: skip


def moments_numpy(x: np.ndarray, n: int) -> float:
    """N Σ_{k≤4} (m̂_k − μ_k)² / Var(X^k) under N(0, 1): μ = (0, 1, 0, 3), Var = (1, 2, 15, 96)."""
    mu, var = np.array([0.0, 1.0, 0.0, 3.0]), np.array([1.0, 2.0, 15.0, 96.0])
    sample = np.array([np.mean(x**k) for k in range(1, 5)])
    return n * np.sum((sample - mu) ** 2 / var)


def test_a_second_univariate_statistic_is_an_object_the_regulariser_takes():
    """``SIGReg(statistic=Moments(order=4))`` slices the moment-matching statistic, against numpy."""
    assert STATISTICS.get("moments") is Moments and STATISTICS.get("epps-pulley") is EppsPulley
    gen = torch.Generator().manual_seed(12)
    z = torch.randn(6, 10, 5, generator=gen, dtype=torch.float64) * 1.2 + 0.3
    directions = sample_directions(5, 7, gen, dtype=torch.float64)
    x = (z.reshape(60, 5) @ directions).numpy()
    module = SIGReg(num_directions=7, statistic=Moments(order=4))
    expected = np.mean([moments_numpy(x[:, m], n=6) for m in range(7)])
    assert module(z, directions).item() == pytest.approx(expected, rel=1e-12)
    standard = torch.randn(20000, 5, generator=gen, dtype=torch.float64)
    assert module(standard, directions).item() < 10 < module(standard**2, directions).item()


@pytest.mark.parametrize(
    ("options", "statistic"),
    [
        ({}, EppsPulley(17, 3.0)),
        ({"knots": 9, "t_max": 2.5}, EppsPulley(9, 2.5)),
        ({"statistic": "epps-pulley", "statistic_options": {"knots": 5}}, EppsPulley(5, 3.0)),
        ({"statistic": "moments", "statistic_options": {"order": 3}}, Moments(3)),
    ],
)
def test_the_registry_builds_the_statistic_a_config_names_and_injects_it(options, statistic):
    """A config's ``statistic`` / ``statistic_options`` (and Epps–Pulley's ``knots`` / ``t_max``)
    become one statistic object in ``SIGReg(statistic=...)``: the same object a caller would pass."""
    gen = torch.Generator().manual_seed(14)
    z = torch.randn(4, 9, 6, generator=gen, dtype=torch.float64)
    directions = sample_directions(6, 5, gen, dtype=torch.float64)
    built = REGULARISERS.build("sigreg", num_directions=5, sample_size="tokens", **options)
    assert type(built) is SIGReg and repr(built.statistic) == repr(statistic)
    assert (built.num_directions, built.sample_size) == (5, "tokens")
    direct = SIGReg(num_directions=5, statistic=statistic, sample_size="tokens")
    assert torch.equal(built(z, directions), direct(z, directions))


def test_moments_reduce_hook_combines_shards_into_the_full_batch_value():
    gen = torch.Generator().manual_seed(13)
    z = torch.randn(90, 4, generator=gen, dtype=torch.float64)
    directions = sample_directions(4, 3, gen, dtype=torch.float64)
    module, captured = SlicingTest(Moments(order=3), num_directions=3), {}
    module(z[:40], directions, reduce=lambda means, n: captured.update(means=means, n=n) or (means, n))
    combine = lambda means, n: ((n * means + 40 * captured["means"]) / (n + 40), n + 40)  # noqa: E731
    torch.testing.assert_close(module(z[40:], directions, reduce=combine), module(z, directions), rtol=1e-13, atol=0)


def test_regularisers_share_the_interface_and_only_the_slicing_test_draws():
    sliced, plain = SIGReg(num_directions=5), VICReg()
    assert isinstance(sliced, Regulariser) and isinstance(plain, Regulariser)
    assert plain.draw(8, torch.Generator().manual_seed(0)) == {}
    drawn = sliced.draw(8, torch.Generator().manual_seed(0))
    torch.testing.assert_close(drawn["directions"], sample_directions(8, 5, torch.Generator().manual_seed(0)))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"statistic": "moment"}, "Did you mean 'moments'?"),
        (
            {"statistic": "moments", "knots": 9},
            "knots are options of the univariate statistic 'epps-pulley', but statistic is 'moments'",
        ),
        (
            {"statistic": "moments", "statistic_options": {"ordre": 3}},
            "unknown option of univariate statistic 'moments'; allowed: order",
        ),
        ({"knots": 9, "statistic_options": {"knots": 5}}, "['knots'] given both"),
    ],
)
def test_config_names_a_bad_statistic_option(options, named):
    with pytest.raises(ConfigError) as caught:
        parse_config({"objectives": {"regulariser": {"options": options}}})
    (problem,) = caught.value.problems
    assert problem.startswith("objectives.regulariser.options") and named in problem
    assert consistency_problems(parse_config({"objectives": {"regulariser": {"options": {"statistic": "moments"}}}})) == []


# ---------------------------------------------------------------- VICReg


def vicreg_numpy(z: np.ndarray, mu: float, nu: float) -> float:
    std = np.sqrt(z.var(axis=0, ddof=1) + 1e-4)
    cov = np.cov(z, rowvar=False)
    off = cov - np.diag(np.diag(cov))
    return mu * np.maximum(0.0, 1.0 - std).mean() + nu * (off**2).sum() / z.shape[1]


def test_vicreg_matches_numpy_and_combines_shards():
    rng = np.random.default_rng(6)
    z = rng.normal(size=(50, 7)) * rng.uniform(0.2, 1.5, size=7) + rng.normal(size=7)
    z[:, 3] = 0.5 * z[:, 1] + 0.1 * z[:, 3]  # correlated, low-variance coordinate
    zt = torch.from_numpy(z)
    assert REGULARISERS.get("vicreg") is VICReg
    assert vicreg(zt).item() == pytest.approx(vicreg_numpy(z, 25.0, 1.0), rel=1e-10)
    assert VICReg(variance_weight=2.0, covariance_weight=3.0)(zt.view(5, 10, 7)).item() == (
        pytest.approx(vicreg_numpy(z, 2.0, 3.0), rel=1e-10)
    )
    local_moments = {}
    vicreg(zt[:20], reduce=lambda m, n: local_moments.update(m=m, n=n) or (m, n))
    combine = lambda m, n: ((n * m + 20 * local_moments["m"]) / (n + 20), n + 20)  # noqa: E731
    assert vicreg(zt[20:], reduce=combine).item() == pytest.approx(vicreg(zt).item(), rel=1e-12)


# ---------------------------------------------------------------- transport


def test_rotation_reference_matches_symmetry_layout(symmetry):
    # Precondition of the transport tests: the hand-built ρ and U1Symmetry agree.
    for phi in (0.0, 0.7, 4.1):
        np.testing.assert_allclose(symmetry.matrix(torch.tensor(phi, dtype=torch.float64)).numpy(), rho(phi), atol=1e-12)


def test_transport_loss_matches_naive_pairwise_loop(symmetry, masked_batch):
    z, phi = masked_batch
    c_r, _, pairs = naive_similarities(z.numpy(), phi.numpy())
    expected = np.mean(1 - c_r[pairs > 0])
    assert OBJECTIVES.get("transport") is transport_loss
    assert transport_loss(z, phi, symmetry).item() == pytest.approx(expected, abs=1e-6, rel=1e-6)


def test_pairwise_similarities_match_naive(symmetry, masked_batch):
    z, phi = masked_batch
    c_r, c_i, pairs = pairwise_similarities(z, phi, symmetry)
    naive_r, naive_i, naive_pairs = naive_similarities(z.numpy(), phi.numpy())
    np.testing.assert_array_equal(pairs.numpy(), naive_pairs)
    np.testing.assert_allclose(c_r.numpy(), naive_r, atol=1e-6)  # NaN where naive is NaN
    np.testing.assert_allclose(c_i.numpy(), naive_i, atol=1e-6)
    assert np.isnan(c_r[:2].numpy()).all() and (pairs[:2] == 0).all()


def test_equivariant_tokens_have_zero_transport_loss(symmetry):
    rng = np.random.default_rng(7)
    phi = rng.uniform(0, 2 * np.pi, size=(4, 9))
    phi[:, ::4] = np.nan
    v = rng.normal(size=(4, 8))
    scale = rng.uniform(0.5, 3.0, size=(4, 9, 1))  # magnitudes are free; directions transport
    z = np.stack([[rho(p) @ vb if np.isfinite(p) else vb for p in pb] for pb, vb in zip(phi, v, strict=True)])
    z, phi = torch.from_numpy(z * scale), torch.from_numpy(phi)
    assert transport_loss(z, phi, symmetry).item() == pytest.approx(0.0, abs=1e-12)
    c_r, c_i, _ = pairwise_similarities(z, phi, symmetry)
    torch.testing.assert_close(c_r, torch.ones(4, dtype=torch.float64))
    assert (c_i < 0.99).all()  # without transport the same tokens are far from aligned


def test_transport_gradients_stay_finite_with_nan_phases_and_zero_tokens(symmetry, masked_batch):
    z, phi = masked_batch
    z = z.clone().float()
    z[2, 0] = 0.0  # a zero vector with a defined phase
    phi = phi.float()
    phi[2, 0] = 1.0
    z.requires_grad_(True)
    loss = transport_loss(z, phi, symmetry)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(z.grad).all()
    invalid = ~torch.isfinite(phi)
    assert (z.grad[invalid] == 0).all() and (z.grad[~invalid].abs().sum() > 0)


def test_transport_loss_without_valid_pairs_is_a_differentiable_zero(symmetry):
    z = torch.randn(3, 5, 8, requires_grad=True)
    phi = torch.full((3, 5), float("nan"))
    phi[1, 2] = 0.4  # one valid token: still no pair
    loss = transport_loss(z, phi, symmetry)
    loss.backward()
    assert loss.item() == 0.0 and (z.grad == 0).all()


def test_transport_rejects_mismatched_shapes(symmetry):
    with pytest.raises(ValueError, match="same B and T"):
        transport_loss(torch.randn(2, 5, 8), torch.zeros(2, 4), symmetry)


# ---------------------------------------------------------------- prediction


class ShiftPredictor(nn.Module):
    """Stand-in: predicts token t as 2·z_{t−1} (+ a learnable offset), records the cutoffs."""

    def __init__(self, dim: int):
        super().__init__()
        self.offset = nn.Parameter(torch.zeros(dim))
        self.seen_cutoff = None

    def forward(self, z: torch.Tensor, cutoff: torch.Tensor) -> torch.Tensor:
        self.seen_cutoff = cutoff
        return 2 * z.roll(1, dims=1) + self.offset


def test_prediction_loss_is_the_mse_at_the_token_after_the_cutoff():
    z = torch.randn(4, 6, 3, dtype=torch.float64)
    cutoff = torch.tensor([0, 4, 2, 1])
    predictor = ShiftPredictor(3).double()
    expected = np.mean([((2 * z[b, c] - z[b, c + 1]) ** 2).mean().item() for b, c in enumerate(cutoff.tolist())])
    assert OBJECTIVES.get("prediction") is prediction_loss
    assert prediction_loss(predictor, z, cutoff).item() == pytest.approx(expected, rel=1e-12)
    assert predictor.seen_cutoff is cutoff
    with pytest.raises(ValueError, match="cutoffs must lie in"):
        prediction_loss(predictor, z, torch.tensor([0, 5, 2, 1]))


@pytest.mark.parametrize("stop_gradient", [False, True])
def test_prediction_stop_gradient_detaches_only_the_target(stop_gradient):
    z = torch.randn(2, 5, 3, requires_grad=True)
    cutoff = torch.tensor([1, 3])
    prediction_loss(lambda x, c: 0 * x + 1.0, z, cutoff, stop_gradient=stop_gradient).backward()
    expected = torch.zeros(2, 5, 3)
    if not stop_gradient:  # d/dz of mean((1 − z_{c+1})²) over 2 records × 3 dims
        expected[[0, 1], [2, 4]] = -2 * (1 - z.detach()[[0, 1], [2, 4]]) / 6
    torch.testing.assert_close(z.grad, expected)


def test_sample_cutoffs_cover_the_admissible_indices():
    gen = torch.Generator().manual_seed(8)
    cutoffs = sample_cutoffs(3000, 6, gen)
    assert cutoffs.shape == (3000,) and cutoffs.dtype == torch.int64
    counts = torch.bincount(cutoffs, minlength=5)
    assert counts.numel() == 5 and (counts > 500).all()  # uniform over {0, …, 4}: ~600 each
    again = sample_cutoffs(10, 6, torch.Generator().manual_seed(8))
    torch.testing.assert_close(again, cutoffs[:10])
    with pytest.raises(ValueError, match="tokens >= 2"):
        sample_cutoffs(4, 1, gen)


# ---------------------------------------------------------------- transport on a torus

TORUS = "2x(0,0)+2x(1,0)+1x(0,1)+1x(1,1)+1x(2,-1)"  # K = 2 + 4 + 2 + 2 + 2 = 12
TORUS_BLOCKS = [((0, 0), 2), ((1, 0), 2), ((0, 1), 1), ((1, 1), 1), ((2, -1), 1)]


def torus_similarities(z: np.ndarray, phi: np.ndarray):
    """Per record: mean c_R over ordered valid pairs, summed block by block in float64.

    c_R = Σ_blocks ⟨R(⟨n, φ_u − φ_t⟩) ẑ_t[block], ẑ_u[block]⟩, R the 2×2 rotation (identity on
    invariants); a token is valid when both coordinates are finite.
    """
    means = []
    for record, phases in zip(z, phi, strict=True):
        unit = record / np.linalg.norm(record, axis=1, keepdims=True)
        valid = [t for t in range(len(phases)) if np.isfinite(phases[t]).all()]
        values = []
        for t in valid:
            for u in valid:
                if t == u:
                    continue
                total, start = 0.0, 0
                for n, copies in TORUS_BLOCKS:
                    angle = float(np.dot(n, phases[u] - phases[t]))
                    c, s = np.cos(angle), np.sin(angle)
                    rotation = np.eye(1) if not any(n) else np.array([[c, -s], [s, c]])
                    width = rotation.shape[0]
                    for _ in range(copies):
                        block = slice(start, start + width)
                        total += rotation @ unit[t, block] @ unit[u, block]
                        start += width
                values.append(total)
        means.append(np.mean(values) if values else np.nan)
    return np.array(means)


def test_torus_transport_loss_is_the_naive_sum_over_blocks():
    from cyclejepa.symmetry import TorusSymmetry

    rng = np.random.default_rng(11)
    z = rng.normal(size=(4, 6, 12))
    phi = rng.uniform(0, 2 * np.pi, size=(4, 6, 2))
    phi[rng.random((4, 6)) < 0.25, 1] = np.nan  # respiration undefined: the token drops out
    phi[0, :, 0] = np.nan  # a record without a defined cardiac phase
    c_r = torus_similarities(z, phi)
    expected = np.mean(1 - c_r[np.isfinite(c_r)])
    torus = TorusSymmetry(TORUS)
    loss = transport_loss(torch.from_numpy(z), torch.from_numpy(phi), torus)
    assert loss.item() == pytest.approx(expected, abs=1e-10)
    transported, _, pairs = pairwise_similarities(torch.from_numpy(z), torch.from_numpy(phi), torus)
    np.testing.assert_allclose(transported.numpy(), c_r, atol=1e-10)
    assert pairs[0] == 0


def test_one_coordinate_as_t_by_1_is_bit_identical(symmetry, masked_batch):
    from cyclejepa.symmetry import TorusSymmetry

    z, phi = masked_batch
    z = z.float().requires_grad_(True)
    phi = phi.float()
    reference = transport_loss(z, phi, symmetry)
    (reference_grad,) = torch.autograd.grad(reference, z)
    rank_one_torus = TorusSymmetry("2x(0)+2x(1)+1x(3)")  # rank 1, g of shape (..., 1)
    cases = ((phi[..., None], symmetry), (phi[..., None], rank_one_torus), (phi, rank_one_torus))
    for phases, group in cases:
        loss = transport_loss(z, phases, group)
        (grad,) = torch.autograd.grad(loss, z)
        assert torch.equal(loss, reference) and torch.equal(grad, reference_grad)
    stacked, flat = (pairwise_similarities(z, p, symmetry) for p in (phi[..., None], phi))
    for a, b in zip(stacked, flat, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)  # bit for bit, NaN too


def test_transport_names_a_phase_coordinate_count_the_symmetry_does_not_take(symmetry):
    from cyclejepa.symmetry import TorusSymmetry

    with pytest.raises(ValueError, match=r"phi of shape \(2, 5, 2\) has 2 phase coordinate.*rank 1"):
        transport_loss(torch.randn(2, 5, 8), torch.zeros(2, 5, 2), symmetry)
    with pytest.raises(ValueError, match=r"phi of shape \(2, 5\) has 1 phase coordinate.*rank 2"):
        transport_loss(torch.randn(2, 5, 12), torch.zeros(2, 5), TorusSymmetry(TORUS))
