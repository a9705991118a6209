"""Embeddings, linear probe, AUROC and its patient-clustered bootstrap, lead zeroing, heart-rate strata."""

import logging

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import expit
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler
from torch import nn

from cyclejepa.data.cache import PreparedCache
from cyclejepa.data.ptbxl import LEADS, PTBXL, SUBCLASSES, SUPERCLASSES
from cyclejepa.evaluation.bootstrap import patient_bootstrap_weights
from cyclejepa.evaluation.hr_strata import heart_rate, hr_stratified_auroc
from cyclejepa.evaluation.embeddings import (
    Representations,
    embed_records,
    extract_tokens,
    record_representations,
)
from cyclejepa.evaluation.probe import (
    DEFAULT_CS,
    LinearProbe,
    clustered_bootstrap,
    diagnostic_tasks,
    evaluate_probe,
    evaluate_task,
    macro_auroc,
    record_bootstrap,
    replicate_macro_auroc,
    weighted_auroc,
)
from cyclejepa.evaluation.robustness import channel_zeroing
from cyclejepa.models import build_model


def labelled_scores(rng, n, classes, signal=0.8, prevalence=0.3):
    Y = (rng.random((n, classes)) < prevalence).astype(np.int64)
    return Y, Y * signal + rng.normal(size=(n, classes))


def naive_auroc(y, s):
    """Mean over all positive × negative pairs of 1[s_i > s_j] + ½ 1[s_i = s_j]."""
    pos, neg = s[y == 1][:, None], s[y == 0][None, :]
    return float(((pos > neg) + 0.5 * (pos == neg)).mean())


# --------------------------------------------------------------------------------------------
# AUROC and the bootstrap


def test_weighted_auroc_equals_sklearn_with_ties_and_on_resampled_rows():
    rng = np.random.default_rng(0)
    Y, scores = labelled_scores(rng, 300, 4)
    scores = np.round(scores, 1)  # many ties
    expected = [roc_auc_score(Y[:, c], scores[:, c]) for c in range(4)]
    np.testing.assert_allclose(weighted_auroc(Y, scores)[0], expected, rtol=0, atol=1e-12)

    groups = rng.integers(0, 120, 300)
    weights = patient_bootstrap_weights(groups, 5, 3)
    replicated = weighted_auroc(Y, scores, weights)
    for r in range(5):
        rows = np.repeat(np.arange(300), weights[r].astype(int))  # the explicit resample
        resampled = [roc_auc_score(Y[rows, c], scores[rows, c]) for c in range(4)]
        np.testing.assert_allclose(replicated[r], resampled, rtol=0, atol=1e-12)
        assert replicate_macro_auroc(Y, scores, weights)[r] == pytest.approx(np.mean(resampled), abs=1e-12)


def test_macro_auroc_matches_naive_loop_and_reports_skipped_classes(caplog):
    rng = np.random.default_rng(1)
    Y, scores = labelled_scores(rng, 80, 3)
    Y[:, 1] = 0  # no positives: skipped
    with caplog.at_level(logging.WARNING):
        value = macro_auroc(Y, scores, classes=["A", "B", "C"])
    assert value == pytest.approx(np.mean([naive_auroc(Y[:, c], scores[:, c]) for c in (0, 2)]), abs=1e-12)
    assert caplog.records[-1].getMessage().endswith(": B")
    with pytest.raises(ValueError, match="undefined"):
        macro_auroc(np.zeros((5, 2), int), np.zeros((5, 2)))
    with pytest.raises(ValueError, match="finite"):
        macro_auroc(Y, np.full_like(scores, np.nan))


def test_duplicated_patients_widen_the_clustered_interval():
    rng = np.random.default_rng(2)
    Y, scores = labelled_scores(rng, 150, 2, signal=1.0, prevalence=0.4)
    patients = np.arange(150)
    copies = np.repeat(np.arange(15), 29)  # 15 patients get 29 identical extra records each
    Y, scores, patients = np.r_[Y, Y[copies]], np.r_[scores, scores[copies]], np.r_[patients, copies]

    clustered = clustered_bootstrap(Y, scores, patients, replicates=400, seed=0)
    by_record = record_bootstrap(Y, scores, replicates=400, seed=0)
    assert clustered.point == by_record.point == pytest.approx(macro_auroc(Y, scores))
    assert clustered.high - clustered.low > 1.5 * (by_record.high - by_record.low)


def test_bootstrap_is_reproducible_by_seed_and_covers_the_point():
    rng = np.random.default_rng(3)
    Y, scores = labelled_scores(rng, 200, 5)
    groups = rng.integers(0, 90, 200)
    first = clustered_bootstrap(Y, scores, groups, replicates=200, seed=7)
    assert first == clustered_bootstrap(Y, scores, groups, replicates=200, seed=7)
    assert first != clustered_bootstrap(Y, scores, groups, replicates=200, seed=8)
    assert first.low < first.point < first.high
    assert (first.replicates, first.level) == (200, 0.95)
    narrower = clustered_bootstrap(Y, scores, groups, replicates=200, seed=7, level=0.5)
    assert first.low < narrower.low < narrower.high < first.high


# --------------------------------------------------------------------------------------------
# the probe


def test_probe_follows_the_estimator_api():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(120, 6))
    Y = np.c_[X[:, 0] > 0, X[:, 1] + X[:, 2] > 0.5].astype(int)
    probe = LinearProbe(C=0.5, cv=3)
    with pytest.raises(NotFittedError):
        probe.decision_function(X)
    assert clone(probe).get_params() == probe.get_params()
    assert probe.set_params(C=2.0).C == 2.0
    probe.fit(X, Y)
    logits = probe.decision_function(X)
    assert logits.shape == (120, 2) and probe.C_ == 2.0
    np.testing.assert_allclose(probe.predict_proba(X), expit(logits), rtol=1e-10)
    np.testing.assert_array_equal(probe.predict(X), (logits >= 0).astype(int))
    assert LinearProbe().fit(X, Y[:, :1]).decision_function(X).shape == (120, 1)
    with pytest.raises(ValueError, match="positive number or 'cv'"):
        LinearProbe(C=-1).fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        probe.decision_function(X[:, :3])


def test_cross_validated_C_sees_only_the_training_folds_grouped_by_patient(monkeypatch):
    rng = np.random.default_rng(5)
    n_train, n_test = 200, 60
    train_X = np.c_[np.arange(n_train, dtype=float), rng.normal(size=(n_train, 5))]  # column 0: row id
    train_Y = (train_X[:, 1:3] + 0.8 * rng.normal(size=(n_train, 2)) > 0).astype(int)
    train_groups = np.arange(n_train) // 4  # patients of four records
    test_X = np.c_[np.full(n_test, 1e6), rng.normal(size=(n_test, 5))]  # sentinel: evaluation rows
    test_Y = (test_X[:, 1:3] > 0).astype(int)

    seen = []
    original_fit = StandardScaler.fit

    def spy(self, X, y=None, **kwargs):
        seen.append(np.asarray(X)[:, 0].copy())
        return original_fit(self, X, y, **kwargs)

    monkeypatch.setattr(StandardScaler, "fit", spy)
    result = evaluate_probe(
        train_X, train_Y, test_X, test_Y, np.arange(n_test),
        classes=["a", "b"], C="cv", replicates=50, train_groups=train_groups,
    )  # fmt: skip
    assert len(seen) == 5 * len(DEFAULT_CS) + 1
    assert all(ids.max() < n_train for ids in seen)  # no evaluation row ever reached a fit
    for ids in seen[:-1]:  # inner folds never split a patient
        inner = np.zeros(n_train, bool)
        inner[ids.astype(int)] = True
        assert not set(train_groups[inner]) & set(train_groups[~inner])
    assert len(seen[-1]) == n_train
    monkeypatch.undo()
    alone = LinearProbe(C="cv").fit(train_X, train_Y, groups=train_groups)
    assert result.C == alone.C_ and set(alone.cv_scores_) == set(DEFAULT_CS)


# --------------------------------------------------------------------------------------------
# embeddings


def test_record_representations_exact_means_and_exclusions():
    tokens = np.arange(4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2)
    nan = np.nan
    phases = np.array([[0.1, nan, 0.3], [0.2, 0.2, 0.2], [nan, nan, nan], [nan, 1.0, nan]])
    reps = record_representations(tokens, phases, qc_ok=np.array([True, False, True, True]))
    np.testing.assert_array_equal(reps.rows, [0, 3])
    np.testing.assert_array_equal(reps.features, [(tokens[0, 0] + tokens[0, 2]) / 2, tokens[3, 1]])
    assert reps.excluded == {"qc_failed": 1, "no_valid_phase": 1}
    features, found = reps.lookup(np.array([3, 1, 0]))
    np.testing.assert_array_equal(found, [True, False, True])
    np.testing.assert_array_equal(features, reps.features[[1, 0]])
    with pytest.raises(ValueError, match="phases"):
        record_representations(tokens, phases[:, :2])


def tiny_model():
    small = {"encoder": {"width": 16, "hidden": 32}, "predictor": {"depth": 1, "heads": 2}}
    return build_model("winder", seed=0, **small)


def test_extract_tokens_equals_the_model_and_streams_a_memmap(tmp_path):
    model = tiny_model().train()
    x = torch.randn(7, 12, 1000, generator=torch.Generator().manual_seed(0))
    np.save(tmp_path / "signals.npy", x.numpy())
    signals = np.load(tmp_path / "signals.npy", mmap_mode="r")

    z = extract_tokens(model, signals, batch_size=3)
    h = extract_tokens(model, signals, batch_size=3, pre_projection=True)
    assert model.training  # mode restored
    with torch.no_grad():
        model.eval()
        np.testing.assert_allclose(z, model(x).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(h, model.encode(x).numpy(), rtol=1e-5, atol=1e-6)
    assert z.dtype == np.float32 and z.shape == (7, 125, 16)

    phases = np.random.default_rng(0).uniform(0, 6, (7, 125))
    phases[:, :5] = np.nan
    phases[4] = np.nan
    qc = np.array([True, True, False, True, True, True, True])
    streamed = embed_records(model, signals, phases, qc, rows=np.array([6, 0, 2, 4, 5, 1]), batch_size=2)
    direct = record_representations(z, phases, qc)
    keep = np.isin(direct.rows, streamed.rows)
    np.testing.assert_array_equal(streamed.rows, [0, 1, 5, 6])
    np.testing.assert_allclose(streamed.features, direct.features[keep], rtol=1e-6)
    assert streamed.excluded == {"qc_failed": 1, "no_valid_phase": 1}


# --------------------------------------------------------------------------------------------
# lead zeroing


class PatchLinear(nn.Module):
    """Linear tokens of 8-sample patches of every lead: z = W · patch."""

    def __init__(self, leads=12, patch=8, width=16):
        super().__init__()
        self.patch = patch
        self.linear = nn.Linear(leads * patch, width)

    def encode(self, x):
        batch, leads, samples = x.shape
        patches = x.reshape(batch, leads, samples // self.patch, self.patch).permute(0, 2, 1, 3)
        return self.linear(patches.reshape(batch, samples // self.patch, leads * self.patch))

    forward = encode


def lead_three_corpus(rng, n):
    """Both labels live in lead 'aVR' (index 3) only: an offset and an alternating pattern."""
    Y = (rng.random((n, 2)) < 0.5).astype(int)
    x = rng.normal(size=(n, 12, 1000)).astype(np.float32)
    alternating = np.tile([1.0, -1.0], 500)
    x[:, 3] += Y[:, :1] + Y[:, 1:] * alternating
    phases = rng.uniform(0, 2 * np.pi, (n, 125))
    phases[:, :3] = np.nan
    return x, Y, phases


def test_channel_zeroing_flags_the_only_informative_channel():
    rng = np.random.default_rng(6)
    torch.manual_seed(0)
    model = PatchLinear()
    train_x, train_Y, train_phases = lead_three_corpus(rng, 300)
    train = embed_records(model, train_x, train_phases)
    probe = LinearProbe().fit(train.features, train_Y[train.rows])

    x, Y, phases = lead_three_corpus(rng, 200)
    qc = np.ones(200, bool)
    qc[:4] = False
    result = channel_zeroing(model, x, phases, qc, probe, Y, np.arange(200) // 2, channels=LEADS, replicates=100, batch_size=64)
    assert result.intact > 0.95 and result.records == 196 and result.excluded["qc_failed"] == 4
    assert result.worst_channel == "aVR" and result.delta["aVR"].point < -0.35
    assert result.delta["aVR"].high < 0
    others = [result.delta[lead].point for lead in LEADS if lead != "aVR"]
    assert max(abs(d) for d in others) < 0.02
    assert result.mean_delta.point == pytest.approx(np.mean(others + [result.delta["aVR"].point]))
    assert result.zeroed["aVR"] == pytest.approx(result.intact + result.delta["aVR"].point)


# --------------------------------------------------------------------------------------------
# heart rate


def test_heart_rate_is_the_median_rr():
    beats = np.arange(0, 5000, 400)  # 0.8 s at 500 Hz
    assert heart_rate(beats, 500.0) == pytest.approx(75.0)
    assert heart_rate(np.r_[beats[:5], beats[6:]], 500.0) == pytest.approx(75.0)  # one missed beat
    assert heart_rate(np.arange(0, 1000, 100), fs=100) == pytest.approx(60.0)
    assert np.isnan(heart_rate([120], 500.0))
    with pytest.raises(ValueError, match="increasing"):
        heart_rate([10, 5], 500.0)


def test_hr_stratification_on_a_hand_built_case():
    y = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 0])
    hr = np.r_[[60.0] * 6, [100.0] * 6, np.nan, 130.0]
    ranking = np.r_[y[:12] + 0.1 * np.arange(12), 0, 0]
    arm_a = ranking  # perfect everywhere
    arm_b = np.r_[ranking[:6], -ranking[6:12], 0, 0]  # perfect at 60 bpm, reversed at 100 bpm
    Y = np.c_[y, np.r_[[0] * 6, y[6:12], 0, 0]]  # class 2 has no positive below 80 bpm
    scores = {"winder": np.c_[arm_a, arm_a], "control": np.c_[arm_b, arm_b]}
    table = hr_stratified_auroc(scores, Y, hr, bins=(50, 80, 120), groups=np.arange(14), replicates=50)

    low, high = table.strata
    assert (low.low, low.high, low.records, low.classes) == (50, 80, 6, 1)
    assert low.auroc == {"winder": 1.0, "control": 1.0} and low.gap == 0.0
    assert (low.gap_ci.low, low.gap_ci.high) == (0.0, 0.0)
    assert (high.records, high.classes, high.auroc, high.gap) == (6, 2, {"winder": 1.0, "control": 0.0}, 1.0)
    inside = slice(0, 12)
    expected = np.mean([roc_auc_score(Y[inside, c], arm_b[inside]) for c in range(2)])
    assert table.overall.auroc["control"] == pytest.approx(expected)
    assert table.excluded == {"no_heart_rate": 1, "outside_bins": 1}

    tertiles = hr_stratified_auroc(scores, Y, np.r_[np.linspace(50, 110, 12), np.nan, 70.0])
    np.testing.assert_allclose(
        [s.low for s in tertiles.strata] + [tertiles.strata[-1].high],
        np.quantile(np.r_[np.linspace(50, 110, 12), 70.0], [0, 1 / 3, 2 / 3, 1]),
    )
    assert sum(s.records for s in tertiles.strata) == 13 and tertiles.strata[0].gap_ci is None
    with pytest.raises(ValueError, match="two arms"):
        hr_stratified_auroc({"a": arm_a[:, None]}, Y[:, :1], hr)


# --------------------------------------------------------------------------------------------
# the three diagnostic tasks


class StubCache:
    """The parts of `PreparedCache` that `diagnostic_tasks` reads, from a metadata frame."""

    select = PreparedCache.select
    labels = PreparedCache.labels
    label_levels = PTBXL.label_levels

    def __init__(self, meta: pd.DataFrame):
        self.meta = meta
        self.columns = {name: meta[name].to_numpy() for name in meta}


def stub_cache(rng, n=120):
    meta = pd.DataFrame({"fold": np.arange(n) % 10 + 1, "patient_id": np.arange(n) // 2})
    for c in SUPERCLASSES:
        meta[f"super_{c}"] = (rng.random(n) < 0.3).astype(int)
    for i, c in enumerate(SUBCLASSES):
        meta[f"sub_{c}"] = (rng.random(n) < (0.4 if i < 4 else 0.02)).astype(int)
    return StubCache(meta)


def test_diagnostic_tasks_classes_rows_and_counts():
    rng = np.random.default_rng(8)
    cache = stub_cache(rng)
    tasks = {t.name: t for t in diagnostic_tasks(cache, range(1, 9), [9], min_positives=3)}
    assert list(tasks) == ["superclass", "subclass-eligible", "subclass-all"]
    assert tasks["superclass"].classes == SUPERCLASSES and tasks["subclass-all"].classes == SUBCLASSES
    fold9 = cache.meta["fold"] == 9
    eligible = tuple(c for c in SUBCLASSES if cache.meta.loc[fold9, f"sub_{c}"].sum() >= 3)
    assert tasks["subclass-eligible"].classes == eligible and len(eligible) >= 4

    for task in tasks.values():
        labels = cache.meta[[f"{'super' if task.name == 'superclass' else 'sub'}_{c}" for c in task.classes]]
        labelled = labels.to_numpy().any(axis=1)
        train, evaluation = cache.meta["fold"].between(1, 8).to_numpy(), fold9.to_numpy()
        np.testing.assert_array_equal(task.train_rows, np.flatnonzero(train & labelled))
        np.testing.assert_array_equal(task.eval_rows, np.flatnonzero(evaluation & labelled))
        np.testing.assert_array_equal(task.labels[task.eval_rows], labels.to_numpy()[task.eval_rows])
        assert task.counts == {
            "train_records": int(train.sum()), "train_unlabelled": int((train & ~labelled).sum()),
            "eval_records": int(evaluation.sum()), "eval_unlabelled": int((evaluation & ~labelled).sum()),
        }  # fmt: skip
    with pytest.raises(ValueError, match="overlap"):
        next(diagnostic_tasks(cache, range(1, 10), [9]))


def test_evaluate_task_counts_records_without_representation():
    rng = np.random.default_rng(9)
    cache = stub_cache(rng, n=400)
    task = next(diagnostic_tasks(cache, range(1, 9), [9, 10], min_positives=3))
    represented = np.setdiff1d(np.arange(400), task.eval_rows[:3])
    features = rng.normal(size=(400, 4)) + task.labels[:, :4] * 2.0  # classes 0-3 are decodable
    reps = Representations(features[represented], represented, {"qc_failed": 3, "no_valid_phase": 0})
    patients = cache.columns["patient_id"]
    result = evaluate_task(task, reps, patients, replicates=100)

    assert result.task == "superclass" and result.counts["eval_excluded"] == 3
    assert result.counts["eval"] == len(task.eval_rows) - 3
    assert result.counts["train"] == len(task.train_rows) and result.counts["train_excluded"] == 0
    scored = task.eval_rows[3:]
    assert result.counts["eval_patients"] == len(np.unique(patients[scored]))
    assert result.positives == dict(zip(SUPERCLASSES, task.labels[scored].sum(axis=0).tolist(), strict=True))
    assert result.per_class["NORM"] > 0.8 and result.skipped == []
    assert result.macro_auroc.point == pytest.approx(np.mean(list(result.per_class.values())))
