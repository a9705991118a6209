"""The core ``breath`` provider: synthetic breaths with known peaks, and real respiration channels
against an independent count (zero crossings of the band-passed signal, `zero_crossing_breaths`)."""

import numpy as np
import pytest

from conftest import SAMPLES
from cyclejepa.phase import match_events
from cyclejepa.phase.breath import BreathProvider
from cyclejepa.phase.crosscheck import read_channel, score_breaths, zero_crossing_breaths
from cyclejepa.registry import PHASE_PROVIDERS

real_records = pytest.mark.skipif(not (SAMPLES / "v102s.hea").is_file(), reason="shared multiparameter records absent")


def test_registered_with_its_band_channels_and_reasons():
    assert PHASE_PROVIDERS.get("breath") is BreathProvider and BreathProvider.cycle_band_hz == (0.1, 0.7)
    for name in ("RESP", "Resp", "respiration", "THOR", "abdomen", "Airflow", "impedance"):
        assert BreathProvider.reads_channel(name), name
    for name in ("II", "PLETH", "ABP", "MCL1"):
        assert not BreathProvider.reads_channel(name), name
    track = BreathProvider().phase(np.ones((1, 5000)), 50.0, ["RESP"])
    assert track.qc.reasons == ["too_few_breaths", "low_phase_yield"]
    with pytest.raises(KeyError, match=r"no channel named as respiration.*'II', 'PLETH'"):
        BreathProvider().phase(np.ones((2, 5000)), 50.0, ["II", "PLETH"])


def test_recovers_synthetic_peaks_and_onsets(example):
    """Breaths of 3-5 s with their inspiration peak at 40 % (a half cosine up, then down): every
    breath once, at its peak (the 0.7 Hz low-pass moves it ~80 ms toward expiration) or, with
    ``fiducial="onset"``, at the trough where inspiration starts."""
    fs = 50.0
    signal, peaks = example.synthetic_breathing(fs=fs, duration_s=300.0, seed=0)
    track = BreathProvider().phase(signal, fs, ["resp"])
    found = track.events / fs
    detected, reference = match_events(found, peaks, tolerance=0.25)
    assert len(found) == len(peaks) == len(detected) and track.qc.ok
    assert np.max(np.abs(found[detected] - peaks[reference])) < 0.25
    onsets = BreathProvider(fiducial="onset").phase(signal, fs, ["resp"]).events / fs
    starts = peaks - 0.4 * np.diff(np.concatenate([[0.0], peaks]))  # approximate: previous breath's length
    assert len(onsets) == len(peaks) and np.all(onsets < found) and np.all(onsets[1:] > found[:-1])
    assert np.median(np.abs(onsets[1:] - starts[1:])) < 0.6


def test_inverted_polarity_moves_the_events_to_the_other_end_of_the_breath(example):
    fs = 50.0
    signal, peaks = example.synthetic_breathing(fs=fs, duration_s=300.0, seed=1)
    upright = BreathProvider().phase(signal, fs, ["resp"]).events
    turned = BreathProvider(polarity="inverted").phase(-signal, fs, ["resp"]).events
    np.testing.assert_array_equal(turned, upright)
    troughs = BreathProvider(polarity="inverted").phase(signal, fs, ["resp"]).events
    assert abs(len(troughs) - len(upright)) <= 1 and np.median(np.abs(troughs[: len(upright)] - upright[: len(troughs)])) > fs


@real_records
@pytest.mark.parametrize(("record", "channel", "least"), [("03700181", "RESP", 0.99), ("v102s", "RESP", 0.8)])
def test_real_respiration_against_zero_crossings(record, channel, least):
    """03700181 is ventilated (regular): one breath per reference cycle, every cycle; v102s breathes
    shallowly with movement artefacts."""
    resp = read_channel(SAMPLES / record, channel)
    track = BreathProvider(lead=channel).phase(resp.samples[None], resp.fs, [channel])
    scores = score_breaths(zero_crossing_breaths(resp.samples, resp.fs), track.events)
    assert scores["sensitivity"] >= least and scores["ppv"] >= least, scores
