"""Streaming encoder (exact against offline encoding, constant state), causal phase, monitor."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cyclejepa.models import build_model
from cyclejepa.models.streaming import (
    CausalPhaseTracker,
    StreamingEncoder,
    TransportMonitor,
    causal_phases,
    peaks_due,
)
from cyclejepa.phase import causal_phase_from_events, phase_from_events, token_times
from cyclejepa.symmetry import U1Symmetry


@pytest.fixture(autouse=True)
def one_thread():
    """Token-sized ops gain nothing from threads, and on a busy machine they lose a lot."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


SMALL = {"width": 16, "hidden": 24, "kernel": 5, "dilations": (1, 2, 4)}
SMALL_SPECTRUM = "2x0+2x1+2x2+2x3+1x4"  # dim 16 = the small encoder width


def stream(encoder, x, return_h=False):
    """Stacked outputs of streaming x (B, leads, samples) chunk by chunk."""
    outputs = list(encoder.encode_stream(x.split(encoder.patch, dim=-1), return_h=return_h))
    if return_h:
        return tuple(torch.stack(parts, dim=1) for parts in zip(*outputs, strict=True))
    return torch.stack(outputs, dim=1)


def offline(model, x):
    with torch.no_grad():
        h = model.encode(x)
        return model.project(h), h


def naive_causal_phase(peaks, time):
    """2π (t − R_last)/(R_last − R_prev) from the peaks at or before t, clipped below 2π."""
    known = [p for p in peaks if p <= time]
    if len(known) < 2:
        return math.nan
    return min(2 * math.pi * (time - known[-1]) / (known[-1] - known[-2]), 2 * math.pi - 1e-12)


@pytest.mark.parametrize(
    "config, records, samples",
    [({}, 3, 1000), (SMALL, 4, 640)],
    ids=["paper", "k5-d124"],
)
def test_streamed_tokens_equal_offline_at_every_token(config, records, samples):
    model = build_model("winder", seed=0, encoder=config)
    x = torch.randn(records, 12, samples, generator=torch.Generator().manual_seed(1))
    z_stream, h_stream = stream(StreamingEncoder(model), x, return_h=True)
    z_ref, h_ref = offline(model, x)
    assert z_stream.shape == z_ref.shape == (records, samples // 8, model.projector.out_dim)
    assert (z_stream - z_ref).abs().amax() <= 1e-5  # every token, the first 12 included
    assert (h_stream - h_ref).abs().amax() <= 1e-5


def test_streaming_is_exact_to_float64_rounding():
    model = build_model("winder", seed=2, encoder=SMALL).double()
    x = torch.randn(2, 12, 400, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(stream(StreamingEncoder(model), x), offline(model, x)[0], atol=1e-12)


@pytest.mark.parametrize("config, frames", [({}, 2 * 2 * (1 + 2)), (SMALL, 2 * 4 * (1 + 2 + 4))], ids=["paper", "small"])
def test_state_is_constant_and_sums_the_convolution_lags(config, frames):
    model = build_model("winder", seed=0, encoder=config)
    encoder = StreamingEncoder(model)
    encoder.reset(batch=2)
    width = model.encoder.width
    chunk = torch.randn(2, 12, 8)
    encoder.step(chunk)
    after_one = {name: buffer.shape for name, buffer in encoder.state.items()}
    for _ in range(39):  # the longest buffer (4 frames) is replaced ten times over
        encoder.step(chunk)
    assert {name: buffer.shape for name, buffer in encoder.state.items()} == after_one
    assert sum(encoder.state_layout().values()) == frames
    assert sum(buffer.numel() for buffer in encoder.state.values()) == 2 * width * frames
    assert len(encoder.state) == 2 * len(model.encoder.dilations)


def test_long_stream_stays_exact():
    model = build_model("winder", seed=4, encoder=SMALL)
    x = torch.randn(2, 12, 8 * 300, generator=torch.Generator().manual_seed(5))
    assert (stream(StreamingEncoder(model), x) - offline(model, x)[0]).abs().amax() <= 1e-5


def test_reset_starts_a_fresh_stream_with_any_batch():
    model = build_model("winder", seed=0, encoder=SMALL)
    encoder = StreamingEncoder(model)
    encoder.reset(batch=3)
    for chunk in torch.randn(3, 12, 400).split(8, dim=-1):
        encoder.step(chunk)
    encoder.reset(batch=2)
    x = torch.randn(2, 12, 320)
    z = torch.stack([encoder.step(chunk) for chunk in x.split(8, dim=-1)], dim=1)
    assert (z - offline(model, x)[0]).abs().amax() <= 1e-5
    assert encoder.tokens_seen == 40


def test_bad_use_raises_clear_errors():
    encoder = StreamingEncoder(build_model("winder", seed=0, encoder=SMALL))
    with pytest.raises(RuntimeError, match="reset"):
        encoder.step(torch.zeros(1, 12, 8))
    encoder.reset(batch=2)
    with pytest.raises(ValueError, match=r"\(2, 12, 8\)"):
        encoder.step(torch.zeros(2, 12, 16))
    with pytest.raises(ValueError, match=r"\(2, 12, 8\)"):
        encoder.step(torch.zeros(3, 12, 8))


def test_tracker_equals_offline_phase_for_a_regular_rhythm():
    rr = 83.37  # stream samples (~72 bpm at 100 Hz), deliberately not a multiple of the patch
    peaks = 11.2 + rr * np.arange(14)
    times = token_times(125, 8, "causal")
    streamed = causal_phases(peaks, times)[0]
    reference = phase_from_events(peaks, times)
    inside = (times >= peaks[1]) & (times < peaks[-1])
    np.testing.assert_allclose(streamed[inside], reference[inside], rtol=0, atol=1e-12)
    assert np.isnan(streamed[times < peaks[1]]).all()  # two beats needed
    assert (streamed[times >= peaks[-1]] < 2 * math.pi).all()  # extrapolated, clipped


def test_tracker_uses_only_confirmed_past_peaks():
    rng = np.random.default_rng(0)
    peaks = [np.cumsum(rng.uniform(50, 120, 12)), np.cumsum(rng.uniform(60, 90, 13))]
    peaks[1][6:] += 330  # a long pause: the phase must clip below 2π
    times = token_times(125, 8, "causal")
    streamed = causal_phases(peaks, times)
    reference = [[naive_causal_phase(p, t) for t in times] for p in peaks]
    np.testing.assert_allclose(streamed, reference, rtol=0, atol=1e-9)
    vectorised = [causal_phase_from_events(p, times) for p in peaks]
    np.testing.assert_allclose(streamed, vectorised, rtol=0, atol=1e-12)
    assert np.nanmax(streamed) < 2 * math.pi
    cut = 500.0  # forgetting every peak after the cut changes nothing before it
    truncated = causal_phases([p[p <= cut] for p in peaks], times)
    np.testing.assert_array_equal(streamed[:, times <= cut], truncated[:, times <= cut])


def test_peak_replay_and_tracker_errors():
    due = list(peaks_due([np.array([3.0, 9.0, 10.0]), np.array([17.0])], np.array([7.0, 15, 23])))
    assert due == [[(0, 3.0)], [(0, 9.0), (0, 10.0)], [(1, 17.0)]]
    tracker = CausalPhaseTracker(batch=2)
    tracker.add_peak(10.0, record=1)
    with pytest.raises(ValueError, match="record 1"):
        tracker.add_peak(5.0, record=1)
    with pytest.raises(IndexError):
        tracker.add_peak(5.0, record=2)
    with pytest.raises(ValueError, match="before a confirmed peak"):
        tracker.phase(8.0)


def toy_monitor(warmup_beats):
    model = build_model("winder", seed=0, encoder=SMALL)
    symmetry = U1Symmetry(SMALL_SPECTRUM)
    return TransportMonitor(model, symmetry, warmup_beats=warmup_beats), symmetry


def test_monitor_scores_zero_for_an_equivariant_stream_and_jumps_when_it_breaks():
    monitor, symmetry = toy_monitor(warmup_beats=2)
    peaks = [30.0 + 75.0 * np.arange(14), 45.0 + 90.0 * np.arange(12)]
    times = token_times(125, 8, "causal")
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(2, symmetry.dim, generator=gen, dtype=torch.float64)
    shift = 2.0  # radians: the break rotates every token by ρ(δ) from token 100 on
    monitor.reset(batch=2)
    scores = []
    for t, (time, due) in enumerate(zip(times, peaks_due(peaks, times), strict=True)):
        for record, peak in due:
            monitor.add_peak(peak, record)
        phi = monitor.tracker.phase(time)
        amplitude = 0.5 + torch.rand(2, 1, generator=gen, dtype=torch.float64)
        z = amplitude * symmetry.act(v, torch.nan_to_num(phi) + (shift if t >= 100 else 0.0))
        scores.append(monitor.update(z.float(), phi))
    scores = torch.stack(scores, dim=1).double()
    # Warm-up: NaN until 2 + 2 beats are confirmed at the token's last sample.
    ready = np.stack([np.searchsorted(p, times, side="right") >= 4 for p in peaks])
    assert torch.equal(torch.isfinite(scores), torch.from_numpy(ready))
    assert scores[:, :100].nan_to_num().abs().max() < 1e-6
    # Just after the break the template is still v̂, so 1 − ⟨ρ(δ) v̂, v̂⟩ in closed form.
    unit = F.normalize(v, dim=-1)
    pairs = unit[:, 2:].reshape(2, -1, 2).square().sum(-1)  # |v̂_pair|² per rotating pair
    harmonics = torch.tensor([1, 1, 2, 2, 3, 3, 4], dtype=torch.float64)
    expected = 1 - unit[:, :2].square().sum(-1) - (pairs * torch.cos(harmonics * shift)).sum(-1)
    torch.testing.assert_close(scores[:, 100], expected, atol=1e-6, rtol=0)
    assert (scores[:, 100] > 0.05).all()


def test_monitor_step_matches_an_offline_reference():
    monitor, symmetry = toy_monitor(warmup_beats=1)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(2, 12, 1000, generator=gen)
    peaks = [20.5 + 81.0 * np.arange(12), 50.0 + np.cumsum(np.full(9, 97.3))]
    streamed = monitor.replay(x, peaks).double()
    z = offline(monitor.encoder.model, x)[0].double()
    times = token_times(125, 8, "causal")
    expected = torch.full((2, 125), math.nan, dtype=torch.float64)
    for record in range(2):
        total, count = torch.zeros(symmetry.dim, dtype=torch.float64), 0
        for t, time in enumerate(times):
            phi = naive_causal_phase(peaks[record], time)
            if math.isnan(phi):
                continue
            w = symmetry.matrix(torch.tensor(phi, dtype=torch.float64)).mT @ F.normalize(z[record, t], dim=0)
            if count and (peaks[record] <= time).sum() >= 3:
                expected[record, t] = 1 - w @ total / total.norm()
            total, count = total + w, count + 1
    assert torch.equal(streamed.isnan(), expected.isnan())
    torch.testing.assert_close(streamed, expected, atol=1e-5, rtol=0, equal_nan=True)
    assert torch.isfinite(streamed).sum() > 150


def test_monitor_equals_the_batch_transport_violation_detector():
    anomaly = pytest.importorskip("cyclejepa.evaluation.anomaly")
    monitor, symmetry = toy_monitor(warmup_beats=2)
    rng = np.random.default_rng(2)
    peaks_500hz = [np.cumsum(rng.integers(300, 500, 14)) for _ in range(3)]
    x = torch.randn(3, 12, 1000, generator=torch.Generator().manual_seed(8))
    streamed = monitor.replay(x, [p / 5 for p in peaks_500hz]).double().numpy()
    beats = anomaly.BeatTimes.from_events(peaks_500hz, event_fs=500.0, fs=100.0)
    phases = anomaly.causal_token_phases(beats, 125, 8)
    batch = anomaly.transport_violation(monitor.encoder.model, symmetry, x, phases, warmup_beats=2)
    np.testing.assert_array_equal(np.isnan(streamed), np.isnan(batch))
    np.testing.assert_allclose(streamed, batch, rtol=0, atol=1e-5)
    assert np.isfinite(streamed).sum() > 200


def test_monitor_rejects_mismatched_tokens_and_phases():
    monitor, _ = toy_monitor(warmup_beats=0)
    monitor.reset(batch=2)
    with pytest.raises(ValueError, match="phi"):
        monitor.update(torch.zeros(2, 16), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="symmetry"):
        TransportMonitor(monitor.encoder.model, U1Symmetry("4x0+2x1"))
