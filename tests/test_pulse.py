"""The core ``pulse`` provider: closed-form fiducials on a synthetic pulse train, polarity and slow
rates, and one pulse per QRS of the shared multiparameter records (the library's R-peaks on their
ECG as the reference), inverted, offset and slowed."""

import numpy as np
import pytest

from conftest import SAMPLES
from cyclejepa.phase import PhaseProvider
from cyclejepa.phase.crosscheck import PAIRS, VARIANTS, check_pulses, stretch
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
    for start, end in zip(onsets, np.append(onsets[1:], seconds), strict=True):
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
    with pytest.raises(KeyError, match=r"no channel named as PPG or arterial pressure.*'II', 'RESP'"):
        PHASE_PROVIDERS.build("pulse").phase(np.ones((2, 1250)), 125.0, ["II", "RESP"])
    with pytest.raises(ValueError, match="fiducial\n  Input should be 'foot', 'max-slope' or 'peak'"):
        PHASE_PROVIDERS.build("pulse", fiducial="notch")


def test_stretch_is_the_wave_played_slower():
    x = np.sin(np.arange(100) / 7.0)
    y = stretch(x, 2.0)
    assert len(y) == 199
    np.testing.assert_allclose(y[::2], x)
    np.testing.assert_allclose(y[1::2], (x[:-1] + x[1:]) / 2)


@real_records
@pytest.mark.parametrize(("record", "ecg", "wave"), [PAIRS[0], PAIRS[2], PAIRS[3]])
def test_one_pulse_per_qrs_on_real_records_inverted_offset_and_slowed(record, ecg, wave):
    """v102s (PLETH), 03700181 (ABP) and mixedsignals (Pleth at 125 Hz beside its ECG at 250 Hz,
    read each at its own rate) against the R-peaks of their own ECG: sensitivity and PPV within
    5 % of one, as recorded, inverted, with a large offset and slowed to 50 per minute."""
    rows = check_pulses(SAMPLES / record, ecg, wave)
    assert [row["variant"] for row in rows] == list(VARIANTS)
    for row in rows:
        assert row["sensitivity"] >= 0.95 and row["ppv"] >= 0.95, row
        assert abs(row["pulses"] - row["qrs"]) <= 0.05 * row["qrs"], row


@real_records
def test_one_pulse_per_qrs_on_every_shared_record_where_the_ecg_passes_its_own_qc():
    """a103l, a false-alarm record whose ECG fails QC over its last 70 s, included: over the 10 s
    windows where the reference ECG passes its own QC (most of every record), sensitivity and
    PPV within 5 % of one on every pair, as recorded and slowed."""
    for record, ecg, wave in PAIRS:
        for row in check_pulses(SAMPLES / record, ecg, wave):
            assert row["reliable_qrs"] >= 0.8 * row["qrs"], row  # the gate keeps most of the record
            assert row["reliable_sensitivity"] >= 0.95 and row["reliable_ppv"] >= 0.95, row


def test_reference_windows_keep_the_times_of_windows_whose_qc_passes():
    """A 30 s 'ECG' of clean 1 Hz spikes whose middle 10 s are flat: times in the first and last
    window are kept, those of the flat window and outside the record are not."""
    from cyclejepa.phase.crosscheck import Channel, reference_windows
    from cyclejepa.phase.ecg.provider import EcgRPeakProvider

    fs = 250.0
    t = np.arange(int(30 * fs)) / fs
    ecg = np.exp(-(((t % 1.0) - 0.5) ** 2) / (2 * 0.01**2))
    ecg[(t >= 10) & (t < 20)] = 0.0
    reliable = reference_windows(Channel(ecg, fs, 5.0), EcgRPeakProvider(lead="II", detection_leads=["II"]))
    times = np.array([4.0, 6.0, 14.9, 15.1, 24.9, 25.1, 34.9, 35.1])
    np.testing.assert_array_equal(reliable(times), [False, True, True, False, False, True, True, False])


# --- the phase command picks the provider from the channel names -----------------------------


def write_record(folder, name, channels):
    """A WFDB record of ``channels`` ({name: (samples, unit)}) at 125 Hz."""
    import wfdb

    names = list(channels)
    signal = np.stack([channels[n][0] for n in names], axis=1)
    wfdb.wrsamp(name, fs=125.0, units=[channels[n][1] for n in names], sig_name=names, p_signal=signal,
                fmt=["16"] * len(names), write_dir=str(folder))  # fmt: skip
    return folder / name


def invoke_phase(*args):
    import json

    from typer.testing import CliRunner

    from cyclejepa.cli import app

    result = CliRunner().invoke(app, ["phase", *map(str, args)])
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result, lines


def test_phase_command_runs_pulse_on_a_pulse_wave_and_never_the_r_peak_detector(tmp_path):
    """A PLETH-only record: the pulse provider, its events under "events", no "r_peaks"; asked
    for the R-peak detector, the record is refused (the pulse wave is not an ECG)."""
    wave, onsets = pulse_train()
    record = write_record(tmp_path, "pleth_only", {"PLETH": (wave, "NU")})
    result, (printed,) = invoke_phase(record)
    assert result.exit_code == 0, result.output
    assert (printed["provider"], printed["event"]) == ("pulse", "pulse") and "r_peaks" not in printed
    expected = PulseProvider().phase(wave[None], 125.0, ["PLETH"]).events
    assert np.max(np.abs(np.array(printed["events"]) - expected)) <= 1  # 16-bit storage rounds the wave
    assert len(printed["events"]) == len(onsets) and printed["qc"]["ok"]
    forced, lines = invoke_phase(record, "--provider", "ecg-rpeak")
    assert forced.exit_code == 1 and lines == []
    assert "no ECG lead among the record's channels: PLETH (read by 'pulse')" in " ".join(forced.stderr.split())


def test_phase_command_refuses_a_choice_it_cannot_make_and_names_the_options(tmp_path):
    wave, _ = pulse_train()
    breathing = np.sin(2 * np.pi * 0.25 * np.arange(len(wave)) / 125.0)
    both = write_record(tmp_path, "pleth_resp", {"PLETH": (wave, "NU"), "RESP": (breathing, "NU")})
    result, _ = invoke_phase(both)
    message = " ".join(result.stderr.split())
    assert result.exit_code == 1 and "several phase providers read its channels" in message
    assert "pulse reads PLETH" in message and "breath reads RESP" in message and "--provider" in message
    result, (printed,) = invoke_phase(both, "--lead", "RESP")  # naming the channel decides
    assert printed["provider"] == "breath" and printed["event"] == "breath"
    unknown = write_record(tmp_path, "unnamed", {"ch0": (wave, "NU")})
    result, _ = invoke_phase(unknown)
    assert "no registered phase provider reads its channels ['ch0'] by name" in " ".join(result.stderr.split())


@real_records
def test_phase_command_keeps_r_peaks_on_a_record_with_an_ecg_lead():
    """03700181 (MCL1, ABP, RESP): the R-peak detector, as the acceptance contract says, with the
    rate of each cycle (``rates``) beside its R-peaks."""
    result, (printed,) = invoke_phase(SAMPLES / "03700181")
    assert set(printed) == {"record", "fs", "r_peaks", "rates", "qc", "phase_yield"} and printed["qc"]["ok"]
    assert len(printed["rates"]["per_min"]) == len(printed["r_peaks"]) - 1


def test_validate_refuses_a_provider_that_finds_none_of_the_datasets_channels():
    """`phase: {provider: pulse}` on PTB-XL (12 ECG leads): named before any record is read."""
    from cyclejepa.pipeline.checks import consistency_problems
    from cyclejepa.config import parse_config

    (problem,) = consistency_problems(parse_config({"phase": {"provider": "pulse"}}))
    assert problem == (
        "phase.options.lead: phase provider 'pulse' reads PPG, arterial pressure channels by name, and dataset 'ptbxl' "
        "has none (I, II, III, aVR, aVL, aVF, V1, V2, V3, V4, V5, V6); name its channel with phase.options.lead"
    )
    assert consistency_problems(parse_config({"phase": {"provider": "pulse", "options": {"lead": "II"}}})) == []
    assert consistency_problems(parse_config({"phase": {"provider": "ecg-rpeak"}})) == []


def test_adc_wraps_are_undone_only_at_the_edges_of_the_range():
    """A wave wrapped into a 12-bit range comes back whole; a large step inside the range (an
    exposure change, a baseline jump) is not a wrap and stays."""
    from cyclejepa.data.wfdb_folder import unwrap as unwrap_adc

    span = 4096.0
    t = np.arange(5000) / 125.0
    wave = 1500.0 + 900.0 * np.sin(2 * np.pi * 0.3 * t)  # reaches 2400, beyond the top at 2047
    wrapped = (wave + 2048.0) % span - 2048.0
    assert np.sum(np.abs(np.diff(wrapped)) > span / 2) > 0
    np.testing.assert_allclose(unwrap_adc(wrapped, -2048.0, 2048.0), wave - span * np.round((wrapped[0] - wave[0]) / span))
    inside = np.where(t < 20.0, -1000.0, 1200.0) + np.sin(2 * np.pi * t)  # a 2,200-unit step mid-range
    np.testing.assert_array_equal(unwrap_adc(inside, -2048.0, 2048.0), inside)
