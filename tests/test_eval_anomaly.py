"""Anomaly battery: perturbation families, causal phase tracker, causal detectors, metrics."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cyclejepa.evaluation import anomaly as A
from cyclejepa.models import build_model
from cyclejepa.phase import PhaseTrack, phase_from_events
from cyclejepa.registry import DETECTORS
from cyclejepa.symmetry import U1Symmetry

SPECTRUM = "4x0+2x1+2x2+2x3"  # dim 16 = the small encoder width
SAMPLES, TOKENS = 1000, 125
FS, EVENT_FS, PATCH = 100.0, 500.0, 8  # PTB-XL: signals at 100 Hz, R-peaks at 500 Hz, 80 ms tokens


def beats_of(rpeaks):
    """`BeatTimes` at 100 Hz of R-peak indices at 500 Hz."""
    return A.BeatTimes.from_events(rpeaks, event_fs=EVENT_FS, fs=FS)


def token_phases(rpeaks):
    """Causal token phases of R-peak indices at 500 Hz."""
    return A.causal_token_phases(beats_of(rpeaks), TOKENS, PATCH)


def beat_train(n=4, seed=0, noise=0.05):
    """(n, 12, 1000) float32 records of Gaussian QRS (at R) and T (R + 280 ms) waves, and their
    R-peaks at 100 Hz (integer samples, regular per record, RR 70–90 samples)."""
    rng = np.random.default_rng(seed)
    t = np.arange(SAMPLES)
    signals, peaks = [], []
    for _ in range(n):
        r = np.arange(rng.integers(15, 40), SAMPLES, rng.integers(70, 91))
        since = t[None, :] - r[:, None]
        wave = (np.exp(-0.5 * (since / 1.5) ** 2) + 0.3 * np.exp(-0.5 * ((since - 28) / 4) ** 2)).sum(0)
        gains = rng.normal(size=(12, 1))
        signals.append(gains * wave + noise * rng.normal(size=(12, SAMPLES)))
        peaks.append(r)
    return torch.tensor(np.stack(signals), dtype=torch.float32), peaks


def run_family(name, x, peaks100, severity, onset, seed=3):
    beats = beats_of([5 * p for p in peaks100])
    onset = torch.as_tensor(onset).expand(len(x))
    return A.PERTURBATIONS.get(name)(x, severity, onset, beats, np.random.default_rng(seed))


def rise(u):
    return 0.5 * (1 - math.cos(math.pi * min(max(u, 0.0), 1.0)))


# --------------------------------------------------------------------------------------------
# perturbation families


@pytest.mark.parametrize("name", A.FAMILIES)
def test_family_is_the_identity_at_zero_and_never_touches_the_past(name):
    x, peaks = beat_train()
    onset = torch.tensor([400, 333, 512, 610])
    zero = run_family(name, x, peaks, 0.0, onset)
    assert torch.equal(zero.signals, x)
    full, half = run_family(name, x, peaks, 2.0, onset), run_family(name, x, peaks, 0.5, onset)
    assert torch.equal(full.onset, zero.onset) and torch.equal(half.onset, zero.onset)
    assert (full.onset >= onset).all() and (full.onset < SAMPLES).all()
    changed = (full.signals != x).any(1)  # (N, S)
    first_change = changed.int().argmax(1)
    assert changed.any(1).all()
    assert (first_change >= full.onset).all()  # nothing before the family's onset
    assert (first_change - full.onset <= 2).all()  # and it starts there


@pytest.mark.parametrize("severity", [0.5, 1.0, 2.0])
def test_attenuation_scales_by_one_minus_s_over_two_and_a_half(severity):
    x, peaks = beat_train()
    out = run_family("attenuation", x, peaks, severity, 400).signals
    torch.testing.assert_close(out[..., 400:], (1 - severity / 2.5) * x[..., 400:])
    assert torch.equal(out[..., :400], x[..., :400])


def test_channel_dropout_zeroes_ceil_one_and_a_half_s_nested_channels():
    x, peaks = beat_train()
    dropped = {}
    for severity, k in [(0.5, 1), (1.0, 2), (1.5, 3), (2.0, 3)]:
        out = run_family("lead-dropout", x, peaks, severity, 400).signals
        silent = (out[..., 400:] == 0).all(-1)  # (N, 12)
        assert (silent.sum(1) == k).all(), severity
        kept = ~silent
        assert torch.equal(out[..., 400:][kept], x[..., 400:][kept])
        assert torch.equal(out[..., :400], x[..., :400])
        dropped[severity] = silent
    assert (dropped[0.5] <= dropped[1.0]).all() and (dropped[1.0] <= dropped[2.0]).all()


def test_st_shift_raises_the_st_plateau_by_a_quarter_rms_per_unit_severity():
    x, peaks = beat_train()
    onset = 400
    rms = np.sqrt((x.double().numpy() ** 2).mean(axis=(1, 2)))
    for severity in (1.0, 2.0):
        diff = (run_family("st-shift", x, peaks, severity, onset).signals - x).double().numpy()
        for i, r in enumerate(peaks):
            affected = r[r + 6 >= onset]
            plateau = (affected[:, None] + np.arange(8, 15)).ravel()  # 80–140 ms after R
            plateau = plateau[plateau < SAMPLES]
            np.testing.assert_allclose(diff[i][:, plateau], severity * 0.25 * rms[i], rtol=1e-5)
            window = (r[:, None] + np.arange(6, 17)).ravel()  # support: 60–160 ms after R
            outside = np.setdiff1d(np.arange(SAMPLES), window)
            assert (diff[i][:, outside] == 0).all()


def test_t_inversion_flips_the_t_plateau_at_severity_two():
    x, peaks = beat_train()
    onset = 400
    for severity in (1.0, 2.0):
        out = run_family("t-inversion", x, peaks, severity, onset).signals.double().numpy()
        for i, r in enumerate(peaks):
            affected = r[r + 15 >= onset]
            plateau = (affected[:, None] + np.arange(20, 36)).ravel()  # 200–350 ms after R
            plateau = plateau[plateau < SAMPLES]
            np.testing.assert_allclose(out[i][:, plateau], (1 - severity) * x[i][:, plateau].numpy(), atol=1e-6)
            window = (r[:, None] + np.arange(15, 41)).ravel()
            outside = np.setdiff1d(np.arange(SAMPLES), window)
            assert (out[i][:, outside] == x[i][:, outside].numpy()).all()


def naive_ectopic(x, severity, onset, r, p=0.3, pre=6, post=36, widening=1.5, taper=3):
    """The documented formula, one beat, offset and lead at a time, with np.interp."""
    out = x.astype(np.float64)
    low, high = -math.ceil(widening * pre), math.ceil(widening * post)
    grid = np.arange(SAMPLES)
    for k in range(len(r) - 1):
        centre = round(r[k] + (1 - p) * (r[k + 1] - r[k]))
        if centre + low < onset:
            continue
        for u in range(low, high + 1):
            target, source = centre + u, r[k] + u / widening
            if not (0 <= target < SAMPLES and 0 <= source <= SAMPLES - 1):
                continue
            weight = rise((u - low) / taper) * rise((high - u) / taper)
            for lead in range(x.shape[0]):
                out[lead, target] -= severity * weight * np.interp(source, grid, x[lead])
    return out


def test_ectopic_matches_a_naive_beat_by_beat_reference():
    x, peaks = beat_train(n=3)
    onset = torch.tensor([400, 250, 555])
    for severity in (1.0, 2.0):
        out = run_family("ectopic", x, peaks, severity, onset).signals.double().numpy()
        for i in range(3):
            expected = naive_ectopic(x[i].numpy(), severity, int(onset[i]), peaks[i])
            np.testing.assert_allclose(out[i], expected, atol=1e-5)
    # The inserted complex peaks at its centre with −s times the native R amplitude.
    out = run_family("ectopic", x, peaks, 2.0, 0).signals
    r = peaks[0]
    centre = round(r[3] + 0.7 * (r[4] - r[3]))
    torch.testing.assert_close(out[0, :, centre] - x[0, :, centre], -2.0 * x[0, :, r[3]])


def test_baseline_wander_is_a_shared_slow_sinusoid_of_amplitude_s_rms():
    x, peaks = beat_train()
    onset = 300
    one = (run_family("baseline-wander", x, peaks, 1.0, onset).signals - x).double()
    two = (run_family("baseline-wander", x, peaks, 2.0, onset).signals - x).double()
    torch.testing.assert_close(two, 2 * one, atol=1e-5, rtol=0)
    assert (one[..., :onset] == 0).all()
    torch.testing.assert_close(one, one[:, :1].expand_as(one), atol=1e-5, rtol=0)  # every lead
    rms = x.double().square().mean((1, 2)).sqrt()
    y = (one[:, 0, onset + 100 :] / rms[:, None]).numpy()  # after the 1 s ramp
    for wave in y:  # y(t+1) + y(t−1) = 2 cos(ω) y(t) for a pure sinusoid
        cos_w = np.dot(wave[1:-1], wave[2:] + wave[:-2]) / (2 * np.dot(wave[1:-1], wave[1:-1]))
        omega = math.acos(cos_w)
        assert 0.1 - 1e-3 <= omega * FS / (2 * math.pi) <= 0.5 + 1e-3
        quadrature = (wave[2:] - wave[:-2]) / (2 * math.sin(omega))
        np.testing.assert_allclose(np.hypot(wave[1:-1], quadrature), 1.0, atol=2e-3)


def test_family_rejects_bad_severity_and_shapes():
    x, peaks = beat_train(n=2)
    with pytest.raises(ValueError, match="severity"):
        run_family("st-shift", x, peaks, 2.5, 400)
    with pytest.raises(ValueError, match="one onset"):
        A.attenuation(x, 1.0, torch.tensor([400]), beats_of(peaks), None)
    with pytest.raises(ValueError, match="record 1"):
        beats_of([np.array([1, 5]), np.array([9, 9])])
    with pytest.raises(ValueError, match="rates must be positive"):
        A.BeatTimes.from_events(peaks, event_fs=0.0, fs=FS)


# --------------------------------------------------------------------------------------------
# the causal phase tracker


def test_causal_phase_equals_the_offline_phase_for_a_regular_rhythm():
    peaks = 55 + 415 * np.arange(12)  # 500 Hz, 0.83 s
    causal = token_phases([peaks])[0]
    offline = PhaseTrack(peaks, 500.0, 5000).at_tokens(8, 100.0, "causal")
    times = 5 * (8 * np.arange(TOKENS) + 7)
    both = (times >= peaks[1]) & (times < peaks[-1])
    np.testing.assert_allclose(causal[both], offline[both], rtol=0, atol=1e-12)
    assert np.isnan(causal[times < peaks[1]]).all()
    assert (causal[times >= peaks[-1]] < 2 * math.pi).all()  # extrapolated past the last beat


def test_causal_phase_never_reads_a_later_beat():
    rng = np.random.default_rng(1)
    peaks = [np.cumsum(rng.integers(250, 600, 15)), np.cumsum(rng.integers(300, 450, 16))]
    phases = token_phases(peaks)
    times = 5 * (8 * np.arange(TOKENS) + 7)
    for t in (20, 61, 99):
        moved = [np.r_[p[p <= times[t]], np.sort(rng.uniform(times[t] + 1, 6000, 9)).round()] for p in peaks]
        np.testing.assert_array_equal(token_phases(moved)[:, : t + 1], phases[:, : t + 1])
    naive = [
        [
            min(2 * math.pi * (tau - p[p <= tau][-1]) / np.diff(p[p <= tau][-2:])[0], math.nextafter(2 * math.pi, 0))
            if (p <= tau).sum() >= 2
            else math.nan
            for tau in times
        ]
        for p in peaks
    ]
    np.testing.assert_allclose(phases, naive, rtol=0, atol=1e-12)


def test_causal_phase_matches_the_streaming_tracker():
    streaming = pytest.importorskip("cyclejepa.models.streaming")
    rng = np.random.default_rng(2)
    peaks = [np.cumsum(rng.integers(200, 700, 14)) for _ in range(3)]
    times = 8 * np.arange(TOKENS) + 7.0
    expected = streaming.causal_phases([p / 5 for p in peaks], times)
    np.testing.assert_allclose(token_phases(peaks), expected, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# detectors


def small_model(seed=0, leads=12):
    return build_model(
        "winder", seed=seed, encoder={"width": 16, "hidden": 32, "leads": leads}, predictor={"depth": 2, "heads": 2}
    )


def test_one_pass_predictions_equal_the_training_cutoff_convention():
    model = small_model()
    predictor = model.predictor
    with torch.no_grad():
        predictor.relative_bias.normal_(0, 1.0)  # make the positional biases matter
        z = torch.randn(3, 14, 16, generator=torch.Generator().manual_seed(0))
        one_pass = A.next_token_predictions(predictor, z)
        reference = torch.stack([predictor(z, torch.full((3,), t - 1))[:, t] for t in range(14)], 1)

        class Wrapped(nn.Module):  # not a CausalTransformerPredictor: the per-cutoff fallback
            def forward(self, z, cutoff):
                return predictor(z, cutoff)

        fallback = A.next_token_predictions(Wrapped(), z)
    torch.testing.assert_close(one_pass, reference, atol=1e-5, rtol=0)
    torch.testing.assert_close(fallback, reference, atol=0, rtol=0)


@pytest.mark.parametrize("detector", ["transport-violation", "predictor-error"])
def test_detectors_are_causal(detector):
    model, symmetry = small_model(), U1Symmetry(SPECTRUM)
    x, peaks = beat_train(n=3)
    phases = token_phases([5 * p for p in peaks])
    scores = DETECTORS.get(detector)(model, symmetry, x, phases, batch_size=2)
    assert scores.shape == (3, TOKENS) and np.isfinite(scores[:, 60:]).all()
    for t0 in (50, 90):
        changed = x.clone()
        changed[..., 8 * t0 :] += torch.randn_like(changed[..., 8 * t0 :])
        after = DETECTORS.get(detector)(model, symmetry, changed, phases, batch_size=2)
        np.testing.assert_allclose(after[:, :t0], scores[:, :t0], atol=1e-5, equal_nan=True)
        assert not np.allclose(after[:, t0:], scores[:, t0:], equal_nan=True)


def test_predictor_error_refuses_a_model_without_its_predictor():
    model, symmetry = small_model(), U1Symmetry(SPECTRUM)
    model.predictor = None  # a deployed model (load_pretrained) keeps no predictor
    x, peaks = beat_train(n=2)
    with pytest.raises(ValueError, match="predictor-error detector needs the model's predictor; its predictor is None"):
        DETECTORS.get("predictor-error")(model, symmetry, x, token_phases([5 * p for p in peaks]))


def test_transport_violation_matches_a_naive_float64_reference():
    model, symmetry = small_model(seed=1), U1Symmetry(SPECTRUM)
    x, peaks = beat_train(n=2, seed=4)
    rpeaks = [5 * p for p in peaks]
    phases = token_phases(rpeaks)
    scores = A.transport_violation(model, symmetry, x, phases, warmup_beats=2)
    with torch.no_grad():
        z = model(x).double()
    expected = np.full((2, TOKENS), np.nan)
    times = 5 * (8 * np.arange(TOKENS) + 7)
    for i in range(2):
        total = torch.zeros(16, dtype=torch.float64)
        for t in range(TOKENS):
            if np.isnan(phases[i, t]):
                continue
            w = symmetry.matrix(torch.tensor(phases[i, t])).double().mT @ F.normalize(z[i, t], dim=0)
            if total.norm() > 0 and (rpeaks[i] <= times[t]).sum() >= 4:  # 2 + 2 beats seen
                expected[i, t] = float(1 - w @ total / total.norm())
            total = total + w
    np.testing.assert_array_equal(np.isnan(scores), np.isnan(expected))
    np.testing.assert_allclose(scores, expected, atol=1e-5, equal_nan=True)


def test_transport_violation_equals_the_streaming_monitor():
    streaming = pytest.importorskip("cyclejepa.models.streaming")
    model, symmetry = small_model(seed=2), U1Symmetry(SPECTRUM)
    x, peaks = beat_train(n=2, seed=5)
    monitor = streaming.TransportMonitor(model, symmetry, warmup_beats=2)
    streamed = monitor.replay(x, [p.astype(float) for p in peaks]).double().numpy()
    batch = A.transport_violation(model, symmetry, x, token_phases([5 * p for p in peaks]))
    np.testing.assert_array_equal(np.isnan(batch), np.isnan(streamed))
    np.testing.assert_allclose(batch, streamed, atol=1e-5, equal_nan=True)


class EquivariantToy(nn.Module):
    """z_t = ρ(φ_t) v, with φ_t read from lead 0 at the token's last sample: an exactly
    equivariant encoder whenever lead 0 carries the true phase."""

    def __init__(self, symmetry):
        super().__init__()
        self.symmetry = symmetry
        self.v = nn.Parameter(torch.randn(symmetry.dim, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        phi = x[:, 0, PATCH - 1 :: PATCH]
        return self.symmetry.act(self.v.expand(*phi.shape, -1), phi)


def toy_records(n=12, seed=0):
    """Records whose lead 0 is the phase of a regular rhythm, the R-peaks (500 Hz) and phases."""
    rng = np.random.default_rng(seed)
    x = 0.1 * torch.randn(n, 12, SAMPLES, generator=torch.Generator().manual_seed(seed))
    rpeaks = []
    for i in range(n):
        r = np.arange(rng.integers(10, 40), SAMPLES + 200, rng.integers(60, 100))  # past the end
        x[i, 0] = torch.from_numpy(np.nan_to_num(phase_from_events(r, np.arange(SAMPLES))))
        rpeaks.append(5 * r)
    return x, rpeaks


def test_transport_violation_is_zero_for_an_equivariant_encoder_and_sees_a_phase_jump():
    symmetry = U1Symmetry(SPECTRUM)
    toy = EquivariantToy(symmetry)
    x, rpeaks = toy_records(n=4)
    phases = token_phases(rpeaks)
    clean = A.transport_violation(toy, symmetry, x, phases)
    assert np.isfinite(clean[:, 50:]).all() and np.nanmax(np.abs(clean)) < 1e-5
    shift, t0 = 1.0, 70
    jumped = x.clone()
    jumped[:, 0, 8 * t0 :] += shift
    scores = A.transport_violation(toy, symmetry, jumped, phases)
    np.testing.assert_array_equal(scores[:, :t0], clean[:, :t0])
    unit = F.normalize(toy.v.detach().double(), dim=0)
    harmonics = torch.tensor([0] * 4 + [1] * 4 + [2] * 4 + [3] * 4, dtype=torch.float64)
    expected = float((unit.square() * torch.cos(harmonics * shift)).sum())  # ⟨ρ(δ) v̂, v̂⟩
    np.testing.assert_allclose(scores[:, t0], 1 - expected, atol=1e-5)
    assert (scores[:, t0:] > 1e-3).all()


# --------------------------------------------------------------------------------------------
# metrics


def test_record_scores_alarms_hits_and_latency_on_hand_built_scores():
    clean = np.zeros((4, 10))
    clean[:, 6:] = np.array([[1.0], [2.0], [3.0], [4.0]])  # record maxima 1…4 after onset
    onset = np.array([5, 5, 6, 4])
    perturbed = clean.copy()
    perturbed[0, 5] = 10.0  # alarm at the onset: latency 80 ms, a hit
    perturbed[1, 8] = 10.0  # alarm 3 tokens after onset: latency 320 ms, outside the hit window
    perturbed[2, 2] = 10.0  # an early alarm: record 2's alarm at its onset is no hit
    perturbed[3, 4:] = np.nan  # no defined score after onset: left out
    np.testing.assert_array_equal(A.record_scores(clean, onset), [1, 2, 3, 4])
    cell = A.score_anomaly_cell(clean, perturbed, onset, token_ms=80.0, false_alarm_rate=0.5, hit_tokens=3)
    threshold = np.quantile([1.0, 2.0, 3.0], 0.5)
    assert cell.records == 3 and cell.threshold == threshold == 2.0
    first, early = A.first_alarms(perturbed[:3], threshold, onset[:3])
    np.testing.assert_array_equal(first, [5, 8, 6])  # record 1's level 2 is not above 2
    np.testing.assert_array_equal(early, [False, False, True])
    assert cell.alarm_rate == 1.0 and cell.alarmed == 3
    assert cell.hit_rate == pytest.approx(1 / 3)
    assert cell.median_latency_ms == 80.0  # latencies 80, 320, 80
    assert cell.clean_alarm_rate == pytest.approx(1 / 3)
    assert cell.auroc == A.auroc(np.array([1.0, 2, 3]), np.array([10.0, 10, 3])) == pytest.approx(8.5 / 9)


def test_threshold_is_calibrated_on_clean_records_only():
    rng = np.random.default_rng(0)
    clean = rng.normal(size=(200, 20))
    onset = rng.integers(5, 15, 200)
    cells = [
        A.score_anomaly_cell(clean, clean + shift * rng.normal(size=clean.shape), onset, token_ms=80.0)
        for shift in (0.0, 5.0, 50.0)
    ]
    expected = np.quantile(A.record_scores(clean, onset), 0.95)
    assert all(c.threshold == expected for c in cells)
    assert cells[0].clean_alarm_rate == pytest.approx(0.05, abs=0.006)


def test_auroc_equals_the_pairwise_count_with_ties():
    rng = np.random.default_rng(0)
    negative, positive = rng.integers(0, 5, 30).astype(float), rng.integers(1, 6, 40).astype(float)
    wins = (positive[:, None] > negative[None, :]) + 0.5 * (positive[:, None] == negative[None, :])
    assert A.auroc(negative, positive) == pytest.approx(wins.mean(), abs=1e-12)


# --------------------------------------------------------------------------------------------
# the battery


def phase_jump(x, severity, onset, beats, rng):
    """Advance lead 0 (the toy's phase) by s/2 radians from the onset on."""
    after = (torch.arange(x.shape[-1]) >= onset[:, None])[:, None]
    return A.Perturbed(x + 0.5 * severity * after * (torch.arange(12) == 0)[:, None], onset)


def invisible(x, severity, onset, beats, rng):
    """Changes lead 11 only, which the toy never reads."""
    after = (torch.arange(x.shape[-1]) >= onset[:, None])[:, None]
    return A.Perturbed(x + severity * after * (torch.arange(12) == 11)[:, None], onset)


@pytest.fixture
def test_families(monkeypatch):
    """``phase-jump`` and ``invisible`` registered as plugin families, unregistered after the test."""
    monkeypatch.setattr(A.PERTURBATIONS, "_entries", dict(A.PERTURBATIONS._entries))
    A.PERTURBATIONS.register("phase-jump")(phase_jump)
    A.PERTURBATIONS.register("invisible")(invisible)


def test_battery_finds_a_phase_jump_and_ignores_what_the_detector_cannot_see(test_families):
    symmetry = U1Symmetry(SPECTRUM)
    toy = EquivariantToy(symmetry)
    x, rpeaks = toy_records(n=20, seed=1)
    battery = A.anomaly_battery(
        toy,
        symmetry,
        x.numpy(),
        beats_of(rpeaks),
        patch=PATCH,
        families=["phase-jump", "invisible", "st-shift"],
        severities=(1.0, 2.0),
        seed=5,
    )
    cells = battery.cells
    assert battery.skipped == {}
    table = {(c.family, c.severity): c for c in cells}
    assert len(cells) == 9 and all(c.records == 20 for c in cells)
    for family in ("phase-jump", "invisible", "st-shift"):  # severity 0 is the same pipeline
        assert table[family, 0.0].auroc == 0.5 == table[family, 2.0].reference_auroc
    jump = table["phase-jump", 2.0]
    assert jump.auroc == 1.0 and jump.excess == 0.5 and jump.alarm_rate == 1.0
    assert jump.median_latency_ms == 80.0  # the one-token floor
    clean = A.transport_violation(toy, symmetry, x, token_phases(rpeaks))
    onset = A.draw_onsets(20, (40, 100), seed=5)
    early = (clean > jump.threshold) & (np.arange(TOKENS) < onset[:, None])
    assert jump.hit_rate == pytest.approx(1 - early.any(1).mean())
    for severity in (1.0, 2.0):
        assert table["invisible", severity].auroc == 0.5 and table["invisible", severity].excess == 0.0
    assert table["st-shift", 2.0].auroc == 1.0  # the toy reads lead 0, which the shift raises
    assert A.strongest_cell(cells).excess == 0.5
    assert "| phase-jump | 2.0 | 1.0000 |" in A.to_table(cells)


@pytest.mark.parametrize("detector", ["transport-violation", "predictor-error"])
def test_battery_runs_a_model_with_either_detector(detector):
    model, symmetry = small_model(), U1Symmetry(SPECTRUM)
    x, peaks = beat_train(n=6, seed=2)
    cells = A.anomaly_battery(
        model,
        symmetry,
        x,
        beats_of([5 * p for p in peaks]),
        patch=PATCH,
        families=["ectopic", "attenuation"],
        severities=(2.0,),
        detector=detector,
        batch_size=4,
    ).cells
    assert [(c.family, c.severity) for c in cells] == [
        ("ectopic", 0.0),
        ("ectopic", 2.0),
        ("attenuation", 0.0),
        ("attenuation", 2.0),
    ]
    assert all(c.detector == detector and c.records == 6 for c in cells)
    assert cells[0].auroc == 0.5 and cells[0].excess == 0.0
    assert all(c.excess == c.auroc - 0.5 for c in cells)


def test_battery_rejects_unknown_family_and_bad_severity():
    model, symmetry = small_model(), U1Symmetry(SPECTRUM)
    x, peaks = beat_train(n=2)
    with pytest.raises(KeyError, match="Did you mean 'ectopic'"):
        A.anomaly_battery(model, symmetry, x, beats_of(peaks), patch=PATCH, families=["ectopc"])
    with pytest.raises(ValueError, match="severities"):
        A.anomaly_battery(model, symmetry, x, beats_of(peaks), patch=PATCH, severities=(3.0,))
    with pytest.raises(ValueError, match="whole tokens"):
        A.anomaly_battery(model, symmetry, x, beats_of(peaks), patch=7)


class Unreachable(torch.nn.Module):
    def forward(self, x):
        raise AssertionError("the model ran before the battery checked its arguments")


def test_battery_rejects_an_onset_range_past_the_record_before_running_the_model():
    x, peaks = beat_train(n=2)
    tokens = x.shape[-1] // PATCH
    with pytest.raises(ValueError, match="must end before the last"):
        A.anomaly_battery(Unreachable(), U1Symmetry(SPECTRUM), x, beats_of(peaks), patch=PATCH, onset_range=(1, tokens))


# --------------------------------------------------------------------------------------------
# where the families apply


def test_families_apply_by_signal_kind_and_channel_count(test_families):
    families = [*A.FAMILIES, "phase-jump"]
    assert A.applicable_families(families, "ecg", 12) == (families, {})
    kept, skipped = A.applicable_families(families, "resp", 1)
    assert kept == ["attenuation", "baseline-wander", "phase-jump"]  # a plugin family without a claim applies anywhere
    assert set(skipped) == {"ectopic", "t-inversion", "st-shift", "lead-dropout"}
    assert skipped["ectopic"] == "applies to ecg signals; the phase provider's signal is 'resp'"
    assert skipped["lead-dropout"] == "needs at least 2 channels; the records have 1"
    assert A.applicable_families(families, None, 2) == (families, {})  # signal kind not checked
    with pytest.raises(KeyError, match="Did you mean 'st-shift'"):
        A.applicable_families(["st-shfit"], "ecg", 12)


def test_phase_providers_declare_their_signal_kind():
    from cyclejepa.phase import EcgRPeakProvider, PhaseProvider

    assert PhaseProvider.signal == "any" and EcgRPeakProvider.signal == "ecg"


def test_battery_skips_the_families_that_do_not_apply_and_says_why():
    model, symmetry = small_model(leads=1), U1Symmetry(SPECTRUM)
    x, peaks = beat_train(n=4, seed=2)
    battery = A.anomaly_battery(
        model,
        symmetry,
        x[:, :1],
        beats_of([5 * p for p in peaks]),
        patch=PATCH,
        families=["ectopic", "lead-dropout", "attenuation"],
        severities=(2.0,),
        signal_kind="ppg",
        batch_size=4,
    )
    assert [(c.family, c.severity) for c in battery.cells] == [("attenuation", 0.0), ("attenuation", 2.0)]
    assert battery.skipped == {
        "ectopic": "applies to ecg signals; the phase provider's signal is 'ppg'",
        "lead-dropout": "needs at least 2 channels; the records have 1",
    }


def test_the_report_names_the_skipped_families():
    from cyclejepa.evaluation.anomaly.battery import AnomalyCell
    from cyclejepa.evaluation.report import anomaly_markdown
    from cyclejepa.evaluation.results import CheckpointResult

    cell = AnomalyCell(family="attenuation", severity=2.0, detector="transport-violation", records=4, auroc=0.9,
                       reference_auroc=0.5, excess=0.4, threshold=1.0, clean_alarm_rate=0.05, alarm_rate=0.5,
                       hit_rate=0.25, median_latency_ms=160.0, alarmed=2)  # fmt: skip
    skipped = {"ectopic": "applies to ecg signals; the phase provider's signal is 'ppg'"}
    text = anomaly_markdown([CheckpointResult.model_construct(arm="winder", anomaly=[cell], anomaly_skipped=skipped)])
    assert "Not run (the family does not apply): ectopic: applies to ecg signals; the phase provider's signal is 'ppg'." in text
    assert "Not run" not in anomaly_markdown([CheckpointResult.model_construct(arm="winder", anomaly=[cell])])  # none skipped
