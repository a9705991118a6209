"""The respiration provider of examples/custom_phase_provider.py (a user-written provider)."""

import numpy as np
import pytest

from cyclejepa.phase import PhaseProvider, match_events
from cyclejepa.phase.crosscheck import zero_crossing_breaths
from cyclejepa.registry import PHASE_PROVIDERS


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


# ---------------------------------------------------------------- one option convention


def test_every_channel_reading_provider_names_its_channel_option_lead(example):
    import inspect

    for name in PHASE_PROVIDERS.names():
        provider = PHASE_PROVIDERS.get(name)
        if not issubclass(provider, PhaseProvider):
            continue  # "composite" reads through its coordinates' providers
        first = next(iter(list(inspect.signature(provider.__init__).parameters.values())[1:]))
        assert first.name == "lead", f"{name}: first option is {first.name!r}"
    assert example.BreathPhase(lead="resp").lead == "resp"


def test_a_config_checks_resp_breath_options_against_its_declared_model(example):
    from cyclejepa.pipeline.checks import consistency_problems
    from cyclejepa.config import ConfigError, parse_config

    with_resp = {"dataset": "challenge2021", "options": {"channels": ["II", "RESP"]}}
    good = parse_config({"data": with_resp, "phase": {"provider": "resp-breath", "options": {"lead": "RESP", "min_events": 6}}})
    assert consistency_problems(good) == []
    with pytest.raises(ConfigError) as caught:
        parse_config({"data": with_resp, "phase": {"provider": "resp-breath", "options": {"channel": "RESP"}}})
    (problem,) = caught.value.problems
    assert problem.startswith("phase.options.channel: unknown option of phase provider 'resp-breath'")
    assert "lead" in problem and "min_phase_yield" in problem  # its own and the shared QC options


def test_validate_checks_the_channel_resp_breath_reads_against_the_dataset(example):
    from cyclejepa.pipeline.checks import consistency_problems
    from cyclejepa.config import parse_config

    (problem,) = consistency_problems(parse_config({"phase": {"provider": "resp-breath"}}))  # PTB-XL has no RESP
    assert problem == (
        "phase.options.lead: 'RESP' (the default of phase provider 'resp-breath') is not a channel of dataset "
        "'ptbxl'; its channels: I, II, III, aVR, aVL, aVF, V1, V2, V3, V4, V5, V6"
    )


@pytest.mark.parametrize(
    ("record", "cycles_with_a_breath"),
    [("03700181", 0.98), ("v102s", 0.78)],  # ventilated and regular; spontaneous with shallow breaths
)
def test_breaths_of_real_records_against_a_naive_onset_scan(example, physionet_samples, record, cycles_with_a_breath):
    signal, fs, channel_names, _ = example.load(physionet_samples / record)
    track = PHASE_PROVIDERS.build("resp-breath", lead="RESP").phase(signal, fs, channel_names)
    onsets = zero_crossing_breaths(signal[channel_names.index("RESP")], fs)
    inside = (track.events > onsets[0]) & (track.events < onsets[-1])
    cycle = np.searchsorted(onsets, track.events[inside])
    assert len(np.unique(cycle)) == inside.sum()  # never two breaths in one naive cycle
    assert inside.sum() >= cycles_with_a_breath * (len(onsets) - 1)
    if record == "03700181":  # the ventilator's rate: the same by both methods
        assert track.qc.metrics["rate_per_min"] == pytest.approx(60 / np.median(np.diff(onsets) / fs), rel=0.02)


def test_cli_phase_runs_the_entry_point_provider_with_lead(example, physionet_samples, monkeypatch):
    import json

    from typer.testing import CliRunner

    from cyclejepa import registry
    from cyclejepa.cli import app

    class ExampleEntry:  # what `[project.entry-points."cyclejepa.plugins"]` would install
        name = "resp"

        def load(self):
            return lambda: example  # the module is imported (registered) already

    monkeypatch.setattr(registry, "entry_points", lambda group: [ExampleEntry()] if group == registry.PLUGIN_GROUP else [])
    assert registry.load_plugins() == ["resp"]
    record = physionet_samples / "03700181"
    result = CliRunner().invoke(app, ["phase", str(record), "--provider", "resp-breath", "--lead", "RESP"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output.strip().splitlines()[-1])
    signal, fs, channel_names, _ = example.load(record)
    expected = example.BreathPhase(lead="RESP").phase(signal, fs, channel_names)
    assert printed["events"] == expected.events.tolist() and printed["qc"]["ok"]
    assert (printed["provider"], printed["event"]) == ("resp-breath", "breath") and "r_peaks" not in printed
