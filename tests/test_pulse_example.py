"""The PPG example (examples/pulse_phase.py, examples/pulse_wave_dataset.py, examples/ppg.yaml) as
plugins through a real cyclejepa.plugins entry point: the provider against closed-form feet and
independent beat counts of real records, the dataset's reading, validate, and one run end to end."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLES
from cyclejepa import registry, runner
from cyclejepa.config import ConfigError, load_config
from cyclejepa.data.datasets import RecordRejected
from cyclejepa.registry import DATASETS, PHASE_PROVIDERS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
real_records = pytest.mark.skipif(not (SAMPLES / "v102s.hea").is_file(), reason="shared multiparameter records absent")


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The two pulse modules installed as a distribution with cyclejepa.plugins entry points."""
    info = tmp_path / "site" / "pulse_examples-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pulse-examples\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[cyclejepa.plugins]\npulse-phase = pulse_phase\npulse-wave = pulse_wave_dataset\n")
    registry.load_builtins()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setattr(DATASETS, "_entries", {k: v for k, v in DATASETS._entries.items() if k != "pulse-wave"})
    monkeypatch.setattr(PHASE_PROVIDERS, "_entries", {k: v for k, v in PHASE_PROVIDERS._entries.items() if k != "pulse-phase"})
    for name in ("pulse_phase", "pulse_wave_dataset"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert {"pulse-phase", "pulse-wave"} <= set(registry.load_plugins())
    return tmp_path


def pulse_train(fs=125.0, seconds=60.0, rise_s=0.12, seed=0):
    """An upright pulse wave with known onsets: each beat rises as a half cosine over ``rise_s``
    from its onset and decays exponentially (τ 0.25 s) until the next; beat intervals 0.55-1.1 s,
    slow drift and a little noise. Returns (wave, onsets in s)."""
    rng = np.random.default_rng(seed)
    onsets = np.cumsum(rng.uniform(0.55, 1.1, int(seconds / 0.55)))
    onsets = onsets[onsets < seconds - 1.0]
    t = np.arange(round(seconds * fs)) / fs
    wave = np.zeros_like(t)
    for start, end in zip(onsets, np.append(onsets[1:], seconds)):
        u = (t - start) / rise_s
        beat = (t >= start) & (t < end)
        rise = 0.5 * (1.0 - np.cos(np.pi * np.clip(u, 0.0, 1.0)))
        decay = np.exp(-np.clip(t - start - rise_s, 0.0, None) / 0.25)
        wave[beat] = np.where(u[beat] < 1.0, rise[beat] * 0.95 + 0.05, decay[beat])
    wave += 0.2 * np.sin(2 * np.pi * 0.1 * t) + 0.005 * rng.standard_normal(len(t))
    return wave, onsets


def test_feet_and_steepest_rises_against_the_closed_form(plugins):
    """A half-cosine rise of duration r from onset t0 is steepest at t0 + r/2, and its tangent
    there meets the foot level at t0 + r/2 - r/π (the intersecting-tangent foot)."""
    fs, rise = 125.0, 0.12
    wave, onsets = pulse_train(fs, rise_s=rise)
    for fiducial, expected in (("max-slope", onsets + rise / 2), ("foot", onsets + rise / 2 - rise / np.pi)):
        track = PHASE_PROVIDERS.build("pulse-phase", fiducial=fiducial).phase(wave[None], fs, ["PLETH"])
        found = track.events / fs
        assert len(found) == len(onsets), fiducial
        assert np.max(np.abs(found - expected)) < 0.016, fiducial  # two samples at 125 Hz
        assert track.qc.ok


def test_an_inverted_wave_gives_the_same_events_and_the_wrong_polarity_does_not(plugins):
    fs = 125.0
    wave, _ = pulse_train(fs, seed=1)
    upright = PHASE_PROVIDERS.build("pulse-phase").phase(wave[None], fs, ["pleth"]).events
    inverted = PHASE_PROVIDERS.build("pulse-phase").phase(-wave[None], fs, ["pleth"]).events
    np.testing.assert_array_equal(inverted, upright)
    forced = PHASE_PROVIDERS.build("pulse-phase", polarity="upright").phase(-wave[None], fs, ["pleth"]).events
    assert len(forced) != len(upright) or np.median(np.abs(forced - upright)) > 0.05 * fs  # the decay, not the rise


def test_a_flat_channel_fails_qc_and_a_missing_one_is_named(plugins):
    track = PHASE_PROVIDERS.build("pulse-phase").phase(np.ones((1, 1250)), 125.0, ["PLETH"])
    assert len(track.events) == 0 and track.qc.reasons == ["too_few_beats", "low_phase_yield"]
    with pytest.raises(KeyError, match="'ABP'.*'PLETH'"):
        PHASE_PROVIDERS.build("pulse-phase", lead="ABP").phase(np.ones((1, 1250)), 125.0, ["PLETH"])
    with pytest.raises(ValueError, match="fiducial must be one of foot, max-slope"):
        PHASE_PROVIDERS.build("pulse-phase", fiducial="peak")


@real_records
def test_pulse_counts_of_real_records_against_independent_references(plugins):
    """03700181: its arterial pressure has 1,224 pulses (counted by hand); v102s: the beats of
    its ECG (lead V, WFDB's XQRS detector) and their median rate."""
    from cyclejepa.data.wfdb_format import read_record

    abp = DATASETS.build("pulse-wave", channels=["ABP"]).read_path(SAMPLES / "03700181")
    pulses = PHASE_PROVIDERS.build("pulse-phase", lead="ABP").phase(abp.signal, abp.fs, abp.channels)
    assert abs(len(pulses.events) - 1224) <= 0.01 * 1224 and pulses.qc.ok

    record = read_record(SAMPLES / "v102s")
    ecg = PHASE_PROVIDERS.build("ecg-rpeak", lead="V", detector="wfdb-xqrs", detection_leads=["V"])
    beats = ecg.phase(np.nan_to_num(record.signal), record.fs, record.names)
    pleth = DATASETS.build("pulse-wave").read_path(SAMPLES / "v102s")
    pulses = PHASE_PROVIDERS.build("pulse-phase").phase(pleth.signal, pleth.fs, pleth.channels)
    assert abs(len(pulses.events) - len(beats.events)) <= 0.02 * len(beats.events)
    assert pulses.qc.metrics["rate_per_min"] == pytest.approx(beats.qc.metrics["rate_per_min"], rel=0.01)


@real_records
def test_the_dataset_reads_each_channel_at_its_rate_unwrapped_in_its_unit(plugins):
    from cyclejepa.data.wfdb_format import read_header, read_record

    dataset = DATASETS.build("pulse-wave", root=SAMPLES)
    assert [e.name for e in dataset.entries()] == ["a103l", "mixedsignals", "v102s"]
    assert {(r.record_id, r.check) for r in dataset.rejected()} == {(n, "lead_order") for n in ("03700181", "100", "s0010_re")}
    mixed = dataset.read(dataset.entries()[1])  # pleth at 2 samples per 62.4725 Hz frame, not the frame rate
    assert mixed.fs == pytest.approx(2 * 62.4725) and mixed.signal.shape == (1, 28800) and mixed.id == 2

    raw = read_record(SAMPLES / "v102s").signal[2]  # PLETH, 12-bit format 212, gain 1250 / NU
    span = 2**12 / read_header(SAMPLES / "v102s").signals[2].gain
    finite = np.isfinite(raw)
    assert np.sum(np.abs(np.diff(raw[finite])) > span / 2) > 500  # the stored wave wraps around
    unwrapped = dataset.read_path(SAMPLES / "v102s").signal[0].astype(np.float64)
    assert np.max(np.abs(np.diff(unwrapped[1:]))) < span / 4  # (the first sample is the record's own outlier)
    shift = (unwrapped[finite] - raw[finite]) / span
    np.testing.assert_allclose(shift, np.round(shift), atol=1e-4)  # whole wraps added back, nothing else


def write_pleth(folder, name, signal, units, fs=125.0):
    import wfdb

    wfdb.wrsamp(name, fs=fs, units=[units], sig_name=["PLETH"], p_signal=signal[:, None], fmt=["16"], adc_gain=[1000.0],
                baseline=[0], write_dir=str(folder))  # fmt: skip
    return folder / name


def test_read_path_refuses_another_unit_and_long_gaps_and_fills_short_ones(plugins):
    wave, _ = pulse_train(seconds=20.0)
    gappy = wave.copy()
    gappy[500:530] = np.nan  # 0.24 s
    dataset = DATASETS.build("pulse-wave")  # no root: reading a file does not need one
    filled = dataset.read_path(write_pleth(plugins, "short_gap", gappy, "NU"))
    np.testing.assert_allclose(filled.signal[0, 500:530], np.interp(np.arange(500, 530), [499, 530], wave[[499, 530]]), atol=2e-3)
    gappy[1000:1125] = np.nan  # 1 s
    with pytest.raises(RecordRejected, match=r"\(non_finite\): 125 missing samples in a row on PLETH from 8.00 s"):
        dataset.read_path(write_pleth(plugins, "long_gap", gappy, "NU"))
    with pytest.raises(RecordRejected, match=r"\(units\): channel PLETH is in mV, but the dataset declares NU"):
        dataset.read_path(write_pleth(plugins, "in_mv", wave, "mV"))


def test_validate_names_the_provider_lead_and_families_that_do_not_fit(plugins, tmp_path):
    base = [f"output_dir={tmp_path / 'out'}", f"data.root={SAMPLES}"]
    with pytest.raises(ConfigError) as caught:
        runner.preflight(load_config(EXAMPLES / "ppg.yaml", base + ["phase.options.lead=PPG", "evaluation.families=[ectopic, attenuation]"]))
    assert caught.value.problems == [
        "phase.options.lead: 'PPG' is not a channel of dataset 'pulse-wave'; its channels: PLETH",
        "evaluation.families[0]: 'ectopic' applies to ecg signals; the phase provider's signal is 'pulse'; leave it out",
    ]


@real_records
def test_the_example_runs_end_to_end_and_embeds_a_training_record(plugins):
    """examples/ppg.yaml, three steps: prepare, train both arms, evaluate, report; then
    `cyclejepa embed` on a training record gives the cache's windows of it."""
    from typer.testing import CliRunner

    from cyclejepa.cli import app

    out = plugins / "run"
    tiny = ["training.steps=3", "training.checkpoint_every=3", "evaluation.steps=[3]", "evaluation.bootstrap=10"]
    cfg = load_config(EXAMPLES / "ppg.yaml", [f"output_dir={out}", f"data.root={SAMPLES}", *tiny])
    assert (cfg.data.fs, cfg.data.decimation, cfg.data.token_patch, cfg.model.encoder.leads) == (125.0, 5, 2, 1)
    report = runner.run_experiment(cfg, progress=False)
    assert report.is_file() and "G1 shuffled-φ gate" in report.read_text()
    result = CliRunner().invoke(app, ["embed", str(out), str(SAMPLES / "a103l"), "--out", str(out / "a103l.npz"), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    from cyclejepa.data.cache import PreparedCache

    cache = PreparedCache(out / "cache")
    rows = np.flatnonzero(np.char.startswith(cache.columns["record"].astype(str), "a103l/"))  # its 30 s segments, in order
    assert len(rows) == 33
    saved = np.load(out / "a103l.npz")
    np.testing.assert_array_equal(saved["token_phases"], cache.phases("centre")[rows])
    assert json.loads(str(saved["failed"])) == {} and saved["qc_ok"].all()
