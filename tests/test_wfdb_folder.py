"""The `wfdb` dataset (any folder of WFDB records), ADC wrap-around, the preparation before
windowing, the rates from a cycle band and prepare's spread warning; real records from
../shared/data/physionet-samples where present."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import pytest

from cyclejepa.data.cache import CacheSpec, cut_record, prepare_cache
from cyclejepa.data.datasets import Record, RecordRejected, band_rates, conform, hash_fold
from cyclejepa.data.preprocess import SignalPreparation, cut_windows, highpass, spread_ratio
from cyclejepa.data.wfdb_folder import WfdbFolder, adc_limits, unwrap
from cyclejepa.data.wfdb_format import read_header
from cyclejepa.embed import CacheSettings, Encoder
from cyclejepa.registry import DATASETS
from cyclejepa.signal_geometry import SignalGeometry

from conftest import SAMPLES

real_records = pytest.mark.skipif(not (SAMPLES / "v102s.hea").is_file(), reason="shared physionet-samples absent")


def write(folder: Path, name: str, signal: np.ndarray, fs: float, names=("PLETH",), units=("NU",)) -> Path:
    """``signal`` (samples, channels) as a WFDB record of format 16 (wrsamp fits the ADC range to it)."""
    import wfdb

    wfdb.wrsamp(name, fs=fs, units=list(units), sig_name=list(names), p_signal=signal, fmt=["16"] * len(names),
                write_dir=str(folder))  # fmt: skip
    return folder / name


@real_records
def test_pleth_of_three_records_each_at_its_own_rate_others_rejected_by_name():
    dataset = DATASETS.build("wfdb", root=SAMPLES, channels=["pleth"])  # names match in any case
    assert [e.name for e in dataset.entries()] == ["a103l", "mixedsignals", "v102s"]
    assert [e.fold for e in dataset.entries()] == [hash_fold(n) for n in ("a103l", "mixedsignals", "v102s")]
    rejected = {r.record_id: (r.check, r.detail) for r in dataset.rejected()}
    assert set(rejected) == {"03700181", "100", "s0010_re"} and {c for c, _ in rejected.values()} == {"channel_order"}
    assert "MCL1" in rejected["03700181"][1]  # says what the record has
    assert dataset.units == ("NU",)
    a103l, mixed, v102s = (dataset.read(e) for e in dataset.entries())
    assert a103l.fs == 250.0 and a103l.signal.shape == (1, 82500)  # the .mat record
    assert mixed.fs == pytest.approx(2 * 62.4725) and mixed.signal.shape == (1, 28800)  # 2 samples per frame
    assert v102s.fs == 250.0 and np.isfinite(v102s.signal).all()


@real_records
def test_v102s_wraps_are_all_undone_as_whole_ranges():
    """Every one of v102s's ~1,000 wraps (12-bit PLETH) is found: the naive rule "a step beyond
    half the range is a wrap", right on this record, gives the same signal."""
    import wfdb

    raw = wfdb.rdrecord(str(SAMPLES / "v102s"), channels=[2]).p_signal[:, 0]
    low, high = adc_limits(read_header(SAMPLES / "v102s").signals[2])
    assert high - low == pytest.approx(2**12 / 1250)
    finite = raw[np.isfinite(raw)]
    naive = finite - np.concatenate([[0], np.cumsum(np.round(np.diff(finite) / (high - low)))]) * (high - low)
    assert np.sum(np.abs(np.diff(finite)) > (high - low) / 2) > 500
    np.testing.assert_allclose(unwrap(finite, low, high), naive, atol=1e-12)


def pulse_wave_class(monkeypatch):
    """The example pulse-wave dataset, registered in a copy of the registry for one test."""
    import importlib.util

    monkeypatch.setattr(DATASETS, "_entries", dict(DATASETS._entries))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples"))
    spec = importlib.util.spec_from_file_location(
        "pulse_wave_for_test", Path(__file__).resolve().parents[1] / "examples" / "pulse_wave_dataset.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PulseWaves


@real_records
@pytest.mark.parametrize("example", [False, True], ids=["wfdb", "pulse-wave"])
def test_a_step_inside_the_adc_range_is_kept_and_a_true_wrap_undone(tmp_path, monkeypatch, example):
    """The issue's defect: a 26-unit exposure drop in a record whose ADC range fits the signal
    (wrsamp) was taken for a wrap by the pulse-wave example and the rest shifted by a range.
    Injected into a real PLETH; the example dataset now reads as the core one does."""
    import wfdb

    pleth = wfdb.rdrecord(str(SAMPLES / "a103l"), channels=[2], sampto=7500).p_signal[:, 0]
    raw = 150.0 + 2.0 * (pleth - pleth.mean()) / pleth.std()
    raw[3000:] -= 26.0  # a drop of most of the ADC range the writer fits to this signal
    dataset = (pulse_wave_class(monkeypatch) if example else WfdbFolder)(tmp_path, channels=["PLETH"])
    path = write(tmp_path, "drop", raw[:, None], 250.0)
    low, high = adc_limits(read_header(path).signals[0])
    assert (high - low) / 2 < 26.0  # the old rule would have called it a wrap
    np.testing.assert_allclose(dataset.read_path(path).signal[0], raw, atol=1e-3)

    gain = 40.0  # a 16-bit ADC of 1638.4 units: wrap the signal around it as a real ADC would
    level = raw + np.linspace(0, 1700, raw.size)  # drifts past the top limit
    stored = np.round(level * gain).astype(np.int64)
    wrapped = (stored + 2**15) % 2**16 - 2**15
    assert (np.abs(np.diff(wrapped)) > 2**15).sum() >= 1
    wfdb.wrsamp("wrap", fs=250.0, units=["NU"], sig_name=["PLETH"], d_signal=wrapped[:, None].astype(np.int16),
                fmt=["16"], adc_gain=[gain], baseline=[0], write_dir=str(tmp_path))  # fmt: skip
    np.testing.assert_allclose(dataset.read_path(tmp_path / "wrap").signal[0], stored / gain, atol=1e-3)
    if not example:
        off = WfdbFolder(tmp_path, channels=["PLETH"], unwrap="off").read_path(tmp_path / "wrap").signal[0]
        np.testing.assert_allclose(off, wrapped / gain, atol=1e-3)


@real_records
def test_resp_by_unit_and_a_multi_rate_pick_resampled_to_one_rate():
    dataset = DATASETS.build("wfdb", root=SAMPLES, channels=["RESP"], units=["NU"])
    assert [e.name for e in dataset.entries()] == ["03700181", "v102s"]
    rejected = {r.record_id: r for r in dataset.rejected()}
    assert rejected["mixedsignals"].check == "units" and "Ohm" in rejected["mixedsignals"].detail
    assert all(dataset.read(e).signal.std() > 0 for e in dataset.entries())

    both = WfdbFolder(SAMPLES, channels=["Pleth", "Resp"]).read_path(SAMPLES / "mixedsignals")
    assert both.fs == pytest.approx(2 * 62.4725) and both.signal.shape == (2, 28800)
    import wfdb

    resp = np.asarray(wfdb.rdrecord(str(SAMPLES / "mixedsignals"), channels=[5], smooth_frames=False).e_p_signal[0])
    np.testing.assert_allclose(both.signal[1, ::2], resp, atol=0.02 * np.ptp(resp))  # every other sample is the original


def test_subjects_file_folds_by_subject_and_rejects_an_unlisted_record(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("a", "b", "c", "d"):
        write(tmp_path, name, rng.normal(size=(300, 1)), 30.0)
    (tmp_path / "subjects.csv").write_text("record,subject\na,p1\nb,p1\nc,p2\n")
    dataset = WfdbFolder(tmp_path, channels=["PLETH"])
    entries = {e.name: e for e in dataset.entries()}
    assert set(entries) == {"a", "b", "c"}
    assert entries["a"].fold == entries["b"].fold == hash_fold("p1") and entries["c"].fold == hash_fold("p2")
    assert entries["a"].patient_id == entries["b"].patient_id != entries["c"].patient_id
    assert [(r.record_id, r.check) for r in dataset.rejected()] == [("d", "subject")]
    (tmp_path / "subjects.csv").write_text("record,subject\na,p1\na,p2\n")
    with pytest.raises(ValueError, match="line 3: record 'a'"):
        WfdbFolder(tmp_path, channels=["PLETH"]).entries()


def test_options_are_checked_before_any_file_is_read():
    with pytest.raises(ValueError, match="data.options.channels"):
        WfdbFolder(None, channels="PLETH")
    with pytest.raises(ValueError, match="highpass_hz: 2 cut-offs for 1 channels"):
        WfdbFolder(None, channels=["PLETH"], highpass_hz=[0.3, 0.3])
    with pytest.raises(ValueError, match="normalisation"):
        WfdbFolder(None, channels=["PLETH"], normalisation="global")
    with pytest.raises(ValueError, match=r"cut-offs \[70.0\] Hz are not below the Nyquist frequency 62.5 Hz"):
        prepare_cache(
            WfdbFolder(None, channels=["PLETH"], highpass_hz=70), CacheSpec("unused", phase_provider="pulse"), progress=False
        )


def test_geometry_and_preparation_follow_the_cycle_band():
    """A heartbeat (0.5-3.5 Hz): the model rate is the first of the ladder >= 6 x 3.5 = 21 Hz,
    tokens floor(25 / 10.5) = 2 samples, windows of max(10, 5 / 0.5) s; breathing (0.1-0.7 Hz):
    5 Hz, floor(5 / 2.1) = 2, 50 s."""
    pulse = WfdbFolder.geometry(("PLETH",), cycle_band_hz=(0.5, 3.5))
    assert pulse == SignalGeometry(("PLETH",), **band_rates(0.5, 3.5)) and pulse.n_tokens == 125
    assert band_rates(0.1, 0.7) == {"cache_fs": 25.0, "decimation": 5, "token_patch": 2, "window_s": 50.0}
    assert band_rates(0.1, 0.5)["window_s"] == pytest.approx(84 * 3 / 5)  # 50 s rounded up to whole 0.6 s tokens
    assert WfdbFolder.geometry(("PLETH",), 50.0, cycle_band_hz=(0.5, 3.5)).n_tokens == 50  # a given rate wins, the rest derived
    with pytest.raises(ValueError, match="set data.cache_fs"):
        WfdbFolder.geometry(("PLETH",))
    dataset = WfdbFolder(None, channels=["PLETH"])
    assert dataset.preparation((0.5, 3.5)) == SignalPreparation((0.25,), "corpus", 3.0)
    assert dataset.preparation(None).is_default
    assert WfdbFolder(None, channels=["PLETH"], highpass_hz=None, normalisation="window", drop_s=1).preparation(
        (0.5, 3.5)
    ) == SignalPreparation((), "window", 1.0)


def test_the_config_derives_the_rates_from_the_providers_band(tmp_path):
    from cyclejepa.config import ExperimentConfig

    cfg = ExperimentConfig.model_validate({"name": "x", "data": {"dataset": "wfdb", "root": str(tmp_path),
                                           "options": {"channels": ["PLETH"]}}, "phase": {"provider": "pulse"}})  # fmt: skip
    assert (cfg.data.cache_fs, cfg.data.decimation, cfg.data.token_patch, cfg.data.window_s) == (125.0, 5, 2, 10.0)


def test_highpass_removes_an_offset_and_passes_the_cycle_with_the_butterworth_gain():
    fs, t = 125.0, np.arange(0, 60, 1 / 125.0)
    for f in (0.5, 1.0, 2.0):
        y = highpass(200.0 + np.sin(2 * np.pi * f * t), fs, 0.25)[1250:-1250]  # away from the ends
        gain = 1 / (1 + (0.25 / f) ** 4)  # |H|^2 of order 2, applied forward and backward
        assert abs(y.mean()) < 1e-3
        assert np.std(y) * np.sqrt(2) == pytest.approx(gain, rel=2e-3)


def test_cut_record_prepares_as_asked_and_changes_nothing_by_default():
    rng = np.random.default_rng(1)
    fs = 125.0
    signal = (180.0 + 5 * np.sin(2 * np.pi * 1.2 * np.arange(0, 32, 1 / fs)) + rng.normal(0, 0.1, 4000)).astype(np.float32)
    record = Record("r", signal[None], fs, ("PLETH",))
    np.testing.assert_array_equal(cut_record(record, ["PLETH"], fs, 1250), cut_windows(conform(record, ("PLETH",), fs), 1250))

    dropped = cut_record(record, ["PLETH"], fs, 1250, preparation=SignalPreparation((None,), "record", 3.0))
    x = signal[375:].astype(np.float64)
    reference = cut_windows(((x - x.mean()) / x.std())[None], 1250)
    assert dropped.shape == (2, 1, 1250)  # 29 s left of 32: two 10 s windows, not three
    np.testing.assert_allclose(dropped, reference, atol=1e-5)

    windows = cut_record(record, ["PLETH"], fs, 1250, preparation=SignalPreparation((0.25,), "window", 0.0))
    np.testing.assert_allclose(windows.mean(axis=-1), 0, atol=1e-5)
    np.testing.assert_allclose(windows.std(axis=-1), 1, atol=1e-5)

    flat = Record("flat", np.full((1, 4375), 3.0, np.float32), fs, ("PLETH",))
    with pytest.raises(RecordRejected, match=r"flat.*PLETH"):
        cut_record(flat, ["PLETH"], fs, 1250, preparation=SignalPreparation((None,), "record"))


def test_spread_ratio_against_its_closed_form():
    """Windows a sin(.) + offset_w: within-window std a / sqrt(2), between-window std that of the offsets."""
    t = np.arange(1000) / 100.0
    offsets = np.array([0.0, 3.0, -1.0, 7.0, 2.0])
    windows = np.stack([[0.5 * np.sin(2 * np.pi * t) + o, 2.0 * np.sin(2 * np.pi * t)] for o in offsets])
    ratio = spread_ratio(windows, chunk=2)
    assert ratio[0] == pytest.approx(0.5 / np.sqrt(2) / offsets.std(), rel=1e-6)
    assert ratio[1] == np.inf  # every window has the same mean


def test_prepare_warns_of_an_offset_the_corpus_z_score_leaves_and_the_band_defaults_remove_it(tmp_path, caplog):
    rng = np.random.default_rng(2)
    t = np.arange(0, 25, 1 / 125.0)
    (tmp_path / "raw").mkdir()
    for k, level in enumerate((124.0, 180.0, 255.0, 150.0)):
        write(
            tmp_path / "raw", f"r{k}", (level + 2.0 * np.sin(2 * np.pi * 1.1 * t) + rng.normal(0, 0.05, t.size))[:, None], 125.0
        )
    folds = sorted({hash_fold(f"r{k}") for k in range(4)})
    for options, warned in (({"highpass_hz": None, "normalisation": "corpus", "drop_s": 0}, True), ({}, False)):
        dataset = WfdbFolder(tmp_path / "raw", channels=["PLETH"], **options)
        cache = prepare_cache(dataset, CacheSpec(tmp_path / f"cache-{warned}", train_folds=folds, phase_provider="pulse"), progress=False)  # fmt: skip
        manifest = json.loads((cache.path / "manifest.json").read_text())
        spread = manifest["dataset"].get("spread_warnings", [])
        assert [w["channel"] for w in spread] == (["PLETH"] if warned else [])
        assert ("preparation" in manifest["arguments"]) is not warned
        settings = CacheSettings.from_cache(cache, "wfdb", {"channels": ["PLETH"], **options})
        assert settings.preparation == dataset.preparation((0.5, 3.5))  # what embed applies (the pulse band)
        assert CacheSettings.from_dict(settings.to_dict()) == settings  # what a package carries
        assert not cache.rejections
        first = dataset.entries()[0]  # embed prepares a record as the cache did (cut_record, decimate_and_phase)
        prepared = Encoder(torch.nn.Identity(), settings, "cpu", {}, None)._prepare(dataset.read(first))  # no weights needed
        np.testing.assert_allclose(prepared.signals, cache.signals[: len(prepared.signals)], atol=1e-6)  # record order
        np.testing.assert_allclose(prepared.start, settings.preparation.drop_s + 10.0 * np.arange(len(prepared.start)))
    assert "channel PLETH" in caplog.text and "high-pass" in caplog.text


def test_a_header_or_signal_file_outside_the_root_or_missing_rejects_its_record_by_name(tmp_path):
    rng = np.random.default_rng(3)
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir(), elsewhere.mkdir()
    for name in ("good", "gone", "escape"):
        write(root, name, rng.normal(size=(300, 1)), 30.0)
    write(elsewhere, "linked", rng.normal(size=(300, 1)), 30.0)
    (root / "linked.hea").symlink_to(elsewhere / "linked.hea")  # a header that lives outside the root
    (root / "gone.dat").unlink()
    header = root / "escape.hea"
    header.write_text(header.read_text().replace("escape.dat", "../escape.dat"))
    dataset = WfdbFolder(root, channels=["PLETH"])
    entries = {e.name: e for e in dataset.entries()}
    assert [(r.record_id, r.check) for r in dataset.rejected()] == [("linked", "outside_root")]
    assert dataset.read(entries["good"]).signal.shape == (1, 300)
    for name, check, detail in (("gone", "unreadable", "gone"), ("escape", "outside_root", "outside the dataset root")):
        with pytest.raises(RecordRejected, match=check) as caught:
            dataset.read(entries[name])
        assert caught.value.record_id == name and detail in caught.value.detail


def test_a_file_name_that_is_not_utf8_is_rejected_and_the_rest_indexed(tmp_path):
    import os

    from cyclejepa.data.cache.files import read_rejections, write_rejections

    rng = np.random.default_rng(4)
    write(tmp_path, "good", rng.normal(size=(300, 1)), 30.0)
    header = (tmp_path / "good.hea").read_bytes()
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xffname.hea"), "wb") as stream:
        stream.write(header)
    dataset = WfdbFolder(tmp_path, channels=["PLETH"])
    assert [e.name for e in dataset.entries()] == ["good"]
    (rejection,) = dataset.rejected()
    assert rejection.record_id == "'bad\\udcffname'" and rejection.check == "unreadable"
    write_rejections(tmp_path / "rejections.csv", dataset.rejected())  # the cache's report can hold it
    assert read_rejections(tmp_path / "rejections.csv")[0].detail == rejection.detail


def test_fingerprint_and_entries_without_a_root_say_which_folder_is_missing():
    from cyclejepa.data.datasets import DatasetNotFound

    dataset = WfdbFolder(None, channels=["PLETH"])  # built without a corpus, as `cyclejepa embed` does
    for read in (dataset.fingerprint, dataset.entries):
        with pytest.raises(DatasetNotFound, match=r"the folder None does not exist \(set data.root"):
            read()


def test_a_gain_that_puts_samples_beyond_float32_rejects_the_record_by_name_without_a_warning(tmp_path):
    """A header gain of 1e-300 makes physical values of about 1e302: the record is rejected
    (``non_finite``, naming the channel), with no raw numpy overflow warning on the way."""
    import warnings

    t = np.arange(125 * 20) / 125
    for name in ("ok", "huge"):
        write(tmp_path, name, np.sin(2 * np.pi * 1.2 * t)[:, None], 125)
    header = tmp_path / "huge.hea"
    lines = header.read_text().splitlines()
    fields = lines[1].split()
    fields[2] = "1e-300(0)/NU"
    header.write_text("\n".join([lines[0], " ".join(fields), *lines[2:]]) + "\n")
    dataset = DATASETS.build("wfdb", root=tmp_path, channels=["PLETH"])
    ok, huge = sorted(dataset.entries(), key=lambda e: e.name != "ok")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dataset.read(ok).signal.dtype == np.float32
        with pytest.raises(RecordRejected, match=r"float32.*PLETH") as rejected:
            dataset.read(huge)
    assert (rejected.value.record_id, rejected.value.check) == ("huge", "non_finite")
