"""The cohort-composition table (paper, appendix "Data protocol"): two fold groups side by side."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from cyclejepa.data.datasets import LabelLevel

if TYPE_CHECKING:
    import pandas as pd

    from cyclejepa.data.cache import PreparedCache

__all__ = ["AGE_SENTINEL", "cohort_column", "cohort_markdown", "cohort_table", "rows"]

AGE_SENTINEL = 300
"""The age PTB-XL writes for de-identified patients over 89 (counted on its own row)."""


def rows(level: LabelLevel | None, event: str = "beat", windowed: bool = False) -> tuple[str, ...]:
    """The table's rows: a prevalence row per class of ``level``, events in the provider's word
    ``event``, counted per window (with a "Windows" row) when ``windowed``, else per recording."""
    unit = "window" if windowed else "recording"
    labelled = (*(f"{c}, %" for c in level.classes), f"Unlabeled {unit}s") if level else ()
    return (
        "Recordings",
        *(("Windows",) if windowed else ()),
        "Patients",
        "Age, median (years)",
        "Age, lower quartile",
        "Age, upper quartile",
        "Age sentinel (age=300)",
        "Male, %",
        *labelled,
        f"{event.capitalize()}s per {unit}, median",
        "Phase yield, median",
        f"{unit.capitalize()}s failing phase QC",
    )


def cohort_column(meta: pd.DataFrame, level: LabelLevel | None, event: str = "beat", windowed: bool = False) -> dict[str, float]:
    """Composition of the windows in ``meta`` (the cache's meta.csv columns), in the rows of `rows`.

    Age and sex once per recording (distinct ``record_id``); age statistics without the
    sentinel or missing ages (NaN when none); Male = ``sex == 0`` among known sexes.
    Prevalences, event counts and phase QC per row of meta.csv.
    """
    unit = "window" if windowed else "recording"
    recordings = meta.drop_duplicates("record_id")
    age = recordings["age"].to_numpy(dtype=float)
    real_age = age[np.isfinite(age) & (age != AGE_SENTINEL)]
    q1, median, q3 = np.percentile(real_age, [25, 50, 75]) if real_age.size else [np.nan] * 3
    columns = list(level.columns()) if level else []
    labels = meta[columns].to_numpy().reshape(len(meta), -1) > 0
    sex = recordings["sex"].to_numpy()
    known = sex[sex >= 0]
    prevalence = {f"{c}, %": 100.0 * float(labels[:, i].mean()) for i, c in enumerate(level.classes)} if level else {}
    if level:
        prevalence[f"Unlabeled {unit}s"] = int((~labels.any(axis=1)).sum())
    return {
        "Recordings": len(recordings),
        **({"Windows": len(meta)} if windowed else {}),
        "Patients": meta["patient_id"].nunique(),
        "Age, median (years)": median,
        "Age, lower quartile": q1,
        "Age, upper quartile": q3,
        "Age sentinel (age=300)": int((age == AGE_SENTINEL).sum()),
        "Male, %": 100.0 * float((known == 0).mean()) if known.size else np.nan,
        **prevalence,
        f"{event.capitalize()}s per {unit}, median": float(meta["events"].median()),
        "Phase yield, median": float(meta["phase_yield"].median()),
        f"{unit.capitalize()}s failing phase QC": int((~meta["qc_ok"].astype(bool)).sum()),
    }


def cohort_table(
    cache_or_meta: PreparedCache | pd.DataFrame,
    folds_a: Iterable[int],
    folds_b: Iterable[int],
    level: LabelLevel | None = None,
    event: str = "beat",
) -> pd.DataFrame:
    """The cohort-composition table: a row per quantity (`rows`), a column per fold group
    ("Folds 1–9", "Fold 10"), of a `PreparedCache` (its first label level) or a meta.csv table
    (``level``); windows are counted when some record has several."""
    import pandas as pd

    bare = isinstance(cache_or_meta, pd.DataFrame)
    meta: pd.DataFrame = cache_or_meta if bare else cache_or_meta.meta
    if not bare:
        level = cache_or_meta.label_levels[0] if cache_or_meta.label_levels else None
    windowed = "window" in meta and bool((meta["window"] > 0).any())
    columns = {}
    for folds in (sorted(set(folds_a)), sorted(set(folds_b))):
        chosen = meta[meta["fold"].isin(folds)]
        if chosen.empty:
            present = sorted(set(meta["fold"]))
            raise ValueError(f"no record in folds {folds}; folds present: {present}")
        columns[_fold_label(folds)] = cohort_column(chosen, level, event, windowed)
    return pd.DataFrame(columns, index=list(rows(level, event, windowed)))


def cohort_markdown(table: pd.DataFrame) -> str:
    """The table as Markdown in the paper's layout (one IQR row; the sentinel's row if non-zero)."""
    lines = ["| | " + " | ".join(table.columns) + " |", "|---|" + "---:|" * len(table.columns)]
    for row in table.index:
        if row == "Age, upper quartile":
            continue
        if row == "Age sentinel (age=300)" and not table.loc[row].any():
            continue
        if row == "Age, lower quartile":
            upper = table.loc["Age, upper quartile"]
            cells = [
                f"{_number(a)}–{_number(b)}" if np.isfinite(a) else "unknown" for a, b in zip(table.loc[row], upper, strict=True)
            ]
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
        return f"{value:.1f}" if np.isfinite(value) else "unknown"
    if row == "Phase yield, median":
        return f"{value:.3f}"
    return _number(value)


def _number(value: float) -> str:
    if not np.isfinite(value):
        return "unknown"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
