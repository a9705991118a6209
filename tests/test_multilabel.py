"""Benchmark scores: sample-centric Fmax against a naive loop and a hand count, bootstrap weights
against repeated records, macro-AUROC against scikit-learn."""

import numpy as np
import pytest
from scipy.special import expit
from sklearn.metrics import roc_auc_score

from cyclejepa.evaluation.bootstrap import patient_bootstrap_weights
from cyclejepa.evaluation.multilabel import THRESHOLDS, sample_fmax, score_multilabel


def naive_fmax(Y, P, thresholds=THRESHOLDS):
    """The CAFA definition, one threshold and one record at a time, in Python floats."""
    best = 0.0
    for t in thresholds:
        precisions, recalls = [], []
        for labels, scores in zip(Y.tolist(), P.tolist(), strict=True):
            predicted = {c for c, p in enumerate(scores) if p >= t}
            true = {c for c, y in enumerate(labels) if y}
            hit = len(predicted & true)
            if predicted:
                precisions.append(hit / len(predicted))
            recalls.append(hit / len(true))
        if precisions:
            pr, rc = sum(precisions) / len(precisions), sum(recalls) / len(recalls)
            if pr + rc > 0:
                best = max(best, 2 * pr * rc / (pr + rc))
    return best


def data(n=60, c=7, seed=0):
    rng = np.random.default_rng(seed)
    Y = (rng.random((n, c)) < 0.3).astype(np.int64)
    Y[np.arange(n), rng.integers(0, c, n)] = 1  # every record carries a label
    logits = 1.5 * Y + rng.normal(size=(n, c))
    return Y, logits, rng.integers(0, n // 3, n)


def test_fmax_of_a_hand_counted_example():
    Y = np.array([[1, 0, 0], [0, 1, 1]])
    P = np.array([[0.9, 0.8, 0.1], [0.2, 0.7, 0.3]])
    # t in (0.2, 0.3]: record 1 predicts {0, 1} (precision 1/2, recall 1), record 2 {1, 2} (1, 1):
    # precision 3/4, recall 1, F = 6/7, the best; t in (0.3, 0.7]: record 2 predicts {1} (1, 1/2),
    # F = 3/4; t in (0.8, 0.9]: only record 1 predicts {0} (1, 1), recall (1 + 0) / 2, F = 2/3.
    assert sample_fmax(Y, P)[0] == pytest.approx(6 / 7)
    assert sample_fmax(Y, P, thresholds=np.array([0.5]))[0] == pytest.approx(3 / 4)
    assert sample_fmax(Y, P, thresholds=np.array([0.85]))[0] == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fmax_matches_a_naive_loop(seed):
    Y, logits, _ = data(seed=seed)
    P = expit(logits)
    assert sample_fmax(Y, P)[0] == pytest.approx(naive_fmax(Y, P), abs=1e-12)


def test_weighted_fmax_equals_fmax_of_the_records_repeated():
    Y, logits, patients = data(n=30)
    P = expit(logits)
    weights = patient_bootstrap_weights(patients, 4, seed=3)
    for row, value in zip(weights, sample_fmax(Y, P, weights), strict=True):
        repeat = row.astype(int)
        assert value == pytest.approx(naive_fmax(np.repeat(Y, repeat, axis=0), np.repeat(P, repeat, axis=0)), abs=1e-12)


def test_fmax_refuses_unlabelled_records_and_scores_outside_unit_interval():
    Y = np.array([[1, 0], [0, 0]])
    with pytest.raises(ValueError, match="1 records carry no label"):
        sample_fmax(Y, np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match=r"probabilities must lie in \[0, 1\]"):
        sample_fmax(np.eye(2, dtype=int), np.array([[1.2, 0.0], [0.0, 1.0]]))


def test_scores_macro_auroc_like_sklearn_and_share_one_bootstrap():
    Y, logits, patients = data()
    Y[:, 3] = 0  # a class without positives is skipped, as roc_auc_score cannot score it
    Y[Y.sum(axis=1) == 0, 0] = 1
    classes = [f"c{i}" for i in range(Y.shape[1])]
    scores = score_multilabel(Y, logits, patients, classes=classes, replicates=300, seed=1)
    kept = [c for c in range(Y.shape[1]) if c != 3]
    assert scores.macro_auroc.point == pytest.approx(roc_auc_score(Y[:, kept], logits[:, kept], average="macro"), abs=1e-12)
    assert scores.per_class["c1"] == pytest.approx(roc_auc_score(Y[:, 1], logits[:, 1]), abs=1e-12)
    assert scores.skipped == ["c3"] and scores.positives["c3"] == 0
    assert scores.fmax.point == pytest.approx(naive_fmax(Y, expit(logits)), abs=1e-12)
    for ci in (scores.macro_auroc, scores.fmax):
        assert ci.low <= ci.point <= ci.high and ci.replicates == 300
    assert (scores.records, scores.patients) == (len(Y), len(np.unique(patients)))
    again = score_multilabel(Y, logits, patients, classes=classes, replicates=300, seed=1)
    assert (again.fmax.low, again.macro_auroc.high) == (scores.fmax.low, scores.macro_auroc.high)


@pytest.mark.parametrize("weights", [np.ones((2, 3)), np.ones(4), -np.ones((1, 4))])
def test_both_weighted_scores_refuse_record_weights_of_the_wrong_shape_or_sign(weights):
    from cyclejepa.evaluation.probe import weighted_auroc

    Y = np.array([[1, 0], [0, 1], [1, 0], [0, 1]])  # every record labelled, as Fmax requires
    scores = np.array([[0.9, 0.2], [0.1, 0.7], [0.4, 0.5], [0.6, 0.3]])
    for score in (weighted_auroc, sample_fmax):
        with pytest.raises(ValueError, match=r"weights must be non-negative \(R, 4\)"):
            score(Y, scores, weights)
