"""Rates come from the data: on a corpus prepared at 250 Hz (50 Hz model rate, 160 ms tokens)
the anomaly battery's beat times, its perturbations and the heart rates of the heart-rate strata
equal what the phase provider's events give directly, in seconds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL

from cyclejepa.data.cache import CacheSpec, prepare_cache
from cyclejepa.data.ptbxl import PTBXL, read_ptbxl_record
from cyclejepa.evaluation.anomaly import BeatTimes, anomaly_battery
from cyclejepa.evaluation.hr_strata import record_heart_rates
from cyclejepa.models import build_model
from cyclejepa.registry import PERTURBATIONS, PHASE_PROVIDERS
from cyclejepa.symmetry import U1Symmetry

signal_lib = pytest.importorskip("scipy.signal")

EVENT_FS = 250.0  # the cache rate: the provider's events are sample indices at it
WINDOW = 2000  # 8 s at 250 Hz -> 400 samples at the model's 50 Hz -> 50 tokens of 8


pytestmark = pytest.mark.xdist_group("eval_rates")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A 12-record synthetic PTB-XL corpus (500 Hz) and its cache prepared at 250 Hz, 8 s windows."""
    from cyclejepa.data.synthetic import write_synthetic_corpus

    root = write_synthetic_corpus(tmp_path_factory.mktemp("ptbxl"), 12, seed=2, progress=False)
    spec = CacheSpec(tmp_path_factory.mktemp("cache") / "c", cache_fs=EVENT_FS, window_s=8.0)
    cache = prepare_cache(PTBXL(root), spec, progress=False)
    return root, cache


def provider_events(root, ecg_id: int) -> np.ndarray:
    """The provider's events on the record's first 8 s at 250 Hz, resampled here with the
    documented filter (polyphase 1/2, Kaiser beta 5, edge padding), independently of the cache."""
    record = read_ptbxl_record(root, ecg_id).astype(np.float64)
    x = signal_lib.resample_poly(record, 1, 2, axis=-1, window=("kaiser", 5.0), padtype="edge").astype(np.float32)
    return PHASE_PROVIDERS.build("ecg-rpeak").phase(x[:, :WINDOW].astype(np.float64), EVENT_FS, PTBXL.channels).events


def test_the_cache_records_its_rates(corpus):
    _, cache = corpus
    assert (cache.cache_fs, cache.model_fs, cache.token_patch, cache.n_tokens) == (250.0, 50.0, 8, 50)


def test_beat_times_and_heart_rates_equal_the_providers_events_in_seconds(corpus):
    root, cache = corpus
    rows = np.arange(len(cache))
    beats = BeatTimes.from_cache(cache, rows)
    heart_rates = record_heart_rates(cache, rows)
    assert beats.fs == 50.0 and len(beats) == len(cache) >= 10
    for row, beat_samples, hr in zip(rows, beats.records(), heart_rates, strict=True):
        seconds = provider_events(root, int(cache.columns["record_id"][row])) / EVENT_FS
        assert len(seconds) >= 5
        np.testing.assert_allclose(beat_samples / cache.model_fs, seconds, rtol=1e-12, atol=0)
        assert hr == pytest.approx(60.0 / np.median(np.diff(seconds)), rel=1e-12)


def test_the_battery_perturbs_at_the_providers_beats_in_milliseconds(corpus):
    """st-shift changes a record only 60-160 ms after one of its R-peaks (in seconds), and
    the battery runs on 50 tokens."""
    root, cache = corpus
    rows = np.arange(4)
    beats = BeatTimes.from_cache(cache, rows)
    x = torch.from_numpy(np.array(cache.signals[rows]))
    onset = torch.zeros(len(rows), dtype=torch.int64)
    shifted = PERTURBATIONS.get("st-shift")(x, 2.0, onset, beats, np.random.default_rng(0)).signals
    for i, row in enumerate(rows):
        changed = np.flatnonzero((shifted[i] != x[i]).any(0).numpy()) / cache.model_fs  # seconds
        seconds = provider_events(root, int(cache.columns["record_id"][row])) / EVENT_FS
        assert len(changed) > 2 * len(seconds)
        since = changed[:, None] - seconds[None, :]
        assert ((since > 0.06) & (since < 0.16)).any(1).all()
    model = build_model("winder", seed=0, encoder={"width": 16, "hidden": 32}, predictor={"depth": 1, "heads": 2})
    battery = anomaly_battery(
        model,
        U1Symmetry("4x0+2x1+2x2+2x3"),
        x,
        beats,
        patch=cache.token_patch,
        families=["st-shift"],
        severities=(2.0,),
        signal_kind="ecg",
        batch_size=4,
    )
    assert [c.severity for c in battery.cells] == [0.0, 2.0] and battery.cells[1].records == 4


def test_the_trainer_augments_at_the_caches_rate(corpus, tmp_path):
    """The paper's 25 Hz tone is at the Nyquist frequency of the 50 Hz model rate: refused, so
    the trainer's augmenter runs at the cache's rate; a 10 Hz tone trains."""
    from cyclejepa import pipeline
    from cyclejepa.config import parse_config

    root, cache = corpus

    def train(tone_hz: float):
        cfg = parse_config({
            "output_dir": str(tmp_path / "run"), "data": {"root": str(root)}, **TINY_MODEL,
            "training": {"steps": 1, "batch_size": 2, "checkpoint_every": 1},
            "augmentations": [{"name": "tone", "p": 1.0, "options": {"frequency": tone_hz}}],
        })  # fmt: skip
        return pipeline.train_run(cfg, cache, tmp_path / f"tone{tone_hz:g}", seed=0, transport_weight=1.0, progress=False)

    with pytest.raises(ValueError, match="tone: frequency 25.0 Hz is not below the Nyquist frequency 25.0 Hz"):
        train(25.0)
    assert train(10.0).augmenter.fs == cache.model_fs == 50.0
