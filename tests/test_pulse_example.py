"""The PPG example (examples/pulse_wave_dataset.py as a plugin through a real cyclejepa.plugins entry
point, examples/ppg.yaml with the core `pulse` provider): the dataset's reading, pulse counts of its
real records against independent references, validate, and one run end to end. The provider's own
tests are in test_pulse.py."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLES
from test_pulse import pulse_train
from cyclejepa import registry, pipeline
from cyclejepa.config import ConfigError, load_config
from cyclejepa.data.datasets import RecordRejected
from cyclejepa.registry import DATASETS, PHASE_PROVIDERS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
real_records = pytest.mark.skipif(not (SAMPLES / "v102s.hea").is_file(), reason="shared multiparameter records absent")


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The pulse-wave dataset module installed as a distribution with a cyclejepa.plugins entry point."""
    info = tmp_path / "site" / "pulse_examples-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pulse-examples\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[cyclejepa.plugins]\npulse-wave = pulse_wave_dataset\n")
    registry.load_builtins()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setattr(DATASETS, "_entries", {k: v for k, v in DATASETS._entries.items() if k != "pulse-wave"})
    monkeypatch.delitem(sys.modules, "pulse_wave_dataset", raising=False)
    assert "pulse-wave" in set(registry.load_plugins())
    return tmp_path


@real_records
def test_pulse_counts_of_real_records_against_independent_references(plugins):
    """03700181: its arterial pressure has 1,224 pulses (counted by hand); v102s: the beats of
    its ECG (lead V, WFDB's XQRS detector) and their median rate."""
    from cyclejepa.data.wfdb_format import read_record

    abp = DATASETS.build("pulse-wave", channels=["ABP"]).read_path(SAMPLES / "03700181")
    pulses = PHASE_PROVIDERS.build("pulse", lead="ABP").phase(abp.signal, abp.fs, abp.channels)
    assert abs(len(pulses.events) - 1224) <= 0.01 * 1224 and pulses.qc.ok

    record = read_record(SAMPLES / "v102s")
    ecg = PHASE_PROVIDERS.build("ecg-rpeak", lead="V", detector="wfdb-xqrs", detection_leads=["V"])
    beats = ecg.phase(np.nan_to_num(record.signal), record.fs, record.names)
    pleth = DATASETS.build("pulse-wave").read_path(SAMPLES / "v102s")
    pulses = PHASE_PROVIDERS.build("pulse").phase(pleth.signal, pleth.fs, pleth.channels)
    assert abs(len(pulses.events) - len(beats.events)) <= 0.02 * len(beats.events)
    assert pulses.qc.metrics["rate_per_min"] == pytest.approx(beats.qc.metrics["rate_per_min"], rel=0.01)


@real_records
def test_the_dataset_reads_each_channel_at_its_rate_unwrapped_in_its_unit(plugins):
    from cyclejepa.data.wfdb_format import read_header, read_record

    dataset = DATASETS.build("pulse-wave", root=SAMPLES)
    assert [e.name for e in dataset.entries()] == ["a103l", "mixedsignals", "v102s"]
    assert {(r.record_id, r.check) for r in dataset.rejected()} == {(n, "channel_order") for n in ("03700181", "100", "s0010_re")}
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
        pipeline.preflight(
            load_config(EXAMPLES / "ppg.yaml", base + ["phase.options.lead=PPG", "evaluation.families=[ectopic, attenuation]"])
        )
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
    assert (cfg.data.cache_fs, cfg.data.decimation, cfg.data.token_patch, cfg.model.encoder.leads) == (125.0, 5, 2, 1)
    report = pipeline.run_experiment(cfg, progress=False)
    assert report.is_file() and "G1 shuffled-φ gate" in report.read_text()
    result = CliRunner().invoke(
        app, ["embed", str(out), str(SAMPLES / "a103l"), "--out", str(out / "a103l.npz"), "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    from cyclejepa.data.cache import PreparedCache

    cache = PreparedCache(out / "cache")
    rows = np.flatnonzero(np.char.startswith(cache.columns["record"].astype(str), "a103l/"))  # its 30 s segments, in order
    assert len(rows) == 33
    saved = np.load(out / "a103l.npz")
    np.testing.assert_array_equal(saved["token_phases"], cache.phases("centre")[rows])
    assert json.loads(str(saved["failed"])) == {} and saved["qc_ok"].all()
