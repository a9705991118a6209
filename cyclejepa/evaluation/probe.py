"""Linear probes on frozen record representations, macro-AUROC and its patient-clustered bootstrap.

A probe is fitted on the training folds only (standardisation, regressions, and C when
``C="cv"``) and scores the evaluation fold once; intervals resample patients, not records.
With bootstrap multiplicities w, the AUROC of one class is the weighted Mann–Whitney statistic

    A(w) = Σ_{i∈pos} Σ_{j∈neg} w_i w_j (1[s_i > s_j] + ½ 1[s_i = s_j]) / (W_pos W_neg),

computed for a whole (R, N) weight matrix at once (`weighted_auroc`: negatives sorted once per
class, each positive located by `searchsorted`, weights read from cumulative sums).
"""

from __future__ import annotations

import logging
import numbers
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_array, check_is_fitted

from cyclejepa.evaluation.bootstrap import BootstrapCI, n_clusters, patient_bootstrap_weights, percentile_interval, record_weights

if TYPE_CHECKING:
    from cyclejepa.data.cache import PreparedCache
    from cyclejepa.evaluation.embeddings import Representations

__all__ = [
    "DEFAULT_CS",
    "DiagnosticTask",
    "LinearProbe",
    "ProbeResult",
    "TaskSplit",
    "clustered_bootstrap",
    "degenerate_probe",
    "diagnostic_tasks",
    "evaluate_probe",
    "evaluate_task",
    "macro_auroc",
    "record_bootstrap",
    "replicate_macro_auroc",
    "score_probe",
    "weighted_auroc",
]

log = logging.getLogger(__name__)

DEFAULT_CS = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
"""Inverse regularisation strengths searched when ``C="cv"``."""
_BLOCK = 1 << 22
"""Replicates × records per block of the bootstrap (bounds the working memory to ~100 MB)."""


class LinearProbe(BaseEstimator):
    """Standardised features → one L2 logistic regression per class (one-vs-rest, multi-label).

    ``C`` is the inverse L2 strength, or ``"cv"``: chosen from ``Cs`` by ``cv``-fold
    patient-grouped cross-validation inside the data given to `fit` (mean held-out macro-AUROC,
    ties to the smaller C). Fitted: ``C_``, ``cv_scores_`` (C → score), ``pipeline_``. A class
    with one label value in training gets a constant score (AUROC 0.5).
    """

    def __init__(
        self,
        C: float | str = 1.0,
        *,
        Cs: Sequence[float] = DEFAULT_CS,
        cv: int = 5,
        max_iter: int = 1000,
        n_jobs: int | None = None,
    ):
        self.C = C
        self.Cs = Cs
        self.cv = cv
        self.max_iter = max_iter
        self.n_jobs = n_jobs

    def fit(self, X: np.ndarray, Y: np.ndarray, groups: np.ndarray | None = None) -> LinearProbe:
        """Fit on features X (N, K) and multi-hot labels Y (N, C); ``groups`` (N,) are the
        patients for ``C="cv"`` (None: every record its own group)."""
        X, Y = _check_xy(X, Y)
        constant = np.flatnonzero(Y.min(0) == Y.max(0))
        if constant.size:
            log.info("label columns %s take one value in the training data: their probes are constant", constant.tolist())
        with warnings.catch_warnings():  # sklearn warns once per such class; logged above instead
            warnings.filterwarnings("ignore", message="Label not .* is present in all training examples")
            return self._fit(X, Y, groups)

    def _fit(self, X: np.ndarray, Y: np.ndarray, groups: np.ndarray | None) -> LinearProbe:
        if isinstance(self.C, str) and self.C == "cv":
            self.cv_scores_ = self._cross_validate(X, Y, groups)
            self.C_ = max(self.cv_scores_, key=lambda c: (self.cv_scores_[c], -c))
        elif isinstance(self.C, numbers.Real) and not isinstance(self.C, bool) and self.C > 0:
            self.C_, self.cv_scores_ = float(self.C), {}
        else:
            raise ValueError(f"LinearProbe C must be a positive number or 'cv', got {self.C!r}")
        self.pipeline_ = self._pipeline(self.C_).fit(X, _fit_target(Y))
        self.n_samples_fit_, self.n_features_in_ = X.shape
        self.n_classes_ = Y.shape[1]
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """(N, C) logits."""
        X = self._check_features(X)
        return self.pipeline_.decision_function(X).reshape(len(X), self.n_classes_)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """(N, C) probability of each class being present."""
        X = self._check_features(X)
        proba = self.pipeline_.predict_proba(X)
        return proba[:, 1:] if self.n_classes_ == 1 else proba

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(N, C) multi-hot predictions at probability 0.5."""
        return (self.predict_proba(X) >= 0.5).astype(np.int64)

    def linear_map(self) -> tuple[np.ndarray, np.ndarray]:
        """(W, b), (C, K) and (C,), with ``decision_function(X) = X Wᵀ + b``: the standardisation
        x → (x − μ) / σ folded into each class's regression (W = w / σ, b = b₀ − Σ_k w_k μ_k / σ_k);
        a class that took one value in training has W = 0 and b its constant score."""
        check_is_fitted(self, "pipeline_")
        scaler, one_vs_rest = self.pipeline_[0], self.pipeline_[-1]
        weights, biases = [], []
        for estimator in one_vs_rest.estimators_:
            if hasattr(estimator, "coef_"):
                w, b = estimator.coef_.ravel() / scaler.scale_, float(estimator.intercept_[0])
                weights.append(w)
                biases.append(b - float(w @ scaler.mean_))
            else:  # sklearn's constant predictor
                weights.append(np.zeros(self.n_features_in_))
                biases.append(float(estimator.decision_function(np.zeros((1, self.n_features_in_)))[0]))
        return np.stack(weights), np.array(biases)

    def _pipeline(self, C: float):
        from sklearn.linear_model import LogisticRegression
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        regression = LogisticRegression(C=C, max_iter=self.max_iter)
        return make_pipeline(StandardScaler(), OneVsRestClassifier(regression, n_jobs=self.n_jobs))

    def _cross_validate(self, X: np.ndarray, Y: np.ndarray, groups: np.ndarray | None) -> dict[float, float]:
        """C → mean macro-AUROC over the held-out folds of a grouped K-fold split of (X, Y)."""
        from sklearn.model_selection import GroupKFold

        groups = np.arange(len(X)) if groups is None else np.asarray(groups)
        if groups.shape != (len(X),):
            raise ValueError(f"groups must be ({len(X)},), one patient per record, got {groups.shape}")
        if not self.Cs or min(self.Cs) <= 0:
            raise ValueError(f"Cs must be non-empty and positive, got {self.Cs}")
        splits = list(GroupKFold(n_splits=self.cv).split(X, Y, groups))
        scores = {}
        for C in sorted(float(c) for c in self.Cs):
            held_out = []
            for inner, outer in splits:
                pipeline = self._pipeline(C).fit(X[inner], _fit_target(Y[inner]))
                logits = pipeline.decision_function(X[outer]).reshape(len(outer), -1)
                held_out.append(_nanmean(weighted_auroc(Y[outer], logits)[0]))
            scores[C] = float(_nanmean(np.array(held_out)))
        if np.isnan(list(scores.values())).all():
            raise ValueError("cross-validation for C: no held-out fold has a class with both label values")
        return {C: score for C, score in scores.items() if not np.isnan(score)}

    def _check_features(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self, "pipeline_")
        X = check_array(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features; the probe was fitted on {self.n_features_in_}")
        return X


def _check_xy(X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    X = check_array(X)
    Y = np.asarray(Y)
    if Y.ndim != 2 or len(Y) != len(X):
        raise ValueError(f"Y must be (N, C) multi-hot with N = {len(X)} like X, got shape {Y.shape}")
    if not np.isin(Y, (0, 1)).all():
        raise ValueError("Y must be multi-hot (0/1 entries only)")
    return X, Y.astype(np.int64)


def _fit_target(Y: np.ndarray) -> np.ndarray:
    """One class is a binary target for sklearn, several a multi-label indicator matrix."""
    return Y[:, 0] if Y.shape[1] == 1 else Y


def weighted_auroc(Y: np.ndarray, scores: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """(R, C) AUROC of labels Y (N, C) by ``scores`` (N, C) under each row of record ``weights``
    (R, N; None: one row of ones), ties counting ½; NaN where a class lacks positive or negative weight."""
    Y, scores = _check_scores(Y, scores)
    weights = record_weights(weights, len(Y))
    block = max(1, _BLOCK // len(Y))
    out = np.empty((len(weights), Y.shape[1]))
    for c in range(Y.shape[1]):
        positives, negatives = np.flatnonzero(Y[:, c]), np.flatnonzero(Y[:, c] == 0)
        negatives = negatives[np.argsort(scores[negatives, c], kind="stable")]
        ranked = scores[negatives, c]
        below = np.searchsorted(ranked, scores[positives, c], side="left")
        not_above = np.searchsorted(ranked, scores[positives, c], side="right")
        for start in range(0, len(weights), block):
            w = weights[start : start + block]
            out[start : start + block, c] = _auroc(w[:, positives], w[:, negatives], below, not_above)
    return out


def _auroc(positive: np.ndarray, negative: np.ndarray, below: np.ndarray, not_above: np.ndarray) -> np.ndarray:
    """(R,) weighted AUROC from the positives' and score-sorted negatives' weights (R, ·)."""
    cumulative = np.zeros((len(negative), negative.shape[1] + 1))
    np.cumsum(negative, axis=1, out=cumulative[:, 1:])
    # negative weight below a positive, plus half the negative weight tied with it
    credit = 0.5 * (cumulative[:, below] + cumulative[:, not_above])
    pairs = positive.sum(axis=1) * cumulative[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, (positive * credit).sum(axis=1) / pairs, np.nan)


def macro_auroc(Y: np.ndarray, scores: np.ndarray, classes: Sequence[str] | None = None) -> float:
    """Mean AUROC over the classes with both positives and negatives; the others are skipped
    and logged (by name when ``classes`` is given)."""
    per_class = weighted_auroc(Y, scores)[0]
    skipped = _skipped(per_class, classes)
    if skipped:
        log.warning("macro-AUROC skips classes without positives or negatives: %s", ", ".join(skipped))
    if len(skipped) == len(per_class):
        raise ValueError("no class has both positive and negative records; macro-AUROC is undefined")
    return float(np.nanmean(per_class))


def replicate_macro_auroc(Y: np.ndarray, scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(R,) macro-AUROC per weight row, over the classes defined in that replicate."""
    return _nanmean(weighted_auroc(Y, scores, weights), axis=1)


def clustered_bootstrap(
    Y: np.ndarray,
    scores: np.ndarray,
    groups: np.ndarray,
    *,
    replicates: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    classes: Sequence[str] | None = None,
) -> BootstrapCI:
    """Macro-AUROC with a percentile interval over patient-clustered replicates
    (`patient_bootstrap_weights` of the patients ``groups`` (N,)); a replicate averages over the
    classes defined in it. Not testable below two patients."""
    Y, scores = _check_scores(Y, scores)
    groups = np.asarray(groups)
    if groups.shape != (len(Y),):
        raise ValueError(f"groups must be ({len(Y)},), one patient per record, got {groups.shape}")
    values = replicate_macro_auroc(Y, scores, patient_bootstrap_weights(groups, replicates, seed))
    return percentile_interval(macro_auroc(Y, scores, classes), values, level, n_clusters(groups))


def record_bootstrap(
    Y: np.ndarray, scores: np.ndarray, *, replicates: int = 1000, seed: int = 0, level: float = 0.95
) -> BootstrapCI:
    """`clustered_bootstrap` with every record its own cluster (ignores patients; for comparison)."""
    return clustered_bootstrap(Y, scores, np.arange(len(Y)), replicates=replicates, seed=seed, level=level)


def _check_scores(Y: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    Y, scores = np.asarray(Y), np.asarray(scores, dtype=np.float64)
    if Y.ndim != 2 or scores.shape != Y.shape:
        raise ValueError(f"Y and scores must both be (N, C); got {Y.shape} and {scores.shape}")
    if len(Y) == 0 or not np.isin(Y, (0, 1)).all():
        raise ValueError("Y must be non-empty and multi-hot (0/1 entries only)")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    return Y, scores


def _nanmean(values: np.ndarray, axis: int | None = None) -> np.ndarray:
    """nanmean without the all-NaN warning (an all-NaN slice gives NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def _skipped(per_class: np.ndarray, classes: Sequence[str] | None) -> list[str]:
    names = list(classes) if classes is not None else [str(c) for c in range(len(per_class))]
    if len(names) != len(per_class):
        raise ValueError(f"{len(names)} class names for {len(per_class)} score columns")
    return [name for name, value in zip(names, per_class, strict=True) if np.isnan(value)]


@dataclass
class ProbeResult:
    """One probe on one task. ``per_class`` leaves out the ``skipped`` classes (no positive or no
    negative evaluation record); ``degenerate`` says why the macro-AUROC means nothing, if it does not."""

    task: str
    classes: list[str]
    per_class: dict[str, float]
    skipped: list[str]
    macro_auroc: BootstrapCI
    C: float
    positives: dict[str, int]
    counts: dict[str, int]
    degenerate: str | None = None


def degenerate_probe(scores: np.ndarray, per_class: np.ndarray) -> str | None:
    """Why a probe's macro-AUROC is meaningless, or None: constant scores on every class it
    averages (each AUROC ½), or fewer than two defined classes in a task of several."""
    scored = np.flatnonzero(np.isfinite(per_class))
    if len(scored) and all(np.ptp(scores[:, c]) == 0 for c in scored):
        return "constant predictions"
    if len(per_class) > 1 and len(scored) < 2:
        return f"{len(scored)} of {len(per_class)} classes with positive and negative evaluation records"
    return None


def score_probe(
    probe: LinearProbe,
    X: np.ndarray,
    Y: np.ndarray,
    groups: np.ndarray,
    *,
    classes: Sequence[str],
    replicates: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    task: str = "",
) -> ProbeResult:
    """Score a fitted probe on evaluation features X, labels Y (N, C) and patients ``groups``."""
    scores = probe.decision_function(X)
    per_class = weighted_auroc(Y, scores)[0]
    skipped = _skipped(per_class, classes)
    return ProbeResult(
        task=task,
        classes=list(classes),
        per_class={c: float(a) for c, a in zip(classes, per_class, strict=True) if c not in skipped},
        skipped=skipped,
        macro_auroc=clustered_bootstrap(Y, scores, groups, replicates=replicates, seed=seed, level=level, classes=classes),
        C=probe.C_,
        positives={c: int(n) for c, n in zip(classes, np.asarray(Y).sum(axis=0), strict=True)},
        counts={"train": probe.n_samples_fit_, "eval": len(Y), "eval_patients": len(np.unique(groups))},
        degenerate=degenerate_probe(np.asarray(scores), per_class),
    )


def evaluate_probe(
    train_X: np.ndarray,
    train_Y: np.ndarray,
    test_X: np.ndarray,
    test_Y: np.ndarray,
    test_groups: np.ndarray,
    *,
    classes: Sequence[str],
    C: float | str = 1.0,
    replicates: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    train_groups: np.ndarray | None = None,
    task: str = "",
) -> ProbeResult:
    """Fit a `LinearProbe` on the training data only (``train_groups`` for ``C="cv"``), then
    `score_probe` on the test data."""
    probe = LinearProbe(C).fit(train_X, train_Y, groups=train_groups)
    return score_probe(
        probe, test_X, test_Y, test_groups, classes=classes, replicates=replicates, seed=seed, level=level, task=task
    )


@dataclass(frozen=True)
class TaskSplit:
    """Features, labels and patients of one task's represented records."""

    train_X: np.ndarray
    train_Y: np.ndarray
    train_groups: np.ndarray
    eval_X: np.ndarray
    eval_Y: np.ndarray
    eval_groups: np.ndarray
    eval_rows: np.ndarray
    counts: dict[str, int]


@dataclass(frozen=True)
class DiagnosticTask:
    """One classification task over the cache rows (with a label of the task) of the training and
    evaluation folds; ``counts`` has each fold group's records and how many carry no label."""

    name: str
    classes: tuple[str, ...]
    labels: np.ndarray  # (N_cache, C) uint8 multi-hot over `classes`
    train_rows: np.ndarray
    eval_rows: np.ndarray
    counts: dict[str, int]

    def split(self, representations: Representations, groups: np.ndarray) -> TaskSplit:
        """The task's records that have a representation; ``groups`` are patients per cache row.
        ``counts`` gains ``train``/``eval`` (scored) and ``*_excluded`` (labelled, unrepresented)."""
        groups = np.asarray(groups)
        train_X, train_found = representations.lookup(self.train_rows)
        eval_X, eval_found = representations.lookup(self.eval_rows)
        train_rows, eval_rows = self.train_rows[train_found], self.eval_rows[eval_found]
        counts = {
            **self.counts,
            "train_excluded": int((~train_found).sum()),
            "eval_excluded": int((~eval_found).sum()),
            "train": len(train_rows),
            "eval": len(eval_rows),
        }
        train_Y, eval_Y = self.labels[train_rows], self.labels[eval_rows]
        return TaskSplit(train_X, train_Y, groups[train_rows], eval_X, eval_Y, groups[eval_rows], eval_rows, counts)


def diagnostic_tasks(
    cache: PreparedCache,
    train_folds: Sequence[int],
    eval_folds: Sequence[int],
    *,
    eligible_fold: int = 9,
    min_positives: int = 20,
) -> Iterator[DiagnosticTask]:
    """One task per label level: the first level whole; each further one as ``<level>-eligible``
    (classes with ≥ ``min_positives`` positive windows in ``eligible_fold``) and ``<level>-all``.
    On PTB-XL: ``superclass`` (5), ``subclass-eligible`` (the "17-class" task), ``subclass-all`` (23)."""
    if set(train_folds) & set(eval_folds):
        raise ValueError(f"train_folds {list(train_folds)} and eval_folds {list(eval_folds)} overlap")
    train, evaluation = cache.select(train_folds), cache.select(eval_folds)
    if not len(train) or not len(evaluation):
        raise ValueError(f"no record in train_folds {list(train_folds)} or eval_folds {list(eval_folds)}")
    if not cache.label_levels:
        raise ValueError(f"the dataset of {cache.path} has no label level to probe")
    first, *others = cache.label_levels
    tasks = [(first.name, first.classes, cache.labels(first.name))]
    for level in others:
        labels = cache.labels(level.name)
        in_fold = cache.select([eligible_fold])
        if not len(in_fold):
            raise ValueError(f"no record in fold {eligible_fold}, where eligible {level.name} classes are counted")
        eligible = np.flatnonzero(labels[in_fold].sum(axis=0) >= min_positives)
        tasks.append((f"{level.name}-eligible", tuple(np.asarray(level.classes)[eligible]), labels[:, eligible]))
        tasks.append((f"{level.name}-all", level.classes, labels))
    for name, classes, labels in tasks:
        labelled = np.any(labels, axis=1)
        yield DiagnosticTask(
            name,
            tuple(classes),
            labels,
            train[labelled[train]],
            evaluation[labelled[evaluation]],
            {
                "train_records": len(train),
                "train_unlabelled": int((~labelled[train]).sum()),
                "eval_records": len(evaluation),
                "eval_unlabelled": int((~labelled[evaluation]).sum()),
            },
        )


def evaluate_task(
    task: DiagnosticTask,
    representations: Representations,
    groups: np.ndarray,
    *,
    C: float | str = 1.0,
    replicates: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> ProbeResult:
    """`evaluate_probe` on ``task``; ``groups`` is the patient of every cache row."""
    split = task.split(representations, groups)
    probe = LinearProbe(C).fit(split.train_X, split.train_Y, groups=split.train_groups)
    scored = (split.eval_X, split.eval_Y, split.eval_groups)
    result = score_probe(probe, *scored, classes=task.classes, replicates=replicates, seed=seed, level=level, task=task.name)
    result.counts |= split.counts
    return result
