"""Phase package: phase map, token conventions, QC, R-peak detection, record JSON."""

import json
import math

import numpy as np
import pytest

from cyclejepa.phase import (
    PHASE_MAX,
    EcgRPeakProvider,
    PhaseProvider,
    PhaseTrack,
    causal_phase,
    causal_phase_from_events,
    detect_r_peaks,
    match_events,
    phase_from_events,
    phase_record,
    read_beat_annotations,
    score_events,
)
from cyclejepa.registry import PHASE_PROVIDERS

TWO_PI = 2 * math.pi
LEADS = ["I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6"]
# P, Q, R, S, T waves: (offset from R in s, width in s, amplitude in mV).
WAVES = np.array(
    [
        [-0.20, 0.025, 0.15],
        [-0.03, 0.010, -0.15],
        [0.00, 0.012, 1.00],
        [0.03, 0.012, -0.30],
        [0.28, 0.050, 0.35],
    ]
)


def synthetic_ecg(fs, duration_s=10.0, n_leads=12, seed=0, noise_mv=0.02, wander_mv=0.3):
    """Sum-of-Gaussians ECG with known R times, baseline wander and white noise.

    Returns (signal (leads, samples), R times in s, clean signal without wander and noise).
    """
    rng = np.random.default_rng(seed)
    rr = 60 / 75 * (1 + 0.08 * rng.standard_normal(int(duration_s)))
    r_times = 0.5 + np.concatenate([[0.0], np.cumsum(rr)])
    r_times = r_times[r_times < duration_s - 0.4]
    t = np.arange(round(duration_s * fs)) / fs
    offset, width, amplitude = WAVES.T
    # Per-lead wave amplitudes: the template scaled per wave, with some leads inverted.
    gains = rng.uniform(0.5, 1.5, (n_leads, len(WAVES))) * amplitude
    gains *= np.where(np.arange(n_leads) % 4 == 3, -1.0, 1.0)[:, None]
    centres = r_times[:, None] + offset  # (beats, waves)
    bumps = np.exp(-0.5 * ((t - centres[..., None]) / width[:, None]) ** 2).sum(axis=0)
    clean = gains @ bumps
    wander = wander_mv * np.sin(2 * np.pi * 0.25 * t + rng.uniform(0, TWO_PI, (n_leads, 1)))
    noise = noise_mv * rng.standard_normal(clean.shape)
    return clean + wander + noise, r_times, clean


def naive_phase(events, time):
    """Phase of one time by a linear scan over the cycles (reference implementation)."""
    for start, end in zip(events[:-1], events[1:], strict=True):
        if start <= time < end:
            return TWO_PI * (time - start) / (end - start)
    return math.nan


class EventsProvider(PhaseProvider):
    """Returns fixed events: exercises the shared QC."""

    def __init__(self, events, **qc):
        super().__init__(**qc)
        self.fixed = np.asarray(events)

    def events(self, signal, fs, channel_names):
        return self.fixed


# --- phase map ------------------------------------------------------------------------------


def test_phase_from_events_hand_computed():
    events = np.array([10, 20, 40])
    times = np.array([5.0, 10.0, 15.0, 19.0, 20.0, 30.0, 39.0, 40.0, 45.0])
    nan = math.nan
    expected = [nan, 0.0, math.pi, 0.9 * TWO_PI, 0.0, math.pi, TWO_PI * 19 / 20, nan, nan]
    np.testing.assert_allclose(phase_from_events(events, times), expected, rtol=0, atol=1e-12)


def test_phase_from_events_matches_naive_scan():
    rng = np.random.default_rng(1)
    events = np.cumsum(rng.uniform(50, 150, 20))
    times = rng.uniform(-100, events[-1] + 100, 500)
    expected = [naive_phase(events, time) for time in times]
    np.testing.assert_allclose(phase_from_events(events, times), expected, rtol=0, atol=1e-12)


def naive_causal_phase(events, time):
    """Causal phase of one time from the last two events at or before it (reference)."""
    seen = [event for event in events if event <= time]
    if len(seen) < 2:
        return math.nan
    return min(TWO_PI * (time - seen[-1]) / (seen[-1] - seen[-2]), math.nextafter(TWO_PI, 0))


def test_causal_phase_from_events_matches_naive_scan():
    rng = np.random.default_rng(3)
    events = np.cumsum(rng.uniform(50, 150, 20))
    events[12:] += 400  # a pause: the phase saturates below 2π
    times = rng.uniform(-100, events[-1] + 300, (25, 20))
    expected = [[naive_causal_phase(events, time) for time in row] for row in times]
    causal = causal_phase_from_events(events, times)
    np.testing.assert_allclose(causal, expected, rtol=0, atol=1e-12)
    assert np.nanmax(causal) == PHASE_MAX < TWO_PI
    assert np.isnan(causal_phase_from_events(events[:1], times)).all()


def test_causal_phase_equals_phase_map_on_a_regular_train_and_ignores_later_events():
    events = 7.3 + 83.37 * np.arange(12)
    times = np.linspace(0, 1000, 777)
    inside = (times >= events[1]) & (times < events[-1])
    causal = causal_phase_from_events(events, times)
    np.testing.assert_allclose(causal[inside], phase_from_events(events, times)[inside], atol=1e-12)
    assert np.isnan(causal[times < events[1]]).all()
    cut = times <= events[5] + 40
    np.testing.assert_array_equal(causal_phase_from_events(events[:6], times)[cut], causal[cut])


def test_causal_phase_is_the_same_formula_on_tensors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    last = rng.uniform(0, 100, 50)
    previous, times = last - rng.uniform(20, 80, 50), last + rng.uniform(0, 150, 50)
    previous[:5] = math.nan
    as_numpy = causal_phase(times, last, previous)
    as_torch = causal_phase(*(torch.from_numpy(a) for a in (times, last, previous)))
    np.testing.assert_array_equal(as_torch.numpy(), as_numpy)
    expected = [naive_causal_phase([before, after], t) for t, after, before in zip(times, last, previous, strict=True)]
    np.testing.assert_allclose(as_numpy, expected, rtol=0, atol=1e-12)


def test_per_sample_phase_nan_outside_events_and_in_range():
    track = PhaseTrack(np.array([100, 180, 270, 350]), fs=500.0, n_samples=400)
    phase = track.phase
    assert np.isnan(phase[:100]).all() and np.isnan(phase[350:]).all()
    assert np.isfinite(phase[100:350]).all()
    assert phase[100] == 0 and phase[180] == 0 and phase[270] == 0
    assert phase[100:350].min() >= 0 and phase[100:350].max() < TWO_PI
    assert track.phase_yield == pytest.approx(250 / 400)
    assert track.phase_yield == pytest.approx(np.isfinite(phase).mean())


@pytest.mark.parametrize(
    "events, error",
    [
        (np.array([5, 5, 9]), "increasing"),
        (np.array([5, 400]), r"\[0, 400\)"),
        (np.array([1.5, 3.0]), "integer"),
    ],
)
def test_track_rejects_bad_events(events, error):
    with pytest.raises(ValueError, match=error):
        PhaseTrack(events, fs=500.0, n_samples=400)


# --- token phase ----------------------------------------------------------------------------


@pytest.mark.parametrize("convention, offset", [("centre", 3.5), ("causal", 7.0)])
def test_token_phase_closed_form_with_even_events(convention, offset):
    period, first = 410, 333  # native samples at 500 Hz
    events = np.arange(first, 5000, period)
    track = PhaseTrack(events, fs=500.0, n_samples=5000)
    phase = track.at_tokens(patch=8, fs_out=100.0, convention=convention)
    assert phase.shape == (125,)
    native_time = (8 * np.arange(125) + offset) * 5.0  # output sample -> native sample
    expected = TWO_PI * np.mod((native_time - first) / period, 1.0)
    defined = (native_time >= events[0]) & (native_time < events[-1])
    np.testing.assert_allclose(phase[defined], expected[defined], rtol=0, atol=1e-12)
    assert np.isnan(phase[~defined]).all()


def test_token_phase_uses_continuous_time_against_naive_reference():
    rng = np.random.default_rng(2)
    events = np.cumsum(rng.integers(200, 600, 12)) + 7  # 360 Hz native, irregular RR
    track = PhaseTrack(events, fs=360.0, n_samples=int(events[-1]) + 300)
    phase = track.at_tokens(patch=8, fs_out=100.0, convention="centre", n_tokens=60)
    expected = [naive_phase(events, (8 * k + 3.5) * 3.6) for k in range(60)]
    np.testing.assert_allclose(phase, expected, rtol=0, atol=1e-12)


def test_causal_minus_centre_is_35_ms_at_100_hz():
    period = 400  # 0.8 s at 500 Hz
    track = PhaseTrack(np.arange(100, 5000, period), fs=500.0, n_samples=5000)
    centre = track.at_tokens(8, 100.0, "centre")
    causal = track.at_tokens(8, 100.0, "causal")
    both = np.isfinite(centre) & np.isfinite(causal)
    shift = np.mod(causal[both] - centre[both], TWO_PI)
    np.testing.assert_allclose(shift, TWO_PI * 0.035 / 0.8, rtol=0, atol=1e-12)


def test_unknown_convention_is_rejected():
    track = PhaseTrack(np.array([10, 400]), fs=500.0, n_samples=500)
    with pytest.raises(ValueError, match="convention"):
        track.at_tokens(8, 100.0, convention="middle")


# --- QC -------------------------------------------------------------------------------------


def run_qc(events, n_samples=5000, **qc):
    return EventsProvider(events, **qc).phase(np.zeros((1, n_samples)), 500.0, ["x"]).qc


def test_qc_passes_regular_rhythm_and_reports_metrics():
    verdict = run_qc(np.arange(200, 4900, 400))
    assert verdict.ok and verdict.reasons == []
    assert verdict.metrics["n_events"] == 12
    assert verdict.metrics["interval_median_s"] == pytest.approx(0.8)
    assert verdict.metrics["rate_per_min"] == pytest.approx(75.0)
    assert verdict.metrics["phase_yield"] == pytest.approx(4400 / 5000)


def test_qc_flat_line_has_too_few_beats():
    track = EcgRPeakProvider(lead="all").phase(np.full((12, 5000), 0.3), 500.0, LEADS)
    assert len(track.events) == 0
    assert not track.qc.ok
    assert "too_few_beats" in track.qc.reasons and "low_phase_yield" in track.qc.reasons


def test_qc_erratic_event_train_is_implausible():
    # 150 ms interval (400 bpm) in an otherwise regular train.
    events = np.concatenate([[200, 600, 1000, 1075], np.arange(1475, 4900, 400)])
    assert run_qc(events).reasons == ["implausible_interval"]  # the generic name; ecg-rpeak says implausible_rr
    # Every interval plausible, but one successive ratio is 3 > 2.5.
    events = np.cumsum([250, 300, 300, 900, 300, 300, 300, 300, 300, 300, 300, 300, 300, 300])
    assert run_qc(events).reasons == ["implausible_interval"]
    assert run_qc(events, max_interval_ratio=None).ok


def test_qc_short_valid_span_has_low_phase_yield():
    verdict = run_qc(np.arange(100, 1700, 400))  # 5 beats in the first 3.4 s of 10 s
    assert verdict.reasons == ["low_phase_yield"]
    assert verdict.metrics["phase_yield"] == pytest.approx(1200 / 5000)


# --- R-peak detection -----------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4000,), (12, 4000), (2, 3, 900)])
@pytest.mark.parametrize(("fs", "band"), [(500.0, (5.0, 15.0)), (125.0, (8.0, 40.0)), (100.0, (0.5, 40.0))])
def test_bandpass_equals_scipy_sosfiltfilt(shape, fs, band):
    from scipy.signal import butter, sosfiltfilt

    from cyclejepa.phase.ecg.rpeak import bandpass

    x = np.random.default_rng(len(shape)).normal(size=shape)
    sos = butter(2, [band[0], min(band[1], 0.45 * fs)], btype="bandpass", fs=fs, output="sos")
    np.testing.assert_allclose(bandpass(x, fs, band), sosfiltfilt(sos, x, axis=-1), rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 1248, 1249])
def test_partition_median_and_quantile_equal_numpy(n):
    from cyclejepa.phase.ecg.rpeak import _median, _quantile

    x = np.random.default_rng(n).lognormal(size=(12, n))
    np.testing.assert_array_equal(_median(x), np.median(x, axis=-1))
    for q in (0.05, 0.5, 0.95):
        np.testing.assert_array_equal(_quantile(x, q), np.quantile(x, q, axis=-1))


def test_detects_r_peaks_on_synthetic_12_lead_ecg_at_500_hz():
    signal, r_times, _ = synthetic_ecg(500.0)
    track = EcgRPeakProvider(lead="all").phase(signal, 500.0, LEADS)
    assert len(track.events) == len(r_times)
    np.testing.assert_allclose(track.events / 500.0, r_times, atol=0.010)
    assert track.qc.ok


@pytest.mark.parametrize("fs", [125.0, 250.0, 360.0, 1000.0])
def test_detects_r_peaks_single_lead_at_other_rates(fs):
    signal, r_times, _ = synthetic_ecg(fs, n_leads=2, seed=3)
    peaks = detect_r_peaks(signal[1], fs)
    assert len(peaks) == len(r_times)
    np.testing.assert_allclose(peaks / fs, r_times, atol=0.010)


def two_wave_ecg(fs, r_mv, s_mv, seed=4):
    """Beats of an R wave (``r_mv``) and an S wave (``s_mv``, 30 ms later) plus 0.4 mV baseline
    wander; returns the signal and the samples of the R-wave and S-wave extrema."""
    rng = np.random.default_rng(seed)
    beats = 0.5 + np.cumsum(np.r_[0.0, 0.8 * (1 + 0.08 * rng.standard_normal(10))])
    t = np.arange(round(10 * fs)) / fs
    bump = lambda centre: np.exp(-0.5 * ((t - centre[:, None]) / 0.012) ** 2).sum(axis=0)  # noqa: E731
    clean = r_mv * bump(beats) + s_mv * bump(beats + 0.03)
    around = np.round(beats * fs).astype(int)[:, None] + np.arange(-5, 21)  # R - 10 ms to S + 10 ms
    r_at = around[np.arange(len(beats)), np.argmax(np.sign(r_mv) * clean[around], axis=1)]
    s_at = around[np.arange(len(beats)), np.argmax(np.sign(s_mv) * clean[around], axis=1)]
    return clean + 0.4 * np.sin(2 * np.pi * 0.3 * t), r_at, s_at


@pytest.mark.parametrize(
    ("r_mv", "s_mv", "expected"),
    [
        (1.0, -0.3, "r"),  # qRs: the R wave
        (0.5, -0.9, "r"),  # RS with the deeper S: still the R wave
        (0.3, -1.0, "r"),  # rS, the S 3.3 times the r: the R wave
        (0.2, -1.0, "s"),  # rS, the S over 4 times the r (a vestigial r): the nadir
        (-1.0, 0.3, "r"),  # an inverted lead: the trough of the inverted R
    ],
)
def test_refinement_lands_on_the_r_wave_or_the_nadir(r_mv, s_mv, expected):
    fs = 500.0
    ecg, r_wave, s_wave = two_wave_ecg(fs, r_mv, s_mv)
    peaks = detect_r_peaks(ecg, fs)
    np.testing.assert_allclose(peaks, r_wave if expected == "r" else s_wave, rtol=0, atol=1)  # 2 ms


def test_inverted_ectopic_beat_refines_to_its_trough():
    fs = 500.0
    _, r_times, clean = synthetic_ecg(fs, n_leads=1, noise_mv=0.0, wander_mv=0.0, seed=5)
    t = np.arange(clean.shape[1]) / fs
    ectopic = r_times[5]
    beat = np.abs(t - ectopic) < 0.15
    ecg = clean[0].copy()
    ecg[beat] = -2.0 * np.exp(-0.5 * ((t[beat] - ectopic) / 0.02) ** 2)  # wide, negative QRS
    peaks = detect_r_peaks(ecg, fs)
    assert np.min(np.abs(peaks - round(ectopic * fs))) <= 1


def test_lead_selection_is_case_insensitive_and_errors_list_channels():
    signal, r_times, _ = synthetic_ecg(500.0, seed=6)
    lower = [name.lower() for name in LEADS]
    by_name = EcgRPeakProvider(lead="V5").phase(signal, 500.0, lower).events
    np.testing.assert_array_equal(by_name, detect_r_peaks(signal[10], 500.0))
    default = EcgRPeakProvider().phase(signal, 500.0, lower).events  # "ii" when present
    np.testing.assert_array_equal(default, detect_r_peaks(signal[1], 500.0))
    first = EcgRPeakProvider().phase(signal[[6, 1]], 500.0, ["V1", "X"]).events  # else first
    np.testing.assert_array_equal(first, detect_r_peaks(signal[6], 500.0))
    with pytest.raises(KeyError, match=r"'V7'.*\['i', 'ii'"):
        EcgRPeakProvider(lead="V7").phase(signal, 500.0, lower)
    with pytest.raises(ValueError, match="channel names"):
        EcgRPeakProvider().phase(signal, 500.0, LEADS[:3])
    assert isinstance(PHASE_PROVIDERS.build("ecg-rpeak", lead="II"), EcgRPeakProvider)


def test_only_channels_named_as_ecg_leads_take_part_in_detection():
    """An arterial pressure channel beside the ECG (pulses 0.25 s after each R wave) never
    votes: the beats are those of the ECG lead alone, also when the pressure comes first."""
    from cyclejepa.phase.ecg.provider import ECG_LEAD_NAME, ecg_lead_rows

    leads = ["I", "aVR", "V4R", "vz", "MLII", "MCL1", "CM5", "ECG", "ecg2", "Lead I", "DIII"]
    others = ["ABP", "ART", "PLETH", "PLETH (NU)", "Resp", "SpO2", "CVP", "EEG", "Lead"]
    assert [bool(ECG_LEAD_NAME.fullmatch(name)) for name in leads + others] == [True] * 11 + [False] * 9
    assert ecg_lead_rows(["ABP", "MCL1", "RESP"]) == [1] and ecg_lead_rows(["ch0", "ch1"]) == [0, 1]
    ecg, r_times, _ = synthetic_ecg(125.0, duration_s=30.0, n_leads=1, seed=10)
    t = np.arange(ecg.shape[1]) / 125.0
    pressure = 60 + 40 * np.exp(-0.5 * ((t - r_times[:, None] - 0.25) / 0.08) ** 2).sum(axis=0)
    alone = detect_r_peaks(ecg[0], 125.0)
    assert len(alone) == len(r_times)
    for names, order in [(["MCL1", "ABP"], [0, 1]), (["ABP", "MCL1"], [1, 0])]:
        signal = np.stack([ecg[0], pressure])[order]
        np.testing.assert_array_equal(EcgRPeakProvider().phase(signal, 125.0, names).events, alone)
        np.testing.assert_array_equal(EcgRPeakProvider(lead="all").phase(signal, 125.0, names).events, alone)


def test_a_125_hz_mcl1_record_has_as_many_beats_as_its_arterial_pulses(physionet_samples):
    """03700181 (MCL1, ABP, RESP at 125 Hz, 600 s; its ABP has 1,224 pulses): the default
    finds one beat per pulse, not one per QRS and T wave; each pulse follows one beat by the
    record's pulse transit delay."""
    import wfdb

    from cyclejepa.phase.ecg.reference_sets import arterial_pulses

    path = physionet_samples / "03700181"
    result = phase_record(path)
    record = wfdb.rdrecord(str(path))
    pulses = arterial_pulses(record.p_signal[:, record.sig_name.index("ABP")], record.fs)
    beats = np.array(result["r_peaks"])
    assert abs(len(pulses) - 1224) <= 12 and abs(len(beats) - len(pulses)) <= 0.01 * len(pulses)
    assert result["qc"]["ok"]
    after_a_beat = pulses[pulses > beats[0]]
    delay = np.median(after_a_beat - beats[np.searchsorted(beats, after_a_beat) - 1])
    matched, _ = match_events(beats + round(delay), pulses, 0.08 * record.fs)
    assert len(matched) >= 0.99 * len(pulses)


def test_detects_through_non_finite_samples():
    signal, r_times, _ = synthetic_ecg(500.0, n_leads=1, seed=7)
    signal[0, 1200:1203] = np.nan
    track = EcgRPeakProvider().phase(signal, 500.0, ["II"])
    np.testing.assert_allclose(track.events / 500.0, r_times, atol=0.010)


# --- scoring and real records ---------------------------------------------------------------


def test_match_events_is_one_to_one_within_tolerance():
    detected = np.array([98, 105, 300, 520, 900])
    reference = np.array([100, 310, 500, 700])
    det, ref = match_events(detected, reference, tolerance=15)
    assert det.tolist() == [0, 2] and ref.tolist() == [0, 1]  # 105 loses to 98; 520 too far
    scores = score_events(detected, reference, fs=1000.0, tolerance_s=0.015)
    assert (scores["tp"], scores["fn"], scores["fp"]) == (2, 2, 3)
    assert scores["median_abs_error_ms"] == pytest.approx(6.0)


def test_record_100_against_reference_annotations(physionet_samples):
    """Whole 30-min MIT-BIH record 100, lead MLII, beats matched within 50 ms."""
    path = physionet_samples / "100"
    result = phase_record(path)
    assert result["fs"] == 360 and result["record"] == str(path)
    scores = score_events(np.array(result["r_peaks"]), read_beat_annotations(path), fs=360.0)
    assert scores["sensitivity"] >= 0.99 and scores["ppv"] >= 0.99
    assert scores["median_abs_error_ms"] <= 3.0  # annotations mark the R-wave peak


def test_phase_record_json_contract(physionet_samples):
    result = phase_record(physionet_samples / "s0010_re")  # lead names are lower case
    assert set(result) == {"record", "fs", "r_peaks", "rates", "qc", "phase_yield"}  # rates: one per cycle
    decoded = json.loads(json.dumps(result, allow_nan=False))
    assert decoded == result
    assert result["fs"] == 1000 and all(type(peak) is int for peak in result["r_peaks"])
    assert {"ok", "reasons", "n_events", "phase_yield"} <= set(result["qc"])
    assert result["qc"]["ok"] and 40 <= len(result["r_peaks"]) <= 60  # ~80 bpm over 38.4 s
    rr = np.diff(result["r_peaks"]) / 1000.0
    assert np.all((rr > 0.6) & (rr < 0.9))
    multi = phase_record(physionet_samples / "s0010_re", lead="all")
    assert len(match_events(multi["r_peaks"], result["r_peaks"], 50)[0]) == len(result["r_peaks"])


def test_phase_record_errors_name_the_problem(physionet_samples, tmp_path):
    with pytest.raises(FileNotFoundError, match="nonexistent"):
        phase_record(tmp_path / "nonexistent")
    with pytest.raises(KeyError, match="'V9'.*'MLII'"):
        phase_record(physionet_samples / "100", lead="V9")

    with pytest.raises(ValueError, match="phase provider 'Unassessed' returned a track without a QC verdict"):
        phase_record(physionet_samples / "s0010_re", provider=Unassessed())


class Unassessed(EcgRPeakProvider):
    """A provider whose tracks carry no QC verdict."""

    def phase(self, signal, fs, channel_names):
        track = super().phase(signal, fs, channel_names)
        track.qc = None
        return track


# --- named detectors, the annotated real sets, real PTB-XL, the synthetic ground truth --------


def test_detector_registry_names_the_default_first_and_suggests_close_names():
    from cyclejepa.phase import detector_names, get_detector

    names = detector_names()
    assert names[0] == "cyclejepa" and {"pan-tompkins", "wfdb-xqrs", "neurokit2:neurokit"} <= set(names)
    with pytest.raises(KeyError, match="Did you mean .pan-tompkins."):
        get_detector("pan-tomkins")
    with pytest.raises(KeyError, match="pan-tomkins"):
        EcgRPeakProvider(detector="pan-tomkins")  # at construction, before any record


def test_a_plugin_detector_registered_in_the_registry_serves_the_provider(monkeypatch):
    """A detector registered as a plugin would (``RPEAK_DETECTORS.register``) is listed, named
    in the provider's config, and called on the timing lead: its events are the provider's."""
    from scipy.signal import find_peaks

    from cyclejepa.phase import detector_names
    from cyclejepa.registry import RPEAK_DETECTORS

    monkeypatch.setattr(RPEAK_DETECTORS, "_entries", dict(RPEAK_DETECTORS._entries))  # unregistered after

    @RPEAK_DETECTORS.register("tallest-samples")
    def tallest(signal, fs, timing_row):
        return find_peaks(signal[timing_row], height=0.5, distance=int(0.25 * fs))[0]

    signal, r_times, _ = synthetic_ecg(500.0, noise_mv=0.0, wander_mv=0.0, seed=9)
    assert "tallest-samples" in detector_names()
    track = PHASE_PROVIDERS.build("ecg-rpeak", lead="V5", detector="tallest-samples").phase(signal, 500.0, LEADS)
    np.testing.assert_array_equal(track.events, tallest(signal, 500.0, 10))
    np.testing.assert_allclose(track.events / 500.0, r_times, atol=0.004)


@pytest.mark.parametrize("detector", ["pan-tompkins", "neurokit2:neurokit", "wfdb-xqrs"])
def test_named_detectors_run_on_the_timing_lead(detector):
    signal, r_times, _ = synthetic_ecg(500.0, seed=8)
    events = EcgRPeakProvider(lead="V5", detector=detector).phase(signal, 500.0, LEADS).events
    det, ref = match_events(events, np.round(r_times * 500.0), 25)
    assert len(det) == len(r_times) and len(events) <= len(r_times) + 1
    lead_v5 = EcgRPeakProvider(lead="V5", detector=detector).phase(signal[[10]], 500.0, ["V5"])
    np.testing.assert_array_equal(events, lead_v5.events)  # one lead read, the others ignored


def reference_scores(name, detector):
    from cyclejepa.phase import get_detector
    from cyclejepa.phase.ecg.reference_sets import load_set, score_set

    from conftest import SHARED

    try:
        records = list(load_set(name, SHARED / "data"))
    except FileNotFoundError as error:
        pytest.skip(str(error))
    detect = get_detector(detector)
    return score_set(name, [(r, detect(r.signal, r.fs, 0)) for r in records])


# Pooled (Se, PPV) that the default detector must reach on each set (benchmarks/
# phase_validation.py; docs/phase.md): just under its own figures, and above the better of
# NeuroKit2 0.2.13 `neurokit` and WFDB 4.3.1 XQRS there (cpsc2019: 0.884 / 0.957; cpsc2021:
# 0.980 / 0.964).
FLOORS = {"cpsc2019": (50, 0.935, 0.970), "cpsc2021": (18, 0.985, 0.968)}


@pytest.mark.parametrize("name", ["cpsc2019", "cpsc2021"])
def test_default_detector_beats_the_peers_on_the_cpsc_sets(name):
    scores = reference_scores(name, "cyclejepa")
    records, se, ppv = FLOORS[name]
    assert scores["records"] == records
    assert scores["sensitivity"] >= se and scores["ppv"] >= ppv, scores


def test_default_detector_beats_pan_tompkins_on_cpsc2019():
    """The single-lead core the paper names stays selectable; the default finds more beats."""
    default, core = reference_scores("cpsc2019", "cyclejepa"), reference_scores("cpsc2019", "pan-tompkins")
    assert default["tp"] > core["tp"] + 50 and default["fp"] < core["fp"]


def test_arterial_pulses_count_systolic_peaks_not_dicrotic_waves():
    """Pulses of known times (a 40 mmHg systolic wave and a 12 mmHg dicrotic wave 0.22 s later,
    its notch 1.8 mmHg deep; 0.5 mmHg noise; RR 0.45-0.95 s): every systolic peak, nothing else."""
    from cyclejepa.phase.ecg.reference_sets import arterial_pulses

    fs, rng = 125.0, np.random.default_rng(0)
    beats = np.cumsum(rng.uniform(0.45, 0.95, 80))
    t = np.arange(round((beats[-1] + 1) * fs)) / fs
    wave = lambda centre, width: np.exp(-0.5 * ((t - centre[:, None]) / width) ** 2).sum(axis=0)  # noqa: E731
    pressure = 60 + 40 * wave(beats, 0.08) + 12 * wave(beats + 0.22, 0.05) + rng.normal(0, 0.5, len(t))
    found = arterial_pulses(pressure, fs)
    assert len(found) == len(beats)
    np.testing.assert_allclose(found / fs, beats, atol=0.025)  # ±3 samples at 125 Hz
    with pytest.raises(ValueError, match="finite"):
        arterial_pulses(np.r_[pressure[:10], np.nan], fs)


def read_ptbxl_archive(folder, count=None, names=None):
    """Real PTB-XL records (500 Hz, 12 leads, mV) of the shared archive, ``{name: signal}``:
    the first ``count`` complete ones in archive order, or those named (``"00041_hr"``)."""
    import tarfile

    from cyclejepa.data.ptbxl import read_verified

    from conftest import SHARED

    archive = SHARED / "data" / "ptbxl-dev" / "ptbxl-dev-434.tar.xz"
    if not archive.is_file():
        pytest.skip(f"real PTB-XL records not found at {archive}")
    complete = []
    with tarfile.open(archive) as tar:
        for member in tar:  # archive order; stop once the records asked for are complete
            stem = member.name.rsplit("/", 1)[-1].split(".")[0]
            if member.isfile() and "/records500/" in member.name and (names is None or stem in names):
                path = folder / member.name.rsplit("/", 1)[1]
                path.write_bytes(tar.extractfile(member).read())
                if path.with_suffix(".hea").exists() and path.with_suffix(".dat").exists():
                    complete.append(path.with_suffix(""))
                    if len(complete) == (count or len(names)):
                        break
    return {path.name: read_verified(path).astype(np.float64) for path in complete}


pytestmark = pytest.mark.xdist_group("phase")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def ptbxl_records(tmp_path_factory):
    """24 real PTB-XL records of the shared archive."""
    return read_ptbxl_archive(tmp_path_factory.mktemp("ptbxl-records"), count=24)


def test_real_ptbxl_records_agree_with_the_beats_both_peers_find(ptbxl_records):
    """Beats that NeuroKit2 and XQRS both find on lead II (±50 ms, 0.5 s edges aside): the
    default provider finds each of them and adds none that neither has, except on the paced
    record 498, where the peers mark the pacemaker spike and the default (spikes removed) the
    paced QRS after it."""
    from cyclejepa.data.ptbxl import LEADS as PTBXL_LEADS
    from cyclejepa.phase import get_detector

    assert "00498_hr" in ptbxl_records
    failed = 0
    for name, signal in ptbxl_records.items():
        track = EcgRPeakProvider().phase(signal, 500.0, list(PTBXL_LEADS))
        failed += not track.qc.ok
        nk, xqrs = (get_detector(d)(signal, 500.0, 1) for d in ("neurokit2:neurokit", "wfdb-xqrs"))
        both = nk[match_events(nk, xqrs, 25)[0]]
        both, mine = (x[(x >= 250) & (x < 4750)] for x in (both, track.events))
        if name == "00498_hr":
            after = mine[np.minimum(np.searchsorted(mine, both), len(mine) - 1)] - both  # next detection
            assert len(both) >= 8 and np.all((after >= 20) & (after <= 65)), after
            continue
        matched, _ = match_events(mine, both, 25)
        assert len(matched) == len(both), (name, both, mine)
        unmatched = np.delete(mine, matched)
        near_a_peer = [min(np.abs(nk - e).min(initial=99), np.abs(xqrs - e).min(initial=99)) <= 25 for e in unmatched]
        assert all(near_a_peer), (name, unmatched)
    assert failed <= 1


def test_synthetic_ground_truth_12_leads():
    from cyclejepa.data.ptbxl import LEADS as PTBXL_LEADS
    from cyclejepa.data.ptbxl import N_SAMPLES
    from cyclejepa.data.synthetic import generate_records

    records = generate_records(64, 0)
    tp = fn = fp = 0
    for signal, truth in zip(records.signals, records.rpeaks, strict=True):
        events = EcgRPeakProvider().phase(signal.astype(np.float64), 500.0, list(PTBXL_LEADS)).events
        events, truth = (x[(x >= 25) & (x < N_SAMPLES - 25)] for x in (events, np.asarray(truth)))
        matched, _ = match_events(events, truth, 25)
        tp, fn, fp = tp + len(matched), fn + len(truth) - len(matched), fp + len(events) - len(matched)
    assert tp > 700 and tp / (tp + fn) >= 0.99 and tp / (tp + fp) >= 0.99, (tp, fn, fp)


def test_real_rs_complexes_are_timed_on_the_r_wave_and_qs_complexes_on_the_nadir(tmp_path):
    """The fiducial convention on real PTB-XL records whose lead II has an rS complex with an r
    of a quarter to a half of the S (ecg_id 41, 235, 346, 447): the R wave, where NeuroKit2
    (which times the QRS maximum) puts it, not the S nadir 30-90 ms later; on a QS complex
    (477, no R wave) the nadir: the lead's minimum within 20 ms."""
    from cyclejepa.data.ptbxl import LEADS as PTBXL_LEADS
    from cyclejepa.phase import get_detector
    from cyclejepa.phase.ecg.rpeak import REFINE_BAND_HZ, bandpass

    rs = ["00041_hr", "00235_hr", "00346_hr", "00447_hr"]
    records = read_ptbxl_archive(tmp_path, names=[*rs, "00477_hr"])
    for name in rs:
        mine = EcgRPeakProvider().phase(records[name], 500.0, list(PTBXL_LEADS)).events
        nk = get_detector("neurokit2:neurokit")(records[name], 500.0, 1)
        found, ref = match_events(mine, nk, 50)
        assert len(found) >= len(nk) - 1 and np.median(np.abs(mine[found] - nk[ref])) <= 5, (name, mine, nk)
    qs = records["00477_hr"]
    mine = EcgRPeakProvider().phase(qs, 500.0, list(PTBXL_LEADS)).events
    lead_ii = bandpass(qs[1], 500.0, REFINE_BAND_HZ)
    around = np.clip(mine[:, None] + np.arange(-10, 11), 0, len(lead_ii) - 1)
    assert len(mine) == 5 and np.all(lead_ii[mine] == lead_ii[around].min(axis=1))


def test_providers_declare_cycle_band_and_the_channels_they_read():
    """`cycle_band_hz` (rates derive from it) and `reads_channel`, which the `phase` command
    uses to pick a provider: ECG lead names are read by ``ecg-rpeak``, nothing else is."""
    assert PhaseProvider.cycle_band_hz is None and not PhaseProvider.reads_channel("II")
    assert EcgRPeakProvider.cycle_band_hz == (0.5, 3.5)
    for name in ("II", "v5", "MCL1", "ECG", "Lead I", " aVF "):
        assert EcgRPeakProvider.reads_channel(name), name
    for name in ("PLETH", "ABP", "RESP", "Pleth", "ART"):
        assert not EcgRPeakProvider.reads_channel(name), name


def test_an_unknown_provider_from_elsewhere_names_where_it_comes_from(monkeypatch):
    from cyclejepa.registry import UnknownComponentError

    PHASE_PROVIDERS.names()  # the built-ins loaded, then the examples' provider taken out if a test registered it
    monkeypatch.setattr(PHASE_PROVIDERS, "_entries", {k: v for k, v in PHASE_PROVIDERS._entries.items() if k != "resp-breath"})
    with pytest.raises(UnknownComponentError) as caught:
        PHASE_PROVIDERS.get("pulse-phase")
    assert str(caught.value).startswith("unknown phase provider 'pulse-phase'; registered: breath, composite, ecg-rpeak, pulse")
    assert str(caught.value).endswith("'pulse-phase' was the examples' pulse provider; the core provider 'pulse' replaces it")
    with pytest.raises(
        UnknownComponentError, match=r"'resp-breath' is registered by the cyclejepa-examples package: `pip install -e examples`"
    ):
        PHASE_PROVIDERS.get("resp-breath")
    with pytest.raises(UnknownComponentError, match=r"unknown phase provider 'puls'.*Did you mean 'pulse'\?"):
        PHASE_PROVIDERS.get("puls")
