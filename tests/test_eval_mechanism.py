"""Transport gain, G1 gate and latent geometry against closed forms and naive float64 loops."""

import math
import sys

import numpy as np
import pytest
import torch

from cyclejepa.evaluation.bootstrap import patient_bootstrap_weights
from cyclejepa.evaluation.geometry import (
    dephase,
    fundamental_amplitude,
    orbit_coherence,
    phase_ring_figure,
    umap_figure,
)
from cyclejepa.evaluation.mechanism import (
    g1_gate,
    record_similarities,
    shuffle_phases,
    transport_gain,
)
from cyclejepa.symmetry import U1Symmetry

SPEC = "2x0+3x1+2x2"  # K = 12: two invariants, c_1 = 3, c_2 = 2
TWO_PI = 2 * math.pi


def random_phases(rng, n, t, nan_fraction=0.2):
    """Uniform phases with NaNs; record 0 keeps one valid token (no pair), record 1 none."""
    phases = rng.uniform(0, TWO_PI, (n, t))
    phases[rng.random((n, t)) < nan_fraction] = np.nan
    phases[0, 1:] = np.nan
    phases[1] = np.nan
    return phases


def act(symmetry, v, phases):
    """ρ(φ_t) v per token (v broadcast over T); tokens without a phase get v itself."""
    with torch.no_grad():
        return symmetry.act(torch.as_tensor(v), torch.as_tensor(np.nan_to_num(phases))).numpy()


def block_rotation(symmetry, phi):
    """ρ(φ) built from the spectrum's layout by hand: 1 on invariants, R(nφ) on each pair."""
    blocks = []
    for term in symmetry.spectrum.terms:
        n = term.frequency
        for _ in range(term.multiplicity):
            if n == 0:
                blocks.append(np.eye(1))
            else:
                c, s = math.cos(n * phi), math.sin(n * phi)
                blocks.append(np.array([[c, -s], [s, c]]))
    size = sum(len(b) for b in blocks)
    out, start = np.zeros((size, size)), 0
    for b in blocks:
        out[start : start + len(b), start : start + len(b)] = b
        start += len(b)
    q = symmetry.basis.matrix()
    return out if q is None else q.double().detach().numpy() @ out @ q.double().detach().numpy().T


def naive_pair_similarities(tokens, phases, symmetry):
    """Per record, the (c_R, c_I) of every ordered valid pair, by explicit rotation matrices."""
    out = []
    for z, phi in zip(np.asarray(tokens, np.float64), phases, strict=True):
        unit = z / np.linalg.norm(z, axis=-1, keepdims=True)
        valid = np.flatnonzero(np.isfinite(phi))
        out.append(
            [
                (block_rotation(symmetry, phi[b] - phi[a]) @ unit[a] @ unit[b], unit[a] @ unit[b])
                for a in valid
                for b in valid
                if a != b
            ]
        )
    return out


# --- transport gain ---------------------------------------------------------------------------


@pytest.mark.parametrize("basis", ["canonical", "householder"])
def test_gain_matches_naive_all_pairs_loop(basis):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    symmetry = U1Symmetry(SPEC, basis=basis).double()
    tokens = rng.normal(size=(6, 9, 12)).astype(np.float32)
    phases = random_phases(rng, 6, 9)
    naive = naive_pair_similarities(tokens, phases, symmetry)
    pairs = np.concatenate([np.reshape(p, (-1, 2)) for p in naive])
    records = record_similarities(tokens, phases, symmetry)
    np.testing.assert_array_equal(records.pairs, [len(p) for p in naive])
    scored = records.pairs > 0
    naive_means = np.array([np.mean(p, 0) for p in naive if p])
    np.testing.assert_allclose(records.c_r[scored], naive_means[:, 0], atol=1e-10)
    np.testing.assert_allclose(records.c_i[scored], naive_means[:, 1], atol=1e-10)
    assert np.isnan(records.c_r[~scored]).all() and (~scored).sum() == 2
    result = transport_gain(tokens, phases, symmetry)
    c_r, c_i = pairs.T
    assert result.mean_gain == pytest.approx(np.mean(c_r - c_i), abs=1e-6)
    assert result.gain_fraction == pytest.approx(np.mean(c_r - c_i) / np.mean(1 - c_i), abs=1e-6)
    assert (result.mean_c_r, result.mean_c_i) == pytest.approx((c_r.mean(), c_i.mean()), abs=1e-6)
    assert (result.pairs, result.records, result.records_without_pairs) == (len(pairs), 4, 2)


def equivariant_tokens(rng, symmetry, n, t, invariant_scale=0.1):
    """z_t = ρ(φ_t) v_r; in canonical coordinates v_r's n = 1 part is a per-record multiple of
    one fixed direction and its invariant part is small."""
    spectrum = symmetry.spectrum
    first = spectrum.harmonic_slices[1]
    y = rng.normal(size=(n, 1, spectrum.dim))
    y[..., spectrum.harmonic_slices[0]] *= invariant_scale
    y[..., first] = rng.uniform(0.5, 2.0, (n, 1, 1)) * rng.normal(size=first.stop - first.start)
    with torch.no_grad():
        v = symmetry.basis.from_canonical(torch.from_numpy(y)).numpy()
    phases = random_phases(rng, n, t)
    return act(symmetry, v, phases), phases, v[:, 0]


def test_equivariant_encoder_has_unit_transport_and_passes_g1():
    rng = np.random.default_rng(1)
    symmetry = U1Symmetry(SPEC)
    tokens, phases, v = equivariant_tokens(rng, symmetry, 40, 125)
    records = record_similarities(tokens, phases, symmetry)
    scored = records.pairs > 0
    np.testing.assert_allclose(records.c_r[scored], 1.0, atol=1e-12)
    # Closed form of c_I: invariant share + Σ_n share_n (|Σ_t e^{inφ_t}|² − m) / (m(m − 1)).
    unit = v / np.linalg.norm(v, axis=-1, keepdims=True)
    expected = []
    for u, phi in zip(unit[scored], phases[scored], strict=True):
        phi = phi[np.isfinite(phi)]
        m = len(phi)
        c_i = np.sum(u[symmetry.spectrum.harmonic_slices[0]] ** 2)
        for n, block in symmetry.spectrum.harmonic_slices.items():
            if n:
                resultant = abs(np.exp(1j * n * phi).sum()) ** 2
                c_i += np.sum(u[block] ** 2) * (resultant - m) / (m * (m - 1))
        expected.append(c_i)
    np.testing.assert_allclose(records.c_i[scored], expected, atol=1e-10)
    assert transport_gain(tokens, phases, symmetry).gain_fraction == pytest.approx(1.0, abs=1e-12)

    gate = g1_gate(tokens, phases, symmetry, np.arange(40) // 2, replicates=200)
    # Invariant parts add the same amount to c_R and c_I whatever the phases; the harmonic
    # parts of shuffled pairs average cos(n(δ_t − δ_t')), δ = φ − ψ uniform: O(1/m) noise.
    assert abs(gate.shuffled.gain_fraction) < 0.02
    assert gate.true.gain_fraction == pytest.approx(1.0, abs=1e-12)
    assert gate.interval_excludes_zero and gate.shuffled_fraction_within_tolerance and gate.passed
    assert gate.paired_difference.low > 0.9 and gate.patients == 20


def test_phase_blind_encoders_fail_g1_for_the_right_reason():
    rng = np.random.default_rng(2)
    symmetry = U1Symmetry(SPEC)
    phases = random_phases(rng, 40, 60)
    patients = np.arange(40) // 2
    # Invariant content plus isotropic noise: transport neither helps nor hurts.
    invariant = np.zeros((40, 1, 12))
    invariant[..., :2] = rng.normal(size=(40, 1, 2))
    noisy = invariant + 0.3 * rng.normal(size=(40, 60, 12))
    assert abs(transport_gain(noisy, phases, symmetry).mean_gain) < 0.01
    gate = g1_gate(noisy, phases, symmetry, patients, replicates=200)
    assert gate.paired_difference.low < 0 < gate.paired_difference.high
    assert not gate.interval_excludes_zero and gate.shuffled_fraction_within_tolerance
    assert not gate.passed
    # A constant harmonic vector per record: transporting it by any phases scrambles it, so the
    # shuffled gain is about −(harmonic share) against a near-zero headroom E[1 − c_I].
    constant = rng.normal(size=(40, 1, 12)) + 0.05 * rng.normal(size=(40, 60, 12))
    gate = g1_gate(constant, phases, symmetry, patients, replicates=200)
    assert gate.shuffled.gain_fraction < -1 and not gate.shuffled_fraction_within_tolerance
    assert not gate.passed


def test_g1_of_one_patient_is_not_testable_rather_than_passed():
    rng = np.random.default_rng(1)
    symmetry = U1Symmetry(SPEC)
    tokens, phases, _ = equivariant_tokens(rng, symmetry, 12, 60)
    one = g1_gate(tokens, phases, symmetry, np.zeros(12, int), replicates=50)
    # Every resample draws the one patient: each replicate is the sample, the interval a point.
    assert one.paired_difference.low == pytest.approx(one.paired_difference.point, abs=1e-12)
    assert one.paired_difference.high == pytest.approx(one.paired_difference.point, abs=1e-12)
    assert one.patients == 1 and one.passed is None and one.interval_excludes_zero is None
    assert not one.paired_difference.testable and not one.mean_gain.testable
    assert one.shuffled_fraction_within_tolerance  # the tolerance condition is still measured
    two = g1_gate(tokens, phases, symmetry, np.arange(12) % 2, replicates=50)
    assert two.passed is True and two.paired_difference.testable and two.patients == 2


def test_every_patient_clustered_interval_knows_when_it_is_not_testable():
    from cyclejepa.evaluation.bootstrap import percentile_interval
    from cyclejepa.evaluation.hr_strata import hr_stratified_auroc
    from cyclejepa.evaluation.probe import clustered_bootstrap

    rng = np.random.default_rng(6)
    Y = np.array([[1, 0], [0, 1], [1, 1], [0, 0]] * 5)
    scores = rng.normal(size=Y.shape)
    assert not clustered_bootstrap(Y, scores, np.zeros(20), replicates=30).testable
    assert clustered_bootstrap(Y, scores, np.arange(20) % 3, replicates=30).testable
    assert percentile_interval(0.5, np.ones(3)).testable  # no clusters given: nothing to judge
    hr = np.linspace(50, 100, 20)
    strata = hr_stratified_auroc({"a": scores, "b": -scores}, Y, hr, bins=[50, 75, 100.5],
                                 groups=np.where(hr < 75, 0, np.arange(20)), replicates=30)  # fmt: skip
    assert not strata.strata[0].gap_ci.testable and strata.strata[1].gap_ci.testable


# --- shuffling and the clustered bootstrap ----------------------------------------------------


def test_shuffle_phases_permutes_valid_phases_within_records():
    rng = np.random.default_rng(3)
    phases = random_phases(rng, 5, 50)
    shuffled = shuffle_phases(phases, seed=7)
    np.testing.assert_array_equal(np.isnan(shuffled), np.isnan(phases))
    for before, after in zip(phases, shuffled, strict=True):
        np.testing.assert_array_equal(np.sort(before[np.isfinite(before)]), np.sort(after[np.isfinite(after)]))
    moved = np.isfinite(phases) & (shuffled != phases)
    assert moved.sum() > 0.8 * np.isfinite(phases[2:]).sum()
    np.testing.assert_array_equal(shuffle_phases(phases, seed=7), shuffled)
    assert not np.array_equal(shuffle_phases(phases, seed=8), shuffled, equal_nan=True)
    as_tensor = shuffle_phases(torch.from_numpy(phases), seed=7)
    assert isinstance(as_tensor, torch.Tensor)
    np.testing.assert_array_equal(as_tensor.numpy(), shuffled)
    # On a torus the coordinates of a token move together; a partly defined token stays put.
    torus = np.stack([phases, 2 * phases], -1)
    torus[4, 3] = [0.5, np.nan]
    moved = shuffle_phases(torus, seed=1)
    together = np.ones(phases.shape, bool)
    together[4, 3] = False
    np.testing.assert_array_equal(moved[together][:, 1], 2 * moved[together][:, 0])
    np.testing.assert_array_equal(moved[4, 3], [0.5, np.nan])


def test_clustered_intervals_match_a_naive_patient_resampling_loop():
    rng = np.random.default_rng(4)
    symmetry = U1Symmetry(SPEC)
    tokens = rng.normal(size=(9, 8, 12))
    phases = random_phases(rng, 9, 8)
    patients = np.array(["p3", "p3", "p1", "p7", "p7", "p7", "p2", "p9", "p1"])
    seed, replicates = 5, 9
    gate = g1_gate(tokens, phases, symmetry, patients, seed=seed, replicates=replicates)

    shuffle_seed, bootstrap_seed = np.random.SeedSequence(seed).spawn(2)
    true = naive_pair_similarities(tokens, phases, symmetry)
    shuffled = naive_pair_similarities(tokens, shuffle_phases(phases, shuffle_seed), symmetry)
    gain = [[c_r - c_i for c_r, c_i in record] for record in true]
    difference = [[g - (c_r - c_i) for g, (c_r, c_i) in zip(a, b, strict=True)] for a, b in zip(gain, shuffled, strict=True)]
    ids = np.unique(patients)
    draws = np.random.default_rng(bootstrap_seed).integers(0, len(ids), (replicates, len(ids)))
    naive_difference, naive_gain = [], []
    for row in draws:
        records = [r for k in row for r in np.flatnonzero(patients == ids[k])]
        naive_difference.append(np.mean([d for r in records for d in difference[r]]))
        naive_gain.append(np.mean([g for r in records for g in gain[r]]))
    low, high = np.percentile(naive_difference, [2.5, 97.5])
    paired = gate.paired_difference
    assert (paired.low, paired.high) == pytest.approx((low, high), abs=1e-9)
    low, high = np.percentile(naive_gain, [2.5, 97.5])
    assert (gate.mean_gain.low, gate.mean_gain.high) == pytest.approx((low, high), abs=1e-9)
    assert gate.mean_gain.point == pytest.approx(np.mean([g for r in gain for g in r]), abs=1e-9)
    weights = patient_bootstrap_weights(patients, replicates, bootstrap_seed)
    own_patient = np.searchsorted(ids, patients)
    np.testing.assert_array_equal(weights, (draws[:, :, None] == own_patient).sum(1))


# --- latent geometry --------------------------------------------------------------------------


def test_dephase_undoes_the_action_and_blanks_undefined_tokens():
    rng = np.random.default_rng(5)
    symmetry = U1Symmetry(SPEC)
    tokens, phases, v = equivariant_tokens(rng, symmetry, 4, 10)
    dephased = dephase(tokens, phases, symmetry).numpy()
    valid = np.isfinite(phases)
    expected = np.broadcast_to(v[:, None], tokens.shape)[valid]
    np.testing.assert_allclose(dephased[valid], expected, atol=1e-12)
    assert np.isnan(dephased[~valid]).all()


@pytest.mark.parametrize("basis", ["canonical", "householder"])
def test_fundamental_amplitude_closed_forms(basis):
    rng = np.random.default_rng(6)
    torch.manual_seed(6)
    symmetry = U1Symmetry(SPEC, basis=basis).double()
    first = symmetry.spectrum.harmonic_slices[1]
    canonical = rng.normal(size=(12, 1, 12))  # y_r, canonical coordinates of v_r = Q y_r
    q = symmetry.basis.matrix()
    v = canonical if q is None else canonical @ q.detach().numpy().T
    block_norms = np.linalg.norm(canonical[:, 0, first].reshape(12, -1, 2), axis=-1)
    phases = random_phases(rng, 12, 30)
    # Equivariant: the dephased mean is v_r itself.
    equivariant = act(symmetry, v, phases)
    scored = [0, *range(2, 12)]  # record 1 has no valid token
    expected = block_norms[scored].mean()
    amplitude = fundamental_amplitude(equivariant, phases, symmetry)
    assert amplitude == pytest.approx(expected, abs=1e-12)
    # Phase-blind constant v_r: the mean of R(−φ_t) shrinks every pair by |mean_t e^{iφ_t}|.
    constant = np.broadcast_to(v, (12, 30, 12))
    resultant = [abs(np.exp(1j * phi[np.isfinite(phi)]).mean()) for phi in phases[scored]]
    expected = np.mean(np.array(resultant) * block_norms[scored].mean(-1))
    assert fundamental_amplitude(constant, phases, symmetry) == pytest.approx(expected, abs=1e-12)


def bin_centred_tokens(rng, offsets, bins, per_bin=3, records=4):
    """Tokens whose n = 1 pairs in bin b are a_j R(θ_bj) e_x (other coordinates random), plus
    undefined-phase tokens with huge n = 1 values that must be ignored."""
    c1 = offsets.shape[1]
    amplitude = rng.uniform(0.5, 2.0, c1)
    width = TWO_PI / bins
    bin_of = np.repeat(np.arange(bins), per_bin)
    phases = np.tile(width * (bin_of + rng.uniform(0.05, 0.95, bin_of.shape)), (records, 1))
    tokens = rng.normal(size=(*phases.shape, 2 + 2 * c1 + 4))
    angle = offsets[bin_of]  # (T, c1)
    pairs = amplitude[:, None] * np.stack([np.cos(angle), np.sin(angle)], -1)
    tokens[:, :, 2 : 2 + 2 * c1] = pairs.reshape(len(bin_of), -1)
    phases[:, :2] = np.nan
    tokens[:, :2, 2 : 2 + 2 * c1] = 1e3
    return tokens, phases, amplitude


def test_orbit_coherence_of_incoherent_blocks_matches_the_resultant_length():
    rng = np.random.default_rng(7)
    symmetry = U1Symmetry("2x0+5x1+2x2")
    offsets = rng.uniform(0, TWO_PI, (8, 5))
    tokens, phases, amplitude = bin_centred_tokens(rng, offsets, 8)
    result = orbit_coherence(tokens, phases, symmetry, bins=8)
    weights = amplitude**2
    delta = offsets - offsets[0]
    overlap = (weights * np.exp(1j * delta)).sum(-1) / math.sqrt(weights.sum())
    np.testing.assert_allclose(result.cosine, overlap.real, atol=1e-10)
    np.testing.assert_allclose(result.sine, overlap.imag, atol=1e-10)
    kappa = np.abs(overlap) / math.sqrt(weights.sum())
    np.testing.assert_allclose(result.kappa, kappa, atol=1e-10)
    assert result.kappa[0] == pytest.approx(1.0) and all(0 <= k <= 1 + 1e-12 for k in result.kappa)
    assert result.mean_kappa == pytest.approx(kappa[1:].mean()) and result.mean_kappa < 0.9
    assert result.tokens == [4] + [12] * 7  # 4 records x 3 tokens, 2 undefined in bin 0


def test_equivariant_encoder_is_coherent_in_every_bin_in_any_basis():
    rng = np.random.default_rng(8)
    torch.manual_seed(8)
    for basis in ["canonical", "householder"]:
        symmetry = U1Symmetry(SPEC, basis=basis).double()
        tokens, phases, _ = equivariant_tokens(rng, symmetry, 20, 40)
        result = orbit_coherence(tokens, phases, symmetry, bins=8)
        np.testing.assert_allclose(result.kappa, 1.0, atol=1e-10)
        # The loop turns counter-clockwise: bin b sits near the angle of its centre phase.
        angles = np.angle(np.array(result.cosine) + 1j * np.array(result.sine))
        np.testing.assert_allclose(np.cos(angles - TWO_PI / 8 * np.arange(8)), 1.0, atol=0.05)


def test_orbit_coherence_rejects_empty_bins_and_missing_harmonics():
    symmetry = U1Symmetry(SPEC)
    tokens = np.ones((1, 4, 12))
    with pytest.raises(ValueError, match="phase bins"):
        orbit_coherence(tokens, np.array([[0.1, 0.2, 3.5, np.nan]]), symmetry, bins=8)
    with pytest.raises(ValueError, match="harmonic 3"):
        fundamental_amplitude(tokens, np.zeros((1, 4)), symmetry, harmonic=3)


# --- figures (smoke checks paired with the plotted numbers) -----------------------------------


def test_phase_ring_figure_plots_the_orbit_overlaps(tmp_path):
    rng = np.random.default_rng(9)
    symmetry = U1Symmetry(SPEC)
    equivariant = equivariant_tokens(rng, symmetry, 20, 60)[:2]
    blind = (rng.normal(size=(20, 60, 12)), equivariant[1])
    runs = {"equivariant": (*equivariant, symmetry), "blind": (*blind, symmetry)}
    path = tmp_path / "ring.png"
    figure = phase_ring_figure(runs, bins=24, path=path)
    assert path.stat().st_size > 1000
    axes = figure.axes
    assert len(axes) == 2 * 2 + 1  # two rows of two runs, one colour bar
    for column, (tokens, phases, _) in enumerate(runs.values()):
        result = orbit_coherence(tokens, phases, symmetry, bins=24)
        points = np.column_stack([result.cosine, result.sine])
        np.testing.assert_allclose(axes[column].collections[0].get_offsets(), points)
        rms = math.sqrt(np.mean(np.sum(points**2, -1)))
        np.testing.assert_allclose(axes[2 + column].collections[0].get_offsets(), points / rms)
        assert len(axes[column].lines[0].get_xdata()) == 25  # closed loop
    assert axes[0].get_xlim() == axes[1].get_xlim()


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_umap_figure_embeds_a_seeded_subsample_coloured_by_phase(tmp_path):
    pytest.importorskip("umap", reason="umap-learn is not installed (the PCA fallback has its own test)")
    rng = np.random.default_rng(10)
    symmetry = U1Symmetry(SPEC)
    tokens, phases, _ = equivariant_tokens(rng, symmetry, 10, 40)
    path = tmp_path / "umap.png"
    runs = {"equivariant": (tokens, phases), "blind": (rng.normal(size=tokens.shape), phases)}
    figure = umap_figure(runs, max_points=150, seed=0, path=path)
    assert path.stat().st_size > 1000 and len(figure.axes) == 3
    valid_phases = np.sort(phases[np.isfinite(phases)])
    colours = [axis.collections[0].get_array() for axis in figure.axes[:2]]
    for axis, colour in zip(figure.axes[:2], colours, strict=True):
        assert "UMAP" in axis.get_title() and len(colour) == 150
        assert np.isin(colour, valid_phases).all()
    np.testing.assert_array_equal(colours[0], colours[1])  # same tokens in both runs


def test_umap_figure_falls_back_to_principal_components_and_says_so(monkeypatch):
    from sklearn.decomposition import PCA

    monkeypatch.setitem(sys.modules, "umap", None)  # import umap -> ImportError
    rng = np.random.default_rng(11)
    tokens = rng.normal(size=(3, 20, 12)) * np.linspace(3, 0.1, 12)
    phases = rng.uniform(0, TWO_PI, (3, 20))
    figure = umap_figure({"run": (tokens, phases)}, max_points=1000)
    axis = figure.axes[0]
    assert "PCA" in axis.get_title() and "umap-learn not installed" in axis.get_title()
    expected = PCA(2).fit_transform(tokens.reshape(-1, 12).astype(np.float32))
    plotted = axis.collections[0].get_offsets()
    np.testing.assert_allclose(np.abs(plotted), np.abs(expected), atol=1e-4)


def test_effective_rank_against_closed_forms():
    from cyclejepa.evaluation.geometry import effective_rank

    rng = np.random.default_rng(0)
    line = rng.standard_normal((500, 1)) * rng.standard_normal((1, 16))
    assert effective_rank(line) == pytest.approx(1.0, abs=1e-6)
    # centred tokens with singular values (3, 1, 0, ...): p = (3/4, 1/4), rank = exp(H(p))
    basis = np.linalg.qr(rng.standard_normal((16, 16)))[0][:, :2]
    centred = rng.standard_normal((400, 2))
    u = np.linalg.qr(centred - centred.mean(0))[0]  # orthonormal columns with zero mean
    tokens = (u * [3.0, 1.0]) @ basis.T
    p = np.array([0.75, 0.25])
    assert effective_rank(tokens) == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-3)
    iso = rng.standard_normal((20_000, 8))
    assert effective_rank(iso) == pytest.approx(8.0, rel=0.01)
    phases = np.full((20_000,), np.nan)
    phases[:3] = 0.0
    assert effective_rank(iso, phases) <= 3.0


# ---------------------------------------------------------------- two cyclic coordinates

TORUS_SPEC = "2x(0,0)+2x(1,0)+2x(0,1)+1x(1,1)"  # K = 2 + 4 + 4 + 2 = 12
COLUMNS = {0: [0, 1, 2, 3, 4, 5], 1: [0, 1, 6, 7, 8, 9]}  # invariants + the k·e_c pairs


def naive_view_gain(y: np.ndarray, phases: np.ndarray) -> tuple[float, float]:
    """Pair-weighted ḡ and g_f of canonical sub-vectors y (N, T, 6) = 2 invariants + 2 pairs at
    harmonic 1, by explicit loops over ordered pairs of valid tokens, in float64."""
    gains, headroom = [], []
    for record, phi in zip(y, phases, strict=True):
        unit = record / np.linalg.norm(record, axis=1, keepdims=True)
        valid = [t for t in range(len(phi)) if np.isfinite(phi[t])]
        for t in valid:
            for u in valid:
                if t == u:
                    continue
                c, s = np.cos(phi[u] - phi[t]), np.sin(phi[u] - phi[t])
                moved = unit[t].copy()
                for a in (2, 4):
                    moved[a : a + 2] = np.array([[c, -s], [s, c]]) @ unit[t, a : a + 2]
                gains.append(moved @ unit[u] - unit[t] @ unit[u])
                headroom.append(1 - unit[t] @ unit[u])
    return float(np.mean(gains)), float(np.sum(gains) / np.sum(headroom))


def torus_corpus(seed=0, n=12, t=10):
    """Canonical tokens whose (1,0) pairs rotate with φ_1 (cardiac, equivariant), whose (0,1)
    pairs are noise unrelated to φ_2 (respiratory), phases (n, t, 2) with NaNs, and the
    per-record (1,0) pairs v (n, 2, 2) that the cardiac phase rotates."""
    rng = np.random.default_rng(seed)
    phases = rng.uniform(0, TWO_PI, (n, t, 2))
    phases[rng.random((n, t)) < 0.2, 1] = np.nan
    y = rng.normal(size=(n, t, 12))
    y[..., :2] = rng.normal(size=(n, 1, 2))  # invariants constant within a record
    v = rng.normal(size=(n, 2, 2))
    c, s = np.cos(phases[..., 0]), np.sin(phases[..., 0])
    for pair in range(2):
        x0, x1 = v[:, None, pair, 0], v[:, None, pair, 1]
        y[..., 2 + 2 * pair] = c * x0 - s * x1
        y[..., 3 + 2 * pair] = s * x0 + c * x1
    return y, phases, v


@pytest.mark.parametrize("basis", ["canonical", "householder"])
def test_per_coordinate_gain_matches_naive_loops_on_each_coordinate(basis):
    from cyclejepa.evaluation.mechanism import coordinate_view, per_coordinate
    from cyclejepa.symmetry import TorusSymmetry

    y, phases, _ = torus_corpus()
    options = {"generator": torch.Generator().manual_seed(1)} if basis == "householder" else {}
    torus = TorusSymmetry(TORUS_SPEC, basis, **options).double()
    q = torus.basis.matrix()
    z = y if q is None else y @ q.detach().numpy().T  # z = Q y: the learned latent
    results = per_coordinate(transport_gain, z, phases, torus, ("cardiac", "respiratory"))
    valid = np.isfinite(phases).all(-1)
    for coordinate, name in enumerate(("cardiac", "respiratory")):
        own = np.where(valid, phases[..., coordinate], np.nan)
        mean_gain, fraction = naive_view_gain(y[..., COLUMNS[coordinate]], own)
        assert results[name].mean_gain == pytest.approx(mean_gain, abs=1e-10)
        assert results[name].gain_fraction == pytest.approx(fraction, abs=1e-10)
        view = coordinate_view(z, phases, torus, coordinate)
        assert str(view.symmetry.spectrum) == "2x0+2x1"
        np.testing.assert_allclose(view.tokens.numpy(), y[..., COLUMNS[coordinate]], atol=1e-10)
    assert results["cardiac"].mean_c_r == pytest.approx(1.0, abs=1e-12)  # equivariant in φ_1
    assert results["cardiac"].gain_fraction > 0.9 and abs(results["respiratory"].gain_fraction) < 0.2
    assert results["cardiac"].pairs == results["respiratory"].pairs  # same valid tokens


def test_per_coordinate_g1_and_loop_amplitude_tell_the_coordinates_apart():
    from cyclejepa.evaluation.mechanism import per_coordinate
    from cyclejepa.symmetry import TorusSymmetry

    y, phases, v = torus_corpus(seed=2, n=16)
    torus = TorusSymmetry(TORUS_SPEC)
    names = ("cardiac", "respiratory")
    ids = np.arange(16)
    gates = per_coordinate(g1_gate, y, phases, torus, names, patient_ids=ids, replicates=200, tolerance=0.1)
    assert gates["cardiac"].passed and gates["cardiac"].paired_difference.point > 0.5
    # the (0,1) pairs are noise: shuffling φ_2 changes their gain by a sampling wobble only
    assert abs(gates["respiratory"].paired_difference.point) < 0.1
    amplitude = per_coordinate(fundamental_amplitude, y, phases, torus, names)
    # Dephased by φ_1 the (1,0) pairs are the constant v: the amplitude is the mean |v| exactly.
    assert amplitude["cardiac"] == pytest.approx(np.linalg.norm(v, axis=-1).mean(), abs=1e-12)
    assert amplitude["respiratory"] < 0.6 * amplitude["cardiac"]


def test_coordinate_view_errors_name_the_problem():
    from cyclejepa.evaluation.mechanism import coordinate_view, per_coordinate
    from cyclejepa.symmetry import TorusSymmetry

    y, phases, _ = torus_corpus()
    with pytest.raises(ValueError, match=r"coordinate 2 of phases \(12, 10, 2\).*rank 2"):
        coordinate_view(y, phases, TorusSymmetry(TORUS_SPEC), 2)
    with pytest.raises(ValueError, match="no term acting on coordinate 1 alone"):
        coordinate_view(y[..., :8], phases, TorusSymmetry("2x(0,0)+2x(1,0)+1x(1,1)"), 1)
    with pytest.raises(ValueError, match="3 names for a rank-2 symmetry"):
        per_coordinate(transport_gain, y, phases, TorusSymmetry(TORUS_SPEC), ("a", "b", "c"))
