"""`report.md` and `report.json` of a run directory, rebuilt from saved results only.

The first table has the rows of the paper's "Winder vs control" table for the headline cell
(first seed, ``evaluation.headline_step`` or the first evaluated step), both arms side by
side, then the random baseline (the seed's untrained weights, `RunFields.untrained`) where it was
evaluated, 95 % patient-clustered intervals where the paper has them and the better arm in bold;
with several seeds each figure is their mean ± SD and G1 "passes in k of n seeds" (`seeds_row`).
Then the full grid (arms × seeds × steps), per-class AUROCs, the mechanism, robustness,
geometry and anomaly details, heart-rate strata, the figures, and the protocol.

Things are named from the data (the result's ``data`` section): the dataset's tasks (PTB-XL's
keep the paper's names), its channels as leads or channels, the phase provider's event word,
windows or recordings. A part that did not apply is left out and listed with its reason
(``not_run``); with fewer than two patients in the evaluation set, G1 and every interval read
"not testable". A figure that means nothing says so in its place (`cyclejepa.evaluation.validity`):
a collapsed arm's gain fraction reads "collapsed (token similarity s)" and its G1 "Not testable
(collapsed)", a degenerate probe's AUROC "degenerate probe (why)"; a figure of an arm whose
figures rest on too few windows or patients keeps its number, followed in its own cell by "(few
data: n windows, m patients)" (`qualified`; "recordings" when the dataset does not know whose
each recording is), and is never bold; the detail tables head such an arm's raw figures with the
same words (`arm_label`; the anomaly battery's table counts its own windows). Notes under the
bottom line name collapse, degenerate probes and few data. A run whose training or evaluation
windows mostly fail phase QC (`ReportSpec.phase_qc_flags`, under ``data.phase_qc.flag_below``)
gets a warning at the top and no bold figure at all (`phase_qc_markdown`). Every result is read
as its typed schema (`cyclejepa.evaluation.results`): one of another schema version or altered
is refused with the command that rebuilds it, and results of another evaluation's settings are
refused (`require_one_evaluation`). What the report needs besides the results (title, arm order, headline
cell, fold-use logs) comes as a `ReportSpec`, which the pipeline's report stage builds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cyclejepa.evaluation.anomaly.battery import AnomalyCell
from cyclejepa.evaluation.bootstrap import BootstrapCI
from cyclejepa.evaluation.integrity import ResultAltered, model_digest
from cyclejepa.evaluation.mechanism import G1Result
from cyclejepa.evaluation.probe import ProbeResult
from cyclejepa.evaluation.results import (
    CheckpointResult,
    Geometry,
    ProtocolResult,
    ReportResult,
    StrataResult,
    Validity,
    read_result,
    write_result,
)
from cyclejepa.evaluation.spec import ReportSpec
from cyclejepa.evaluation.validity import cell_validity, is_collapsed, subject_word
from cyclejepa.outputs import OutputFolder

Result = CheckpointResult


@dataclass(frozen=True)
class Row:
    """One row of the bottom-line table: how to read it from a result, which way is better and,
    where it has one, its interval."""

    section: str
    label: str
    value: Callable[[Result], Any]
    higher_is_better: bool | None = True
    interval: Callable[[Result], BootstrapCI] | None = None


_UNDEFINED = BootstrapCI(math.nan, math.nan, math.nan, 0, math.nan)


def channel_word(result: Result) -> str:
    """What the result's channels are called (`DataDescription.channel_word`): "lead" or "channel"."""
    return result.data.channel_word


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def _probe(result: Result, task: str) -> ProbeResult | None:
    """The task's probe; None when the task could not be evaluated."""
    probe = result.diagnostic.get(task)
    return probe if isinstance(probe, ProbeResult) else None


def _macro(result: Result, task: str) -> BootstrapCI:
    """The task's macro-AUROC interval; NaN when the task could not be evaluated."""
    probe = _probe(result, task)
    return _UNDEFINED if probe is None else probe.macro_auroc


def probe_value(result: Result, task: str) -> float | str:
    """The task's macro-AUROC, or "degenerate probe (why)" when it means nothing."""
    probe = _probe(result, task)
    return f"degenerate probe ({probe.degenerate})" if probe and probe.degenerate else _macro(result, task).point


def _probe_row(label: str, task: str) -> Row:
    return Row("Diagnostic accuracy", label, lambda r: probe_value(r, task), True, lambda r: _macro(r, task))


def gain_fraction_value(mechanism: G1Result, shuffled: bool = False) -> float | str:
    """The true (or ``shuffled``) gain fraction, or "collapsed (token similarity s)"."""
    if is_collapsed(mechanism):
        return f"collapsed (token similarity {mechanism.true.mean_c_i:.3f})"
    return (mechanism.shuffled if shuffled else mechanism.true).gain_fraction


def g1_text(mechanism: G1Result, word: str = "patient") -> str:
    """G1 as "Pass", "Fail", "Not testable (collapsed)" or, below two patients (``passed``
    None), "Not testable (1 patient)" (``word``: what the bootstrap resamples)."""
    if is_collapsed(mechanism):
        return "Not testable (collapsed)"
    if mechanism.passed is None:
        return f"Not testable ({_plural(mechanism.patients, word)})"
    return "Pass" if mechanism.passed else "Fail"


def g1_cell(result: Result, mechanism: G1Result | None = None) -> str:
    """G1 of ``result`` (or of one of its coordinates, ``mechanism``) as a cell shows it:
    `g1_text`, a pass or fail followed by the few-data words (`qualified`)."""
    mechanism = result.mechanism if mechanism is None else mechanism
    text = g1_text(mechanism, subject_word(result))
    return text if mechanism.passed is None else qualified(text, cell_validity(result))


def few_data_words(validity: Validity) -> str | None:
    """The words beside a figure of a result whose figures rest on too few (`Validity.too_few`),
    "few data: n windows, m patients"; None for a result on enough data."""
    few = validity.too_few
    if few is None:
        return None
    return f"few data: {_plural(few.windows, 'window')}, {_plural(few.patients, few.subject)}"


def qualified(text: str, validity: Validity) -> str:
    """A figure's cell ``text`` followed by "(few data: n windows, m patients)" when its result's
    figures rest on too few (`few_data_words`); else ``text`` as it is."""
    words = few_data_words(validity)
    return text if words is None else f"{text} ({words})"


def figure_cell(value: Any, validity: Validity) -> str:
    """A figure as a table cell shows it: a finite number (or a verdict) `qualified`; words that
    say why a figure means nothing, a label, or "–" as they are."""
    text = format_number(value)
    return qualified(text, validity) if _finite(value) else text


def arm_label(result: Result) -> str:
    """The arm's name as a detail table heads its raw figures, `qualified` by its validity."""
    return qualified(result.arm, cell_validity(result))


def _strongest(result: Result) -> AnomalyCell | None:
    """The anomaly cell with the largest excess at the highest severity."""
    cells = result.anomaly
    if not cells:  # no battery (a torus run, or no family applies)
        return None
    top = max(c.severity for c in cells)
    finite = [c for c in cells if c.severity == top and _finite(c.excess)]
    return max(finite, key=lambda c: c.excess) if finite else None


def _strongest_figure(name: str, missing: Any = math.nan) -> Callable[[Result], Any]:
    """A row's value: the field ``name`` of the strongest anomaly cell, ``missing`` without one."""
    return lambda r: missing if (cell := _strongest(r)) is None else getattr(cell, name)


def _coherence(geometry: Geometry) -> float:
    """The mean orbit coherence over the non-reference bins; NaN without a fundamental block."""
    return math.nan if geometry.coherence is None else geometry.coherence.mean_kappa


def task_title(dataset: str | None, task: str) -> str:
    """The bottom line's name of a probe task: as the dataset registered as ``dataset`` titles it
    (`Dataset.task_titles`: PTB-XL's keep the paper's names), else "`task` macro-AUROC"."""
    from cyclejepa.registry import DATASETS

    try:
        titles = {} if dataset is None else DATASETS.get(dataset).task_titles
    except KeyError:  # a dataset of a package not installed here
        titles = {}
    return titles.get(task, f"`{task}` macro-AUROC ↑")


def headline_rows(cell: list[Result]) -> tuple[Row, ...]:
    """The bottom-line rows of a cell: one probe row per task it evaluated (none without labels),
    the mechanism rows, the robustness rows where channel zeroing ran (named for leads or channels),
    the geometry rows, and the anomaly rows where the battery ran."""
    first = cell[0]
    probes = [_probe_row(task_title(first.data.dataset, task), task) for task in first.diagnostic]
    robustness = robustness_rows(channel_word(first)) if first.robustness else ()
    anomaly = ANOMALY_ROWS if first.anomaly else ()
    return (*probes, *MECHANISM_ROWS, *robustness, *GEOMETRY_ROWS, *anomaly)


def robustness_rows(word: str) -> tuple[Row, ...]:
    """The two channel-zeroing rows, ``word`` "lead" (PTB-XL's rows) or "channel"."""
    return (
        Row("Robustness", f"Mean signed Δ macro-AUROC, single-{word} dropout ↑", lambda r: _robustness(r).mean_delta.point),
        Row(
            "Robustness",
            f"Worst signed Δ macro-AUROC across single-{word} dropouts ↑",
            lambda r: (_robustness(r).worst_delta, _robustness(r).worst_channel),
        ),
    )


def _robustness(result: Result):
    """The result's channel zeroing (the robustness rows are shown only where it ran)."""
    assert result.robustness is not None, "robustness rows are shown only where channel zeroing ran"
    return result.robustness


MECHANISM_ROWS = (
    Row("Mechanism validity", "Transport gain fraction ↑", lambda r: gain_fraction_value(r.mechanism)),
    Row("Mechanism validity", "G1 shuffled-φ gate", g1_cell, None),
    Row(
        "Mechanism validity",
        "Paired true − shuffled gain ↑",
        lambda r: "collapsed" if is_collapsed(r.mechanism) else r.mechanism.paired_difference.point,
        True,
        lambda r: r.mechanism.paired_difference,
    ),
)
GEOMETRY_ROWS = (
    Row("Latent geometry", "Fundamental loop amplitude ↑", lambda r: r.geometry.amplitude),
    Row("Latent geometry", "Orbit-subspace coherence, mean over 7 non-reference bins ↑", lambda r: _coherence(r.geometry)),
    Row("Latent geometry", "Effective rank of z ↑", lambda r: r.geometry.effective_rank),
)
ANOMALY_ROWS = (
    Row("Anomaly detection", "Strongest family", _strongest_figure("family", "-"), None),
    Row("Anomaly detection", "Its AUROC at the highest severity ↑", _strongest_figure("auroc")),
    Row("Anomaly detection", "Excess over own zero-severity reference ↑", _strongest_figure("excess")),
    Row("Anomaly detection", "Localisation hit rate ↑", _strongest_figure("hit_rate")),
    Row("Anomaly detection", "Median latency among alarmed windows (ms) ↓", _strongest_figure("median_latency_ms"), False),
)


def write_report(spec: ReportSpec, output_dir: str | Path) -> Path:
    """Build ``<output_dir>/report/report.md`` and ``report.json`` from the saved evaluation and
    ``spec`` (built by the pipeline's report stage).

    Raises `ResultAltered` (a ValueError naming the file) when a result's content, or the
    checkpoint it came from, no longer matches its checksum.
    """
    output_dir = Path(output_dir)
    evaluation = OutputFolder(output_dir).evaluation
    cells = {path.name: checked_result(output_dir, path) for path in sorted(evaluation.glob("*-seed*-step*.json"))}
    if not spec.random_baseline:  # results of an earlier evaluation with the baseline on are not shown
        cells = {name: result for name, result in cells.items() if not result.untrained}
    results = sorted(cells.values(), key=_order(spec.arms))
    if not results:
        raise FileNotFoundError(f"{evaluation} holds no evaluation results; run `cyclejepa run` first")
    headline, over_seeds = headline_cell(spec, results), seed_cells(spec, results)
    protocol = read_result(evaluation / "protocol.json", ProtocolResult)
    strata_path = evaluation / f"hr-strata-step{headline[0].step:06d}.json"
    strata = read_result(strata_path, StrataResult) if strata_path.exists() else None
    files = {**cells, "protocol.json": protocol, **({strata_path.name: strata} if strata else {})}
    require_one_evaluation(evaluation, files, protocol.evaluation_hash)
    report_dir = OutputFolder(output_dir).report
    sections = [
        f"# {spec.name}: report\n\nConfig hash `{spec.config_hash}`; headline cell: seed {headline[0].seed}, "
        f"step {headline[0].step} (first seed; `evaluation.headline_step` or the first evaluated step).",
        phase_qc_markdown(spec.phase_qc_flags),
        integrity_markdown(len(files)),
        bottom_line_markdown(headline, over_seeds, comparable=not spec.phase_qc_flags),
        grid_markdown(results),
        per_class_markdown(headline),
        mechanism_markdown(headline),
        coordinates_markdown(headline),
        robustness_markdown(headline),
        geometry_markdown(headline),
        anomaly_markdown(headline),
        strata_markdown(strata),
        figures_markdown(report_dir),
        protocol_markdown(spec, protocol),
    ]
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "report.md").write_text("\n\n".join(s for s in sections if s) + "\n")
    rows = headline_rows(headline)
    report = ReportResult(
        headline={r.arm: {row.label: _json_value(row, r) for row in rows} for r in headline},
        headline_cell={"seed": headline[0].seed, "step": headline[0].step},
        bottom_line_seeds=[cell[0].seed for cell in over_seeds],
        validity={r.arm: cell_validity(r) for r in headline},
        phase_qc_flags=list(spec.phase_qc_flags),
        probe_rows=[row.label for row in rows if row.section == "Diagnostic accuracy"],
        grid=[_grid_entry(r) for r in results],
        figures=sorted(p.name for p in (report_dir / "figures").glob("*.png")),
        checksums={name: result.checksum for name, result in files.items()},
    )
    write_result(report_dir / "report.json", report)
    return report_dir / "report.md"


def checked_result(output_dir: Path, path: Path) -> Result:
    """A checkpoint's result (`read_result`), refused (`ResultAltered`) also when the checkpoint
    it came from is still in ``output_dir`` but holds other weights (`model_digest`)."""
    result = read_result(path, CheckpointResult)
    if result.checkpoint is None:  # the random baseline: no checkpoint to compare the result with
        return result
    checkpoint = output_dir / result.checkpoint.path
    if checkpoint.exists() and model_digest(checkpoint) != result.checkpoint.model_sha256:
        raise ResultAltered(
            f"{path} was computed from other weights than those in {checkpoint} now; "
            f"re-run `cyclejepa evaluate CONFIG` to evaluate the checkpoint present"
        )
    return result


class MixedEvaluations(ValueError):
    """Results in one ``evaluation/`` folder computed with different evaluation settings."""


def require_one_evaluation(evaluation: Path, files: dict[str, Any], current: str) -> None:
    """Refuse (`MixedEvaluations`) results of ``evaluation`` (file name → result) made with other
    evaluation settings (``evaluation_hash``) than ``current``, the last evaluation's
    ``protocol.json``'s: e.g. cells left from before an evaluation with another
    ``evaluation.bootstrap`` was stopped part-way."""
    stale = sorted(name for name, result in files.items() if result.evaluation_hash != current)
    if stale:
        shown = ", ".join(f"{name} (evaluation_hash {files[name].evaluation_hash})" for name in stale)
        raise MixedEvaluations(
            f"{evaluation}: not from the settings of the last evaluation (protocol.json, evaluation_hash {current}): "
            f"{shown}; a report would mix them. Re-run `cyclejepa evaluate CONFIG` "
            "to recompute them with the config's settings"
        )


def phase_qc_markdown(flags: tuple[str, ...]) -> str:
    """The warning at the top of the report of a run whose windows mostly fail phase QC
    (``flags``: `ReportSpec.phase_qc_flags`); empty when they pass."""
    if not flags:
        return ""
    sentences = " ".join(f"{flag[0].upper()}{flag[1:]}." for flag in flags)
    return (
        "> **Warning: the phase is mostly missing.** " + sentences + " The figures below rest on a signal "
        "whose cycles the phase provider mostly did not find (noise, a flat or wrong channel, a provider that does not "
        "fit the signal): no figure is marked best. Check the channel with `cyclejepa phase RECORD`."
    )


def integrity_markdown(files: int) -> str:
    """One line on the results' checksums (every result is read through its own)."""
    return (
        f"Results: {files} file{'s' if files != 1 else ''} of `evaluation/`, each matching its content "
        "checksum (and the weights of its checkpoint, where still present; checksums in `report.json`)."
    )


def _order(arms: tuple[str, ...]):
    """Results ordered by step, seed and the arms' order (arms not in ``arms`` last), the
    untrained ones (the random baseline) after every trained one."""
    return lambda r: (r.untrained, r.step, r.seed, arms.index(r.arm) if r.arm in arms else len(arms))


def headline_cell(spec: ReportSpec, results: list[Result]) -> list[Result]:
    """The results of every arm at the headline seed and step, in arm order, then the random
    baseline of that seed (untrained: step 0) where it was evaluated."""
    return seed_cell(results, headline_step(spec, results), spec.headline_seed)


def headline_step(spec: ReportSpec, results: list[Result]) -> int:
    """``evaluation.headline_step``, else the first step a trained arm was evaluated at."""
    trained = [r.step for r in results if not r.untrained]
    return spec.headline_step or min(trained or [r.step for r in results])


def seed_cell(results: list[Result], step: int, seed: int) -> list[Result]:
    """The trained arms' results of ``seed`` at ``step`` and the random baseline's of ``seed``."""
    cell = [r for r in results if r.seed == seed and (r.step == step or r.untrained)]
    if not [r for r in cell if not r.untrained]:
        raise ValueError(f"no evaluation at seed {seed}, step {step}")
    return cell


def seed_cells(spec: ReportSpec, results: list[Result]) -> list[list[Result]]:
    """One `seed_cell` at the headline step per seed a trained arm was evaluated at there, the
    headline seed first, then the others in increasing order."""
    step = headline_step(spec, results)
    seeds = sorted({r.seed for r in results if r.step == step and not r.untrained} - {spec.headline_seed})
    return [seed_cell(results, step, seed) for seed in [spec.headline_seed, *seeds]]


def column_title(result: Result) -> str:
    """A bottom-line column's head: the arm and its λ_trans, or "(untrained)" for the random baseline."""
    if result.untrained:
        return f"{result.arm} (untrained)"
    return f"{result.arm} (λ_trans={result.transport_weight:g})"


def bottom_line_markdown(cell: list[Result], over_seeds: list[list[Result]] | None = None, *, comparable: bool = True) -> str:
    """The bottom-line table of ``cell`` (one result per arm) with its notes; with ``over_seeds``
    of several seeds (`seed_cells`, ``cell`` the first), each figure as the mean ± SD over the
    seeds and G1 as "passes in k of n seeds" (`seeds_row`). Not ``comparable`` (a run whose
    windows mostly fail phase QC, `phase_qc_markdown`): no figure is bold, as beside an arm on
    few data."""
    several = over_seeds is not None and len(over_seeds) > 1
    header = "| Metric | " + " | ".join(column_title(r) for r in cell) + " |"
    lines = ["## Bottom line", "", header, "|---|" + "---|" * len(cell)]
    section = None
    validity = [cell_validity(r) for r in cell]
    columns = [[c for seeds in over_seeds or [] for c in seeds if c.arm == r.arm] for r in cell]
    for row in headline_rows(cell):
        if row.section != section:
            section = row.section
            lines.append(f"| **{section}** |" + " |" * len(cell))
        if several:
            lines.append(f"| {row.label} | " + " | ".join(seeds_row(row, columns, comparable)) + " |")
            continue
        values = [row.value(r) for r in cell]
        best = None if not comparable or any(v.too_few for v in validity) else _best_valid(row, values, validity)
        cells = [_cell(row, r, v, i == best, w) for i, (r, v, w) in enumerate(zip(cell, values, validity, strict=True))]
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    word = subject_word(cell[0])
    if several:
        assert over_seeds is not None
        lines += ["", seeds_note(cell, len(over_seeds))]
    else:
        lines += [
            "",
            f"Intervals: 95 % {word}-clustered percentile bootstrap. Bold: the better arm where the comparison is non-degenerate.",
        ]
    if not comparable:
        lines += ["", "**No figure is bold:** the run's windows mostly fail phase QC (the warning at the top of the report)."]
    lines += random_note(cell)
    patients = min(r.mechanism.patients for r in cell)
    if patients < 2:
        lines += [
            "",
            (
                f"**Not testable:** the evaluation set holds {_plural(patients, word)}. "
                f"A {word}-clustered resample of fewer than two {word}s is the sample itself, so every "
                "interval collapses to its point and the G1 gate's interval condition tests nothing; "
                'intervals and G1 read "not testable" instead of a range or pass/fail.'
            ),
        ]
    every = [r for seeds in over_seeds for r in seeds] if several and over_seeds else cell
    return "\n".join(lines + validity_markdown(every, several) + subjects_markdown(cell[0]) + not_run_markdown(cell[0]))


SPREAD = "SD"
"""The spread over seeds of the bottom line: the sample standard deviation (n − 1)."""


def seeds_note(cell: list[Result], seeds: int) -> str:
    """What the bottom line of several seeds shows."""
    step = next(r.step for r in cell if not r.untrained)
    return (
        f"Each figure: the mean ± {SPREAD} (sample standard deviation) over the {seeds} seeds at step {step}, "
        f"with the number of seeds that give it; G1: the seeds whose gate passes. Each seed's figures are in the "
        f"full grid; the intervals and the detail tables below are seed {cell[0].seed}'s. Bold: the best mean "
        "among the arms whose tokens did not collapse in any seed."
    )


def random_note(cell: list[Result]) -> list[str]:
    """The note on the random baseline, where the cell has it."""
    names = sorted({r.arm for r in cell if r.untrained})
    if not names:
        return []
    return [
        "",
        (
            f"**{names[0]}**: the same network at the weights each seed's runs start from (the trainer's step-0 "
            "weights of that seed), frozen, probed and measured as the trained arms are. It costs no training "
            "(`evaluation.random_baseline: false` leaves it out)."
        ),
    ]


def seeds_row(row: Row, columns: list[list[Result]], comparable: bool = True) -> list[str]:
    """A bottom-line row over several seeds, one cell per arm (``columns``: each arm's results,
    one per seed): G1 as "passes in k of n seeds", labels with their counts, numbers as the mean
    ± SD (`seeds_cell`), the best mean bold (`_best`, among the arms that collapsed in no seed and
    rest on enough data in every seed; none when not ``comparable``)."""
    if row.value is g1_cell:
        return [g1_seeds_text(results) for results in columns]
    values = [[row.value(r) for r in results] for results in columns]
    if row.higher_is_better is None:
        return [", ".join(f"{v} ×{vs.count(v)}" for v in dict.fromkeys(vs)) for vs in values]
    numbers = [[v[0] if isinstance(v, tuple) else v for v in vs] for vs in values]
    means = [_mean(ns) if all(_finite(n) for n in ns) else math.nan for ns in numbers]
    validity = [[cell_validity(r) for r in results] for results in columns]
    valid = [i for i, vs in enumerate(validity) if not any(v.collapsed for v in vs)]
    enough = comparable and not any(v.too_few for vs in validity for v in vs)
    best = _best(row, [means[i] for i in valid]) if enough else None
    best = None if best is None else valid[best]
    return [seeds_cell(ns, vs, i == best) for i, (ns, vs) in enumerate(zip(numbers, validity, strict=True))]


def seeds_cell(values: list, validity: list[Validity], bold: bool) -> str:
    """``mean ± SD (n seeds)`` of the finite numbers of ``values`` (one per seed); "k of n seeds"
    when some seed gives words instead (a collapsed arm, a degenerate probe: named once), "few
    data in k seeds" when some rest on too few."""
    finite = [v for v in values if _finite(v)]
    words = list(dict.fromkeys(str(v) for v in values if isinstance(v, str)))
    if not finite:
        return "; ".join(words) if words else "–"
    spread = format_number(_sd(finite)) if len(finite) > 1 else "–"
    count = f"{len(finite)} seeds" if len(finite) == len(values) else f"{len(finite)} of {len(values)} seeds"
    text = f"{format_number(_mean(finite))} ± {spread} ({count})"
    few = sum(v.too_few is not None for v in validity)
    text += f" (few data in {few} of {len(values)} seeds)" if few else ""
    text += f"; other seeds: {'; '.join(words)}" if words else ""
    return f"**{text}**" if bold else text


def g1_seeds_text(results: list[Result]) -> str:
    """G1 over seeds: "passes in k of n seeds", with the seeds where it could not be tested."""
    passed = sum(bool(r.mechanism.passed) and not is_collapsed(r.mechanism) for r in results)
    untested = sum(r.mechanism.passed is None or is_collapsed(r.mechanism) for r in results)
    text = f"passes in {passed} of {len(results)} seeds"
    return text + (f" ({untested} not testable)" if untested else "")


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def _sd(values: list[float]) -> float:
    """The sample standard deviation (n − 1) of at least two values."""
    mean = _mean(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def validity_markdown(cell: list[Result], seeds: bool = False) -> list[str]:
    """A warning for each arm whose figures mean nothing or little (`cell_validity`): collapsed
    tokens, a degenerate probe, too few windows or patients (``seeds``: results of several seeds,
    each named with its seed)."""
    lines = []
    for r in cell:
        validity = cell_validity(r)
        name = f"{r.arm} (seed {r.seed})" if seeds else r.arm
        if validity.collapsed:
            lines.append(
                f"**{name}: collapsed.** Its tokens are {validity.token_similarity:.3f} alike on average "
                f"(untransported similarity E[c_I] ≥ {validity.collapse_similarity}): the gain fraction "
                "divides by E[1 − c_I] ≈ 0 and means nothing, and G1 cannot be tested. Give the regulariser "
                "or the transport term a weight, or check the inputs' normalisation."
            )
        for task, why in validity.degenerate_probes.items():
            lines.append(f"**{name}: the `{task}` probe is degenerate** ({why}): its macro-AUROC means nothing.")
        if few := validity.too_few:
            lines.append(
                f"**{name}: few data.** {few.windows} evaluation windows of "
                f"{_plural(few.patients, subject_word(r))} (fewer than {few.min_windows} windows or "
                f"{few.min_patients} {subject_word(r)}s): one window moves these figures, and the intervals rest on few distinct resamples. "
                f'Each reads "({few_data_words(validity)})" in its cell and is never bold.'
            )
    return [line for text in lines for line in ("", text)]


def subjects_markdown(result: Result) -> list[str]:
    """The sentence a report owes when the dataset does not know whose each recording is."""
    if subject_word(result) == "patient":
        return []
    return [
        "",
        "The dataset does not say which person each recording comes from: every recording counts as its "
        "own subject (intervals resample recordings), so the same person may sit in training and in evaluation.",
    ]


def not_run_markdown(result: Result) -> list[str]:
    """The parts of the evaluation that did not apply to this data, each with its reason."""
    not_run = result.not_run
    if not not_run:
        return []
    names = {
        "probes": "Diagnostic probes",
        "robustness": f"Single-{channel_word(result)} zeroing",
        "heart_rate_strata": "Heart-rate strata",
        "anomaly": "Anomaly battery",
    }
    return [
        "",
        "Not run, as they do not apply to this data:",
        "",
        *(f"- {names.get(part, part)}: {why}." for part, why in not_run.items()),
    ]


def _best_valid(row: Row, values: list, validity: list[Validity]) -> int | None:
    """The index of the best of ``values`` among the arms whose tokens did not collapse (a
    collapsed arm's figures mean nothing, so it never wins bold); None below two such arms."""
    valid = [index for index, arm in enumerate(validity) if not arm.collapsed]
    best = _best(row, [values[index] for index in valid])
    return None if best is None else valid[best]


def _best(row: Row, values: list) -> int | None:
    if row.higher_is_better is None or len(values) < 2:
        return None
    numbers = [v[0] if isinstance(v, tuple) else v for v in values]
    if not all(isinstance(n, (int, float)) and _finite(n) for n in numbers) or len(set(numbers)) == 1:
        return None
    pick = max if row.higher_is_better else min
    return numbers.index(pick(numbers))


def _cell(row: Row, result: Result, value: Any, bold: bool, validity: Validity) -> str:
    """A bottom-line cell: words as they are (a label, a verdict from `g1_cell`, why a figure
    means nothing); a number with its interval or channel, `qualified` when finite."""
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        number, text = value[0], f"{format_number(value[0])} ({value[1]})"
    else:
        number, text = value, format_number(value)
        if row.interval is not None:
            text += f" {_bracket(row.interval(result))}"
    text = qualified(text, validity) if _finite(number) else text
    return f"**{text}**" if bold else text


def _json_value(row: Row, result: Result) -> Any:
    value = row.value(result)
    if row.interval is None or isinstance(value, str):
        return list(value) if isinstance(value, tuple) else value
    interval = row.interval(result)
    testable = {} if interval.testable else {"testable": False}
    return {"point": value, "low": interval.low, "high": interval.high, **testable}


def grid_tasks(result: Result) -> list[str]:
    """The tasks the grid shows: every evaluated task but the ``<level>-all`` ones."""
    return [task for task in result.diagnostic if not task.endswith("-all")]


def _task_column(task: str) -> str:
    """``<level>-eligible`` as "eligible-<level>" (PTB-XL: "eligible-subclass"), others as they are."""
    return f"eligible-{task.removesuffix('-eligible')}" if task.endswith("-eligible") else task


def grid_markdown(results: list[Result]) -> str:
    tasks = grid_tasks(results[0])
    robustness = results[0].robustness is not None
    word = channel_word(results[0])
    columns = [
        *(f"{_task_column(t)} AUROC" for t in tasks),
        "gain fraction",
        "G1",
        *([f"mean Δ {word} dropout"] if robustness else []),
        "amplitude",
        "coherence",
    ]
    lines = [
        "## Full grid",
        "",
        "| arm | seed | step | " + " | ".join(columns) + " |",
        "|---|---:|---:|" + "".join("---|" if c == "G1" else "---:|" for c in columns),
    ]
    for r in results:
        entry = _grid_entry(r)
        validity = cell_validity(r)
        cells = [
            *(figure_cell(entry["auroc"].get(t, math.nan), validity) for t in tasks),
            figure_cell(entry["gain_fraction"], validity),
            g1_cell(r),
            *([figure_cell(entry["mean_channel_delta"], validity)] if robustness else []),
            figure_cell(entry["amplitude"], validity),
            figure_cell(entry["coherence"], validity),
        ]
        step = f"{r.step} (untrained)" if r.untrained else r.step
        lines.append(f"| {r.arm} | {r.seed} | {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _grid_entry(r: Result) -> dict[str, Any]:
    return {
        "arm": r.arm,
        "seed": r.seed,
        "step": r.step,
        "auroc": {task: probe_value(r, task) for task in r.diagnostic},
        "gain_fraction": gain_fraction_value(r.mechanism),
        "g1": None if is_collapsed(r.mechanism) else r.mechanism.passed,
        "validity": cell_validity(r).model_dump(),
        "mean_channel_delta": r.robustness.mean_delta.point if r.robustness else None,
        "amplitude": r.geometry.amplitude,
        "coherence": _coherence(r.geometry),
        **({"untrained": True} if r.untrained else {}),
    }


def per_class_markdown(cell: list[Result]) -> str:
    if not cell[0].diagnostic:
        return ""
    lines = ["## Per-class AUROC (headline cell)"]
    for task, first in cell[0].diagnostic.items():
        if not isinstance(first, ProbeResult):
            lines += ["", f"**{task}**: not evaluated ({first.error})"]
            continue
        lines += [
            "",
            f"**{task}**",
            "",
            "| class | " + " | ".join(arm_label(r) for r in cell) + " | positives |",
            "|---|" + "---:|" * (len(cell) + 1),
        ]
        for name in first.classes:
            values = [format_number(_per_class(r, task, name)) for r in cell]
            positives = first.positives.get(name, "-")
            lines.append(f"| {name} | " + " | ".join(values) + f" | {positives} |")
    return "\n".join(lines)


def _per_class(result: Result, task: str, name: str) -> float:
    """The AUROC of class ``name`` of ``task``; NaN where the class or the task was not scored."""
    probe = _probe(result, task)
    return math.nan if probe is None else probe.per_class.get(name, math.nan)


def mechanism_markdown(cell: list[Result]) -> str:
    lines = [
        "## Mechanism validity (G1, both conditions)",
        "",
        "| arm | mean gain ḡ [95 % CI] | gain fraction | shuffled gain fraction | paired true − shuffled [95 % CI] | interval excludes 0 | |shuffled g_f| ≤ tol | G1 |",
        "|---|---|---:|---:|---|---|---|---|",
    ]
    for r in cell:
        m, validity = r.mechanism, cell_validity(r)
        excludes = "not testable" if m.interval_excludes_zero is None else figure_cell(m.interval_excludes_zero, validity)
        within = qualified(f"{m.shuffled_fraction_within_tolerance} (tol {m.tolerance})", validity)
        lines.append(
            f"| {r.arm} | {_interval_cell(m.mean_gain, validity)} | {figure_cell(gain_fraction_value(m), validity)} | "
            f"{figure_cell(gain_fraction_value(m, shuffled=True), validity)} | {_interval_cell(m.paired_difference, validity)} | "
            f"{excludes} | {within} | {g1_cell(r)} |"
        )
    return "\n".join(lines)


def coordinates_markdown(cell: list[Result]) -> str:
    """Mechanism metrics per cyclic coordinate of a torus run (empty for one coordinate)."""
    if not cell[0].coordinates:
        return ""
    lines = [
        "## Mechanism per cyclic coordinate (each coordinate's own U(1) terms)",
        "",
        "| arm | coordinate | gain fraction | shuffled gain fraction | paired true − shuffled [95 % CI] | G1 | amplitude | coherence |",
        "|---|---|---:|---:|---|---|---:|---:|",
    ]
    for r in cell:
        validity = cell_validity(r)
        for name, c in (r.coordinates or {}).items():
            m, g = c.mechanism, c.geometry
            lines.append(
                f"| {r.arm} | {name} | {figure_cell(gain_fraction_value(m), validity)} | "
                f"{figure_cell(gain_fraction_value(m, shuffled=True), validity)} | {_interval_cell(m.paired_difference, validity)} | "
                f"{g1_cell(r, m)} | {figure_cell(g.amplitude, validity)} | {figure_cell(_coherence(g), validity)} |"
            )
    return "\n".join(lines)


def robustness_markdown(cell: list[Result]) -> str:
    """Each channel zeroed: the signed change of the first task's macro-AUROC."""
    if cell[0].robustness is None:
        return ""
    channels = list(cell[0].robustness.delta)
    word, task = channel_word(cell[0]), next(iter(cell[0].diagnostic))
    lines = [
        f"## Single-{word} zeroing (signed Δ {task} macro-AUROC)",
        "",
        f"| {word} | " + " | ".join(arm_label(r) for r in cell) + " |",
        "|---|" + "---:|" * len(cell),
    ]
    for channel in channels:
        lines.append(f"| {channel} | " + " | ".join(format_number(_robustness(r).delta[channel].point) for r in cell) + " |")
    return "\n".join(lines)


def geometry_markdown(cell: list[Result]) -> str:
    coherence = cell[0].geometry.coherence
    if coherence is None:
        return ""
    lines = [
        "## Orbit-subspace coherence per phase bin (8 bins; bin 0 is the reference)",
        "",
        "| arm | " + " | ".join(f"κ_{b}" for b in range(len(coherence.kappa))) + " |",
        "|---|" + "---:|" * len(coherence.kappa),
    ]
    for r in cell:
        kappa = r.geometry.coherence.kappa if r.geometry.coherence else []
        lines.append(f"| {arm_label(r)} | " + " | ".join(format_number(k) for k in kappa) + " |")
    return "\n".join(lines)


def anomaly_markdown(cell: list[Result]) -> str:
    lines = ["## Anomaly battery (one fixed causal detector)"]
    if "anomaly" in cell[0].not_run:
        return "\n".join(lines + ["", f"Not run: {cell[0].not_run['anomaly']}."])
    for r in cell:
        skipped = r.anomaly_skipped
        if not r.anomaly:
            lines += ["", f"**{r.arm}**: no family applies to this data."]
        else:
            lines += [
                "",
                f"**{r.arm}** — detector `{r.anomaly[0].detector}`",
                "",
                "| family | severity | AUROC | reference | excess | alarm rate | hit rate | median latency (ms) | windows |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
        for c in r.anomaly:
            lines.append(
                f"| {c.family} | {c.severity:.1f} | {format_number(c.auroc)} | {format_number(c.reference_auroc)} | "
                f"{format_number(c.excess)} | {format_number(c.alarm_rate)} | {format_number(c.hit_rate)} | "
                f"{format_number(c.median_latency_ms)} | {c.records} |"
            )
        if skipped:
            lines += ["", "Not run (the family does not apply): " + "; ".join(f"{f}: {why}" for f, why in skipped.items()) + "."]
    return "\n".join(lines)


def strata_markdown(strata: StrataResult | None) -> str:
    """The heart-rate strata of the headline step (``hr-strata-stepNNNNNN.json``), if written."""
    if strata is None:
        return ""
    lines = [f"## Heart-rate stratified {strata.task} AUROC (post hoc)"]
    for seed, result in strata.seeds.items():
        arms = result.arms
        lines += [
            "",
            f"**{seed}**",
            "",
            "| heart rate (bpm) | records | " + " | ".join(arms) + " | gap [95 % CI] |",
            "|---|---:|" + "---:|" * len(arms) + "---|",
        ]
        for s in result.strata:
            lines.append(
                f"| {s.low:.0f}–{s.high:.0f} | {s.records} | "
                + " | ".join(format_number(s.auroc[a]) for a in arms)
                + f" | {format_number(s.gap)} {_bracket(s.gap_ci) if s.gap_ci else ''} |"
            )
    return "\n".join(lines)


def figures_markdown(report_dir: Path) -> str:
    figures = sorted((report_dir / "figures").glob("*.png"))
    if not figures:
        return ""
    return "## Figures\n\n" + "\n\n".join(f"![{p.stem}](figures/{p.name})" for p in figures)


def protocol_markdown(spec: ReportSpec, protocol: ProtocolResult) -> str:
    lines = [
        "## Protocol",
        "",
        *folds_markdown(spec.folds_used),
        f"- Cache `{protocol.cache}`: {counts_text(protocol.counts)}.",
        f"- Rejected records: {len(protocol.rejections)}"
        + "".join(f"\n  - {r.record}: {r.check} ({r.detail})" for r in protocol.rejections[:50]),
        "",
        protocol.cohort_markdown,
    ]
    return "\n".join(lines + ["", *sealed_markdown(spec.folds_used, spec.unseal_audit, spec.audit_log)])


def folds_markdown(folds_used: tuple[dict[str, Any], ...]) -> list[str]:
    """The folds each stage read, from the fold-use log's entries (what the stages recorded, not the config)."""
    used: dict[tuple[str, str, tuple[int, ...]], int] = {}
    for entry in folds_used:
        key = (entry["stage"], entry["key"], tuple(entry["folds"]))
        used[key] = used.get(key, 0) + 1
    if not used:
        return ["- No stage recorded the folds it read (a run directory from before `folds_used.jsonl`)."]
    lines = ["- Folds read, as recorded by each stage:", "", "  | stage | key | folds | times |", "  |---|---|---|---:|"]
    lines += [f"  | {stage} | `{key}` | {list(folds)} | {n} |" for (stage, key, folds), n in used.items()]
    return lines + [""]


def sealed_markdown(folds_used: tuple[dict[str, Any], ...], audit: tuple[dict[str, Any], ...], audit_log: str) -> list[str]:
    """Which stages read the sealed fold (from the fold-use log's entries), and the entries of
    the audit log (named ``audit_log``) of each use."""
    uses = [e for e in folds_used if set(e["folds"]) & set(e.get("sealed", [10]))]
    stages = sorted({e["stage"] for e in uses})
    sealed = sorted({fold for e in uses for fold in set(e["folds"]) & set(e.get("sealed", [10]))})
    if not stages and not audit:
        return ["The sealed fold was not touched."]
    lines = [
        f"Sealed fold {', '.join(map(str, sealed)) or '-'} was read by: {', '.join(stages) or '(no recorded stage)'}; "
        f"{len(audit)} audit entr{'y' if len(audit) == 1 else 'ies'} (`{audit_log}`):",
        "",
        "| time | stage | key | folds | git revision |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {e['time']} | {e.get('stage', '-')} | `{e.get('key', 'data.eval_folds')}` | {e.get('folds', e.get('eval_folds'))} "
        f"| {e['git_revision'][:12]} |"
        for e in audit
    ]
    return lines


def counts_text(counts: dict) -> str:
    """The cache's counts in words: records kept and rejected; windows when records were cut into several."""
    kept = f"{counts['records_kept']} kept"
    if counts["kept"] != counts["records_kept"]:
        kept += f" as {counts['kept']} windows"
    unit = "window" if counts["kept"] != counts["records_kept"] else "recording"
    failing = f"{counts['qc_failed']} {unit}{'s' if counts['qc_failed'] != 1 else ''} failing phase QC"
    return f"{counts['records']} records: {kept}, {counts['rejected']} rejected; {failing}"


def _interval_cell(value: BootstrapCI, validity: Validity) -> str:
    """A point and its interval (`_bracket`), `qualified` when the point is finite."""
    text = f"{format_number(value.point)} {_bracket(value)}"
    return qualified(text, validity) if _finite(value.point) else text


def _bracket(value: BootstrapCI) -> str:
    """``[low, high]``, or ``[not testable]`` for an interval over fewer than two patients."""
    if not value.testable:
        return "[not testable]"
    return f"[{format_number(value.low)}, {format_number(value.high)}]"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def format_number(value: Any) -> str:
    """A number as the report shows it: 4 decimals below 100, none from 100 on or for an integer,
    "–" when not finite; anything else as ``str``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value):
        return "–"
    return f"{value:.0f}" if isinstance(value, int) or abs(value) >= 100 else f"{value:.4f}"
