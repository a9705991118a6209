"""The six statement tasks of the PTB-XL benchmark, from PTB-XL's own ``scp_statements.csv``.

The benchmark of Strodthoff et al. (2021, IEEE JBHI 25(5):1519-1528) predicts, per record, the
statements of one of six label sets. Each is a vocabulary read from the statement table and a
rule that maps a record's ``scp_codes`` to its labels; every statement in ``scp_codes`` counts,
whatever its likelihood (0 % included):

==================  ==========================================================  ====
task                a record's labels                                           1.0.3
==================  ==========================================================  ====
``all``             every statement of ``scp_codes``                              71
``diagnostic``      its statements with ``diagnostic == 1``                       44
``subdiagnostic``   the ``diagnostic_subclass`` of those                          23
``superdiagnostic`` the ``diagnostic_class`` of those                              5
``form``            its statements with ``form == 1``                             19
``rhythm``          its statements with ``rhythm == 1``                           12
==================  ==========================================================  ====

A record with no label of a task is left out of it; classes are sorted by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cyclejepa.data.ptbxl import PTBXL, parse_scp_codes

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TASKS", "TaskLabels", "statement_map", "task_labels", "task_vocabulary"]

TASKS = ("all", "diagnostic", "subdiagnostic", "superdiagnostic", "form", "rhythm")
"""The benchmark's tasks, in the order of its results table."""
_FLAG = {
    "diagnostic": "diagnostic",
    "subdiagnostic": "diagnostic",
    "superdiagnostic": "diagnostic",
    "form": "form",
    "rhythm": "rhythm",
}
_CLASS = {"subdiagnostic": "diagnostic_subclass", "superdiagnostic": "diagnostic_class"}


def _check_task(task: str) -> None:
    if task not in TASKS:
        from cyclejepa.registry import did_you_mean

        raise ValueError(f"unknown PTB-XL benchmark task {task!r}; one of {', '.join(TASKS)}" + did_you_mean(task, list(TASKS)))


def statement_map(statements: pd.DataFrame, task: str) -> dict[str, str]:
    """Statement code → its class in ``task``, from `PTBXL.statements`."""
    _check_task(task)
    if task == "all":
        return {str(code): str(code) for code in statements.index}
    members = statements[statements[_FLAG[task]] == 1]
    column = _CLASS.get(task)
    classes = members.index if column is None else members[column]
    return {str(code): str(name) for code, name in zip(members.index, classes, strict=True)}


def task_vocabulary(statements: pd.DataFrame, task: str) -> tuple[str, ...]:
    """The classes of ``task`` in the statement table, sorted (71/44/23/5/19/12 on PTB-XL 1.0.3)."""
    return tuple(sorted(set(statement_map(statements, task).values())))


@dataclass(frozen=True)
class TaskLabels:
    """(N, C) uint8 multi-hot ``labels`` of one task over ``classes``, row i for ``ecg_ids[i]``."""

    task: str
    classes: tuple[str, ...]
    ecg_ids: np.ndarray
    labels: np.ndarray

    @property
    def labelled(self) -> np.ndarray:
        """Rows with at least one label (the others leave the task)."""
        return np.any(self.labels, axis=1)


def task_labels(dataset: PTBXL, task: str, ecg_ids: Sequence[int]) -> TaskLabels:
    """Labels of ``task`` for ``ecg_ids`` (repeats allowed); KeyError naming ids not in the database."""
    mapping = statement_map(dataset.statements, task)
    classes = task_vocabulary(dataset.statements, task)
    ids = np.asarray(ecg_ids, dtype=np.int64)
    database = dataset.database
    missing = sorted(set(ids.tolist()) - set(database.index))
    if missing:
        raise KeyError(
            f"ecg_id(s) {missing[:5]}{' …' if len(missing) > 5 else ''} are not in {dataset.root / 'ptbxl_database.csv'}"
        )
    by_id = {int(i): _record_classes(parse_scp_codes(text), mapping) for i, text in database["scp_codes"].items()}
    column = {name: c for c, name in enumerate(classes)}
    labels = np.zeros((len(ids), len(classes)), dtype=np.uint8)
    for row, ecg_id in enumerate(ids):
        labels[row, [column[name] for name in by_id[int(ecg_id)]]] = 1
    return TaskLabels(task, classes, ids, labels)


def _record_classes(scp_codes: Mapping[str, float], mapping: Mapping[str, str]) -> set[str]:
    """The classes one record's statements give (likelihoods ignored)."""
    return {mapping[code] for code in scp_codes if code in mapping}
