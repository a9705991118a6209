"""`report.md` and `report.json` of a run directory, rebuilt from saved results only.

The first table has the rows of the paper's "Winder vs control" table for the headline cell
(first seed, ``evaluation.headline_step`` or the first evaluated step), both arms side by
side, 95 % patient-clustered intervals where the paper has them and the better arm in bold.
Then the full grid (arms × seeds × steps), per-class AUROCs, the mechanism, robustness,
geometry and anomaly details, heart-rate strata, the figures, and the protocol.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cyclejepa.config import ExperimentConfig, parse_config
from cyclejepa.jsonio import read_json, write_json
from cyclejepa.seal import AUDIT_FILE, FOLDS_FILE, read_lines


@dataclass(frozen=True)
class Row:
    """One row of the bottom-line table: how to read it from a result and which way is better."""

    section: str
    label: str
    value: Callable[[dict], Any]
    higher_is_better: bool | None = True
    interval: Callable[[dict], tuple[float, float]] | None = None


_UNDEFINED = {"point": math.nan, "low": math.nan, "high": math.nan}


def _macro(result: dict, task: str) -> dict:
    """The task's macro-AUROC interval; NaN when the task could not be evaluated."""
    return result["diagnostic"].get(task, {}).get("macro_auroc", _UNDEFINED)


def _probe_row(label: str, task: str) -> "Row":
    return Row(
        "Diagnostic accuracy", label, lambda r: _macro(r, task)["point"], True,
        lambda r: (_macro(r, task)["low"], _macro(r, task)["high"]),
    )


def _strongest(result: dict) -> dict:
    """The anomaly cell with the largest excess at the highest severity."""
    cells = result["anomaly"]
    if not cells:  # no battery (a torus run)
        return {}
    top = max(c["severity"] for c in cells)
    finite = [c for c in cells if c["severity"] == top and _finite(c["excess"])]
    return max(finite, key=lambda c: c["excess"]) if finite else {}


# PTB-XL's three probe tasks under the paper's names; any other dataset's task is named as it is.
PROBE_LABELS = {
    "superclass": "Superclass macro-AUROC, 5 classes ↑",
    "subclass-eligible": "Subclass macro-AUROC, eligible (17 in PTB-XL) ↑",
    "subclass-all": "Subclass macro-AUROC, 23 classes ↑",
}


def headline_rows(cell: list[dict]) -> tuple["Row", ...]:
    """The bottom-line rows of a cell: one probe row per task it evaluated, then `ROWS`."""
    tasks = cell[0]["diagnostic"] or PROBE_LABELS
    probes = [_probe_row(PROBE_LABELS.get(task, f"`{task}` macro-AUROC ↑"), task) for task in tasks]
    return (*probes, *ROWS)


ROWS = (
    Row("Mechanism validity", "Transport gain fraction ↑", lambda r: r["mechanism"]["true"]["gain_fraction"]),
    Row("Mechanism validity", "G1 shuffled-φ gate", lambda r: "Pass" if r["mechanism"]["passed"] else "Fail", None),
    Row(
        "Mechanism validity", "Paired true − shuffled gain ↑",
        lambda r: r["mechanism"]["paired_difference"]["point"],
        True,
        lambda r: (r["mechanism"]["paired_difference"]["low"], r["mechanism"]["paired_difference"]["high"]),
    ),
    Row("Robustness", "Mean signed Δ macro-AUROC, single-lead dropout ↑", lambda r: r["robustness"]["mean_delta"]["point"]),
    Row(
        "Robustness", "Worst signed Δ macro-AUROC across single-lead dropouts ↑",
        lambda r: (r["robustness"]["worst_delta"], r["robustness"]["worst_lead"]),
    ),
    Row("Latent geometry", "Fundamental loop amplitude ↑", lambda r: r["geometry"].get("amplitude", math.nan)),
    Row(
        "Latent geometry", "Orbit-subspace coherence, mean over 7 non-reference bins ↑",
        lambda r: r["geometry"].get("coherence", {}).get("mean_kappa", math.nan),
    ),
    Row("Latent geometry", "Effective rank of z ↑", lambda r: r["geometry"].get("effective_rank", math.nan)),
    Row("Anomaly detection", "Strongest family", lambda r: _strongest(r).get("family", "-"), None),
    Row("Anomaly detection", "Its AUROC at the highest severity ↑", lambda r: _strongest(r).get("auroc", math.nan)),
    Row("Anomaly detection", "Excess over own zero-severity reference ↑", lambda r: _strongest(r).get("excess", math.nan)),
    Row("Anomaly detection", "Localisation hit rate ↑", lambda r: _strongest(r).get("hit_rate", math.nan)),
    Row("Anomaly detection", "Median latency among alarmed records (ms) ↓", lambda r: _strongest(r).get("median_latency_ms", math.nan), False),
)


def write_report(output_dir: str | Path) -> Path:
    """Build ``<output_dir>/report/report.md`` and ``report.json`` from the saved evaluation."""
    output_dir = Path(output_dir)
    cfg = parse_config(read_json_yaml(output_dir / "config.yaml"), source=str(output_dir / "config.yaml"))
    evaluation = output_dir / "evaluation"
    results = sorted((read_json(p) for p in evaluation.glob("*-seed*-step*.json")), key=_order(cfg))
    if not results:
        raise FileNotFoundError(f"{evaluation} holds no evaluation results; run `cyclejepa run` first")
    headline = headline_cell(cfg, results)
    report_dir = output_dir / "report"
    sections = [
        f"# {cfg.name}: report\n\nConfig hash `{cfg.config_hash()}`; headline cell: seed {headline[0]['seed']}, "
        f"step {headline[0]['step']} (first seed; `evaluation.headline_step` or the first evaluated step).",
        bottom_line_markdown(headline),
        grid_markdown(results),
        per_class_markdown(headline),
        mechanism_markdown(headline),
        coordinates_markdown(headline),
        robustness_markdown(headline),
        geometry_markdown(headline),
        anomaly_markdown(headline),
        strata_markdown(evaluation, headline[0]["step"]),
        figures_markdown(report_dir),
        protocol_markdown(output_dir),
    ]
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "report.md").write_text("\n\n".join(s for s in sections if s) + "\n")
    write_json(report_dir / "report.json", {
        "headline": {r["arm"]: {row.label: _json_value(row, r) for row in headline_rows(headline)} for r in headline},
        "headline_cell": {"seed": headline[0]["seed"], "step": headline[0]["step"]},
        "grid": [_grid_entry(r) for r in results],
        "figures": sorted(p.name for p in (report_dir / "figures").glob("*.png")),
    })
    return report_dir / "report.md"


def write_grid_summary(output_dir: Path, cells: list[tuple[str, ExperimentConfig]]) -> Path:
    """``grid_summary.md``: for every grid cell, its overrides and its headline metrics per arm."""
    lines = ["# Grid summary", "", "| cell | settings | arm | headline-task AUROC | gain fraction | G1 | report |",
             "|---|---|---|---:|---:|---|---|"]
    for label, cfg in cells:
        report = read_json(Path(cfg.output_dir) / "report" / "report.json")
        settings = ", ".join(f"{k}={_lookup(cfg, k)}" for k in sorted(cells_keys(cells)))
        for arm, values in report["headline"].items():
            auroc = next(iter(values.values()))["point"]  # the first row: the headline task's probe (PTB-XL: superclass)
            lines.append(
                f"| {label} | {settings} | {arm} | {_number(auroc)} | {_number(values['Transport gain fraction ↑'])} | "
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


def _flatten(value: dict, prefix: str = "") -> dict:
    flat = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        flat.update(_flatten(item, name + ".") if isinstance(item, dict) else {name: item})
    return flat


def _lookup(cfg: ExperimentConfig, key: str):
    return _flatten(cfg.model_dump(mode="json"))[key]


def read_json_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


def _order(cfg: ExperimentConfig):
    arms = [a.name for a in cfg.runs.arms]
    return lambda r: (r["step"], r["seed"], arms.index(r["arm"]) if r["arm"] in arms else len(arms))


def headline_cell(cfg: ExperimentConfig, results: list[dict]) -> list[dict]:
    """The results of every arm at the headline seed and step, in arm order."""
    step = cfg.evaluation.headline_step or min(r["step"] for r in results)
    seed = cfg.runs.seeds[0]
    cell = [r for r in results if r["step"] == step and r["seed"] == seed]
    if not cell:
        raise ValueError(f"no evaluation at seed {seed}, step {step}")
    return cell


def bottom_line_markdown(cell: list[dict]) -> str:
    header = "| Metric | " + " | ".join(f"{r['arm']} (λ_trans={r['transport_weight']:g})" for r in cell) + " |"
    lines = ["## Bottom line", "", header, "|---|" + "---|" * len(cell)]
    section = None
    for row in headline_rows(cell):
        if row.section != section:
            section = row.section
            lines.append(f"| **{section}** |" + " |" * len(cell))
        values = [row.value(r) for r in cell]
        best = _best(row, values)
        cells = [_cell(row, r, v, i == best) for i, (r, v) in enumerate(zip(cell, values))]
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    lines += ["", "Intervals: 95 % patient-clustered percentile bootstrap. Bold: the better arm where the comparison is non-degenerate."]
    return "\n".join(lines)


def _best(row: Row, values: list) -> int | None:
    if row.higher_is_better is None or len(values) < 2:
        return None
    numbers = [v[0] if isinstance(v, tuple) else v for v in values]
    if not all(isinstance(n, (int, float)) and _finite(n) for n in numbers) or len(set(numbers)) == 1:
        return None
    pick = max if row.higher_is_better else min
    return numbers.index(pick(numbers))


def _cell(row: Row, result: dict, value: Any, bold: bool) -> str:
    if isinstance(value, tuple):
        text = f"{_number(value[0])} ({value[1]})"
    elif isinstance(value, str):
        text = value
    else:
        text = _number(value)
        if row.interval is not None:
            low, high = row.interval(result)
            text += f" [{_number(low)}, {_number(high)}]"
    return f"**{text}**" if bold else text


def _json_value(row: Row, result: dict) -> Any:
    value = row.value(result)
    if row.interval is None:
        return list(value) if isinstance(value, tuple) else value
    low, high = row.interval(result)
    return {"point": value, "low": low, "high": high}


def grid_markdown(results: list[dict]) -> str:
    lines = [
        "## Full grid",
        "",
        "| arm | seed | step | superclass AUROC | eligible-subclass AUROC | gain fraction | G1 | mean Δ lead dropout | amplitude | coherence |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in results:
        entry = _grid_entry(r)
        lines.append(
            f"| {r['arm']} | {r['seed']} | {r['step']} | {_number(entry['superclass'])} | {_number(entry['subclass_eligible'])} | "
            f"{_number(entry['gain_fraction'])} | {'Pass' if entry['g1'] else 'Fail'} | {_number(entry['mean_lead_delta'])} | "
            f"{_number(entry['amplitude'])} | {_number(entry['coherence'])} |"
        )
    return "\n".join(lines)


def _grid_entry(r: dict) -> dict:
    return {
        "arm": r["arm"], "seed": r["seed"], "step": r["step"],
        "superclass": _macro(r, "superclass")["point"],
        "subclass_eligible": _macro(r, "subclass-eligible")["point"],
        "subclass_all": _macro(r, "subclass-all")["point"],
        "gain_fraction": r["mechanism"]["true"]["gain_fraction"],
        "g1": r["mechanism"]["passed"],
        "mean_lead_delta": r["robustness"]["mean_delta"]["point"],
        "amplitude": r["geometry"].get("amplitude", math.nan),
        "coherence": r["geometry"].get("coherence", {}).get("mean_kappa", math.nan),
    }


def per_class_markdown(cell: list[dict]) -> str:
    lines = ["## Per-class AUROC (headline cell)"]
    for task, first in cell[0]["diagnostic"].items():
        classes = first["classes"]
        if "error" in first:
            lines += ["", f"**{task}**: not evaluated ({first['error']})"]
            continue
        lines += ["", f"**{task}**", "", "| class | " + " | ".join(r["arm"] for r in cell) + " | positives |",
                  "|---|" + "---:|" * (len(cell) + 1)]
        for name in classes:
            values = [_number(r["diagnostic"][task]["per_class"].get(name, math.nan)) for r in cell]
            positives = cell[0]["diagnostic"][task]["positives"].get(name, "-")
            lines.append(f"| {name} | " + " | ".join(values) + f" | {positives} |")
    return "\n".join(lines)


def mechanism_markdown(cell: list[dict]) -> str:
    lines = [
        "## Mechanism validity (G1, both conditions)", "",
        "| arm | mean gain ḡ [95 % CI] | gain fraction | shuffled gain fraction | paired true − shuffled [95 % CI] | interval excludes 0 | |shuffled g_f| ≤ tol | G1 |",
        "|---|---|---:|---:|---|---|---|---|",
    ]
    for r in cell:
        m = r["mechanism"]
        lines.append(
            f"| {r['arm']} | {_interval(m['mean_gain'])} | {_number(m['true']['gain_fraction'])} | "
            f"{_number(m['shuffled']['gain_fraction'])} | {_interval(m['paired_difference'])} | "
            f"{m['interval_excludes_zero']} | {m['shuffled_fraction_within_tolerance']} (tol {m['tolerance']}) | "
            f"{'Pass' if m['passed'] else 'Fail'} |"
        )
    return "\n".join(lines)


def coordinates_markdown(cell: list[dict]) -> str:
    """Mechanism metrics per cyclic coordinate of a torus run (empty for one coordinate)."""
    if "coordinates" not in cell[0]:
        return ""
    lines = [
        "## Mechanism per cyclic coordinate (each coordinate's own U(1) terms)", "",
        "| arm | coordinate | gain fraction | shuffled gain fraction | paired true − shuffled [95 % CI] | G1 | amplitude | coherence |",
        "|---|---|---:|---:|---|---|---:|---:|",
    ]
    for r in cell:
        for name, c in r["coordinates"].items():
            m, g = c["mechanism"], c["geometry"]
            lines.append(
                f"| {r['arm']} | {name} | {_number(m['true']['gain_fraction'])} | {_number(m['shuffled']['gain_fraction'])} | "
                f"{_interval(m['paired_difference'])} | {'Pass' if m['passed'] else 'Fail'} | "
                f"{_number(g.get('amplitude', math.nan))} | {_number(g.get('coherence', {}).get('mean_kappa', math.nan))} |"
            )
    return "\n".join(lines)


def robustness_markdown(cell: list[dict]) -> str:
    leads = list(cell[0]["robustness"]["delta"])
    lines = ["## Single-lead zeroing (signed Δ superclass macro-AUROC)", "",
             "| lead | " + " | ".join(r["arm"] for r in cell) + " |", "|---|" + "---:|" * len(cell)]
    for lead in leads:
        lines.append(f"| {lead} | " + " | ".join(_number(r["robustness"]["delta"][lead]["point"]) for r in cell) + " |")
    return "\n".join(lines)


def geometry_markdown(cell: list[dict]) -> str:
    if "coherence" not in cell[0]["geometry"]:
        return ""
    lines = ["## Orbit-subspace coherence per phase bin (8 bins; bin 0 is the reference)", "",
             "| arm | " + " | ".join(f"κ_{b}" for b in range(len(cell[0]["geometry"]["coherence"]["kappa"]))) + " |",
             "|---|" + "---:|" * len(cell[0]["geometry"]["coherence"]["kappa"])]
    for r in cell:
        lines.append(f"| {r['arm']} | " + " | ".join(_number(k) for k in r["geometry"]["coherence"]["kappa"]) + " |")
    return "\n".join(lines)


def anomaly_markdown(cell: list[dict]) -> str:
    lines = ["## Anomaly battery (one fixed causal detector)"]
    for r in cell:
        detector = r["anomaly"][0]["detector"] if r["anomaly"] else "-"
        lines += ["", f"**{r['arm']}** — detector `{detector}`", "",
                  "| family | severity | AUROC | reference | excess | alarm rate | hit rate | median latency (ms) | records |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in r["anomaly"]:
            lines.append(
                f"| {c['family']} | {c['severity']:.1f} | {_number(c['auroc'])} | {_number(c['reference_auroc'])} | "
                f"{_number(c['excess'])} | {_number(c['alarm_rate'])} | {_number(c['hit_rate'])} | "
                f"{_number(c['median_latency_ms'])} | {c['records']} |"
            )
        skipped = r.get("anomaly_skipped", {})
        if skipped:
            lines += ["", "Not run (the family does not apply): " + "; ".join(f"{f}: {why}" for f, why in skipped.items()) + "."]
    return "\n".join(lines)


def strata_markdown(evaluation: Path, step: int) -> str:
    path = evaluation / f"hr-strata-step{step:06d}.json"
    if not path.exists():
        return ""
    lines = ["## Heart-rate stratified superclass AUROC (post hoc)"]
    for seed, result in read_json(path).items():
        arms = result["arms"]
        lines += ["", f"**{seed}**", "", "| heart rate (bpm) | records | " + " | ".join(arms) + " | gap [95 % CI] |",
                  "|---|---:|" + "---:|" * len(arms) + "---|"]
        for s in result["strata"]:
            lines.append(
                f"| {s['low']:.0f}–{s['high']:.0f} | {s['records']} | " + " | ".join(_number(s["auroc"][a]) for a in arms)
                + f" | {_number(s['gap'])} {_ci(s.get('gap_ci'))} |"
            )
    return "\n".join(lines)


def figures_markdown(report_dir: Path) -> str:
    figures = sorted((report_dir / "figures").glob("*.png"))
    if not figures:
        return ""
    return "## Figures\n\n" + "\n\n".join(f"![{p.stem}](figures/{p.name})" for p in figures)


def protocol_markdown(output_dir: Path) -> str:
    protocol = read_json(output_dir / "evaluation" / "protocol.json")
    counts = protocol["counts"]
    lines = [
        "## Protocol", "",
        *folds_markdown(output_dir),
        f"- Cache `{protocol['cache']}`: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".",
        f"- Rejected records: {len(protocol['rejections'])}"
        + "".join(f"\n  - {r['record']}: {r['check']} ({r['detail']})" for r in protocol["rejections"][:50]),
        "", protocol["cohort_markdown"],
    ]
    return "\n".join(lines + ["", *sealed_markdown(output_dir)])


def folds_markdown(output_dir: Path) -> list[str]:
    """The folds each stage read, from ``folds_used.jsonl`` (what the stages recorded, not the config)."""
    used: dict[tuple[str, str, tuple[int, ...]], int] = {}
    for entry in read_lines(output_dir / FOLDS_FILE):
        key = (entry["stage"], entry["key"], tuple(entry["folds"]))
        used[key] = used.get(key, 0) + 1
    if not used:
        return ["- No stage recorded the folds it read (a run directory from before `folds_used.jsonl`)."]
    lines = ["- Folds read, as recorded by each stage:", "", "  | stage | key | folds | times |", "  |---|---|---|---:|"]
    lines += [f"  | {stage} | `{key}` | {list(folds)} | {n} |" for (stage, key, folds), n in used.items()]
    return lines + [""]


def sealed_markdown(output_dir: Path) -> list[str]:
    """Which stages read the sealed fold, and the audit log of each use."""
    uses = [e for e in read_lines(output_dir / FOLDS_FILE) if set(e["folds"]) & set(e.get("sealed", [10]))]
    stages = sorted({e["stage"] for e in uses})
    sealed = sorted({fold for e in uses for fold in set(e["folds"]) & set(e.get("sealed", [10]))})
    audit = read_lines(output_dir / AUDIT_FILE)
    if not stages and not audit:
        return ["The sealed fold was not touched."]
    lines = [f"Sealed fold {', '.join(map(str, sealed)) or '-'} was read by: {', '.join(stages) or '(no recorded stage)'}; "
             f"{len(audit)} audit entr{'y' if len(audit) == 1 else 'ies'} (`{AUDIT_FILE}`):", "",
             "| time | stage | key | folds | git revision |", "|---|---|---|---|---|"]
    lines += [f"| {e['time']} | {e.get('stage', '-')} | `{e.get('key', 'data.eval_folds')}` | {e.get('folds', e.get('eval_folds'))} "
              f"| {e['git_revision'][:12]} |" for e in audit]
    return lines


def _interval(value: dict) -> str:
    return f"{_number(value['point'])} [{_number(value['low'])}, {_number(value['high'])}]"


def _ci(value: dict | None) -> str:
    return f"[{_number(value['low'])}, {_number(value['high'])}]" if value else ""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value):
        return "–"
    return f"{value:.0f}" if isinstance(value, int) or abs(value) >= 100 else f"{value:.4f}"
