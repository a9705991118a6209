"""The cohort-composition table (paper, appendix "Data protocol"): two fold groups side by side."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from cyclejepa.data.datasets import LabelLevel
from cyclejepa.data.ptbxl import PTBXL

if TYPE_CHECKING:
    import pandas as pd

    from cyclejepa.data.cache import PreparedCache

__all__ = ["AGE_SENTINEL", "cohort_column", "cohort_markdown", "cohort_table", "rows"]

AGE_SENTINEL = 300
"""PTB-XL's age for de-identified patients over 89."""

PTBXL_LEVEL = PTBXL.label_levels[0]
"""PTB-XL's superclasses, the level a bare meta table is summarised by."""


def rows(level: LabelLevel = PTBXL_LEVEL) -> tuple[str, ...]:
    """The table's rows: one prevalence row per class of ``level``."""
    return (
        "Recordings", "Patients", "Age, median (years)", "Age, lower quartile", "Age, upper quartile",
        "Age sentinel (age=300)", "Male, %", *(f"{c}, %" for c in level.classes), "Unlabeled recordings",
        "Beats per recording, median", "Phase yield, median", "Recordings failing phase QC",
    )  # fmt: skip


def cohort_column(meta: pd.DataFrame, level: LabelLevel = PTBXL_LEVEL) -> dict[str, float]:
    """Composition of the records in ``meta`` (columns as in the cache's meta.csv).

    Age statistics exclude the sentinel and missing ages (the sentinel is counted on its own
    row); quartiles interpolate linearly. Male = ``sex == 0``. Prevalences are multi-label
    percentages of records (rows of meta.csv: windows, for records cut into several); "unlabeled"
    records carry no class of ``level``.
    """
    age = meta["age"].to_numpy(dtype=float)
    real_age = age[np.isfinite(age) & (age != AGE_SENTINEL)]
    q1, median, q3 = np.percentile(real_age, [25, 50, 75]) if real_age.size else [np.nan] * 3
    labels = meta[list(level.columns())].to_numpy().reshape(len(meta), -1) > 0
    return {
        "Recordings": len(meta),
        "Patients": meta["patient_id"].nunique(),
        "Age, median (years)": median,
        "Age, lower quartile": q1,
        "Age, upper quartile": q3,
        "Age sentinel (age=300)": int((age == AGE_SENTINEL).sum()),
        "Male, %": 100.0 * float((meta["sex"] == 0).mean()),
        **{f"{c}, %": 100.0 * float(labels[:, i].mean()) for i, c in enumerate(level.classes)},
        "Unlabeled recordings": int((~labels.any(axis=1)).sum()),
        "Beats per recording, median": float(meta["beats"].median()),
        "Phase yield, median": float(meta["phase_yield"].median()),
        "Recordings failing phase QC": int((~meta["qc_ok"].astype(bool)).sum()),
    }


def cohort_table(
    cache_or_meta: PreparedCache | pd.DataFrame,
    folds_a: Iterable[int] = range(1, 10),
    folds_b: Iterable[int] = (10,),
) -> pd.DataFrame:
    """The cohort-composition table: one row per quantity (`rows`), one column per fold group.

    ``cache_or_meta`` is a `PreparedCache` (prevalences of its dataset's first label level) or a
    table with PTB-XL's meta.csv columns. Columns are named like "Folds 1–9" and "Fold 10".
    """
    import pandas as pd

    bare = isinstance(cache_or_meta, pd.DataFrame)
    meta = cache_or_meta if bare else cache_or_meta.meta
    level = PTBXL_LEVEL if bare else cache_or_meta.label_levels[0]
    columns = {}
    for folds in (sorted(set(folds_a)), sorted(set(folds_b))):
        chosen = meta[meta["fold"].isin(folds)]
        if chosen.empty:
            present = sorted(set(meta["fold"]))
            raise ValueError(f"no record in folds {folds}; folds present: {present}")
        columns[_fold_label(folds)] = cohort_column(chosen, level)
    return pd.DataFrame(columns, index=list(rows(level)))


def cohort_markdown(table: pd.DataFrame) -> str:
    """The table as Markdown in the paper's layout (quartiles merged into one IQR row)."""
    lines = ["| | " + " | ".join(table.columns) + " |", "|---|" + "---:|" * len(table.columns)]
    for row in table.index:
        if row == "Age, upper quartile":
            continue
        if row == "Age, lower quartile":
            upper = table.loc["Age, upper quartile"]
            cells = [f"{_number(a)}–{_number(b)}" for a, b in zip(table.loc[row], upper)]
            row = "Age, interquartile range"
        else:
            cells = [_format(row, value) for value in table.loc[row]]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fold_label(folds: list[int]) -> str:
    if len(folds) == 1:
        return f"Fold {folds[0]}"
    if folds == list(range(folds[0], folds[-1] + 1)):
        return f"Folds {folds[0]}–{folds[-1]}"
    return "Folds " + ", ".join(map(str, folds))


def _format(row: str, value: float) -> str:
    if row.endswith("%"):
        return f"{value:.1f}"
    if row == "Phase yield, median":
        return f"{value:.3f}"
    return _number(value)


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
