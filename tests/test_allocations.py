"""Harmonic-allocation benchmark: every allocation has the same K, and the summary statistics."""

import math

import pytest

from cyclejepa.bench.allocations import ALLOCATIONS, allocation_table, markdown_table, summarise_allocations
from cyclejepa.symmetry import HarmonicSpectrum


def test_allocations_share_one_latent_dimension_and_cover_the_issue():
    spectra = {name: HarmonicSpectrum(spec) for name, spec in ALLOCATIONS.items()}
    assert {s.dim for s in spectra.values()} == {32}
    assert set(spectra["gapped {1,4,7}"].multiplicities) == {1, 4, 7}
    assert spectra["invariant-only"].invariant_dim == 32 and not spectra["invariant-only"].multiplicities
    assert spectra["invariant-heavy"].invariant_dim > spectra["paper-profile"].invariant_dim
    assert spectra["low n_max"].n_max < spectra["paper-profile"].n_max


def row(name, seed, auroc, gain, amplitude=1.0, g1=True):
    return {
        "allocation": name,
        "spectrum": "2x0+1x1",
        "seed": seed,
        "encoder": "trained",
        "auroc": auroc,
        "auroc_low": auroc - 0.1,
        "auroc_high": auroc + 0.1,
        "gain_fraction": gain,
        "shuffled_gain_fraction": 0.0,
        "g1": g1,
        "amplitude": amplitude,
        "coherence": 0.9,
        "effective_rank": 5.0,
    }


def test_summary_is_the_seed_mean_and_range_ignoring_undefined_metrics():
    table = summarise_allocations(
        [
            row("a", 0, 0.8, 0.5),
            row("a", 1, 0.6, 0.7, g1=False),
            row("b", 0, 0.7, 0.0, amplitude=math.nan),
            row("b", 1, 0.7, 0.0, amplitude=math.nan),
        ]
    )
    a, b = table
    assert (a["auroc"], a["auroc_min"], a["auroc_max"]) == pytest.approx((0.7, 0.6, 0.8))
    assert a["gain_fraction"] == pytest.approx(0.6) and a["g1_passed"] == 1 and a["seeds"] == 2
    assert a["auroc_ci"] == pytest.approx([0.6, 0.8])
    assert math.isnan(b["amplitude"])
    text = markdown_table(table)
    assert "| a |" in text and "1/2" in text and "–" in text  # undefined amplitude shown as a dash


def test_the_table_scores_each_allocation_and_seed_once_and_keeps_finished_rows(tmp_path):
    calls = []

    def score(name, seed, directory):
        calls.append((name, seed, directory))
        return {
            k: v
            for k, v in row(name, seed, 0.6 + seed / 10, 0.1).items()
            if k not in ("allocation", "spectrum", "seed", "encoder")
        }

    allocations = {"a": "2x0+1x1", "b b": "4x0"}
    summary = allocation_table(tmp_path, score, allocations=allocations, seeds=(0, 1), steps=3)
    assert [(name, seed) for name, seed, _ in calls] == [("a", 0), ("a", 1), ("b b", 0), ("b b", 1)]
    assert calls[2][2] == tmp_path / "runs" / "b-b-seed0"  # each row its own run folder
    assert summary["steps"] == 3 and summary["table"] == summarise_allocations(summary["rows"])
    assert summary["table"][0]["auroc"] == pytest.approx(0.65) and summary["table"][1]["spectrum"] == "4x0"
    assert (tmp_path / "allocations.md").read_text() == markdown_table(summary["table"]) + "\n"

    calls.clear()
    again = allocation_table(tmp_path, score, allocations={**allocations, "c": "3x0"}, seeds=(0, 1), steps=3)
    assert [(name, seed) for name, seed, _ in calls] == [("c", 0), ("c", 1)]  # finished rows are read back
    assert again["rows"][:4] == summary["rows"]


def test_the_random_baseline_has_its_own_rows_beside_each_trained_allocation(tmp_path):
    """With an ``untrained`` scorer every allocation × seed also gets a random-encoder row, scored
    without a run folder, summarised apart from the trained rows and shown beside them."""
    calls = []

    def score(name, seed, directory):
        return {k: v for k, v in row(name, seed, 0.8, 0.9).items() if k not in ("allocation", "spectrum", "seed", "encoder")}

    def untrained(name, seed):
        calls.append((name, seed))
        return {
            k: v
            for k, v in row(name, seed, 0.6 + seed / 10, 0.1, g1=False).items()
            if k not in ("allocation", "spectrum", "seed", "encoder")
        }

    summary = allocation_table(tmp_path, score, allocations={"a": "2x0+1x1"}, seeds=(0, 1), steps=3, untrained=untrained)
    assert calls == [("a", 0), ("a", 1)]
    trained, random = summary["table"]
    assert (trained["encoder"], random["encoder"]) == ("trained", "random")
    assert trained["auroc"] == pytest.approx(0.8) and random["auroc"] == pytest.approx(0.65)
    assert random["g1_passed"] == 0 and trained["g1_passed"] == 2
    text = markdown_table(summary["table"])
    assert "| a | trained |" in text and "| a | random (untrained) |" in text
    assert (tmp_path / "rows" / "a-random-seed1.json").exists() and not (tmp_path / "runs").exists()
