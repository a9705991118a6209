"""Harmonic allocations compared: the same short training, one capacity split per row.

Every allocation has the same latent dimension K; what changes is how it is split between
invariant coordinates (K0) and harmonic blocks ({c_n}, n_max, gaps). Each is trained with the
transport objective on the synthetic corpus for every seed and scored like a checkpoint of
`cyclejepa run` (superclass probe with its patient-clustered interval, gain fraction, G1,
loop amplitude, orbit coherence, effective rank of z). Beside each, the random baseline: the
same network at the weights each seed's run starts from (the trainer's step-0 weights), frozen and
scored the same way, at no training cost. `cyclejepa.bench.commands` builds the configs
and trains; this module keeps the table.

    cyclejepa benchmark allocations --out runs/allocations
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cyclejepa.evaluation.probe import ProbeResult
from cyclejepa.evaluation.results import AllocationRow, CheckpointMetrics, plain, read_result, write_result
from cyclejepa.jsonio import write_json

# K = 32 each: the paper's decreasing profile scaled down, and the alternatives of the issue.
ALLOCATIONS = {
    "paper-profile": "4x0+4x1+4x2+3x3+2x4+1x5",
    "uniform": "2x0+3x1+3x2+3x3+3x4+3x5",
    "invariant-heavy": "20x0+2x1+2x2+1x3+1x4",
    "gapped {1,4,7}": "2x0+5x1+5x4+5x7",
    "low n_max": "4x0+10x1+4x2",
    "invariant-only": "32x0",
}
QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"


def allocation_table(
    out: Path,
    score: Callable[[str, int, Path], dict[str, Any]],
    *,
    allocations: dict[str, str] = ALLOCATIONS,
    seeds: Sequence[int] = (0, 1),
    steps: int,
    untrained: Callable[[str, int], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Score every allocation × seed with ``score(allocation, seed, run directory)`` (its
    `allocation_metrics`) and, with ``untrained(allocation, seed)``, its random baseline (encoder
    "random"), keeping finished rows; write ``allocations.json``, ``.md`` and ``.png`` to ``out``.
    ``steps`` is the training length every trained row shares."""
    rows = []
    for name, spectrum in allocations.items():
        for encoder in [TRAINED, *([RANDOM] if untrained else [])]:
            for seed in seeds:
                suffix = "" if encoder == TRAINED else f"-{RANDOM}"
                done = out / "rows" / f"{_slug(name)}{suffix}-seed{seed}.json"  # finished rows are kept
                if not done.exists():
                    directory = out / "runs" / f"{_slug(name)}-seed{seed}"
                    metrics = score(name, seed, directory) if encoder == TRAINED else untrained(name, seed)  # type: ignore[misc]
                    row = AllocationRow(allocation=name, spectrum=spectrum, seed=seed, encoder=encoder, **metrics)
                    write_result(done, row)
                rows.append(read_result(done, AllocationRow).model_dump(exclude={"checksum", "schema_version"}))
    table = summarise_allocations(rows)
    summary = {"steps": steps, "seeds": list(seeds), "rows": rows, "table": table}
    write_json(out / "allocations.json", summary)
    (out / "allocations.md").write_text(markdown_table(table) + "\n")
    allocation_figure(table, out / "allocations.png")
    return summary


def allocation_metrics(result: dict[str, Any]) -> dict[str, Any]:
    """A row's metrics from the checkpoint scores of `cyclejepa.evaluation.checkpoint_evaluation.core_metrics`
    (read as `CheckpointMetrics`)."""
    metrics = CheckpointMetrics.model_validate(plain(result))
    probe, mechanism, geometry = metrics.diagnostic["superclass"], metrics.mechanism, metrics.geometry
    if not isinstance(probe, ProbeResult):
        raise ValueError(f"the superclass probe could not be evaluated: {probe.error}")
    return {
        "auroc": probe.macro_auroc.point,
        "auroc_low": probe.macro_auroc.low,
        "auroc_high": probe.macro_auroc.high,
        "gain_fraction": mechanism.true.gain_fraction,
        "shuffled_gain_fraction": mechanism.shuffled.gain_fraction,
        "g1": mechanism.passed,
        "amplitude": geometry.amplitude,
        "coherence": float("nan") if geometry.coherence is None else geometry.coherence.mean_kappa,
        "effective_rank": geometry.effective_rank,
    }


TRAINED, RANDOM = "trained", "random"
"""A row's encoder: trained with the transport objective, or the untrained random baseline."""


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")


METRICS = ("auroc", "gain_fraction", "shuffled_gain_fraction", "amplitude", "coherence", "effective_rank")


def summarise_allocations(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per allocation and encoder (trained, then random): the seed mean and range of every metric,
    the mean probe interval, G1 passes."""
    table = []
    for name, encoder in dict.fromkeys((r["allocation"], r["encoder"]) for r in rows):
        group = [r for r in rows if r["allocation"] == name and r["encoder"] == encoder]
        entry = {
            "allocation": name,
            "encoder": encoder,
            "spectrum": group[0]["spectrum"],
            "seeds": len(group),
            "g1_passed": sum(bool(r["g1"]) for r in group),
        }
        for metric in METRICS:
            values = np.array([r[metric] for r in group], dtype=float)
            finite = values[np.isfinite(values)]
            entry[metric] = float(finite.mean()) if len(finite) else float("nan")
            entry[f"{metric}_min"] = float(finite.min()) if len(finite) else float("nan")
            entry[f"{metric}_max"] = float(finite.max()) if len(finite) else float("nan")
        entry["auroc_ci"] = [float(np.mean([r["auroc_low"] for r in group])), float(np.mean([r["auroc_high"] for r in group]))]
        table.append(entry)
    return table


def markdown_table(table: list[dict[str, Any]]) -> str:
    lines = [
        "| allocation | encoder | spectrum | superclass AUROC (mean 95 % CI) | gain fraction | shuffled g_f | G1 passes | amplitude | coherence | effective rank |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for e in table:
        encoder = "random (untrained)" if e.get("encoder") == RANDOM else "trained"
        lines.append(
            f"| {e['allocation']} | {encoder} | `{e['spectrum']}` | {e['auroc']:.3f} [{e['auroc_ci'][0]:.3f}, {e['auroc_ci'][1]:.3f}] | "
            f"{_range(e, 'gain_fraction')} | {_range(e, 'shuffled_gain_fraction')} | {e['g1_passed']}/{e['seeds']} | "
            f"{_range(e, 'amplitude')} | {_range(e, 'coherence')} | {_range(e, 'effective_rank', '.1f')} |"
        )
    return "\n".join(lines)


def _range(entry: dict[str, Any], metric: str, fmt: str = ".3f") -> str:
    if not np.isfinite(entry[metric]):
        return "–"
    return f"{entry[metric]:{fmt}} ({entry[metric + '_min']:{fmt}}–{entry[metric + '_max']:{fmt}})"


def allocation_figure(table: list[dict[str, Any]], path: Path):
    """Bars per allocation (seed mean, whiskers the seed range) for four metrics."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 3.4), layout="constrained")
    axes = figure.subplots(1, 4)
    names = [e["allocation"] + (" (random)" if e.get("encoder") == RANDOM else "") for e in table]
    for axis, metric, title in zip(
        axes,
        ("auroc", "gain_fraction", "coherence", "effective_rank"),
        ("superclass macro-AUROC", "transport gain fraction", "orbit coherence", "effective rank of z"),
        strict=True,
    ):
        mean = np.array([e[metric] for e in table])
        low = mean - np.array([e[f"{metric}_min"] for e in table])
        high = np.array([e[f"{metric}_max"] for e in table]) - mean
        axis.barh(names, np.nan_to_num(mean), xerr=np.nan_to_num([low, high]), color="#2a7f8f")
        axis.set_title(title, fontsize=9)
        if metric == "auroc":
            axis.set_xlim(0.5, 1.0)  # chance level at the left edge
        axis.invert_yaxis()
        if axis is not axes[0]:
            axis.set_yticklabels([])
    figure.savefig(path, dpi=110)
    return figure


def allocation_arguments() -> argparse.ArgumentParser:
    """The options of ``cyclejepa benchmark allocations``."""
    parser = argparse.ArgumentParser(prog="cyclejepa benchmark allocations", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/allocations")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the base config's)")
    parser.add_argument("--config", default=str(QUICKSTART), help="base experiment (default: the quickstart)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="override a base config key")
    parser.add_argument(
        "--no-random-baseline",
        dest="random_baseline",
        action="store_false",
        help="leave out the rows of the untrained (random) encoder of each allocation and seed",
    )
    return parser
