"""Training-time augmentations: parameter distributions measured in the signal, gating, the
clean-RMS convention, determinism and the absence of host synchronisation.

Distribution checks use fixed seeds and large batches; their tolerances are several standard
errors wide (or p-value floors of 1e-4), so a wrong range, law or scale fails them.
"""

from __future__ import annotations

import ast
import inspect
import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch.utils._python_dispatch import TorchDispatchMode

from cyclejepa.data import augment
from cyclejepa.data.augment import DEFAULT_AUGMENTATIONS, Augmenter, record_rms
from cyclejepa.registry import AUGMENTATIONS, UnknownComponentError

B = 4000
P_FLOOR = 1e-4


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def run_only(name: str, x: torch.Tensor, seed: int = 0, fs: float = 100.0, p: float = 1.0, **kw):
    """Apply one transform through an Augmenter; returns (augmented, params, applied) as numpy."""
    augmenter = Augmenter.from_config([{"name": name, "p": p, **kw}], fs=fs)
    y, trace = augmenter(x, generator(seed), return_params=True)
    params = {key: value.numpy() for key, value in trace.params[name].items()}
    return y.numpy(), params, trace.applied[name].numpy()


def scaled_gaussian(shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    """Gaussian records with per-record scales log-uniform on [0.1, 10]."""
    g = generator(seed)
    scale = 10 ** (2 * torch.rand(shape[0], 1, 1, generator=g, dtype=dtype) - 1)
    return scale * torch.randn(shape, generator=g, dtype=dtype)


def rms64(x: torch.Tensor) -> np.ndarray:
    """Clean RMS over leads and samples, recomputed in numpy float64."""
    return np.sqrt(np.mean(x.numpy().astype(np.float64) ** 2, axis=(1, 2)))


def uniform_p(values: np.ndarray, low: float, high: float) -> float:
    return stats.kstest(np.ravel(values), "uniform", args=(low, high - low)).pvalue


def lag_frequency(y: np.ndarray, lag: int, fs: float) -> np.ndarray:
    """Frequency of a pure sinusoid per row from y[n+m] + y[n-m] = 2 cos(mω) y[n] (mω < π)."""
    centre, ahead, behind = y[:, lag:-lag], y[:, 2 * lag :], y[:, : -2 * lag]
    cos_mw = (centre * (ahead + behind)).sum(1) / (2 * (centre**2).sum(1))
    return np.arccos(np.clip(cos_mw, -1, 1)) / lag * fs / (2 * np.pi)


def sines(t: np.ndarray, amplitude, frequency, phase) -> np.ndarray:
    """Σ_c a_c sin(2π f_c t + ξ_c) in float64: parameters (B, C) -> (B, samples)."""
    arg = 2 * np.pi * frequency[..., None] * t + phase[..., None]
    return (amplitude[..., None] * np.sin(arg)).sum(1)


def fit_sinusoid(y: np.ndarray, frequency: np.ndarray, t: np.ndarray):
    """Least-squares fit of a sin + b cos(2π f t) + c per row -> (√(a² + b²), c)."""
    arg = 2 * np.pi * frequency[:, None] * t
    basis = np.stack([np.sin(arg), np.cos(arg), np.ones_like(arg)], 1)  # (rows, 3, samples)
    coef = np.linalg.solve(basis @ basis.transpose(0, 2, 1), basis @ y[..., None])[..., 0]
    return np.hypot(coef[:, 0], coef[:, 1]), coef[:, 2]


def test_lead_dropout_zeroes_a_uniform_random_subset_of_one_to_three_leads():
    x = 1 + torch.rand(B, 12, 8, generator=generator(1))
    y, params, _ = run_only("lead-dropout", x)
    zeroed = (y == 0).all(-1)
    count = zeroed.sum(1)
    assert set(np.unique(count)) == {1, 2, 3}
    np.testing.assert_array_equal(count, params["count"])
    np.testing.assert_array_equal(zeroed, params["dropped"])
    np.testing.assert_array_equal(y[~zeroed], x.numpy()[~zeroed])  # kept leads untouched
    assert stats.chisquare(np.bincount(count)[1:]).pvalue > P_FLOOR
    for k in (1, 2, 3):  # every lead equally likely to be among the k dropped
        assert stats.chisquare(zeroed[count == k].sum(0)).pvalue > P_FLOOR


def test_lead_gain_is_uniform_on_0_7_to_1_3_independent_per_lead():
    x = 1 + torch.rand(B, 12, 8, generator=generator(2), dtype=torch.float64)
    y, params, _ = run_only("lead-gain", x)
    ratio = y / x.numpy()
    gain = ratio[..., 0]
    np.testing.assert_allclose(ratio, gain[..., None] * np.ones_like(ratio), rtol=1e-12)
    np.testing.assert_allclose(gain, params["gain"], rtol=1e-12)
    assert gain.min() >= 0.7 and gain.max() <= 1.3
    assert uniform_p(gain, 0.7, 1.3) > P_FLOOR
    correlation = np.corrcoef(gain.T)[np.triu_indices(12, 1)]
    assert np.abs(correlation).max() < 4.5 / math.sqrt(B)


@pytest.mark.parametrize("fs, batch", [(100.0, B), (250.0, 500)])
def test_tone_is_one_25_hz_line_shared_across_leads_at_5_to_20_percent_of_rms(fs, batch):
    samples = int(4 * fs)  # 4 s: 25 Hz falls on FFT bin 100
    x = scaled_gaussian((batch, 3, samples), seed=3)
    y, params, _ = run_only("tone", x, fs=fs)
    added = y - x.numpy()
    np.testing.assert_allclose(added, np.repeat(added[:, :1], 3, 1), atol=1e-12 * rms64(x).max())
    spectrum = np.fft.rfft(added[:, 0]) * 2 / samples
    assert (np.abs(spectrum).argmax(1) == 100).all()
    off_peak = np.delete(np.abs(spectrum), 100, axis=1)
    assert off_peak.max() < 1e-9 * np.abs(spectrum[:, 100]).min()
    ratio = np.abs(spectrum[:, 100]) / rms64(x)
    assert ratio.min() >= 0.05 and ratio.max() <= 0.20
    assert uniform_p(ratio, 0.05, 0.20) > P_FLOOR
    np.testing.assert_allclose(ratio, params["amplitude"], rtol=1e-9)
    phase = np.angle(spectrum[:, 100] * 1j) % (2 * np.pi)  # sin(ωt + ξ) ↦ −i e^{iξ}
    np.testing.assert_allclose(np.exp(1j * phase), np.exp(1j * params["phase"]), atol=1e-9)
    assert uniform_p(params["phase"], 0, 2 * np.pi) > P_FLOOR


def test_drift_is_one_to_three_slow_sinusoids_matching_the_drawn_parameters():
    fs, samples = 100.0, 600
    x = scaled_gaussian((B, 2, samples), seed=4)
    y, params, _ = run_only("drift", x)
    added = y - x.numpy()
    np.testing.assert_allclose(added[:, 1], added[:, 0], atol=1e-12 * rms64(x).max())
    count, active = params["count"], params["active"]
    assert set(np.unique(count)) == {1, 2, 3}
    assert stats.chisquare(np.bincount(count)[1:]).pvalue > P_FLOOR
    np.testing.assert_array_equal(active.sum(1), count)
    frequency, amplitude = params["frequency"][active], params["amplitude"][active]
    assert frequency.min() >= 0.05 and frequency.max() <= 0.4
    assert uniform_p(frequency, 0.05, 0.4) > P_FLOOR
    assert uniform_p(amplitude, 0.05, 0.20) > P_FLOOR
    t = np.arange(samples) / fs
    amplitude_abs = params["amplitude"] * active * rms64(x)[:, None]
    expected = sines(t, amplitude_abs, params["frequency"], params["phase"])
    np.testing.assert_allclose(added[:, 0], expected, atol=1e-10 * rms64(x).max())
    single = count == 1  # one component: frequency and amplitude read off the signal alone
    recovered = lag_frequency(added[single, 0], lag=100, fs=fs)
    assert recovered.min() >= 0.05 - 1e-9 and recovered.max() <= 0.4 + 1e-9
    np.testing.assert_allclose(recovered, params["frequency"][single, 0], atol=1e-9)
    amplitude, offset = fit_sinusoid(added[single, 0], recovered, t)
    ratio = amplitude / rms64(x)[single]
    assert ratio.min() >= 0.05 - 1e-9 and ratio.max() <= 0.20 + 1e-9
    np.testing.assert_allclose(ratio, params["amplitude"][single, 0], rtol=1e-8)
    np.testing.assert_allclose(offset, 0, atol=1e-9)


def test_amplitude_modulation_envelope_depth_and_frequency_from_the_signal():
    fs, samples = 100.0, 600
    x = torch.ones(B, 2, samples, dtype=torch.float64)
    y, params, _ = run_only("amplitude-modulation", x)
    envelope = y / x.numpy()
    np.testing.assert_array_equal(envelope[:, 1], envelope[:, 0])
    frequency = lag_frequency(envelope[:, 0] - 1, lag=100, fs=fs)
    assert frequency.min() >= 0.05 - 1e-9 and frequency.max() <= 0.3 + 1e-9
    np.testing.assert_allclose(frequency, params["frequency"], atol=1e-9)
    assert uniform_p(frequency, 0.05, 0.3) > P_FLOOR
    depth, mean = fit_sinusoid(envelope[:, 0], frequency, np.arange(samples) / fs)
    np.testing.assert_allclose(mean, 1, atol=1e-9)
    assert depth.min() >= 0.02 - 1e-9 and depth.max() <= 0.10 + 1e-9
    np.testing.assert_allclose(depth, params["depth"], rtol=1e-8)
    assert uniform_p(depth, 0.02, 0.10) > P_FLOOR


def test_gaussian_noise_std_is_5_percent_of_each_records_clean_rms():
    x = scaled_gaussian((B, 4, 250), seed=5)
    y, params, _ = run_only("gaussian-noise", x)
    added = y - x.numpy()
    rms = rms64(x)
    expected = 0.05 * rms[:, None, None] * params["noise"]
    np.testing.assert_allclose(added, expected, atol=1e-12 * rms.max())
    relative = added.std(axis=(1, 2)) / rms
    standard_error = 0.05 / math.sqrt(2 * 1000)
    assert abs(relative.mean() - 0.05) < 5 * standard_error / math.sqrt(B)
    assert np.abs(relative - 0.05).max() < 5 * standard_error
    assert abs(np.corrcoef(relative, np.log(rms))[0, 1]) < 4.5 / math.sqrt(B)
    standardised = (added / (0.05 * rms[:, None, None])).ravel()[::50]
    assert stats.kstest(standardised, "norm").pvalue > P_FLOOR


def test_gates_fire_at_rate_p_independently_per_transform_and_record():
    x = torch.randn(B, 12, 16, generator=generator(6))
    _, trace = Augmenter.from_config(fs=100.0)(x, generator(7), return_params=True)
    applied = np.stack([trace.applied[name].numpy() for name in DEFAULT_AUGMENTATIONS], 1)
    sigma = math.sqrt(0.25 / B)
    assert np.abs(applied.mean(0) - 0.5).max() < 4.5 * sigma
    joint = (applied[:, :, None] & applied[:, None, :]).mean(0)[np.triu_indices(6, 1)]
    assert np.abs(joint - 0.25).max() < 4.5 * math.sqrt(0.25 * 0.75 / B)


@pytest.mark.parametrize("p", [0.0, 0.2, 1.0])
def test_gate_leaves_unselected_records_untouched(p):
    x = torch.randn(B, 3, 16, generator=generator(8))
    y, _, applied = run_only("tone", x, p=p)
    changed = (y != x.numpy()).any(axis=(1, 2))
    np.testing.assert_array_equal(changed, applied)
    assert abs(applied.mean() - p) <= 4.5 * math.sqrt(p * (1 - p) / B)


def test_default_chain_matches_a_float64_reference_in_table_order_with_clean_rms():
    fs, samples = 100.0, 300
    x = scaled_gaussian((256, 12, samples), seed=9)
    y, trace = Augmenter.from_config(fs=fs)(x, generator(10), return_params=True)
    assert trace.applied.keys() == trace.params.keys() == set(DEFAULT_AUGMENTATIONS)
    prm = {n: {k: v.numpy() for k, v in trace.params[n].items()} for n in DEFAULT_AUGMENTATIONS}
    on = {n: trace.applied[n].numpy()[:, None, None] for n in DEFAULT_AUGMENTATIONS}
    rms = rms64(x)
    np.testing.assert_allclose(trace.rms.numpy(), rms, rtol=1e-12)
    t = np.arange(samples) / fs
    noise = 0.05 * rms[:, None, None] * prm["gaussian-noise"]["noise"]
    tone = prm["tone"]
    tone_amplitude = (tone["amplitude"] * rms)[:, None]
    tone_wave = sines(t, tone_amplitude, np.full((256, 1), 25.0), tone["phase"][:, None])
    drift = prm["drift"]
    drift_amplitude = drift["amplitude"] * drift["active"] * rms[:, None]
    drift_wave = sines(t, drift_amplitude, drift["frequency"], drift["phase"])
    am = prm["amplitude-modulation"]
    envelope = 1 + sines(t, am["depth"][:, None], am["frequency"][:, None], am["phase"][:, None])
    expected = x.numpy() + on["gaussian-noise"] * noise
    expected = expected + on["tone"] * tone_wave[:, None] + on["drift"] * drift_wave[:, None]
    expected = np.where(on["amplitude-modulation"], expected * envelope[:, None], expected)
    dropped = prm["lead-dropout"]["dropped"][..., None] & on["lead-dropout"]
    expected = np.where(dropped, 0.0, expected)
    expected = np.where(on["lead-gain"], expected * prm["lead-gain"]["gain"][..., None], expected)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_seeded_generator_gives_identical_draws_and_draw_count_is_data_independent():
    x = torch.randn(64, 12, 100, generator=generator(11))
    augmenter = Augmenter.from_config(fs=100.0)
    g1, g2, g3 = generator(12), generator(12), generator(12)
    y1, trace1 = augmenter(x, g1, return_params=True)
    y2 = augmenter(x, g2)
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)
    y3, trace3 = augmenter(2 * x + 1, g3, return_params=True)
    for name in DEFAULT_AUGMENTATIONS:
        assert torch.equal(trace1.applied[name], trace3.applied[name])
    assert torch.equal(g1.get_state(), g3.get_state())  # stream position independent of data
    assert not torch.equal(augmenter(x, generator(13)), y1)


class _NoHostSync(TorchDispatchMode):
    """Fails on ops that read device values on the host or have data-dependent shapes."""

    forbidden = {"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim"}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        bool_index = name == "index" and any(getattr(i, "dtype", None) == torch.bool for i in (args[1] if len(args) > 1 else []))
        if name in self.forbidden or bool_index:
            raise AssertionError(f"host-synchronising op {func} in the augmentation path")
        return func(*args, **kwargs)


def test_augmenter_has_no_host_synchronising_ops():
    with _NoHostSync(), pytest.raises(AssertionError, match="host-synchronising"):  # the detector itself
        torch.ones(3).sum().item()
    x = torch.randn(16, 12, 100, generator=generator(14))
    with _NoHostSync():
        Augmenter.from_config(fs=100.0)(x, generator(15), return_params=True)
    tree = ast.parse(inspect.getsource(augment))
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not attributes & {"item", "tolist", "cpu", "numpy", "nonzero"}


def test_registry_defaults_and_configurable_ranges():
    assert set(DEFAULT_AUGMENTATIONS) <= set(AUGMENTATIONS.names())
    default = Augmenter.from_config(fs=100.0)
    assert default.names == DEFAULT_AUGMENTATIONS
    assert all(step.p == 0.5 for step in default.steps)
    assert Augmenter.from_config([], fs=100.0).names == ()
    x = torch.ones(B, 1, 8, dtype=torch.float64)
    y, params, _ = run_only("lead-gain", x, gain=[2.0, 3.0])
    assert y.min() >= 2.0 and y.max() <= 3.0 and uniform_p(params["gain"], 2.0, 3.0) > P_FLOOR


def test_record_rms_is_over_all_leads_and_samples():
    x = scaled_gaussian((5, 12, 40), seed=16)
    np.testing.assert_allclose(record_rms(x).numpy(), rms64(x), rtol=1e-12)


@pytest.mark.parametrize(
    "specs, match",
    [
        ([{"name": "tonee"}], "Did you mean 'tone'"),
        ([{"p": 0.5}], r"augmentations\[0\]: missing 'name'"),
        ([{"name": "tone"}, {"name": "drift", "depth": [0.1]}], r"augmentations\[1\] \(drift\)"),
        ([{"name": "tone", "amplitude": [0.2, 0.1]}], r"augmentations\[0\] \(tone\): .*amplitude must be a pair"),
        ([{"name": "lead-dropout", "count": [1, 2.5]}], r"\(lead-dropout\): .*count\.1: Input should be a valid integer"),
        ([{"name": "tone", "p": 1.5}], r"'tone': p must lie in \[0, 1\]"),
        ([{"name": "tone"}, {"name": "tone"}], "repeated \\['tone'\\]"),
    ],
)
def test_bad_configs_raise_naming_the_entry(specs, match):
    with pytest.raises((ValueError, UnknownComponentError), match=match):
        Augmenter.from_config(specs, fs=100.0)


def test_bad_batches_raise_clear_errors():
    augmenter = Augmenter.from_config(fs=100.0)
    with pytest.raises(ValueError, match=r"shape \(B, channels, samples\)"):
        augmenter(torch.randn(12, 100), generator())
    with pytest.raises(ValueError, match="generator is on cpu but the batch is on meta"):
        augmenter(torch.empty(2, 12, 100, device="meta"), generator())
    with pytest.raises(ValueError, match="cannot drop up to 3 of 2 channels"):
        Augmenter.from_config([{"name": "lead-dropout", "count": [1, 3]}], fs=100.0)(torch.randn(4, 2, 100), generator())
    with pytest.raises(ValueError, match="not below the Nyquist frequency 20.0 Hz"):
        Augmenter.from_config([{"name": "tone", "frequency": 25.0}], fs=40.0)(torch.randn(4, 2, 100), generator())


def test_the_default_lead_dropout_and_tone_are_the_papers_on_twelve_leads_at_100_hz():
    """Left out, count and frequency draw and add exactly what (1, 3) and 25 Hz do: twelve-lead
    numbers do not change."""
    x = torch.randn(16, 12, 500)
    explicit = [{"name": "lead-dropout", "p": 1.0, "count": [1, 3]}, {"name": "tone", "p": 1.0, "frequency": 25.0}]
    default = [{"name": "lead-dropout", "p": 1.0}, {"name": "tone", "p": 1.0}]
    first, second = (Augmenter.from_config(specs, fs=100.0)(x, generator()) for specs in (explicit, default))
    assert torch.equal(first, second)


@pytest.mark.parametrize(("channels", "most"), [(1, 0), (2, 1), (3, 2), (4, 3), (12, 3)])
def test_the_default_lead_dropout_keeps_a_channel_and_drops_nothing_of_one(channels, most):
    augmenter = Augmenter.from_config([{"name": "lead-dropout", "p": 1.0}], fs=25.0)
    x = torch.randn(256, channels, 50) + 5.0
    dropped = (augmenter(x, generator()) == 0).all(dim=-1).sum(dim=1)
    assert int(dropped.max()) == most and int(dropped.min()) == min(1, most)


def test_the_default_tone_lies_below_the_nyquist_frequency_of_a_slow_model():
    """At a 25 Hz model rate the paper's 25 Hz tone is above Nyquist: the default is fs / 4."""
    x = torch.ones(2, 1, 400, dtype=torch.float64)  # 16 s: 6.25 Hz is bin 100
    added = Augmenter.from_config([{"name": "tone", "p": 1.0}], fs=25.0)(x, generator()) - x
    spectrum = torch.fft.rfft(added[0, 0]).abs()
    assert int(spectrum.argmax()) * 25.0 / 400 == 6.25
