"""The dataset interface: registered datasets, the shared windowing rule, and a plugin dataset
installed through a `cyclejepa.plugins` entry point that `prepare` and `run` use."""

import json
import sys
import textwrap

import numpy as np
import pytest

from cyclejepa import registry, pipeline
from cyclejepa.config import ConfigError, parse_config
from cyclejepa.data.cache import PreparedCache
from cyclejepa.data.datasets import Dataset, Entry, FoldProtocol, Record, RecordRejected, conform, hash_fold
from cyclejepa.data.preprocess import cut_windows
from cyclejepa.data.synthetic import generate_records
from cyclejepa.registry import DATASETS

PLUGIN = '''
"""A third-party dataset: NAME.npz records (signal, fs, channels) and index.json."""
import json
from pathlib import Path

import numpy as np

from cyclejepa.data.datasets import Dataset, Entry, LabelLevel, Record, RecordRejected, sha256_of
from cyclejepa.declarations.options import Options
from cyclejepa.registry import DATASETS


class NpzOptions(Options):
    channels: tuple[str, ...] = ("I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6")


@DATASETS.register("npz-ecg")
class NpzECG(Dataset):
    Options = NpzOptions  # the options a config gives it, checked when the config loads
    label_levels = (LabelLevel("rhythm", "rhythm", ("ABN", "NORM")),)
    cache_fs, decimation = 500.0, 5  # records at any rate, phased at 500 Hz, the model at 100 Hz
    phase_provider = "ecg-rpeak"  # what a config that names no phase provider uses

    def __init__(self, root, channels=("I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6")):
        self.root, self.channels = Path(root), tuple(channels)
        self.index = json.loads((self.root / "index.json").read_text())

    def entries(self):
        return [Entry(i + 1, r["name"], r["patient"], r["patient"] % 10 + 1, labels={"rhythm": frozenset([r["label"]])})
                for i, r in enumerate(self.index)]

    def read(self, entry):
        with np.load(self.root / f"{entry.name}.npz") as f:
            if f["signal"].shape[1] < 10:
                raise RecordRejected(entry.id, "extent", "fewer than 10 samples")
            return Record(entry.id, f["signal"], float(f["fs"]), tuple(str(c) for c in f["channels"]))

    def fingerprint(self):
        return {"root": str(self.root), "index": sha256_of([self.root / "index.json"], self.root)}


@DATASETS.register("npz-unlabelled")
class NpzUnlabelled(NpzECG):
    """The same records without labels, age or sex; patient 0 alone in fold 9; rows marked bad
    in the index are rejected by name while indexing."""

    label_levels = ()

    def entries(self):
        return [Entry(i + 1, r["name"], r["patient"], 9 if r["patient"] == 0 else r["patient"] % 8 + 1)
                for i, r in enumerate(self.index) if not r.get("bad")]

    def rejected(self):
        return [RecordRejected(r["name"], "metadata", "marked bad in index.json") for r in self.index if r.get("bad")]
'''

LEADS_SHUFFLED = ("V6", "I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "RESP")


def test_cut_windows_rule():
    x = np.arange(2 * 25).reshape(2, 25)
    windows = cut_windows(x, 10)
    assert windows.shape == (2, 2, 10)
    np.testing.assert_array_equal(windows[1], x[:, 10:20])  # the 5-sample tail is dropped
    with pytest.raises(ValueError, match="fewer than one window"):
        cut_windows(x[:, :9], 10)


def test_conform_picks_channels_by_name_and_rejects_missing_or_non_finite():
    signal = np.arange(3 * 8, dtype=np.float32).reshape(3, 8)
    record = Record(7, signal, 100.0, ("ii", "I", "V1"))
    np.testing.assert_array_equal(conform(record, ("I", "II"), 100.0), signal[[1, 0]])
    with pytest.raises(RecordRejected, match=r"record 7 rejected \(channel_order\): no channel \['V2'\]"):
        conform(record, ("I", "V2"), 100.0)
    signal[2, 3] = np.nan
    with pytest.raises(RecordRejected, match=r"\(non_finite\): non-finite samples on \['V1'\]"):
        conform(Record(7, signal, 100.0, ("ii", "I", "V1")), ("V1",), 100.0)


def test_builtin_datasets_are_registered():
    assert {"ptbxl", "synthetic", "challenge2021"} <= set(DATASETS.names())


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plugin as an installed distribution: a package and its .dist-info with entry_points.txt."""
    registry.load_builtins()  # the installed plugins first, before this one is on the path
    monkeypatch.delitem(sys.modules, "npz_ecg_plugin", raising=False)  # imported afresh: it registers again
    site = tmp_path / "site"
    (site / "npz_ecg_plugin").mkdir(parents=True)
    (site / "npz_ecg_plugin" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "npz_ecg_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: npz-ecg-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[cyclejepa.plugins]\nnpz-ecg = npz_ecg_plugin\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(DATASETS, "_entries", dict(DATASETS._entries))  # unregistered after the test
    assert "npz-ecg" not in DATASETS
    assert "npz-ecg" in registry.load_plugins()
    assert "npz-ecg" in DATASETS
    return tmp_path


def write_npz_corpus(root, n=60, name="rec{:03d}"):
    """n records at 250 Hz, channels in another order plus RESP; every 5th lasts 20 s; record 3 is
    4 s; record i is called ``name.format(i)``."""
    source = generate_records(n + 1, seed=5)
    index = []
    for i in range(n):
        signal = source.signals[i][:, ::2]  # 500 -> 250 Hz; the synthetic ECG has little above 50 Hz
        if i % 5 == 0:
            signal = np.concatenate([signal, source.signals[n][:, ::2]], axis=1)
        if i == 3:
            signal = signal[:, :1000]
        stacked = np.concatenate([signal[[11, *range(11)]], np.zeros((1, signal.shape[1]), np.float32)])
        np.savez(root / f"{name.format(i)}.npz", signal=stacked, fs=250.0, channels=np.array(LEADS_SHUFFLED))
        label = "NORM" if "NORM" in source.metadata[i]["scp_codes"] else "ABN"
        index.append({"name": name.format(i), "patient": i // 2, "label": label})
    (root / "index.json").write_text(json.dumps(index))
    return index


def tiny_config(root, out, **data):
    return parse_config({
        "name": "plugin", "output_dir": str(out),
        "data": {"dataset": "npz-ecg", "root": str(root), "train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9], **data},
        "symmetry": {"spectrum": "2x0+3x1+2x2+2x3"},
        "model": {"encoder": {"width": 16, "hidden": 32}, "projector": {"hidden": 32, "dim": 16},
                  "predictor": {"depth": 1, "heads": 2, "ffn": 32, "max_relative_position": 124}},
        "objectives": {"regulariser": {"options": {"num_directions": 16}}},
        "training": {"steps": 2, "batch_size": 8, "checkpoint_every": 2, "device": "cpu"},
        "runs": {"seeds": [0]},
        "evaluation": {"steps": [2], "bootstrap": 20, "anomaly_records": 4, "severities": [0.0, 2.0], "umap": False,
                       "eligible_min_positives": 1, "probe_c": 1.0, "device": "cpu"},
    })  # fmt: skip


def test_plugin_dataset_is_prepared_and_run(plugin):
    root = plugin / "corpus"
    root.mkdir()
    index = write_npz_corpus(root)
    with pytest.raises(ConfigError, match=r"data.options.channel: unknown option of dataset 'npz-ecg'.*'channels'"):
        tiny_config(root, plugin / "bad", options={"channel": ["I"]})
    cfg = tiny_config(root, plugin / "run")
    cache = pipeline.prepare(cfg, progress=False)
    assert [(r.record_id, r.check) for r in cache.rejections] == [("rec003", "extent")]  # rec003 lasts 4 s: named, not numbered
    assert "lasts 4.00 s" in cache.rejections[0].detail
    kept = [r for i, r in enumerate(index) if i != 3]
    windows = [2 if int(r["name"][3:]) % 5 == 0 else 1 for r in kept]
    assert len(cache) == sum(windows) and cache.manifest["geometry"]["cache_fs"] == 500 and cache.signals.shape[1:] == (12, 1000)
    assert list(cache.columns["record"]) == [r["name"] for r, w in zip(kept, windows, strict=True) for _ in range(w)]
    assert list(cache.columns["patient_id"]) == [r["patient"] for r, w in zip(kept, windows, strict=True) for _ in range(w)]
    assert (cache.columns["fold"] == cache.columns["patient_id"] % 10 + 1).all()  # the dataset's folds, per window
    expected = [[r["label"] == "ABN", r["label"] == "NORM"] for r, w in zip(kept, windows, strict=True) for _ in range(w)]
    np.testing.assert_array_equal(cache.labels("rhythm"), np.array(expected, dtype=np.uint8))
    report = pipeline.run_experiment(cfg, progress=False)
    result = json.loads((plugin / "run" / "evaluation" / "winder-seed0-step000002.json").read_text())
    assert list(result["diagnostic"]) == ["rhythm"] and np.isfinite(result["diagnostic"]["rhythm"]["macro_auroc"]["point"])
    assert set(result["robustness"]["delta"]) == set(LEADS_SHUFFLED[:-1])
    assert report.is_file()


def test_unlabelled_one_channel_dataset_trains_evaluates_and_reports_without_probes(plugin):
    """An unlabelled corpus (``label_levels = ()``) of one channel, digit-only record names with a
    leading zero, windows, unknown age and sex, and one patient in the evaluation fold."""
    root = plugin / "corpus"
    root.mkdir()
    index = write_npz_corpus(root, n=40, name="0370{:04d}")
    index.append({"name": "03709999", "patient": 99, "label": "ABN", "bad": True})
    (root / "index.json").write_text(json.dumps(index))
    raw = tiny_config(root, plugin / "run", dataset="npz-unlabelled", options={"channels": ["II"]}).model_dump(mode="json")
    raw["evaluation"]["families"] = ["ectopic", "attenuation"]
    raw["augmentations"] = []  # the default lead dropout needs several leads
    cfg = parse_config(raw)
    report = pipeline.run_experiment(cfg, progress=False)

    cache = PreparedCache(pipeline.cache_dir(cfg))
    assert cache.columns["record"][0] == "03700000"  # meta.csv's names stay strings
    rejected = {(r.record_id, r.check) for r in cache.rejections}
    assert rejected == {("03709999", "metadata"), ("03700003", "extent")}  # by name, not by rank in the index
    evaluation = plugin / "run" / "evaluation"
    result = json.loads((evaluation / "winder-seed0-step000002.json").read_text())
    assert result["diagnostic"] == {} and result.get("robustness") is None
    assert set(result["not_run"]) == {"probes", "robustness", "heart_rate_strata"}
    mechanism = result["mechanism"]
    assert mechanism["patients"] == 1 and mechanism["passed"] is None and mechanism["interval_excludes_zero"] is None
    assert not mechanism["paired_difference"]["testable"] and not mechanism["mean_gain"]["testable"]
    assert np.isfinite(mechanism["true"]["gain_fraction"]) and np.isfinite(result["geometry"]["effective_rank"])
    assert {c["family"] for c in result["anomaly"]} == {"ectopic", "attenuation"}
    assert not list(evaluation.glob("*.npz")) and not list(evaluation.glob("hr-strata-*.json"))

    text = report.read_text()
    bottom = text.split("## Full grid")[0]
    assert "AUROC" not in bottom.split("Anomaly detection")[0]  # no probe row, no lead-zeroing row
    assert "| G1 shuffled-φ gate | Not testable (1 patient) | Not testable (1 patient) |" in text
    assert "| Paired true − shuffled gain ↑ |" in text and "[not testable]" in text
    assert "- Diagnostic probes: dataset 'npz-unlabelled' has no labels" in text
    assert "- Single-lead zeroing: one lead (II): nothing to zero beside it." in text
    assert "superclass" not in text and "Single-lead zeroing (" not in text and "Heart-rate stratified" not in text
    assert "| arm | seed | step | gain fraction | G1 | amplitude | coherence |" in text  # the grid, no task column
    for row in (
        "| Windows |",
        "| Beats per window, median |",
        "| Windows failing phase QC |",
        "| Male, % | unknown | unknown |",
        "| Age, interquartile range | unknown | unknown |",
    ):
        assert row in text, row
    assert "Age sentinel" not in text and "Unlabeled" not in text
    assert "  - 03709999: metadata (marked bad in index.json)" in text
    assert "41 records: 39 kept as 47 windows, 2 rejected;" in text  # record 3 and the bad row out; 8 of 20 s


# A dataset and a phase provider written from the base classes' docstrings alone: the facts,
# `entries` and `read` of `Dataset` (its constructor keeps the root), `events` of `PhaseProvider`
# with the ``lead`` option; nothing else. Pulse-like records at 50 Hz, not an ECG rate.
FROM_THE_DOCSTRINGS = """
import numpy as np
from scipy.signal import find_peaks

from cyclejepa.data.datasets import Dataset, Entry, Record, hash_fold
from cyclejepa.phase import PhaseProvider, channel_indices
from cyclejepa.registry import DATASETS, PHASE_PROVIDERS


@DATASETS.register("npy-pulses")
class NpyPulses(Dataset):
    channels, units, fs = ("PPG",), ("NU",), 50.0
    decimation, token_patch, window_s = 2, 5, 8.0

    def entries(self):
        names = sorted(path.stem for path in self.root.glob("*.npy"))
        return [Entry(i + 1, name, patient_id=i + 1, fold=hash_fold(name)) for i, name in enumerate(names)]

    def read(self, entry):
        return Record(entry.id, np.load(self.root / f"{entry.name}.npy"), self.fs, self.channels)


@PHASE_PROVIDERS.register("npy-pulse-peaks")
class PulsePeaks(PhaseProvider):
    def __init__(self, lead="PPG", **qc):
        super().__init__(**qc)
        self.lead = lead

    def events(self, signal, fs, channel_names):
        wave = signal[channel_indices(channel_names, self.lead)[0]]
        return find_peaks(wave, distance=int(0.3 * fs))[0]
"""


def test_a_dataset_written_from_the_base_class_docstring_prepares_and_trains(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "npy_pulses.py").write_text(FROM_THE_DOCSTRINGS)
    info = site / "npy_pulses-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: npy-pulses\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[cyclejepa.plugins]\nnpy-pulses = npy_pulses\n")
    registry.load_builtins()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(DATASETS, "_entries", dict(DATASETS._entries))
    monkeypatch.setattr(registry.PHASE_PROVIDERS, "_entries", dict(registry.PHASE_PROVIDERS._entries))
    assert "npy-pulses" in registry.load_plugins()
    root = tmp_path / "corpus"
    root.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):  # 20 s at 50 Hz: two 8 s windows each
        t = np.arange(1000) / 50.0
        rate = rng.uniform(1.0, 1.6)  # beats per second
        wave = np.sin(2 * np.pi * rate * t) ** 8 + 0.05 * rng.standard_normal(len(t))
        np.save(root / f"subject{i:02d}.npy", wave[None].astype(np.float32))
    cfg = parse_config({
        "name": "pulses", "output_dir": str(tmp_path / "out"),
        "data": {"dataset": "npy-pulses", "root": str(root)},
        "phase": {"provider": "npy-pulse-peaks"},
        "symmetry": {"spectrum": "2x0+3x1+2x2+2x3"},
        "model": {"encoder": {"width": 16, "hidden": 32}, "projector": {"hidden": 32, "dim": 16},
                  "predictor": {"depth": 1, "heads": 2, "ffn": 32}},
        "objectives": {"regulariser": {"options": {"num_directions": 16}}},
        "augmentations": [{"name": "gaussian-noise"}, {"name": "drift"}],
        "training": {"steps": 2, "batch_size": 4, "checkpoint_every": 2, "device": "cpu"},
        "runs": {"seeds": [0]}, "evaluation": {"steps": [2]},
    })  # fmt: skip
    pipeline.preflight(cfg)
    # derived from the dataset: one channel, tokens of 5 samples at 25 Hz, 8 s = 40 tokens
    assert (cfg.model.encoder.leads, cfg.model.encoder.patch, cfg.model.predictor.max_relative_position) == (1, 5, 79)
    cache = pipeline.prepare(cfg, progress=False)
    assert cache.signals.shape == (24, 1, 200) and cache.phase_centre.shape == (24, 40) and cache.units == ("NU",)
    assert cache.columns["qc_ok"].all()
    directory = pipeline.pretrain(cfg, cache, pipeline.plan_runs(cfg)[0], progress=False)
    losses = [json.loads(line)["loss"] for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and np.isfinite(losses).all() and (directory / "done.json").is_file()


def test_a_dataset_declares_one_unit_per_channel(monkeypatch):
    from cyclejepa.data.datasets import Dataset

    class TwoUnits(Dataset):
        channels, units, fs = ("PPG",), ("NU", "mV"), 50.0

    monkeypatch.setattr(DATASETS, "_entries", {**DATASETS._entries, "two-units": TwoUnits})
    with pytest.raises(
        ConfigError, match=r"data.dataset: 'two-units' declares 2 unit\(s\) \['NU', 'mV'\] for 1 channel\(s\) \['PPG'\]"
    ):
        pipeline.preflight(parse_config({"data": {"dataset": "two-units"}}))


# ------------------------------------------------------------------ facts a dataset owns: folds, default provider


class FiveFolds(Dataset):
    """Twelve 20 s pulse waves at 50 Hz in five folds; its phase provider is ``pulse``."""

    channels, units, fs = ("PPG",), ("NU",), 50.0
    decimation, token_patch, window_s = 2, 5, 8.0
    folds = FoldProtocol(train=(1, 2, 3), evaluation=(5,), sealed=(5,), eligible=4, count=5)
    phase_provider = "pulse"

    def entries(self):
        names = [f"subject{i:02d}" for i in range(12)]
        return [Entry(i + 1, name, patient_id=i + 1, fold=hash_fold(name, self.folds.count)) for i, name in enumerate(names)]

    def read(self, entry):
        t = np.arange(1000) / self.fs
        return Record(entry.id, (np.sin(np.pi * (1.0 + entry.id / 20) * t) ** 8)[None].astype(np.float32), self.fs, self.channels)


class NoProvider(FiveFolds):
    phase_provider = None


@pytest.fixture
def five_folds(monkeypatch):
    monkeypatch.setattr(DATASETS, "_entries", {**DATASETS._entries, "five-folds": FiveFolds, "no-provider": NoProvider})


def test_a_dataset_owns_its_fold_count_and_its_default_provider(tmp_path, five_folds):
    from cyclejepa.pipeline.checks import consistency_problems
    from cyclejepa.data.cache import CacheSpec, prepare_cache

    cfg = parse_config({"data": {"dataset": "five-folds", "root": str(tmp_path)}})
    assert (cfg.phase.provider, cfg.data.train_folds, cfg.data.eval_folds) == ("pulse", [1, 2, 3], [5])
    assert consistency_problems(cfg) == []
    beyond = parse_config({"data": {"dataset": "five-folds", "train_folds": [1, 6], "eval_folds": [10]}})
    assert consistency_problems(beyond) == [
        "data.train_folds: folds [6] are not folds of dataset 'five-folds', which has 1..5",
        "data.eval_folds: folds [10] are not folds of dataset 'five-folds', which has 1..5",
    ]
    assert consistency_problems(parse_config({"data": {"dataset": "ptbxl", "train_folds": [1], "eval_folds": [10]}})) == []
    with pytest.raises(ValueError, match=r"train_folds must be a non-empty subset of FiveFolds's folds 1\.\.5, got \(6,\)"):
        prepare_cache(FiveFolds(tmp_path), CacheSpec(tmp_path / "refused", train_folds=(6,)), progress=False)
    cache = prepare_cache(FiveFolds(tmp_path), CacheSpec(tmp_path / "cache"), progress=False)
    assert cache.manifest["arguments"]["phase_provider"] == "pulse"
    assert cache.manifest["dataset"]["folds"]["count"] == 5 and cache.folds == FiveFolds.folds
    assert set(cache.columns["fold"]) <= set(range(1, 6)) and 5 in set(cache.columns["fold"])


def test_a_dataset_without_a_default_provider_needs_one_named(tmp_path, five_folds):
    from cyclejepa.pipeline.checks import consistency_problems
    from cyclejepa.data.cache import CacheSpec, prepare_cache

    cfg = parse_config({"data": {"dataset": "no-provider"}})
    assert cfg.phase.provider is None
    assert consistency_problems(cfg)[-1].startswith(
        "phase.provider: dataset 'no-provider' declares no default phase provider; name one ("
    )
    assert parse_config({"data": {"dataset": "no-provider"}, "phase": {"provider": "pulse"}}).phase.provider == "pulse"
    with pytest.raises(ValueError, match=r"phase_provider: NoProvider declares no default phase provider"):
        prepare_cache(NoProvider(tmp_path), CacheSpec(tmp_path / "cache"), progress=False)


def test_a_fold_protocol_names_only_its_folds_and_a_ten_fold_manifest_keeps_its_bytes():
    assert FoldProtocol().to_dict() == {"train": list(range(1, 10)), "evaluation": [10], "sealed": [10], "eligible": 9}
    assert FoldProtocol.from_dict(FiveFolds.folds.to_dict()) == FiveFolds.folds
    assert FoldProtocol.from_dict(FoldProtocol().to_dict()) == FoldProtocol()
    with pytest.raises(
        ValueError,
        match=r"folds \{'train': \[6, 7, 8, 9\], 'evaluation': \[10\], 'sealed': \[10\], 'eligible': \[9\]\} outside 1\.\.5",
    ):
        FoldProtocol(count=5)
    assert {hash_fold(f"r{i}", 3) for i in range(60)} == {1, 2, 3}
