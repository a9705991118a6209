"""The report stage: ``report/report.md`` of an output directory (`report_experiment`) and, for a
grid, ``grid_summary.md`` (`write_grid_summary`), from the saved results and the config.

The stage reads the resolved config and the fold-use logs of the output directory and hands the
report what it needs of them as a `ReportSpec` (`report_spec`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from cyclejepa.config import ExperimentConfig, parse_config
from cyclejepa.evaluation.report import figure_cell, write_report
from cyclejepa.evaluation.results import ProtocolResult, ReportResult, read_result
from cyclejepa.evaluation.spec import ReportSpec
from cyclejepa.outputs import OutputFolder
from cyclejepa.pipeline.checks import phase_qc_verdict
from cyclejepa.pipeline.identity import config_hash
from cyclejepa.pipeline.seal import AUDIT_FILE, FOLDS_FILE, read_lines


def report_spec(cfg: ExperimentConfig) -> ReportSpec:
    """What the report reads of ``cfg`` and of its output directory's fold-use and audit logs,
    and the phase QC flags of its evaluation's windows (`phase_qc_flags`)."""
    out = Path(cfg.output_dir)
    return ReportSpec(
        name=cfg.name,
        config_hash=config_hash(cfg),
        arms=tuple(arm.name for arm in cfg.runs.arms),
        headline_seed=cfg.runs.seeds[0],
        headline_step=cfg.evaluation.headline_step,
        folds_used=tuple(read_lines(out / FOLDS_FILE)),
        unseal_audit=tuple(read_lines(out / AUDIT_FILE)),
        audit_log=AUDIT_FILE,
        phase_qc_flags=phase_qc_flags(cfg),
        random_baseline=cfg.evaluation.random_baseline,
    )


def phase_qc_flags(cfg: ExperimentConfig) -> tuple[str, ...]:
    """The flags of `phase_qc_verdict` under ``data.phase_qc`` on the phase QC counts the
    evaluation's ``protocol.json`` records (none before the evaluation wrote it)."""
    protocol = OutputFolder(Path(cfg.output_dir)).evaluation / "protocol.json"
    if not protocol.is_file():
        return ()
    return tuple(phase_qc_verdict(cfg, read_result(protocol, ProtocolResult).phase_qc.model_dump())[1])


def report_experiment(output_dir: str | Path) -> Path:
    """Build ``<output_dir>/report/report.md`` and ``report.json`` (`write_report`) from the saved
    evaluation and the output directory's resolved config."""
    output_dir = Path(output_dir)
    path = OutputFolder(output_dir).config
    cfg = parse_config(yaml.safe_load(path.read_text()), source=str(path))
    return write_report(report_spec(cfg), output_dir)


def write_grid_summary(output_dir: Path, cells: list[tuple[str, ExperimentConfig]]) -> Path:
    """``grid_summary.md``: for every grid cell, its overrides and its headline metrics per arm
    (the first task's AUROC: "–" for a dataset without labels), each figure `figure_cell` as the
    report's tables show it (with the few-data words of the arm's validity)."""
    lines = [
        "# Grid summary",
        "",
        "| cell | settings | arm | headline-task AUROC | gain fraction | G1 | report |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for label, cfg in cells:
        report = read_result(OutputFolder(Path(cfg.output_dir)).report / "report.json", ReportResult)
        settings = ", ".join(f"{k}={_lookup(cfg, k)}" for k in sorted(cells_keys(cells)))
        for arm, values in report.headline.items():
            auroc = values[report.probe_rows[0]] if report.probe_rows else math.nan
            auroc = auroc["point"] if isinstance(auroc, dict) else auroc  # a degenerate probe's is words
            validity = report.validity[arm]
            lines.append(
                f"| {label} | {settings} | {arm} | {figure_cell(auroc, validity)} | "
                f"{figure_cell(values['Transport gain fraction ↑'], validity)} | "
                f"{values['G1 shuffled-φ gate']} | grid/{label}/report/report.md |"
            )
    path = output_dir / "grid_summary.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def cells_keys(cells: list[tuple[str, ExperimentConfig]]) -> set[str]:
    """The config keys that differ between grid cells."""
    dumps = [_flatten(cfg.model_dump(mode="json", exclude={"output_dir"})) for _, cfg in cells]
    return {k for k in dumps[0] if len({json.dumps(d.get(k)) for d in dumps}) > 1}


def _flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        flat.update(_flatten(item, name + ".") if isinstance(item, dict) else {name: item})
    return flat


def _lookup(cfg: ExperimentConfig, key: str) -> Any:
    return _flatten(cfg.model_dump(mode="json"))[key]
