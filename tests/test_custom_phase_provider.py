"""The respiration provider of examples/custom_phase_provider.py (a user-written provider)."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from cyclejepa.phase import PhaseProvider, match_events
from cyclejepa.registry import PHASE_PROVIDERS

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_phase_provider.py"


@pytest.fixture(scope="module")
def example():
    """The example module, imported once (its import registers "resp-breath")."""
    name = "custom_phase_provider_example"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def test_provider_is_a_registered_phase_provider(example):
    assert PHASE_PROVIDERS.get("resp-breath") is example.BreathPhase
    assert issubclass(example.BreathPhase, PhaseProvider)


def test_recovers_synthetic_breaths_and_rate(example):
    fs = 50.0
    signal, peaks = example.synthetic_breathing(fs=fs, duration_s=300.0, seed=0)
    track = PHASE_PROVIDERS.build("resp-breath").phase(signal, fs, ["resp"])
    found = track.events / fs
    detected, reference = match_events(found, peaks, tolerance=0.25)
    assert len(found) == len(peaks) == len(detected)  # every breath once, nothing extra
    # The 0.7 Hz low-pass moves the peak of the asymmetric breath ~80 ms toward expiration.
    assert np.max(np.abs(found[detected] - peaks[reference])) < 0.25
    true_rate = 60.0 / np.median(np.diff(peaks))
    assert track.qc.metrics["rate_per_min"] == pytest.approx(true_rate, rel=0.03)
    assert track.qc.ok


def test_missing_resp_channel_is_named(example):
    with pytest.raises(KeyError, match="'RESP'.*'II'"):
        example.BreathPhase().phase(np.zeros((1, 5000)), 50.0, ["II"])


def test_real_respiration_record_v102s(example, physionet_samples):
    signal, fs, channel_names, _ = example.load(physionet_samples / "v102s")
    track = example.BreathPhase().phase(signal, fs, channel_names)
    assert 6.0 <= track.qc.metrics["rate_per_min"] <= 40.0
    assert track.qc.ok, track.qc.reasons
    assert len(track.events) >= 300 / 10  # at least one breath per 10 s over 5 min
