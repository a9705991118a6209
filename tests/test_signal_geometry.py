"""The signal geometry (`cyclejepa.signal_geometry.SignalGeometry`): its derived quantities against
their closed forms, its refusals, its JSON form (a package of format 3 named the cache rate
``fs``), and the one place it is built from a dataset's declaration and a config's data keys."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from cyclejepa.config import parse_config
from cyclejepa.declarations.kinds import band_rates
from cyclejepa.facts import data_facts
from cyclejepa.signal_geometry import SignalGeometry

MODULE = Path(__file__).resolve().parents[1] / "cyclejepa" / "signal_geometry.py"


@pytest.mark.parametrize(
    ("cache_fs", "decimation", "token_patch", "window_s"),
    [(500.0, 5, 8, 10.0), (125.0, 5, 2, 10.0), (25.0, 5, 2, 50.0), (50.0, 2, 5, 8.0), (125.0, 1, 25, 10.0)],
)
def test_derived_quantities_are_their_closed_forms(cache_fs, decimation, token_patch, window_s):
    geometry = SignalGeometry(("A", "B"), cache_fs, decimation, token_patch, window_s)
    assert geometry.model_fs == cache_fs / decimation
    assert geometry.window == round(window_s * cache_fs)
    assert geometry.window_samples == round(window_s * cache_fs / decimation)
    assert geometry.n_tokens == round(window_s * cache_fs / (decimation * token_patch))
    assert geometry.n_tokens * token_patch * decimation == geometry.window


def test_the_papers_geometry():
    """PTB-XL: 500 Hz cache, decimated by 5 to 100 Hz, 10 s windows of 1000 samples, 125 tokens of 8."""
    geometry = SignalGeometry(("I", "II"), 500, 5, 8, 10)
    assert (geometry.model_fs, geometry.window, geometry.window_samples, geometry.n_tokens) == (100.0, 5000, 1000, 125)
    assert isinstance(geometry.cache_fs, float) and isinstance(geometry.decimation, int) and geometry.channels == ("I", "II")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((500.0, 5, 8, 10.001), "not a whole number of tokens"),
        ((250.0, 5, 8, 10.0), "not a whole number of tokens of 40 samples"),
        ((500.0, 5, 8, 0.01), "less than one token"),
        ((0.0, 5, 8, 10.0), "rates must be positive"),
        ((500.0, 0, 8, 10.0), "rates must be positive"),
    ],
)
def test_a_window_of_no_whole_tokens_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        SignalGeometry(("A",), *args)


def test_the_json_form_round_trips_and_reads_a_format_3_package():
    geometry = SignalGeometry(("PLETH",), 125.0, 5, 2, 10.0)
    written = json.loads(json.dumps(geometry.to_dict()))
    assert written == {"channels": ["PLETH"], "cache_fs": 125.0, "decimation": 5, "token_patch": 2, "window_s": 10.0,
                       "model_fs": 25.0, "window": 1250, "n_tokens": 125}  # fmt: skip
    assert SignalGeometry.from_dict(written) == geometry
    older = {"channels": ["PLETH"], "fs": 125.0, "window": 1250, "window_s": 1250 / 125.0, "decimation": 5, "token_patch": 2}
    assert SignalGeometry.from_dict(older) == geometry


def test_the_module_imports_nothing_of_the_library():
    """A foundation every step may import: no ``cyclejepa`` import, no numpy, no torch."""
    tree = ast.parse(MODULE.read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert {name.split(".")[0] for name in names} <= {"__future__", "dataclasses", "typing"}


def test_data_facts_carry_the_geometry_the_declaration_builds():
    """The config's data keys over the dataset's defaults; a dataset without a rate takes them from
    the provider's cycle band (`band_rates`)."""
    cfg = parse_config({"data": {"dataset": "synthetic", "cache_fs": 250, "window_s": 8}})
    facts = data_facts(cfg.data)
    assert facts.geometry == SignalGeometry(facts.channels, 250.0, cfg.data.decimation, cfg.data.token_patch, 8.0)
    assert (facts.cache_fs, facts.window_s, facts.n_tokens, facts.folds.count) == (250.0, 8.0, 50, 10)
    pulse = parse_config({"data": {"dataset": "wfdb", "options": {"channels": ["PLETH"]}}, "phase": {"provider": "pulse"}})
    from cyclejepa.facts import cycle_band

    band = data_facts(pulse.data, cycle_band(pulse.phase.provider)).geometry
    assert band == SignalGeometry(("PLETH",), **band_rates(0.5, 3.5))
    with pytest.raises(AttributeError):
        _ = facts.no_such_quantity
