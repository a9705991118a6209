"""The benchmark's cells: every task × protocol × pre-trained run × seed × label fraction.

Folds. The scored folds are ``data.eval_folds``; the training folds ``data.train_folds`` are
split into the fit folds and one early-stopping fold, by default the last (the paper's config:
fit 1-8, early stopping 9, score 10; the development configs: fit 1-7, early stopping 8,
score 9). Both fold lists reach `benchmark_split` after the seal (the pipeline asks it for both keys).

Protocols, per pre-trained run (the checkpoint at ``step``):

- ``linear``: `LinearProbe` (C = ``evaluation.probe_c``) on the frozen record features z̄ (the
  mean of all projected tokens) of the fit records;
- ``random-linear`` (per pre-training seed, not per run): the same probe on the features of the
  untrained network each run of that seed starts from (the trainer's step-0 weights): the frozen
  random-encoder baseline, trained nothing;
- ``finetune``: `Classifier` with a head drawn from the seed, every layer trained, the
  encoder and projector at ``backbone_scale`` × the head's rate;
- ``linear-finetune``: the same, the head started from the ``linear`` probe (LP-FT);
- ``scratch`` (once, not per run): the same network from random weights, every layer at the
  head's rate.

A finished cell (its JSON with the same identity) is kept, a failed one is tried again; an
interrupted fine-tuning resumes from its checkpoint (removed once the cell is stored), one of
another identity is started afresh.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cyclejepa.bench.ptbxl.spec import BenchmarkSpec, PretrainedRun
from cyclejepa.data.ptbxl import PTBXL
from cyclejepa.data.ptbxl_tasks import task_labels
from cyclejepa.jsonio import read_json, write_json
from cyclejepa.outputs import RunFolder
from cyclejepa.training.finetune import (
    CheckpointMismatch,
    Classifier,
    FineTuner,
    label_subset,
    predict_logits,
)

log = logging.getLogger(__name__)

PROTOCOLS = ("linear", "random-linear", "finetune", "linear-finetune", "scratch")
RANDOM_LINEAR = "random-linear"
LINEAR_PROTOCOLS = ("linear", RANDOM_LINEAR)
"""The protocols that fit a probe on frozen features (no network trained)."""
FRACTIONS = (1.0, 0.1, 0.01)
SCRATCH = "scratch"
"""The run name of the from-scratch cells."""


@dataclass(frozen=True)
class Split:
    """Cache rows of the fit folds, the early-stopping fold and the scored folds."""

    fit_folds: list[int]
    validation_fold: int
    test_folds: list[int]
    fit: np.ndarray
    validation: np.ndarray
    test: np.ndarray


def benchmark_split(cache, train: list[int], test: list[int], validation_fold: int | None = None) -> Split:
    """The cache rows of the folds (see the module docstring): ``train`` (``data.train_folds``)
    split into fit folds and the early-stopping fold, ``test`` (``data.eval_folds``) scored."""
    validation = max(train) if validation_fold is None else validation_fold
    if validation not in train:
        raise ValueError(f"the early-stopping fold {validation} is not one of data.train_folds {train}")
    fit = [f for f in train if f != validation]
    if not fit:
        raise ValueError(f"data.train_folds {train} leaves no fold to fit on besides the early-stopping fold {validation}")
    rows = {name: cache.select(folds) for name, folds in (("fit", fit), ("validation", [validation]), ("test", test))}
    empty = [name for name, found in rows.items() if not len(found)]
    if empty:
        raise ValueError(
            f"no cached record in the {' and '.join(empty)} folds (fit {fit}, early stopping {validation}, scored {test})"
        )
    return Split(fit, validation, sorted(test), **rows)


@dataclass(frozen=True)
class TaskData:
    """One task's labels on every cache row and its labelled rows of each fold group."""

    task: str
    classes: tuple[str, ...]
    labels: np.ndarray
    fit: np.ndarray
    validation: np.ndarray
    test: np.ndarray


def task_data(dataset: PTBXL, task: str, cache, split: Split) -> TaskData:
    """The task's labels for the cache rows (by their record_id, PTB-XL's ecg_id); unlabelled rows leave the task."""
    found = task_labels(dataset, task, cache.columns["record_id"])
    keep = found.labelled
    return TaskData(
        task,
        found.classes,
        found.labels,
        split.fit[keep[split.fit]],
        split.validation[keep[split.validation]],
        split.test[keep[split.test]],
    )


@dataclass(frozen=True)
class Cell:
    """One result of the benchmark."""

    task: str
    protocol: str
    run: str
    seed: int
    fraction: float

    @property
    def name(self) -> str:
        return f"{self.task}/{self.protocol}/{self.run}-ft{self.seed}-{self.fraction:g}"


class Bench:
    """Runs the cells of ``spec`` on one cache and its split; ``fingerprint`` (`PTBXL.fingerprint`)
    names the tables the labels come from in every cell's identity."""

    def __init__(self, spec: BenchmarkSpec, cache, split: Split, fingerprint: dict[str, Any], *, progress: bool = True):
        from cyclejepa.devices import resolve_device

        self.spec, self.cache, self.split, self.fingerprint = spec, cache, split, fingerprint
        self.out, self.progress = Path(spec.out), progress
        self.device = resolve_device(spec.scoring.device)
        self.patients = cache.columns["patient_id"]
        self._features: dict[str, Any] = {}

    def identity(self, cell: Cell, run: PretrainedRun | None) -> dict[str, Any]:
        """What a cell's result depends on; a stored cell with another identity is recomputed."""
        scoring, training = self.spec.scoring, self.spec.training
        identity = {
            **asdict(cell),
            "folds": [self.split.fit_folds, self.split.validation_fold, self.split.test_folds],
            "bootstrap": scoring.bootstrap,
            "evaluation_seed": scoring.seed,
            "dataset": self.fingerprint,
        }
        if cell.protocol in (*LINEAR_PROTOCOLS, "linear-finetune"):
            identity["probe_c"] = scoring.probe_c
        if cell.protocol not in LINEAR_PROTOCOLS:
            identity |= {"settings": asdict(training.settings), "precision": training.precision}
        if run is not None:
            identity["pretrained"] = {"run_hash": run.run_hash, "step": 0 if run.untrained_seed is not None else self.spec.step}
        else:
            identity["model"] = self.spec.model.model_dump(mode="json")
        return identity

    def stored(self, cell: Cell, run: PretrainedRun | None) -> dict[str, Any] | None:
        """The cell's stored result when it has this identity and did not fail, else None."""
        path = self.cell_path(cell)
        stored = read_json(path) if path.exists() else {}
        return stored if stored.get("identity") == self.identity(cell, run) and "error" not in stored else None

    def cell_path(self, cell: Cell) -> Path:
        """``cells/<task>/<protocol>/<run>-ft<seed>-<fraction>.json``: where the cell's result goes."""
        return self.out / "cells" / f"{cell.name}.json"

    def computed(self, cell: Cell, data: TaskData, run: PretrainedRun | None) -> dict[str, Any]:
        """The cell computed and stored; a ValueError (e.g. a subset too small to fit, a fold
        without a rankable class) is logged and stored as the cell's ``error``."""
        path, identity = self.cell_path(cell), self.identity(cell, run)
        began = time.perf_counter()
        try:
            result = self._compute(cell, data, run)
        except ValueError as error:
            log.warning("%s: %s", cell.name, error)
            result = {"error": str(error)}
        arm = run.arm if run else SCRATCH
        result = {**asdict(cell), "arm": arm, **result, "wall_s": time.perf_counter() - began, "identity": identity}
        write_json(path, result)
        return result

    def _compute(self, cell: Cell, data: TaskData, run: PretrainedRun | None) -> dict[str, Any]:
        from cyclejepa.evaluation.multilabel import score_multilabel

        rows = data.fit[label_subset(data.labels[data.fit], cell.fraction, cell.seed)]
        if cell.protocol in LINEAR_PROTOCOLS:
            assert run is not None, "a linear protocol starts from a pre-trained (or untrained) run"
            probe = self._probe(run, data, rows)
            logits, extra = probe.decision_function(self._features_of(run, data.test)), {"C": probe.C_}
        else:
            logits, extra = self._finetune(cell, data, rows, run)
        scoring = self.spec.scoring
        scores = score_multilabel(
            data.labels[data.test],
            logits,
            self.patients[data.test],
            classes=data.classes,
            replicates=scoring.bootstrap,
            seed=scoring.seed,
        )
        counts = {"fit": len(rows), "fit_available": len(data.fit), "validation": len(data.validation), "test": len(data.test)}
        return {"scores": asdict(scores), "counts": counts, **extra}

    # ---------------------------------------------------------------------------------------

    def _model(self, run: PretrainedRun | None, seed: int):
        """The pre-trained model of ``run`` at the benchmark step, the untrained one of a random
        baseline's run (`PretrainedRun.untrained_seed`), or (None) a fresh one from ``seed``."""
        from cyclejepa.training.trainer import build_configured_model

        if run is None:
            return build_configured_model(self.spec.model, seed)
        if run.untrained_seed is not None:
            return self.spec.initial_model(run.untrained_seed, self.device)
        if not run.checkpoint.exists():
            raise FileNotFoundError(
                f"{run.name} has no checkpoint at step {self.spec.step} ({run.checkpoint}); train it or pick --step"
            )
        return self.spec.load_model(run.checkpoint, self.device)

    def _features_of(self, run: PretrainedRun, rows: np.ndarray) -> np.ndarray:
        """Frozen features z̄ (the mean of all projected tokens) of the cache ``rows``, computed once per run."""
        from cyclejepa.evaluation.embeddings import embed_records

        if run.name not in self._features:
            every = np.concatenate([self.split.fit, self.split.validation, self.split.test])
            tokens = self.cache.phase_centre.shape[1]
            self._features[run.name] = embed_records(
                self._model(run, 0),
                self.cache.signals,
                np.zeros((len(self.cache), tokens), np.float32),
                rows=every,
                device=self.device,
                progress=self.progress,
            )
        features, found = self._features[run.name].lookup(rows)
        assert found.all(), "every benchmark row has features"
        return features

    def _probe(self, run: PretrainedRun, data: TaskData, rows: np.ndarray):
        from cyclejepa.evaluation.probe import LinearProbe

        probe = LinearProbe(C=self.spec.scoring.probe_c)
        return probe.fit(self._features_of(run, rows), data.labels[rows], groups=self.patients[rows])

    def _finetune(self, cell: Cell, data: TaskData, rows: np.ndarray, run: PretrainedRun | None) -> tuple[np.ndarray, dict]:
        from cyclejepa.evaluation.probe import replicate_macro_auroc

        model = self._model(run, cell.seed)
        classifier = Classifier(model.encoder, model.projector, len(data.classes), seed=cell.seed)
        if cell.protocol == "linear-finetune":
            assert run is not None, "the linear-finetune protocol starts from a pre-trained run"
            classifier.set_head(*self._probe(run, data, rows).linear_map())
        validation_x, validation_y = np.asarray(self.cache.signals[data.validation]), data.labels[data.validation]
        training = self.spec.training

        def validate(network) -> float:
            logits = predict_logits(network, validation_x, device=tuner.device, bf16=tuner.bf16)
            return float(replicate_macro_auroc(validation_y, logits, np.ones((1, len(logits))))[0])

        tuner = FineTuner(
            classifier,
            np.asarray(self.cache.signals[rows]),
            data.labels[rows],
            self.out / "finetune" / cell.name,
            validate=validate,
            settings=training.settings,
            backbone_scale=1.0 if run is None else None,
            seed=cell.seed,
            device=training.device,
            precision=training.precision,
            compile=training.compile,
            identity=self.identity(cell, run),
        )
        try:
            tuner.resume()
        except CheckpointMismatch as stale:  # the cell is recomputed with other settings: start afresh
            log.warning("%s; starting %s afresh", stale, cell.name)
            shutil.rmtree(RunFolder(tuner.directory).checkpoints)
        tuner.fit()
        logits = predict_logits(tuner.classifier, np.asarray(self.cache.signals[data.test]), device=tuner.device, bf16=tuner.bf16)
        shutil.rmtree(tuner.directory)  # the result is about to be stored: nothing left to resume
        return logits, {
            "best_step": tuner.best_step,
            "steps": tuner.step,
            "validation_auroc": tuner.best_score,
            "history": tuner.history,
        }
