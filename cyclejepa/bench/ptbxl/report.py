"""The benchmark's summary (seed statistics per task × protocol × pre-training × fraction) and its
Markdown tables, the published figures beside them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cyclejepa.bench.ptbxl.published import PUBLISHED, SOURCES
from cyclejepa.data.ptbxl_tasks import TASKS

__all__ = ["benchmark_markdown", "summarise_cells"]

METRICS = ("macro_auroc", "fmax")


def summarise_cells(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, protocol, arm, fraction): the number of runs and failed runs, the scored records
    and classes, and per metric the mean, sd, range of the point estimates and the mean interval."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for cell in cells:
        groups.setdefault((cell["task"], cell["protocol"], cell["arm"], cell["fraction"]), []).append(cell)
    table = []
    for (task, protocol, arm, fraction), group in groups.items():
        done = [c for c in group if "scores" in c]
        entry = {
            "task": task,
            "protocol": protocol,
            "arm": arm,
            "fraction": fraction,
            "runs": len(done),
            "errors": [c["error"] for c in group if "error" in c],
        }
        if done:
            scores = done[0]["scores"]
            entry |= {
                "records": scores["records"],
                "patients": scores["patients"],
                "classes_scored": len(scores["per_class"]),
                "classes": len(scores["classes"]),
            }
            for metric in METRICS:
                points = np.array([c["scores"][metric]["point"] for c in done])
                entry[metric] = {
                    "mean": float(points.mean()),
                    "sd": float(points.std(ddof=1)) if len(points) > 1 else 0.0,
                    "min": float(points.min()),
                    "max": float(points.max()),
                    "low": float(np.mean([c["scores"][metric]["low"] for c in done])),
                    "high": float(np.mean([c["scores"][metric]["high"] for c in done])),
                }
        table.append(entry)
    return table


def _value(entry: dict[str, Any] | None, metric: str) -> str:
    if entry is None:
        return ""
    if metric not in entry:
        return "failed" if entry["errors"] else ""
    m = entry[metric]
    spread = f" ± {m['sd']:.3f}" if entry["runs"] > 1 else ""
    return f"{m['mean']:.3f}{spread} [{m['low']:.3f}, {m['high']:.3f}]" + _few_data(entry)


def _few_data(entry: dict[str, Any]) -> str:
    """ " (few data: N records, P patients)" when the cell's scores rest on fewer than
    `MIN_WINDOWS` scored records or `MIN_PATIENTS` patients (`cyclejepa.evaluation.validity`),
    else nothing: such a figure is never shown as a plain number."""
    from cyclejepa.evaluation.validity import MIN_PATIENTS, MIN_WINDOWS

    records, patients = entry.get("records", 0), entry.get("patients", 0)
    if records >= MIN_WINDOWS and patients >= MIN_PATIENTS:
        return ""
    return f" (few data: {records} records, {patients} patients)"


def _rows(summary: list[dict[str, Any]], fraction: float) -> list[tuple[str, str]]:
    """(protocol, arm) of the rows of one fraction's table, protocol-major."""
    from cyclejepa.bench.ptbxl.run import PROTOCOLS

    found = {(e["protocol"], e["arm"]) for e in summary if e["fraction"] == fraction}
    arms = list(dict.fromkeys(e["arm"] for e in summary))
    return [(p, a) for p in PROTOCOLS for a in arms if (p, a) in found]


def _table(summary: list[dict[str, Any]], fraction: float, metric: str, tasks: Sequence[str], published: bool) -> list[str]:
    index = {(e["task"], e["protocol"], e["arm"]): e for e in summary if e["fraction"] == fraction}
    lines = ["| protocol | pre-training | " + " | ".join(tasks) + " |", "|---|---|" + "---:|" * len(tasks)]
    for protocol, arm in _rows(summary, fraction):
        cells = [_value(index.get((t, protocol, arm)), metric) for t in tasks]
        lines.append(f"| {protocol} | {arm if protocol != 'scratch' else '–'} | " + " | ".join(cells) + " |")
    scored = []
    for task in tasks:
        entry = next((e for e in summary if e["task"] == task and e["fraction"] == fraction and "classes" in e), None)
        scored.append(f"{entry['classes_scored']}/{entry['classes']} classes, {entry['records']} records" if entry else "")
    lines.append("| *scored* | | " + " | ".join(scored) + " |")
    if published and metric == "macro_auroc":
        keys = list(SOURCES)
        lines.append("| *published, fold 10 of all PTB-XL* | | " + " | ".join("" for _ in tasks) + " |")
        for row in PUBLISHED:
            cells = [f"{row.auroc[t]:.3f}" if t in row.auroc else "" for t in tasks]
            lines.append(f"| {row.protocol} | {row.method} [{keys.index(row.source) + 1}] | " + " | ".join(cells) + " |")
    return lines


def _at_once(meta: dict[str, Any]) -> str:
    return "cells in turn" if meta["at_once"] == 1 else f"cells that train a network {meta['at_once']} at once"


def benchmark_markdown(summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """Tables of macro-AUROC and Fmax per label fraction (the published figures beside the 100 %
    tables), preceded by what was run and followed by the sources."""
    tasks = [t for t in TASKS if any(e["task"] == t for e in summary)]
    folds = meta["folds"]
    lines = [
        f"# PTB-XL benchmark: {meta['name']}",
        "",
        f"Corpus {meta['corpus']}; fit folds {folds['fit']}, early stopping on fold {folds['validation']}, "
        f"scored folds {folds['test']}. Pre-trained checkpoints at step {meta['step']}; seeds {meta['seeds']}; "
        f"fine-tuning {meta['settings']}. Wall time {meta['wall_s'] / 60:.1f} min, {_at_once(meta)}.",
        "",
        "Each cell: the mean over seeds (and pre-training seeds) of the point estimate, ± their sd when there "
        "are several, and the mean 95 % patient-clustered bootstrap interval.",
    ]
    if folds["test"] != [10]:
        lines += [
            "",
            f"The published figures are test-fold-10 scores on all 21,799 PTB-XL records; this run scores "
            f"folds {folds['test']}, so they are context, not a comparison.",
        ]
    for fraction in sorted({e["fraction"] for e in summary}, reverse=True):
        for metric, title in (("macro_auroc", "macro-AUROC"), ("fmax", "Fmax")):
            lines += ["", f"## {title}, {fraction:.0%} of the fit records", ""]
            lines += _table(summary, fraction, metric, tasks, published=fraction == 1.0)
    failed = [(e, error) for e in summary for error in e["errors"]]
    if failed:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {e['task']} / {e['protocol']} / {e['arm']} / {e['fraction']:.0%}: {error}" for e, error in failed]
    lines += ["", "## Sources", ""]
    lines += [f"{i}. {text}" for i, text in enumerate(SOURCES.values(), 1)]
    return "\n".join(lines) + "\n"
