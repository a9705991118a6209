"""benchmarks/neurokit_comparison.py: its scoring against independent computations, on a piece
of a shared BIDMC recording (skipped where ../shared/data/bidmc-samples is absent)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from conftest import SAMPLES

BIDMC = SAMPLES.parent / "bidmc-samples"
bidmc = pytest.mark.skipif(not (BIDMC / "bidmc44.breath").is_file(), reason="shared bidmc-samples absent")


@pytest.fixture(scope="module")
def bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "neurokit_comparison.py"
    spec = importlib.util.spec_from_file_location("neurokit_comparison", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def largest_matching(detected: np.ndarray, annotated: np.ndarray, tolerance: float) -> int:
    """The most one-to-one pairs within ``tolerance``, by the Hungarian algorithm: a pair farther
    apart costs more than every allowed pair together, so the cheapest assignment holds as many
    allowed pairs as there can be."""
    distance = np.abs(detected[:, None] - annotated[None, :])
    cost = np.where(distance <= tolerance, distance, 1e6)
    rows, columns = linear_sum_assignment(cost)
    return int(np.sum(distance[rows, columns] <= tolerance))


def reference_f1(detected: np.ndarray, annotated: np.ndarray, tolerance: float) -> float:
    """F1 = 2 TP / (detected + annotated), detections outside the annotated span ± tolerance left out."""
    inside = [t for t in detected if annotated.min() - tolerance <= t <= annotated.max() + tolerance]
    inside = np.asarray(inside, dtype=float)
    return 2 * largest_matching(inside, annotated, tolerance) / (len(inside) + len(annotated))


@bidmc
def test_breath_f1_of_a_piece_of_a_record_equals_the_largest_one_to_one_matching(bench):
    """The first 90 s of bidmc44's RESP: ``breath``'s breaths against each annotator (who mark
    different points of the breath on this recording), and the same breaths moved, dropped and
    doubled, scored by the benchmark and by the Hungarian algorithm alike."""
    resp = bench.read_channel(BIDMC / "bidmc44", "RESP,")
    piece = bench.Channel(resp.samples[: int(90 * resp.fs)], resp.fs, resp.start_s)
    times, error, _ = bench.detect(bench.cyclejepa_breaths, piece)
    assert error is None and len(times) > 15
    annotators = {name: marks[marks < 90.0] for name, marks in bench.annotated_breaths(BIDMC / "bidmc44").items()}
    rng = np.random.default_rng(0)
    moved = np.sort(np.concatenate([times[::2] + rng.uniform(-0.7, 0.7, len(times[::2])), times[1::3] + 0.3]))
    scores = []
    for detected in (times, moved, times[5:]):
        for marks in annotators.values():
            result = bench.breath_f1(detected, marks)
            assert result["f1"] == pytest.approx(reference_f1(detected, marks, 0.5), abs=1e-12)
            scores.append(result["f1"])
    assert max(scores) > 0.95 and min(scores) < 0.5  # one annotator's marks match, the other's lie half a breath away


def test_count_agreement_is_within_five_percent_of_the_reference(bench):
    assert [bench.count_agrees(n, 100) for n in (94, 95, 100, 105, 106)] == [False, True, True, True, False]
    assert bench.count_agrees(0, 0) and not bench.count_agrees(1, 0)


@bidmc
def test_a_record_row_counts_against_the_ecg_and_reports_a_crashing_method_as_crashed(bench):
    def crashing(wave, fs):
        raise ValueError("no peaks\nsecond line")

    row = bench.pulse_row(BIDMC / "bidmc44", "II,", "PLETH,", {"pulse": bench.cyclejepa_pulses, "crashing": crashing})
    pulse, crashed = row["methods"]["pulse"], row["methods"]["crashing"]
    assert crashed["crashed"] == "ValueError: no peaks" and "count" not in crashed
    assert pulse["within_5pct"] == (abs(pulse["count"] - row["beats"]) <= 0.05 * row["beats"])
    summary = bench.summary([row, row], [])
    assert summary["pulse"]["crashing"] == {"within_5pct": 0, "records": 2, "crashed": 2}
    assert summary["pulse"]["pulse"]["within_5pct"] == 2 * pulse["within_5pct"]
