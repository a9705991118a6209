"""Decimation, normalisation, the preprocessing cache (end to end) and the cohort table."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cyclejepa.data.cache import build as cache_build
from cyclejepa.data.cache import files as cache_files
from cyclejepa.data.cache import shares as cache_shares
from cyclejepa.data.cache import CACHE_FORMAT, CacheSpec, PreparedCache, prepare_cache
from cyclejepa.data.cohort import cohort_markdown, cohort_table
from cyclejepa.data.datasets import RecordRejected
from cyclejepa.data.preprocess import Normalisation, decimate, fit_normalisation
from cyclejepa.data.ptbxl import LEADS, PTBXL, SUPERCLASSES, read_ptbxl_record
from cyclejepa.signal_geometry import SignalGeometry
from test_ptbxl import real_rows  # noqa: F401 (fixture)

wfdb = pytest.importorskip("wfdb")
signal_lib = pytest.importorskip("scipy.signal")

# ------------------------------------------------------------------------------- decimation


def reference_decimate(x: np.ndarray) -> np.ndarray:
    """Independent float64 decimation: same Kaiser FIR, own edge extension, direct convolution."""
    taps = signal_lib.firwin(101, 1 / 5, window=("kaiser", 5.0))
    pad = 100
    padded = np.pad(x, ((0, 0), (pad, pad)), mode="edge")
    full = np.stack([np.convolve(row, taps) for row in padded])
    return full[:, pad + 50 + 5 * np.arange(x.shape[1] // 5)]  # 50 = group delay of 101 taps


def test_decimate_matches_independent_fir():
    x = np.random.default_rng(0).standard_normal((12, 5000)) + 0.3
    y = decimate(x)
    assert y.dtype == np.float32 and y.shape == (12, 1000)
    np.testing.assert_allclose(y, reference_decimate(x), atol=1e-6)


@pytest.mark.parametrize("frequency", [1.0, 5.0])
def test_decimate_has_no_timing_shift(frequency):
    """Output sample n is the input at t = n/100 s (one 2 ms sample of delay would fail)."""
    t_in, t_out = np.arange(5000) / 500, np.arange(1000) / 100
    y = decimate(np.sin(2 * np.pi * frequency * t_in)[None])[0]
    interior = slice(20, -20)
    np.testing.assert_allclose(y[interior], np.sin(2 * np.pi * frequency * t_out)[interior], atol=2e-3)


def test_decimate_edge_has_no_step_on_constant_baseline():
    t = np.arange(5000) / 500
    x = 2.0 + 0.05 * np.sin(2 * np.pi * 1.0 * t)  # 2 mV baseline, slow wave
    y = decimate(x[None])[0]
    np.testing.assert_allclose(y, x[::5], atol=2e-3)  # zero padding would halve the end samples
    assert np.all(decimate(np.full((2, 5000), -1.5)) == np.float32(-1.5))


# ---------------------------------------------------------------------------- normalisation


def test_fit_normalisation_matches_float64_and_uses_train_rows_only():
    rng = np.random.default_rng(3)
    signals = (rng.standard_normal((20, 12, 1000)) * rng.uniform(0.1, 0.4, (1, 12, 1)) + 0.01).astype(np.float32)
    train = np.arange(20) < 14
    norm = fit_normalisation(signals, train, chunk=3)
    chosen = signals[train].astype(np.float64).transpose(1, 0, 2).reshape(12, -1)
    np.testing.assert_allclose(norm.mean, chosen.mean(axis=1), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(norm.std, chosen.std(axis=1), rtol=1e-12)
    changed = signals.copy()
    changed[~train] *= 10  # a test-fold record must not move the statistics
    again = fit_normalisation(changed, train)
    np.testing.assert_array_equal(again.mean, fit_normalisation(signals, train).mean)
    np.testing.assert_array_equal(again.std, fit_normalisation(signals, train).std)
    z = norm.apply(signals[:2])
    np.testing.assert_allclose(z, (signals[:2] - norm.mean[:, None]) / norm.std[:, None], rtol=1e-5)
    with pytest.raises(ValueError, match="no training record"):
        fit_normalisation(signals, np.zeros(20, bool))
    with pytest.raises(ValueError, match="positive"):
        Normalisation(np.zeros(12), np.zeros(12))


# ---------------------------------------------------------------------------- cohort table


def hand_meta() -> pd.DataFrame:
    """Eight records: six in folds 1-2, two in fold 10, with hand-countable composition."""
    meta = pd.DataFrame(
        {
            "record_id": range(1, 9),
            "patient_id": [1, 1, 2, 3, 4, 5, 6, 6],
            "fold": [1, 1, 2, 2, 2, 2, 10, 10],
            "age": [40, 50, 300, 60, 70, 300, 30, 80],
            "sex": [0, 0, 1, 1, 0, 1, 0, 1],
            "events": [10, 12, 8, 11, 14, 12, 9, 10],
            "phase_yield": [0.9, 0.8, 0.7, 0.95, 0.85, 0.6, 0.9, 0.92],
            "qc_ok": [True, True, False, True, True, False, True, False],
            "qc_reason": ["", "", "too_few_beats", "", "", "implausible_rr", "", "x"],
        }
    )
    labels = {"NORM": [1, 1, 0, 0, 0, 0, 1, 0], "MI": [0, 0, 1, 1, 0, 0, 0, 1],
              "STTC": [0, 0, 1, 0, 0, 0, 0, 0], "CD": [0, 0, 0, 0, 0, 0, 0, 0],
              "HYP": [0, 1, 0, 0, 0, 0, 0, 0]}  # fmt: skip
    for name in SUPERCLASSES:
        meta[f"super_{name}"] = labels[name]
    return meta


def test_cohort_table_numbers_on_hand_built_meta():
    table = cohort_table(hand_meta(), folds_a=(1, 2), folds_b=(10,), level=PTBXL.label_levels[0])
    a, b = table["Folds 1–2"], table["Fold 10"]
    assert (a["Recordings"], a["Patients"], b["Recordings"], b["Patients"]) == (6, 5, 2, 1)
    # ages 40, 50, 60, 70 (two sentinels excluded): median 55, linear quartiles 47.5 and 62.5
    assert (a["Age, median (years)"], a["Age, lower quartile"], a["Age, upper quartile"]) == (55, 47.5, 62.5)
    assert a["Age sentinel (age=300)"] == 2 and b["Age sentinel (age=300)"] == 0
    assert a["Male, %"] == pytest.approx(50.0) and b["Male, %"] == pytest.approx(50.0)
    assert a["NORM, %"] == pytest.approx(100 * 2 / 6) and a["MI, %"] == pytest.approx(100 * 2 / 6)
    assert a["HYP, %"] == pytest.approx(100 / 6) and a["CD, %"] == 0
    assert a["Unlabeled recordings"] == 2 and b["Unlabeled recordings"] == 0  # records 5 and 6
    assert a["Beats per recording, median"] == 11.5 and b["Phase yield, median"] == pytest.approx(0.91)
    assert a["Recordings failing phase QC"] == 2 and b["Recordings failing phase QC"] == 1
    markdown = cohort_markdown(table)
    assert "| Age, interquartile range | 47.5–62.5 | 42.5–67.5 |" in markdown
    assert "| NORM, % | 33.3 | 50.0 |" in markdown
    with pytest.raises(ValueError, match="no record in folds"):
        cohort_table(hand_meta(), folds_a=(3,), folds_b=(10,), level=PTBXL.label_levels[0])


def test_cohort_table_of_an_unlabelled_corpus_of_unknown_age_and_sex():
    meta = hand_meta().drop(columns=[f"super_{name}" for name in SUPERCLASSES])
    meta["age"], meta["sex"] = np.nan, -1
    table = cohort_table(meta, folds_a=(1, 2), folds_b=(10,), level=None)
    assert "Unlabeled recordings" not in table.index and not any(r.endswith(", %") and r != "Male, %" for r in table.index)
    markdown = cohort_markdown(table)
    assert "| Male, % | unknown | unknown |" in markdown
    assert "| Age, interquartile range | unknown | unknown |" in markdown
    assert "| Recordings | 6 | 2 |" in markdown


def test_cohort_table_of_windowed_records_counts_windows_and_the_providers_events():
    """Records cut into windows: demographics once per recording, the rest per window, events in
    the provider's word; the age sentinel's row only where a recording carries it."""
    meta = hand_meta().drop(columns=[f"super_{name}" for name in SUPERCLASSES])
    windows = meta.loc[[0, 0, 0, 1, 2, 3, 4, 5, 6, 6, 7]].assign(window=[0, 1, 2, 0, 0, 0, 0, 0, 0, 1, 0])
    table = cohort_table(windows, folds_a=(1, 2), folds_b=(10,), event="breath")
    a, b = table["Folds 1–2"], table["Fold 10"]
    assert (a["Recordings"], a["Windows"], b["Recordings"], b["Windows"]) == (6, 8, 2, 3)
    # ages of the six recordings, sentinels out: 40, 50, 60, 70 (the first recording's three windows count once)
    assert (a["Age, median (years)"], a["Male, %"]) == (55, 50.0) and b["Male, %"] == 50.0
    assert a["Breaths per window, median"] == 10.5 and a["Windows failing phase QC"] == 2
    markdown = cohort_markdown(table)
    assert "| Age sentinel (age=300) | 2 | 0 |" in markdown and "| Windows | 8 | 3 |" in markdown
    assert "Beats" not in markdown and "Recordings failing" not in markdown
    assert "Age sentinel" not in cohort_markdown(cohort_table(windows[windows["age"] != 300], (1, 2), (10,)))


def test_rejections_keep_record_names_that_only_look_like_numbers(tmp_path):
    path = tmp_path / "rejections.csv"
    rejected = [RecordRejected(12, "extent", "short"), RecordRejected("03700181", "format", "x"),
                RecordRejected("0", "a", ""), RecordRejected("v102s/3", "b", ""), RecordRejected("٣", "c", "")]  # fmt: skip
    cache_files.write_rejections(path, rejected)
    assert [r.record_id for r in cache_files.read_rejections(path)] == [12, "03700181", 0, "v102s/3", "٣"]


# ------------------------------------------------------------------------- cache end to end

N_RECORDS = 40
CORRUPTED = {3: "checksum", 7: "sampling_rate", 12: "lead_order", 20: "extent", 31: "non_finite"}
FLAT_ID = 5  # rewritten as a flat line: passes verification, fails phase QC


pytestmark = pytest.mark.xdist_group("cache")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A 40-record synthetic PTB-XL corpus with five corrupted records and one flat record."""
    from test_ptbxl import CORRUPTIONS

    from cyclejepa.data.synthetic import write_synthetic_corpus

    root = write_synthetic_corpus(tmp_path_factory.mktemp("ptbxl"), N_RECORDS, seed=0, progress=False)
    dataset = PTBXL(root)
    for ecg_id, check in CORRUPTED.items():
        CORRUPTIONS[check](dataset.record_path(ecg_id))
    flat = dataset.record_path(FLAT_ID)
    wfdb.wrsamp(flat.name, fs=500, units=["mV"] * 12, sig_name=[n.upper() for n in LEADS],
                d_signal=np.full((5000, 12), 7, dtype=np.int64), fmt=["16"] * 12,
                adc_gain=[1000.0] * 12, baseline=[0] * 12, write_dir=str(flat.parent))  # fmt: skip
    return root


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory) -> PreparedCache:
    return prepare_cache(PTBXL(corpus), CacheSpec(tmp_path_factory.mktemp("cache") / "c"), progress=False)


def test_rejection_log_holds_exactly_the_corrupted_records(prepared):
    assert {r.record_id: r.check for r in prepared.rejections} == CORRUPTED
    reloaded = PreparedCache(prepared.path)
    assert {r.record_id: r.check for r in reloaded.rejections} == CORRUPTED
    kept = [i for i in range(1, N_RECORDS + 1) if i not in CORRUPTED]
    assert len(prepared) == N_RECORDS - len(CORRUPTED) and prepared.columns["record_id"].tolist() == kept
    counts = prepared.manifest["counts"]
    qc_failed = prepared.columns["record_id"][~prepared.columns["qc_ok"]].tolist()
    assert FLAT_ID in qc_failed  # a flat line has no beats
    assert counts == {"records": 40, "records_kept": 35, "kept": 35, "rejected": 5, "qc_failed": len(qc_failed)}
    for array in (prepared.phase_centre, prepared.phase_causal):
        assert array.shape == (35, 125) and array.dtype == np.float32
    assert prepared.signals.shape == (35, 12, 1000) and prepared.signals.dtype == np.float32


def test_normalisation_and_signals_match_independent_recomputation(prepared, corpus):
    """Statistics over the kept fold-1..9 records only, by an independent float64 decimation."""
    ids, folds = prepared.columns["record_id"], prepared.columns["fold"]
    decimated = {i: reference_decimate(read_ptbxl_record(corpus, int(i)).astype(np.float64)) for i in ids}
    train = np.concatenate([decimated[i] for i, f in zip(ids, folds, strict=True) if f <= 9], axis=1)
    np.testing.assert_allclose(prepared.norm.mean, train.mean(axis=1), atol=1e-6)
    np.testing.assert_allclose(prepared.norm.std, train.std(axis=1), rtol=1e-5)
    assert json.loads((prepared.path / "norm.json").read_text())["windows"] == int((folds <= 9).sum())
    for row in (0, 17, 34):
        expected = (decimated[ids[row]] - train.mean(axis=1)[:, None]) / train.std(axis=1)[:, None]
        np.testing.assert_allclose(prepared.signals[row], expected, atol=1e-4)


def test_phases_rpeaks_labels_and_qc_match_their_sources(prepared, corpus):
    from cyclejepa.registry import PHASE_PROVIDERS

    provider = PHASE_PROVIDERS.build("ecg-rpeak")
    for row in (0, 20):
        track = provider.phase(read_ptbxl_record(corpus, int(prepared.columns["record_id"][row])), 500, LEADS)
        np.testing.assert_array_equal(prepared.events(row), track.events)
        for convention in ("centre", "causal"):
            np.testing.assert_allclose(prepared.phases(convention)[row], track.at_tokens(8, 100, convention), atol=1e-6)
        assert prepared.columns["events"][row] == len(track.events)
    flat = prepared.columns["record_id"].tolist().index(FLAT_ID)  # QC failure: flagged, kept
    assert not prepared.columns["qc_ok"][flat] and prepared.columns["qc_reason"][flat]
    assert np.isnan(prepared.phase_centre[flat]).all()
    verdicts = [
        provider.phase(read_ptbxl_record(corpus, int(ecg_id)), 500, LEADS).qc.ok for ecg_id in prepared.columns["record_id"]
    ]
    np.testing.assert_array_equal(prepared.columns["qc_ok"], verdicts)
    source = PTBXL(corpus).metadata.set_index("ecg_id").loc[prepared.columns["record_id"]]
    np.testing.assert_array_equal(prepared.labels("superclass"), source.filter(like="super_").to_numpy())
    np.testing.assert_array_equal(prepared.labels("subclass"), source.filter(like="sub_").to_numpy())
    assert (prepared.columns["fold"][prepared.select([10])] == 10).all()
    assert len(prepared.select(range(1, 11))) == len(prepared)


def test_second_prepare_does_no_work_and_changed_arguments_rebuild(prepared, corpus, tmp_path, monkeypatch):
    target = tmp_path / "copy"
    shutil.copytree(prepared.path, target)
    manifest_mtime = (target / "manifest.json").stat().st_mtime_ns
    calls = []
    real_chunk = cache_build._process_chunk
    monkeypatch.setattr(cache_build, "_process_chunk", lambda *a: calls.append(1) or real_chunk(*a))
    again = prepare_cache(PTBXL(corpus), CacheSpec(target), progress=False)
    assert calls == [] and (target / "manifest.json").stat().st_mtime_ns == manifest_mtime
    assert again.manifest == prepared.manifest

    rebuilt = prepare_cache(PTBXL(corpus), CacheSpec(target, train_folds=range(1, 9)), progress=False)
    assert calls and rebuilt.manifest["config_hash"] != prepared.manifest["config_hash"]
    assert not np.allclose(rebuilt.norm.mean, prepared.norm.mean)
    assert not list(tmp_path.glob(".copy.*"))  # no build or retired folder left behind

    calls.clear()
    (target / "meta.csv").write_text((target / "meta.csv").read_text().replace(",1,", ",0,", 1))
    prepare_cache(PTBXL(corpus), CacheSpec(target, train_folds=range(1, 9)), progress=False)
    assert calls  # a modified file is detected and rebuilt


def test_a_cache_in_the_older_layout_is_refused_by_readers_and_rebuilt_by_prepare(prepared, corpus, tmp_path):
    """Format 2 wrote rpeaks.npz and meta.csv columns ecg_id and beats: reading one names the
    command that rebuilds it; `prepare` rebuilds it with the same arrays under the neutral names."""
    import json

    old = tmp_path / "old"
    shutil.copytree(prepared.path, old)
    (old / "events.npz").rename(old / "rpeaks.npz")
    meta = (old / "meta.csv").read_text().split("\n", 1)
    header = meta[0].replace("record_id,", "ecg_id,").replace(",events,", ",beats,")
    (old / "meta.csv").write_text(header + "\n" + meta[1])
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["arguments"]["cache_format"] = 2
    (old / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ValueError, match=rf"format 2; this cyclejepa reads format {CACHE_FORMAT}: rebuild it with `cyclejepa prepare CONFIG`"
    ):
        PreparedCache(old)
    rebuilt = prepare_cache(PTBXL(corpus), CacheSpec(old), progress=False)
    assert sorted(p.name for p in old.iterdir()) == sorted(p.name for p in prepared.path.iterdir())
    assert rebuilt.manifest["files"] == prepared.manifest["files"]  # every file byte for byte


def test_a_cache_of_format_3_is_refused_naming_the_command_that_rebuilds_it(prepared, tmp_path):
    """Format 3 called the manifest's rates fs_native and fs and its channels leads: a reader
    refuses it rather than taking one rate for the other."""
    old = tmp_path / "old"
    shutil.copytree(prepared.path, old)
    manifest = json.loads((old / "manifest.json").read_text())
    geometry = manifest.pop("geometry")
    manifest |= {"leads": geometry["channels"], "fs_native": geometry["cache_fs"], "fs": geometry["model_fs"]}
    manifest["arguments"]["fs"] = manifest["arguments"].pop("geometry")["cache_fs"]
    manifest["arguments"]["cache_format"] = 3
    (old / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ValueError, match=rf"format 3; this cyclejepa reads format {CACHE_FORMAT}: rebuild it with `cyclejepa prepare CONFIG`"
    ):
        PreparedCache(old)


def test_a_cache_of_format_5_is_refused_and_prepare_rebuilds_it_with_the_same_contents(prepared, corpus, tmp_path):
    """Format 5 wrote the geometry as loose keys (channels, cache_fs, model_fs, window_s,
    token_patch; decimation in the arguments): a reader refuses it naming `cyclejepa prepare`, and
    prepare rebuilds it with its signals, events and normalisation byte for byte."""
    old = tmp_path / "old"
    shutil.copytree(prepared.path, old)
    manifest = json.loads((old / "manifest.json").read_text())
    geometry = manifest.pop("geometry")
    loose = {key: geometry[key] for key in ("channels", "cache_fs", "window_s", "token_patch")}
    manifest |= {**loose, "model_fs": geometry["model_fs"]}
    arguments = manifest["arguments"]
    del arguments["geometry"]
    arguments |= {**loose, "decimation": geometry["decimation"], "cache_format": 5}
    manifest["config_hash"] = cache_files.arguments_hash(arguments)
    (old / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"format 5; .* rebuild it with `cyclejepa prepare CONFIG`"):
        PreparedCache(old)
    rebuilt = prepare_cache(PTBXL(corpus), CacheSpec(old), progress=False)
    assert rebuilt.manifest["files"] == prepared.manifest["files"]  # every file byte for byte
    assert rebuilt.geometry == SignalGeometry(LEADS, 500.0, 5, 8, 10.0) and rebuilt.n_tokens == 125


def test_the_cache_names_its_two_rates(prepared):
    """PTB-XL: records phased at cache_fs = 500 Hz (events are indices at it), the model's
    signals at model_fs = 500 / 5 = 100 Hz: a 10 s window is 1000 samples, its events < 5000."""
    assert (prepared.cache_fs, prepared.model_fs) == (500.0, 100.0)
    assert prepared.signals.shape[-1] == 10 * 100
    assert prepared.event_indices.max() < 10 * 500 and prepared.event_indices.max() > 10 * 100
    assert prepared.channels == LEADS


def test_open_cache_accepts_its_spec_and_names_each_key_another_spec_changes(prepared, corpus):
    from cyclejepa.data.cache import CacheMismatch, open_cache

    spec = CacheSpec(prepared.path, dataset="ptbxl", root=corpus, cache_fs=500.0, decimation=5, token_patch=8,
                     window_s=10.0, phase_provider="ecg-rpeak", train_folds=PTBXL.folds.train)  # fmt: skip
    assert open_cache(spec).path == prepared.path
    assert open_cache(CacheSpec(prepared.path)).path == prepared.path  # a spec that names nothing compares nothing
    other = dataclasses.replace(spec, cache_fs=250.0, window_s=8.0, amplitude_limits={"mV": 50})
    with pytest.raises(CacheMismatch) as caught:
        open_cache(other)
    message = str(caught.value)
    assert (
        "cache_fs: cache 500.0, config 250.0; window_s: cache 10.0, config 8.0; amplitude_limits: cache {'I': 200.0," in message
    )
    assert message.count(": cache ") == 3 and "cyclejepa prepare CONFIG" in message  # only the keys that differ


def test_cache_spec_carries_the_configs_data_and_phase_sections(tmp_path):
    from cyclejepa.config import parse_config
    from cyclejepa.pipeline.preparation import cache_spec

    cfg = parse_config({"data": {"dataset": "synthetic", "root": str(tmp_path), "options": {"records": 12},
                                 "cache_fs": 250, "window_s": 8, "train_folds": [1, 2], "workers": 3,
                                 "cache_dir": str(tmp_path / "c"), "amplitude_limits": {"mV": 50}},
                        "phase": {"options": {"lead": "I"}}})  # fmt: skip
    spec = cache_spec(cfg)
    assert spec == CacheSpec(
        tmp_path / "c", "synthetic", tmp_path, {"records": 12}, 250.0, cfg.data.decimation, cfg.data.token_patch,
        8.0, "ecg-rpeak", {"lead": "I"}, {"mV": 50}, (1, 2), 3,
    )  # fmt: skip
    assert cache_spec(cfg, tmp_path / "elsewhere").directory == tmp_path / "elsewhere"


def test_the_data_layer_reads_no_experiment_config():
    """cyclejepa.data is handed a `CacheSpec`: none of its modules imports the config schema,
    the config's facts or the pipeline."""
    import ast

    import cyclejepa.data

    root, found = Path(cyclejepa.data.__file__).parent, []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno} {name}" for name in names
                      if name.split(".")[:2] in (["cyclejepa", "config"], ["cyclejepa", "facts"], ["cyclejepa", "pipeline"])]  # fmt: skip
    assert found == []


def test_two_workers_write_the_same_cache(prepared, corpus, tmp_path):
    parallel = prepare_cache(PTBXL(corpus), CacheSpec(tmp_path / "w2", workers=2), progress=False)
    assert parallel.manifest["files"] == prepared.manifest["files"]


def test_cache_dir_errors(corpus, tmp_path):
    with pytest.raises(FileNotFoundError, match="cyclejepa prepare"):
        PreparedCache(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="refusing"):
        prepare_cache(PTBXL(corpus), CacheSpec(tmp_path), progress=False)
    with pytest.raises(KeyError, match="ecg-rpeak"):
        prepare_cache(PTBXL(corpus), CacheSpec(tmp_path / "x", phase_provider="ecg-rpeek"), progress=False)


# --------------------------------------------------------- bad CSV rows, validation before swap


def test_bad_rows_are_rejected_into_the_log_and_the_run_goes_on(real_rows, tmp_path):  # noqa: F811 (the fixture imported above)
    """Real PTB-XL rows with one bad cell each: logged with id, column and reason; the rest kept."""
    from test_ptbxl import GOOD_IDS, ROW_REJECTIONS

    cache = prepare_cache(PTBXL(real_rows), CacheSpec(tmp_path / "cache"), progress=False)
    assert cache.columns["record_id"].tolist() == GOOD_IDS
    logged = pd.read_csv(tmp_path / "cache" / "rejections.csv", keep_default_na=False)
    assert list(logged["id"]) == [str(i) for i, _ in ROW_REJECTIONS] and set(logged["check"]) == {"metadata"}
    assert [r.record_id for r in PreparedCache(cache.path).rejections] == [i for i, _ in ROW_REJECTIONS]
    assert cache.manifest["counts"] == {
        "records": len(GOOD_IDS) + len(ROW_REJECTIONS), "records_kept": len(GOOD_IDS), "kept": len(GOOD_IDS),
        "rejected": len(ROW_REJECTIONS), "qc_failed": int((~cache.columns["qc_ok"]).sum()),
    }  # fmt: skip
    assert set(cache.columns["sex"]) <= {0, 1}  # 'male' never reaches meta.csv


def test_a_broken_build_is_never_published(prepared, corpus, tmp_path, monkeypatch):
    target = tmp_path / "published"
    shutil.copytree(prepared.path, target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    real_meta_row = cache_files.meta_row

    def sex_as_text(entry, levels, outcome):  # what the reader once let through from sex='male'
        row = real_meta_row(entry, levels, outcome)
        return row[:6] + ["male"] + row[7:] if entry.id == prepared.columns["record_id"][0] else row

    monkeypatch.setattr(cache_files, "meta_row", sex_as_text)
    with pytest.raises(ValueError, match=r"not published .* does not load: .*'male'"):
        prepare_cache(PTBXL(corpus), CacheSpec(target, train_folds=range(1, 9)), progress=False)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before  # the old cache is intact
    assert not list(tmp_path.glob(".published.*"))  # no build folder left behind
    monkeypatch.undo()
    real_append = cache_shares._append

    def one_row_short(path, sources):
        real_append(path, sources)
        if path.name == "meta.csv":
            path.write_bytes(path.read_bytes().rstrip(b"\r\n").rsplit(b"\r\n", 1)[0] + b"\r\n")

    monkeypatch.setattr(cache_shares, "_append", one_row_short)
    with pytest.raises(ValueError, match=r"signals has 35 rows, meta\.csv 34"):
        prepare_cache(PTBXL(corpus), CacheSpec(tmp_path / "fresh"), progress=False)
    assert not (tmp_path / "fresh").exists()
