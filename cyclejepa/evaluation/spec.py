"""What the evaluation and the report read, as narrow typed specs the pipeline builds from the
experiment config (its evaluation and report stages)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DataDescription:
    """What the report calls the data (a result's ``data`` section)."""

    dataset: str
    """The dataset's registered name (it titles the probe tasks, `Dataset.task_titles`)."""
    subjects_known: bool
    """Whether the dataset knows whose each recording is (`Dataset.subjects_known`): intervals
    resample patients, else recordings."""
    channels: tuple[str, ...]
    """The cache's channel names, in order."""
    units: tuple[str, ...]
    """The unit of each channel."""
    channel_word: str
    """"lead" when every channel is in mV, as ECG leads are, else "channel"."""
    signal: str
    """The phase provider's signal kind (`PhaseProvider.signal`; "any" when it declares none)."""
    event: str
    """The phase provider's event word (`PhaseProvider.event_name`; "event" when it declares none)."""


@dataclass(frozen=True)
class EvaluationSpec:
    """What the evaluation of one checkpoint reads besides the cache and the model."""

    train_folds: tuple[int, ...]
    """The folds the probes are fitted on, passed through the seal (empty without labels)."""
    eval_folds: tuple[int, ...]
    """The folds evaluated, passed through the seal."""
    bootstrap: int
    """Replicates of every patient-clustered bootstrap."""
    seed: int
    """Seed of the bootstraps, the probes' folds, the anomaly battery and the figures."""
    probe_c: float | str
    """The probes' logistic-regression C, or "cv" (chosen within the training folds)."""
    eligible_min_positives: int
    """Positives in the evaluation folds a class needs to enter an ``-eligible`` task."""
    detector: str
    """The anomaly battery's detector (registered name)."""
    families: tuple[str, ...]
    """The anomaly battery's perturbation families."""
    severities: tuple[float, ...]
    """The anomaly battery's severities."""
    anomaly_records: int | None
    """Evaluation records in the anomaly battery (None: all)."""
    data: DataDescription
    """What the report calls the data."""
    strata_not_applying: str | None
    """Why the heart-rate strata do not apply (None: they do)."""
    evaluation_hash: str
    """The hash of what the results depend on besides the weights, written into each result."""


@dataclass(frozen=True)
class ReportSpec:
    """What the report reads besides the saved results of the ``evaluation/`` folder."""

    name: str
    """The experiment's name (the report's title)."""
    config_hash: str
    """The short hash of the whole configuration, shown under the title."""
    arms: tuple[str, ...]
    """The arms' names in the config's order (the order of every table)."""
    headline_seed: int
    """The seed of the headline cell (the first seed)."""
    headline_step: int | None
    """The step of the headline cell (None: the first evaluated step)."""
    folds_used: tuple[dict[str, Any], ...]
    """The fold-use log's entries (stage, key, folds, sealed), in the order they were written."""
    unseal_audit: tuple[dict[str, Any], ...]
    """The unseal audit log's entries, in the order they were written."""
    audit_log: str
    """The audit log's file name in the output directory, as the report names it."""
    phase_qc_flags: tuple[str, ...] = ()
    """Why the run's windows mostly fail phase QC, one line per fold set flagged
    (`cyclejepa.pipeline.checks.phase_qc_verdict`): then the report says so at its top and marks
    no figure best. Empty: the windows pass."""
    random_baseline: bool = True
    """Whether the report shows the random baseline's results (``evaluation.random_baseline``):
    off, results of it left in ``evaluation/`` from an earlier run are not shown."""
