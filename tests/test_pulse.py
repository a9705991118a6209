"""The core ``pulse`` provider: closed-form fiducials on a synthetic pulse train, polarity and slow
rates, and one pulse per QRS of the shared multiparameter records (the library's R-peaks on their
ECG as the reference), inverted, offset and slowed."""

import numpy as np
import pytest

from conftest import SAMPLES
from cyclejepa.phase import PhaseProvider
from cyclejepa.phase.crosscheck import PAIRS, VARIANTS, read_channel, score_pulses, stretch
from cyclejepa.phase.cycles import orientation, pick_with_refractory, window_period
from cyclejepa.phase.pulse import PulseProvider
from cyclejepa.registry import PHASE_PROVIDERS

real_records = pytest.mark.skipif(not (SAMPLES / "v102s.hea").is_file(), reason="shared multiparameter records absent")


def pulse_train(fs=125.0, seconds=60.0, rise_s=0.12, seed=0, intervals=(0.65, 1.0), notch=0.0):
    """An upright pulse wave with known onsets: each beat rises as a half cosine over ``rise_s``
    from its onset and decays exponentially (τ 0.25 s) until the next, plus, with ``notch`` > 0,
    a dicrotic wave of that height rising 0.35 s after the onset (a half cosine over 0.08 s and
    its decay); slow drift and a little noise. Returns (wave, onsets in s)."""
    rng = np.random.default_rng(seed)
    onsets = np.cumsum(rng.uniform(*intervals, int(seconds / intervals[0])))
    onsets = onsets[onsets < seconds - 1.0]
    t = np.arange(round(seconds * fs)) / fs
    wave = np.zeros_like(t)
    for start, end in zip(onsets, np.append(onsets[1:], seconds)):
        u = (t - start) / rise_s
        beat = (t >= start) & (t < end)
        rise = 0.5 * (1.0 - np.cos(np.pi * np.clip(u, 0.0, 1.0)))
        decay = np.exp(-np.clip(t - start - rise_s, 0.0, None) / 0.25)
        v = (t - start - 0.35) / 0.08
        dicrotic = notch * 0.5 * (1.0 - np.cos(np.pi * np.clip(v, 0.0, 1.0))) * np.exp(-np.clip(v - 1.0, 0.0, None) * 0.08 / 0.25)
        wave[beat] = np.where(u[beat] < 1.0, rise[beat] * 0.95 + 0.05, decay[beat]) + dicrotic[beat]
    wave += 0.2 * np.sin(2 * np.pi * 0.1 * t) + 0.005 * rng.standard_normal(len(t))
    return wave, onsets


def test_registered_with_its_band_channels_and_reasons():
    assert PHASE_PROVIDERS.get("pulse") is PulseProvider and issubclass(PulseProvider, PhaseProvider)
    assert PulseProvider.cycle_band_hz == (0.5, 3.5)
    for name in ("PLETH", "Pleth", "PPG", "ABP", "ART", "IBP1", "finger_ppg"):
        assert PulseProvider.reads_channel(name), name
    for name in ("II", "RESP", "MCL1", "ECG", "EEG"):
        assert not PulseProvider.reads_channel(name), name


def test_feet_steepest_rises_and_peaks_against_the_closed_form():
    """A half-cosine rise of duration r from onset t0 is steepest at t0 + r/2, its tangent there
    meets the foot level at t0 + r/2 - r/π (the intersecting-tangent foot), and it peaks at t0 + r."""
    fs, rise = 125.0, 0.12
    wave, onsets = pulse_train(fs, rise_s=rise)
    expected = {"max-slope": onsets + rise / 2, "foot": onsets + rise / 2 - rise / np.pi, "peak": onsets + rise}
    for fiducial, times in expected.items():
        track = PHASE_PROVIDERS.build("pulse", fiducial=fiducial).phase(wave[None], fs, ["PLETH"])
        found = track.events / fs
        assert len(found) == len(onsets), fiducial
        # two samples at 125 Hz; the peak three (the band-pass rounds the corner of the rise)
        assert np.max(np.abs(found - times)) < (0.025 if fiducial == "peak" else 0.016), fiducial
        assert track.qc.ok


def test_an_inverted_wave_gives_the_same_events_and_the_wrong_polarity_does_not():
    fs = 125.0
    wave, _ = pulse_train(fs, seed=1)
    upright = PHASE_PROVIDERS.build("pulse").phase(wave[None], fs, ["pleth"]).events
    inverted = PHASE_PROVIDERS.build("pulse").phase(-wave[None], fs, ["pleth"]).events
    np.testing.assert_array_equal(inverted, upright)
    forced = PHASE_PROVIDERS.build("pulse", polarity="upright").phase(-wave[None], fs, ["pleth"]).events
    assert len(forced) != len(upright) or np.median(np.abs(forced - upright)) > 0.05 * fs  # the decay, not the rise


def test_polarity_is_not_turned_by_a_few_large_artefacts():
    """Five sharp falls 20 times the pulse's slope: the slope's extremes (1st percentile, skewness)
    now say "inverted", the fraction of rising samples still says upright."""
    from scipy.stats import skew

    from cyclejepa.phase.filters import bandpass

    fs = 125.0
    wave, onsets = pulse_train(fs, seed=2)
    for start in (1000, 2500, 4000, 5500, 7000):
        wave[start : start + 3] -= np.array([5.0, 10.0, 15.0])
        wave[start + 3 : start + 60] -= 15.0 * np.exp(-np.arange(57) / 20.0)
    slope = np.gradient(bandpass(wave, fs, (0.5, 8.0))) * fs
    assert np.percentile(slope, 99.9) < -np.percentile(slope, 0.1) and skew(slope) < 0  # the extremes are fooled
    assert orientation(slope) == 1.0
    found = PHASE_PROVIDERS.build("pulse", fiducial="max-slope").phase(wave[None], fs, ["PLETH"]).events / fs
    near = np.abs(found[:, None] - (onsets + 0.06)[None]).min(axis=0) < 0.02
    assert near.mean() > 0.9


def test_a_dicrotic_wave_at_45_to_60_per_minute_is_not_a_beat():
    """A dicrotic wave half the pulse's height, 0.35 s after each onset: with the shortest
    plausible interval as the only refractory period (0.27 s) it is a second beat; with the
    record's own cycle length it never is."""
    fs = 125.0
    wave, onsets = pulse_train(fs, seconds=120.0, intervals=(1.0, 1.33), notch=0.5, seed=3)
    track = PHASE_PROVIDERS.build("pulse").phase(wave[None], fs, ["PLETH"])
    assert len(track.events) == len(onsets) and track.qc.ok
    assert np.max(np.abs(track.events / fs - (onsets + 0.06 - 0.12 / np.pi))) < 0.016
    short = PHASE_PROVIDERS.build("pulse", refractory=0.01).phase(wave[None], fs, ["PLETH"])
    assert len(short.events) > 1.5 * len(onsets)  # the check can fail: the notch is a candidate


def test_a_very_irregular_rhythm_loses_no_beat():
    """Successive intervals anywhere in 0.55-1.1 s (as in atrial fibrillation): a window's
    autocorrelation peak can be two cycles, so the refractory period follows the record's median
    cycle where that is shorter; every beat is found, and none is found with a refractory period
    of twice the local cycle (the check can fail)."""
    fs = 125.0
    for seed in range(3):
        wave, onsets = pulse_train(fs, intervals=(0.55, 1.1), seed=seed)
        found = PHASE_PROVIDERS.build("pulse").phase(wave[None], fs, ["PLETH"]).events
        assert len(found) == len(onsets), seed
        assert len(PHASE_PROVIDERS.build("pulse", refractory=0.9).phase(wave[None], fs, ["PLETH"]).events) < len(onsets)


def test_the_autocorrelation_cycle_and_refractory_picking_against_naive_references():
    fs = 100.0
    t = np.arange(2000) / fs
    for period in (0.4, 0.8, 1.3):
        train = np.fmax(np.sin(2 * np.pi * t / period), 0.0) ** 8  # one narrow bump per cycle
        assert window_period(train, fs, (0.5, 3.5)) == pytest.approx(period, abs=1.0 / fs)
    rng = np.random.default_rng(0)
    candidates = np.sort(rng.choice(1000, 120, replace=False))
    heights = rng.random(120)
    refractory = np.full(1000, 15.0)
    from scipy.signal import find_peaks

    impulses = np.zeros(1000)
    impulses[candidates] = heights + 1.0  # find_peaks's distance rule on isolated peaks
    expected = find_peaks(np.concatenate([[0.0], impulses, [0.0]]), distance=15)[0] - 1
    np.testing.assert_array_equal(pick_with_refractory(candidates, heights, refractory), expected)


def test_a_flat_channel_fails_qc_in_the_providers_words_and_bad_input_is_named():
    track = PHASE_PROVIDERS.build("pulse").phase(np.ones((1, 1250)), 125.0, ["PLETH"])
    assert len(track.events) == 0 and track.qc.reasons == ["too_few_pulses", "low_phase_yield"]
    with pytest.raises(KeyError, match="'ABP'.*'PLETH'"):
        PHASE_PROVIDERS.build("pulse", lead="ABP").phase(np.ones((1, 1250)), 125.0, ["PLETH"])
    with pytest.raises(KeyError, match=r"no channel named as a pulse wave \(PPG, arterial pressure\).*'II', 'RESP'"):
        PHASE_PROVIDERS.build("pulse").phase(np.ones((2, 1250)), 125.0, ["II", "RESP"])
    with pytest.raises(ValueError, match="fiducial must be one of foot, max-slope, peak"):
        PHASE_PROVIDERS.build("pulse", fiducial="notch")


def test_stretch_is_the_wave_played_slower():
    x = np.sin(np.arange(100) / 7.0)
    y = stretch(x, 2.0)
    assert len(y) == 199
    np.testing.assert_allclose(y[::2], x)
    np.testing.assert_allclose(y[1::2], (x[:-1] + x[1:]) / 2)


@real_records
@pytest.mark.parametrize(("record", "ecg", "wave"), [PAIRS[0], PAIRS[2]])
def test_one_pulse_per_qrs_on_real_records_inverted_offset_and_slowed(record, ecg, wave):
    """v102s (PLETH) and 03700181 (ABP) against the R-peaks of their own ECG: sensitivity and PPV
    within 5 % of one, as recorded, inverted, with a large offset and slowed to 50 per minute."""
    qrs_channel = read_channel(SAMPLES / record, ecg)
    pulse_channel = read_channel(SAMPLES / record, wave)
    qrs = PHASE_PROVIDERS.build("ecg-rpeak", lead=ecg, detection_leads=[ecg]).phase(
        qrs_channel.samples[None], qrs_channel.fs, [ecg]
    )
    qrs_s = qrs_channel.times(qrs.events)
    rate = 60.0 / np.median(np.diff(qrs_s))
    for variant, make in VARIANTS.items():
        x, factor = make(pulse_channel.samples, rate)
        track = PulseProvider(lead=wave).phase(x[None], pulse_channel.fs, [wave])
        pulses_s = pulse_channel.start_s * factor + track.events / pulse_channel.fs
        scores = score_pulses(qrs_s * factor, pulses_s, stretch_factor=factor)
        assert scores["sensitivity"] >= 0.95 and scores["ppv"] >= 0.95, (variant, scores)
