"""One checkpoint's evaluation, and the figures and strata that compare runs.

`evaluate_checkpoint` takes an `EvaluationSpec` (built by the pipeline's evaluation stage), the
cache, a trained objective and a device; `write_checkpoint_evaluation` writes its result as
``evaluation/<run>-step<step>.json`` (diagnostic probes with patient-clustered intervals,
transport gain and the G1 gate, channel-zeroing robustness, loop amplitude and orbit coherence,
the anomaly battery, the counts of records left out, what the data is called, what did not
apply, and whether the figures mean anything: ``validity``, `cyclejepa.evaluation.validity`) and
``evaluation/<run>-step<step>.npz`` (per-record scores of the first task and heart rates, for the
heart-rate stratification between arms; its sha256 in the result's ``scores_sha256``). Across
runs `draw_run_figures` draws the phase-ring and UMAP figures of a step and `write_hr_strata`
stratifies the first task's AUROC gap by heart rate. A finished result is kept while its
checksums hold (`is_current`, `cyclejepa.evaluation.integrity`). A model whose outputs on the
evaluation data are not finite is refused by name.

Parts that do not apply are not run, and the result says why (``not_run``): the probes, channel
zeroing and heart-rate strata on a dataset without labels (``label_levels = ()``), channel
zeroing on one channel, the heart-rate strata without an ECG provider's beats, the anomaly
battery on a torus.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cyclejepa.data.cache import PreparedCache
from cyclejepa.data.cohort import cohort_markdown, cohort_table
from cyclejepa.data.datasets import sha256_file
from cyclejepa.evaluation.anomaly import BeatTimes, anomaly_battery
from cyclejepa.evaluation.hr_strata import hr_stratified_auroc, record_heart_rates
from cyclejepa.evaluation.embeddings import (
    NonFiniteOutputs,
    Representations,
    embed_records,
    extract_tokens,
    require_finite_outputs,
)
from cyclejepa.evaluation.geometry import (
    fundamental_amplitude,
    loop_geometry,
    orbit_coherence,
    phase_ring_figure,
    umap_figure,
)
from cyclejepa.evaluation.integrity import SCORES_DIGEST, model_digest, read_scores
from cyclejepa.evaluation.mechanism import g1_gate
from cyclejepa.evaluation.probe import DiagnosticTask, LinearProbe, diagnostic_tasks, evaluate_task
from cyclejepa.evaluation.robustness import channel_zeroing
from cyclejepa.evaluation.spec import DataDescription, EvaluationSpec
from cyclejepa.evaluation.tokens import coordinate_view, per_coordinate
from cyclejepa.evaluation.results import (
    CheckpointMetrics,
    CheckpointResult,
    ProtocolResult,
    RunFields,
    StrataResult,
    plain,
    read_result,
    write_result,
)
from cyclejepa.evaluation.validity import cell_validity


def evaluations_at_once(setting: int | str, device_type: str, cells: int) -> int:
    """Processes evaluating at once: ``auto`` is half the CPU cores on CUDA (the probes and the
    bootstrap run on the CPU) and one on the CPU."""
    if setting == "auto":
        setting = max(1, (os.cpu_count() or 1) // 2) if device_type == "cuda" else 1
    return max(1, min(int(setting), cells))


def write_checkpoint_evaluation(
    spec: EvaluationSpec,
    cache: PreparedCache,
    objective,
    checkpoint: Path,
    target: Path,
    run: RunFields,
    device: torch.device,
    progress: bool = False,
) -> None:
    """``target`` (``<run>-stepNNNNNN.json``, a `CheckpointResult`): `evaluate_checkpoint` of the
    objective loaded from ``checkpoint``, its validity, the ``run`` fields (which run, step and
    checkpoint it is) and the spec's ``evaluation_hash``; when a probe ran, the first task's
    per-record scores in ``.npz`` beside it."""
    try:
        metrics, scores = evaluate_checkpoint(spec, cache, objective, device, progress)
    except NonFiniteOutputs as error:
        raise NonFiniteOutputs(f"checkpoint {checkpoint} gives {error}") from None
    if scores:
        np.savez(target.with_suffix(".npz"), allow_pickle=False, **scores)
    result = CheckpointResult(
        **dict(metrics),
        **dict(run),
        validity=cell_validity(metrics),
        evaluation_hash=spec.evaluation_hash,
        scores_sha256=sha256_file(target.with_suffix(".npz")) if scores else None,
    )
    write_result(target, result)


@dataclass
class CoreMetrics:
    """Diagnostic probes, mechanism and geometry of one checkpoint, with what robustness needs
    (``headline`` and ``probe``: the first task and its probe; None without labels)."""

    result: dict[str, Any]
    scores: dict[str, np.ndarray]
    headline: DiagnosticTask | None
    probe: LinearProbe | None
    phase_rows: np.ndarray


def record_embeddings(
    spec: EvaluationSpec, cache: PreparedCache, model, device: torch.device, progress: bool = False
) -> Representations:
    """The record representations the probes score: training and evaluation folds, token phases
    in the centre convention, records failing phase QC left out."""
    rows = np.union1d(cache.select(spec.train_folds), cache.select(spec.eval_folds))
    phases, qc_ok = cache.phases("centre"), cache.columns["qc_ok"]
    return embed_records(model, cache.signals, phases, qc_ok, rows=rows, device=device, progress=progress)


def no_eligible_class(task: str, spec: EvaluationSpec) -> str:
    """Why the eligible task ``task`` has no class: none reaches the positives it needs."""
    return (
        f"no class has {spec.eligible_min_positives} positive windows in the fold where eligibility is counted "
        f"(evaluation.eligible_min_positives: {spec.eligible_min_positives}); lower it or add records"
    )


def probe_metrics(spec: EvaluationSpec, cache: PreparedCache, reps: Representations):
    """Every diagnostic task's probe (`diagnostic_tasks`), and the first task refitted with its
    scores on the evaluation folds: ``(diagnostic, task, probe, scores)``."""
    patients = cache.columns["patient_id"]
    diagnostic, fitted = {}, {}
    tasks = diagnostic_tasks(cache, spec.train_folds, spec.eval_folds, min_positives=spec.eligible_min_positives)
    for task in tasks:
        if not task.classes:  # an eligible task left without a class: said plainly, not as the probe's error
            diagnostic[task.name] = {"task": task.name, "classes": [], "error": no_eligible_class(task.name, spec)}
            continue
        try:
            probe_result = evaluate_task(task, reps, patients, C=spec.probe_c, replicates=spec.bootstrap, seed=spec.seed)
        except ValueError as error:  # e.g. a task left with one class on a small corpus
            diagnostic[task.name] = {"task": task.name, "classes": list(task.classes), "error": str(error)}
            continue
        diagnostic[task.name] = asdict(probe_result)
        fitted[task.name] = (task, probe_result.C)
    headline = next(iter(diagnostic))  # the first label level (PTB-XL: superclass)
    if headline not in fitted:
        raise ValueError(f"the {headline} probe could not be evaluated: {diagnostic[headline]['error']}")
    task, C = fitted[headline]
    split = task.split(reps, patients)
    probe = LinearProbe(C=C).fit(split.train_X, split.train_Y, groups=split.train_groups)
    scores = {
        "rows": split.eval_rows,
        "scores": probe.decision_function(split.eval_X),
        "labels": split.eval_Y,
        "patients": split.eval_groups,
        "heart_rate": record_heart_rates(cache, split.eval_rows),
    }
    return diagnostic, task, probe, scores


def core_metrics(
    spec: EvaluationSpec, cache: PreparedCache, objective, device: torch.device, progress: bool = False
) -> CoreMetrics:
    """Probes on the diagnostic tasks (none without labels), transport gain + G1, amplitude,
    coherence, effective rank."""
    model, symmetry = objective.model, objective.symmetry
    labelled = bool(cache.label_levels)
    if labelled:
        reps = record_embeddings(spec, cache, model, device, progress)
        require_finite_outputs(reps.features, reps.rows, "record representations")
    patients, qc_ok = cache.columns["patient_id"], cache.columns["qc_ok"]
    phases = cache.phases("centre")
    result: dict[str, Any] = {"data": spec.data, "not_run": {}, "diagnostic": {}}
    headline, probe, scores = None, None, {}
    if labelled:
        result["representations"] = {"records": len(reps.rows), "excluded": reps.excluded}
        result["diagnostic"], headline, probe, scores = probe_metrics(spec, cache, reps)
    else:
        result["not_run"]["probes"] = f"dataset {spec.data.dataset!r} has no labels (label_levels is empty)"
    eval_rows = cache.select(spec.eval_folds)
    phase_rows = eval_rows[qc_ok[eval_rows]]  # phase-QC failures are left out of phase analyses
    tokens = extract_tokens(model, cache.signals[phase_rows], device=device)
    require_finite_outputs(tokens, phase_rows, "tokens")
    token_phases = phases[phase_rows]
    g1 = g1_gate(tokens, token_phases, symmetry, patients[phase_rows], seed=spec.seed, replicates=spec.bootstrap)
    result["mechanism"] = asdict(g1)
    result["geometry"] = loop_geometry(tokens, token_phases, symmetry, bins=8)
    if symmetry.rank > 1:
        names = cache.coordinates or tuple(str(c) for c in range(symmetry.rank))
        result["coordinates"] = coordinate_metrics(tokens, token_phases, symmetry, names, patients[phase_rows], spec)
    result["phase_records"] = {"evaluated": int(len(phase_rows)), "qc_failed": int((~qc_ok[eval_rows]).sum())}
    return CoreMetrics(result, scores, headline, probe, phase_rows)


def coordinate_metrics(tokens, phases, symmetry, names, patients, spec: EvaluationSpec) -> dict[str, dict[str, Any]]:
    """Per cyclic coordinate of a torus (`per_coordinate`, on each coordinate's own U(1)
    sub-representation): the G1 gate (with the gain fraction) and, when every coordinate has a
    fundamental term (frequency e_c), the loop amplitude and the orbit coherence."""
    g1 = per_coordinate(g1_gate, tokens, phases, symmetry, names, patient_ids=patients, seed=spec.seed, replicates=spec.bootstrap)
    out = {name: {"mechanism": asdict(result), "geometry": {}} for name, result in g1.items()}
    vectors = {term.vector for term in symmetry.spectrum.terms}
    if all(tuple(int(c == k) for c in range(symmetry.rank)) in vectors for k in range(symmetry.rank)):
        amplitude = per_coordinate(fundamental_amplitude, tokens, phases, symmetry, names)
        coherence = per_coordinate(orbit_coherence, tokens, phases, symmetry, names, bins=8)
        for name in out:
            out[name]["geometry"] = {"amplitude": amplitude[name], "coherence": asdict(coherence[name])}
    return out


def evaluate_checkpoint(
    spec: EvaluationSpec, cache: PreparedCache, objective, device: torch.device, progress: bool = False
) -> tuple[CheckpointMetrics, dict[str, np.ndarray]]:
    """Every per-checkpoint metric, plus per-record scores of the first task (empty without labels)."""
    core = core_metrics(spec, cache, objective, device, progress)
    if len(cache.channels) < 2:
        core.result["not_run"]["robustness"] = f"one {spec.data.channel_word} ({cache.channels[0]}): nothing to zero beside it"
    elif core.probe is None:
        core.result["not_run"]["robustness"] = "no probe to score the zeroed inputs (no labels)"
    else:
        assert core.headline is not None, "probe_metrics fits the probe on the headline task"
        robustness = channel_zeroing(
            objective.model,
            cache.signals,
            cache.phases("centre"),
            cache.columns["qc_ok"],
            core.probe,
            core.headline.labels,
            cache.columns["patient_id"],
            channels=cache.channels,
            rows=core.scores["rows"],
            device=device,
            replicates=spec.bootstrap,
            seed=spec.seed,
        )
        core.result["robustness"] = asdict(robustness)
    if spec.strata_not_applying:
        core.result["not_run"]["heart_rate_strata"] = spec.strata_not_applying
    if objective.symmetry.rank > 1:  # the battery times beat anomalies by one clock's events
        core.result["anomaly"] = []
        core.result["not_run"]["anomaly"] = (
            f"a torus of {objective.symmetry.rank} coordinates: the battery times anomalies by one clock's events"
        )
        return CheckpointMetrics.model_validate(plain(core.result)), core.scores
    battery_rows = core.phase_rows[: spec.anomaly_records] if spec.anomaly_records else core.phase_rows
    battery = anomaly_battery(
        objective.model,
        objective.symmetry,
        cache.signals[battery_rows],
        BeatTimes.from_cache(cache, battery_rows),
        patch=cache.token_patch,
        families=spec.families,
        severities=spec.severities,
        signal_kind=spec.data.signal,
        detector=spec.detector,
        seed=spec.seed,
        device=device,
    )
    core.result["anomaly"] = [asdict(cell) for cell in battery.cells]
    core.result["anomaly_skipped"] = battery.skipped
    return CheckpointMetrics.model_validate(plain(core.result)), core.scores


def figure_paths(figures: Path, step: int, coordinates: tuple[str, ...], umap: bool) -> tuple[list[Path], Path | None]:
    """The phase-ring figures of ``step`` (a torus: one per coordinate) and its UMAP figure
    (None when ``umap`` is off)."""
    rings = [figures / f"phase-ring-{name}-step{step:06d}.png" for name in coordinates] or [
        figures / f"phase-ring-step{step:06d}.png"
    ]
    return rings, figures / f"umap-step{step:06d}.png" if umap else None


def draw_run_figures(
    objectives: dict[str, Any],
    cache: PreparedCache,
    folds: tuple[int, ...],
    rings: list[Path],
    umap: Path | None,
    umap_points: int,
    seed: int,
    device: torch.device,
) -> None:
    """Phase-ring figures (``rings``; one column per run of ``objectives``, run name → trained
    objective) and, unless ``umap`` is None, the UMAP figure, of the tokens of at most 2000
    phase-QC-passing records of ``folds`` (the paper draws both from folds 1-9)."""
    names = cache.coordinates  # a torus: one ring per coordinate, on its own U(1) terms
    rows = cache.select(folds)
    rows = rows[cache.columns["qc_ok"][rows]][:2000]
    phases = cache.phases("centre")[rows]
    runs = {
        name: (extract_tokens(objective.model, cache.signals[rows], device=device), phases, objective.symmetry)
        for name, objective in objectives.items()
    }
    for c, ring in enumerate(rings):
        if names:  # coordinate c's phases and its own U(1) sub-representation
            views = {k: coordinate_view(*v, c) for k, v in runs.items()}
            phase_ring_figure({k: (v.tokens, v.phases, v.symmetry) for k, v in views.items()}, bins=24, path=ring)
        else:
            phase_ring_figure(runs, bins=24, path=ring)
    if umap is not None:  # coloured by the first coordinate's phase
        umap_figure(
            {k: (v[0], v[1][..., 0] if names else v[1]) for k, v in runs.items()}, max_points=umap_points, seed=seed, path=umap
        )


def write_hr_strata(
    out: Path, task: str, step: int, arms: list[str], seeds: list[int], replicates: int, seed: int, evaluation_hash: str
) -> None:
    """``hr-strata-stepNNNNNN.json``: per seed, the two ``arms``' ``task`` AUROC gap within
    heart-rate strata, from their saved per-record scores (checked against their digests)."""
    strata = {}
    for run_seed in seeds:
        cells = {arm: out / f"{arm}-seed{run_seed}-step{step:06d}" for arm in arms}
        loaded = {arm: _scores(cell) for arm, cell in cells.items()}
        first = loaded[arms[0]]
        if not all(np.array_equal(first["rows"], loaded[a]["rows"]) for a in arms):
            continue  # the arms scored different records: no paired comparison
        result = hr_stratified_auroc(
            {arm: loaded[arm]["scores"] for arm in arms},
            first["labels"],
            first["heart_rate"],
            groups=first["patients"],
            replicates=replicates,
            seed=seed,
        )
        strata[f"seed{run_seed}"] = result
    write_result(out / f"hr-strata-step{step:06d}.json", StrataResult(task=task, seeds=strata, evaluation_hash=evaluation_hash))


def _scores(cell: Path) -> dict[str, np.ndarray]:
    """The per-record arrays of the result ``cell`` (``.json``, ``.npz``), checked against its digest."""
    result = read_result(cell.with_suffix(".json"), CheckpointResult)
    return read_scores(cell.with_suffix(".npz"), {SCORES_DIGEST: result.scores_sha256})


def write_protocol(
    out: Path,
    cache: PreparedCache,
    train_folds: tuple[int, ...],
    eval_folds: tuple[int, ...],
    data: DataDescription,
    evaluation_hash: str,
) -> None:
    """``protocol.json``: the cache, its counts and rejections, the cohort table of the folds
    (without a "Patients" row when the dataset does not know whose each recording is: it would
    count recordings), the phase QC of the training and evaluation windows (``phase_qc``: the
    event word and `PreparedCache.phase_qc_counts` of each) and the evaluation's hash."""
    table = cohort_table(cache, train_folds, eval_folds, event=data.event)
    if not data.subjects_known:
        table = table.drop(index="Patients")
    protocol = ProtocolResult(
        cache=str(cache.path),
        counts=cache.manifest["counts"],
        rejections=[{"record": str(r.record_id), "check": r.check, "detail": r.detail} for r in cache.rejections],
        cohort_markdown=cohort_markdown(table),
        phase_qc={"event": data.event, "train": cache.phase_qc_counts(train_folds), "eval": cache.phase_qc_counts(eval_folds)},
        evaluation_hash=evaluation_hash,
    )
    write_result(out / "protocol.json", protocol)


def is_current(path: Path, evaluation_hash: str, checkpoint: Path) -> bool:
    """A finished result of this evaluation (``evaluation_hash``) of this schema whose checksums
    hold: its content's, its arrays' (``.npz``, where it has them) and its checkpoint's (the
    weights are the ones it was computed from); another one is recomputed."""
    return _holds(
        path, evaluation_hash, lambda r: r.checkpoint is not None and r.checkpoint.model_sha256 == model_digest(checkpoint)
    )


def is_current_untrained(path: Path, evaluation_hash: str, weights_sha256: str) -> bool:
    """`is_current` for a result of untrained weights (the random baseline): its weights' digest
    (``weights.model_sha256``) is ``weights_sha256``, that of the weights it would be computed from now."""
    return _holds(path, evaluation_hash, lambda r: r.weights is not None and r.weights.model_sha256 == weights_sha256)


def _holds(path: Path, evaluation_hash: str, same_weights: Callable[[CheckpointResult], bool]) -> bool:
    """A result of this schema and of ``evaluation_hash`` in ``path`` whose content and arrays
    match their checksums and whose weights pass ``same_weights``."""
    try:
        result = read_result(path, CheckpointResult)
    except (OSError, ValueError):  # absent, of another schema version, altered or unreadable
        return False
    arrays = path.with_suffix(".npz")
    return (
        result.evaluation_hash == evaluation_hash
        and same_weights(result)
        and (not result.diagnostic or (arrays.exists() and result.scores_sha256 == sha256_file(arrays)))
    )
