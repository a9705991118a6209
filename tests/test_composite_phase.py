"""The composite phase provider: cardiac and breathing phase of one record as a torus point."""

import numpy as np
import pytest

from cyclejepa.data.cache.record import decimate_and_phase
from cyclejepa.signal_geometry import SignalGeometry
from cyclejepa.phase import CompositePhaseProvider, CompositeTrack, EcgRPeakProvider, PhaseTrack, Track
from cyclejepa.registry import PHASE_PROVIDERS

COORDINATES = {
    "cardiac": {"provider": "ecg-rpeak", "lead": "II"},
    "respiratory": {"provider": "resp-breath", "lead": "RESP"},
}


@pytest.fixture
def v102s(example, physionet_samples):
    """The first 90 s of v102s (II, V, PLETH, RESP at 250 Hz); artefacts from 99 s on give
    lead II implausible RR intervals, so the whole record fails cardiac QC."""
    signal, fs, channel_names, _ = example.load(physionet_samples / "v102s")
    return signal[:, : round(90 * fs)], fs, channel_names


def test_composite_tokens_are_each_providers_own_tokens(example, v102s):
    signal, fs, names = v102s
    provider = PHASE_PROVIDERS.build("composite", coordinates=COORDINATES)
    track = provider.phase(signal, fs, names)
    assert isinstance(track, CompositeTrack) and track.names == ("cardiac", "respiratory")
    cardiac = EcgRPeakProvider(lead="II").phase(signal, fs, names)
    breathing = example.BreathPhase(lead="RESP").phase(signal, fs, names)
    for convention in ("centre", "causal"):
        tokens = track.at_tokens(patch=8, fs_out=100.0, convention=convention)
        assert tokens.shape == (1125, 2)
        np.testing.assert_array_equal(tokens[:, 0], cardiac.at_tokens(8, 100.0, convention))
        np.testing.assert_array_equal(tokens[:, 1], breathing.at_tokens(8, 100.0, convention))
    # joint yield: the samples where both phases are defined, counted naively
    both = np.isfinite(cardiac.phase) & np.isfinite(breathing.phase)
    assert track.phase_yield == pytest.approx(both.mean(), abs=1.5 / len(both))
    qc = track.qc
    assert qc.ok and qc.reasons == [] and qc.metrics["phase_yield"] == track.phase_yield
    assert qc.metrics["cardiac.n_events"] == len(cardiac.events)
    assert qc.metrics["respiratory.rate_per_min"] == breathing.qc.metrics["rate_per_min"]
    assert track.coordinate_qc["respiratory"].metrics == breathing.qc.metrics


def test_one_and_several_coordinates_are_tracks_the_cache_reads_alike(example, v102s):
    """A `PhaseTrack` and a `CompositeTrack` are both a `Track`; through it the cache keeps one
    coordinate's events and (T,) phases whoever gave them, and two coordinates' events, names
    and (T, 2) phases."""
    signal, fs, names = v102s
    single = EcgRPeakProvider(lead="II").phase(signal, fs, names)
    one = CompositePhaseProvider({"cardiac": COORDINATES["cardiac"]}).phase(signal, fs, names)
    two = CompositePhaseProvider(COORDINATES).phase(signal, fs, names)
    assert all(isinstance(track, Track) for track in (single, one, two))
    assert single.tracks == (single,) and single.names == () and isinstance(two.tracks[1], PhaseTrack)
    outcomes = [
        decimate_and_phase(signal.astype(np.float32), provider, SignalGeometry(names, fs, 5, 8, 8.0))[1]
        for provider in (EcgRPeakProvider(lead="II"), CompositePhaseProvider({"cardiac": COORDINATES["cardiac"]}),
                         CompositePhaseProvider(COORDINATES))
    ]  # fmt: skip
    tokens = single.at_tokens(8, fs / 5).astype(np.float32)
    for outcome in outcomes[:2]:
        assert outcome.coordinates == () and len(outcome.events) == 1
        np.testing.assert_array_equal(outcome.events[0], single.events)
        np.testing.assert_array_equal(outcome.phase_centre, tokens)
    assert outcomes[2].coordinates == ("cardiac", "respiratory") and outcomes[2].phase_centre.shape == (len(tokens), 2)
    np.testing.assert_array_equal(outcomes[2].events[1], two.tracks[1].events)
    assert outcomes[2].phase_yield == two.phase_yield and outcomes[2].qc_ok == two.qc.ok


def test_qc_is_reported_per_coordinate(example, v102s):
    signal, fs, names = v102s
    flat = signal.copy()
    flat[names.index("RESP")] = 0.0  # a disconnected respiration belt
    track = CompositePhaseProvider(COORDINATES).phase(flat, fs, names)
    assert track.coordinate_qc["cardiac"].ok and not track.coordinate_qc["respiratory"].ok
    assert "respiratory:too_few_breaths" in track.qc.reasons and "low_phase_yield" in track.qc.reasons
    assert not any(reason.startswith("cardiac:") for reason in track.qc.reasons)
    assert any(detail.startswith("respiratory: too_few_breaths") for detail in track.qc.details)
    assert np.isnan(track.at_tokens(8, 100.0)[:, 1]).all() and track.qc.to_dict()["ok"] is False


def test_bad_coordinates_are_named(example):
    with pytest.raises(
        ValueError, match=r"coordinates\.respiratory\.provider: unknown phase provider 'resp-breth'.*'resp-breath'"
    ):
        CompositePhaseProvider({"respiratory": {"provider": "resp-breth"}})
    with pytest.raises(TypeError, match=r"coordinates\.respiratory: provider 'resp-breath' refuses \{'channel': 'RESP'\}"):
        CompositePhaseProvider({"respiratory": {"provider": "resp-breath", "channel": "RESP"}})
    with pytest.raises(ValueError, match=r"coordinates\.cardiac: expected a mapping with a 'provider' key"):
        CompositePhaseProvider({"cardiac": "ecg-rpeak"})
    with pytest.raises(ValueError, match="non-empty mapping"):
        CompositePhaseProvider({})


def test_validate_reports_a_bad_coordinate_under_phase_options(example):
    from cyclejepa.pipeline.checks import consistency_problems
    from cyclejepa.config import ConfigError, parse_config

    torus = {"name": "torus", "spectrum": "64x(0,0)+48x(1,0)+48x(0,1)"}  # rank 2, K = 256
    # both coordinates on channels of the default dataset (PTB-XL), so that the refusal is the only problem
    coordinates = {**COORDINATES, "respiratory": {"provider": "resp-breath", "lead": "V1"}}
    options = {"coordinates": {**coordinates, "respiratory": {"provider": "resp-breath", "lead": "V1", "channel": "RESP"}}}
    with pytest.raises(ConfigError) as caught:
        parse_config({"phase": {"provider": "composite", "options": options}, "symmetry": torus})
    (problem,) = caught.value.problems
    assert problem.startswith("phase.options.coordinates.respiratory.channel: unknown option of phase provider 'resp-breath'")
    good = parse_config({"phase": {"provider": "composite", "options": {"coordinates": coordinates}}, "symmetry": torus})
    assert consistency_problems(good) == []


def test_phase_command_takes_a_composite_provider_from_a_config(example, physionet_samples, tmp_path):
    import json

    import yaml
    from typer.testing import CliRunner

    from cyclejepa.cli import app

    config = tmp_path / "torus.yaml"
    config.write_text(yaml.safe_dump({
        "phase": {"provider": "composite", "options": {"coordinates": COORDINATES}},
        "symmetry": {"name": "torus", "spectrum": "4x(0,0)+4x(1,0)+4x(0,1)"},
        "model": {"projector": {"dim": 20}},
    }))  # fmt: skip
    record = str(physionet_samples / "v102s")
    result = CliRunner().invoke(app, ["phase", record, "--config", str(config)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert list(printed["coordinates"]) == ["cardiac", "respiratory"] and "r_peaks" not in printed
    raw = __import__("wfdb").rdrecord(record)  # the whole record, as the command reads it
    signal, fs, channel_names = raw.p_signal.T, raw.fs, raw.sig_name
    for name, own in [
        ("cardiac", EcgRPeakProvider(lead="II")),
        ("respiratory", PHASE_PROVIDERS.build("resp-breath", lead="RESP")),
    ]:
        assert printed["coordinates"][name]["events"] == own.phase(signal, fs, channel_names).events.tolist()
    table = CliRunner().invoke(app, ["phase", record, "--config", str(config), "--format", "table"], terminal_width=200)
    counts = {name: len(c["events"]) for name, c in printed["coordinates"].items()}
    assert all(f"{name} {count}" in table.stdout for name, count in counts.items())  # the cell may wrap
    both = CliRunner().invoke(app, ["phase", record, "--config", str(config), "--provider", "ecg-rpeak"])
    assert both.exit_code == 2 and "--config sets the provider" in " ".join(both.output.split())
