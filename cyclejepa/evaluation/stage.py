"""The evaluation stage of `cyclejepa run`: every checkpoint of the grid, then the cross-run figures.

Per checkpoint it writes ``evaluation/<run>-step<step>.json`` (diagnostic probes with
patient-clustered intervals, transport gain and the G1 gate, lead-zeroing robustness, loop
amplitude and orbit coherence, the anomaly battery, the counts of records left out, what the
data is called, what did not apply, and whether the figures mean anything: ``validity``,
`cyclejepa.evaluation.validity`) and ``evaluation/<run>-step<step>.npz`` (per-record scores of
the first task and heart rates, for the heart-rate stratification between arms; its sha256 in
the result's ``scores_sha256``). Across runs it draws the phase-ring and UMAP figures per step
and stratifies the first task's AUROC gap by heart rate. Finished files are kept while their
checksums hold (`cyclejepa.evaluation.integrity`). A checkpoint with non-finite weights, or
whose outputs on the evaluation data are not finite, is refused by name.

Parts that do not apply are not run, and the result says why (``not_run``): the probes, lead
zeroing and heart-rate strata on a dataset without labels (``label_levels = ()``), lead
zeroing on one channel, the heart-rate strata without an ECG provider's beats, the anomaly
battery on a torus.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cyclejepa.config import ExperimentConfig
from cyclejepa.pipeline.identity import evaluation_identity, identity_hash
from cyclejepa.data.cache import PreparedCache, open_cache
from cyclejepa.data.cohort import cohort_markdown, cohort_table
from cyclejepa.data.datasets import sha256_file
from cyclejepa.devices import child_gpus, thread_environment
from cyclejepa.evaluation.anomaly import BeatTimes, anomaly_battery
from cyclejepa.evaluation.context import hr_stratified_auroc, record_heart_rates
from cyclejepa.evaluation.embeddings import Representations, embed_records, extract_tokens
from cyclejepa.evaluation.geometry import (
    effective_rank,
    fundamental_amplitude,
    orbit_coherence,
    phase_ring_figure,
    umap_figure,
)
from cyclejepa.evaluation.integrity import CHECKSUM, SCORES_DIGEST, content_checksum, model_digest, read_result, read_scores, with_checksum
from cyclejepa.evaluation.mechanism import coordinate_view, g1_gate, per_coordinate
from cyclejepa.evaluation.probe import DiagnosticTask, LinearProbe, diagnostic_tasks, evaluate_task
from cyclejepa.evaluation.robustness import lead_zeroing
from cyclejepa.evaluation.validity import cell_validity
from cyclejepa.jsonio import read_json, write_json
from cyclejepa.outputs import OutputFolder
from cyclejepa.pipeline.plans import run_folder
from cyclejepa.progress import progress_bar
from cyclejepa.registry import DATASETS, PHASE_PROVIDERS
from cyclejepa.pipeline.seal import use_folds


def evaluation_dir(cfg: ExperimentConfig) -> Path:
    return OutputFolder(Path(cfg.output_dir)).evaluation


def evaluate_grid(cfg: ExperimentConfig, cache: PreparedCache, plans, steps: list[int], progress: bool = True) -> None:
    """Evaluate every run × step (skipping finished ones), then the cross-run results.

    With ``evaluation.at_once`` > 1 the checkpoints are evaluated side by side in that many
    processes (spawned; each loads the cache and writes its own result files).
    """
    from cyclejepa.devices import resolve_device

    device = resolve_device(cfg.evaluation.device)
    out = evaluation_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    _write_protocol(cfg, cache, out)
    cells = [(plan, step) for plan in plans for step in steps
             if not _current(_cell_path(out, plan, step), cfg, _checkpoint(cfg, plan, step))]  # fmt: skip
    at_once = evaluations_at_once(cfg.evaluation.at_once, device.type, len(cells))
    if at_once > 1:
        _evaluate_in_processes(cfg, cache, cells, at_once, progress)
    else:
        for plan, step in cells:
            evaluate_cell(cfg, cache, plan, step, device, progress)
    for step in steps:
        compare_runs(cfg, cache, plans, step, device)


def evaluations_at_once(setting: int | str, device_type: str, cells: int) -> int:
    """Processes evaluating at once: ``auto`` is half the CPU cores on CUDA (the probes and the
    bootstrap run on the CPU) and one on the CPU."""
    if setting == "auto":
        setting = max(1, (os.cpu_count() or 1) // 2) if device_type == "cuda" else 1
    return max(1, min(int(setting), cells))


def _cell_path(out: Path, plan, step: int) -> Path:
    return out / f"{plan.name}-step{step:06d}.json"


def _checkpoint(cfg: ExperimentConfig, plan, step: int) -> Path:
    from cyclejepa.training.checkpoint import checkpoint_path

    return checkpoint_path(run_folder(cfg, plan).checkpoints, step)


def evaluate_cell(cfg: ExperimentConfig, cache: PreparedCache, plan, step: int, device: torch.device,
                  progress: bool = False) -> None:
    """Evaluate the checkpoint of ``plan`` at ``step``: ``<run>-stepNNNNNN.json`` (with the
    checkpoint and the digest of its weights, and its own checksum) and, when a probe ran, ``.npz``."""
    from cyclejepa.pipeline.pretraining import objective_spec
    from cyclejepa.training import load_trained

    target = _cell_path(evaluation_dir(cfg), plan, step)
    checkpoint = _checkpoint(cfg, plan, step)
    objective = load_trained(objective_spec(cfg), checkpoint, device)  # refuses non-finite weights by name
    try:
        result, scores = evaluate_checkpoint(cfg, cache, objective, device, progress)
    except NonFiniteOutputs as error:
        raise NonFiniteOutputs(f"checkpoint {checkpoint} gives {error}") from None
    result["validity"] = cell_validity(result)
    result.update(run=plan.name, arm=plan.arm.name, seed=plan.seed, step=step,
                  transport_weight=plan.arm.transport_weight, evaluation_hash=_evaluation_hash(cfg),
                  checkpoint={"path": str(checkpoint.relative_to(cfg.output_dir)), "model_sha256": model_digest(checkpoint)})  # fmt: skip
    if scores:
        np.savez(target.with_suffix(".npz"), **scores)
        result[SCORES_DIGEST] = sha256_file(target.with_suffix(".npz"))
    write_json(target, with_checksum(result))


def _evaluate_in_processes(cfg: ExperimentConfig, cache: PreparedCache, cells, at_once: int, progress: bool) -> None:
    """`evaluate_cell` for every cell in an `evaluation_pool` of ``at_once`` processes."""
    from concurrent.futures import as_completed

    raw = cfg.model_dump(mode="json")
    with evaluation_pool(at_once, len(child_gpus(cfg.evaluation.device))) as pool, progress_bar(
        len(cells), f"evaluating {len(cells)} checkpoints, {at_once} at a time", enabled=progress
    ) as update:
        futures = [pool.submit(_evaluate_cell_process, raw, str(cache.path), plan, step) for plan, step in cells]
        for future in as_completed(futures):
            future.result()  # re-raises a cell's error here
            update(1)


@contextmanager
def evaluation_pool(processes: int, gpus: int = 0) -> Iterator[ProcessPoolExecutor]:
    """``processes`` spawned worker processes that share the machine out.

    Each gets ``cpu_count // processes`` CPU threads, for torch and for the BLAS and OpenMP
    pools of numpy, scipy and scikit-learn (the probes, the bootstrap): those libraries read
    `cyclejepa.devices.THREAD_VARIABLES` once, when loaded, so the variables are set in this
    process's environment while the pool starts its workers (on submission) and restored after.
    With ``gpus`` CUDA devices the workers take them in turn (worker k: ``cuda:<k mod gpus>``
    becomes its current device), so an index-less evaluation device is each worker's own GPU.
    """
    import multiprocessing

    threads = max(1, (os.cpu_count() or 1) // processes)
    context = multiprocessing.get_context("spawn")
    devices = _device_queue(context, processes, gpus)
    pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_start_worker, initargs=(threads, devices))
    with _environment(thread_environment(threads)), pool:
        yield pool


def _device_queue(context, processes: int, gpus: int):
    """The GPU index of each worker in start order, ``k mod gpus`` (None each without GPUs)."""
    devices = context.SimpleQueue()
    for worker in range(processes):
        devices.put(worker % gpus if gpus else None)
    return devices


def _start_worker(threads: int, devices) -> None:
    """An evaluation worker's start: torch's threads, and its GPU (the next of ``devices``) made current."""
    torch.set_num_threads(threads)
    gpu = devices.get()
    if gpu is not None:
        torch.cuda.set_device(gpu)


@contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` set in ``os.environ`` for the block, then restored."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _evaluate_cell_process(raw: dict[str, Any], cache_path: str, plan, step: int) -> None:
    """`evaluate_cell` in a worker: the config and the cache from their serialised forms."""
    from cyclejepa.config import parse_config
    from cyclejepa.devices import resolve_device

    cfg = parse_config(raw)
    evaluate_cell(cfg, open_cache(cfg, cache_path), plan, step, resolve_device(cfg.evaluation.device))


class NonFiniteOutputs(ValueError):
    """A model whose outputs on the evaluation data hold NaN or infinite values."""


def require_finite_outputs(values: np.ndarray, rows: np.ndarray, what: str) -> None:
    """Raise `NonFiniteOutputs` naming ``what`` and the first cache ``rows`` whose ``values``
    (one row each) hold a NaN or an infinite value."""
    bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
    if bad.any():
        raise NonFiniteOutputs(
            f"non-finite (NaN or infinite) {what} for {int(bad.sum())} of {len(bad)} windows, e.g. cache rows {rows[bad][:5].tolist()}"
        )


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
    cfg: ExperimentConfig, cache: PreparedCache, model, device: torch.device, progress: bool = False
) -> Representations:
    """The record representations the probes score: training and evaluation folds, token phases
    in the centre convention, records failing phase QC left out."""
    train_folds = use_folds(cfg, "probe fitting", "data.train_folds")
    eval_folds = use_folds(cfg, "evaluation", "data.eval_folds")
    rows = np.union1d(cache.select(train_folds), cache.select(eval_folds))
    phases, qc_ok = cache.phases("centre"), cache.columns["qc_ok"]
    return embed_records(model, cache.signals, phases, qc_ok, rows=rows, device=device, progress=progress)


def data_facts(cfg: ExperimentConfig, cache: PreparedCache) -> dict[str, Any]:
    """What the report calls the data: the dataset, whether it knows whose each recording is
    (`Dataset.subjects_known`), its channels and units, ``channel_word`` ("lead" when every
    channel is in mV, as ECG leads are, else "channel"), the phase provider's signal kind and
    event word (`PhaseProvider.signal`, `PhaseProvider.event_name`)."""
    provider = PHASE_PROVIDERS.build(cfg.phase.provider, **cfg.phase.options)
    dataset = DATASETS.build(cfg.data.dataset, root=cfg.data.root, **cfg.data.options)
    units = cache.units
    return {
        "dataset": cfg.data.dataset,
        "subjects_known": bool(dataset.subjects_known),
        "channels": list(cache.channels),
        "units": list(units),
        "channel_word": "lead" if all(unit.lower() == "mv" for unit in units) else "channel",
        "signal": getattr(provider, "signal", "any"),
        "event": getattr(provider, "event_name", "event"),
    }


def probe_metrics(cfg: ExperimentConfig, cache: PreparedCache, reps: Representations):
    """Every diagnostic task's probe (`diagnostic_tasks`), and the first task refitted with its
    scores on the evaluation folds: ``(diagnostic, task, probe, scores)``."""
    ev = cfg.evaluation
    patients = cache.columns["patient_id"]
    diagnostic, fitted = {}, {}
    tasks = diagnostic_tasks(cache, cfg.data.train_folds, cfg.data.eval_folds, min_positives=ev.eligible_min_positives)
    for task in tasks:
        try:
            probe_result = evaluate_task(task, reps, patients, C=ev.probe_c, replicates=ev.bootstrap, seed=ev.seed)
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
    cfg: ExperimentConfig, cache: PreparedCache, objective, device: torch.device, progress: bool = False
) -> CoreMetrics:
    """Probes on the diagnostic tasks (none without labels), transport gain + G1, amplitude,
    coherence, effective rank."""
    ev = cfg.evaluation
    model, symmetry = objective.model, objective.symmetry
    labelled = bool(cache.label_levels)
    if labelled:
        reps = record_embeddings(cfg, cache, model, device, progress)  # the folds passed the seal there
        require_finite_outputs(reps.features, reps.rows, "record representations")
    else:
        use_folds(cfg, "evaluation", "data.eval_folds")  # read by the mechanism and geometry only
    patients, qc_ok = cache.columns["patient_id"], cache.columns["qc_ok"]
    phases = cache.phases("centre")
    result: dict[str, Any] = {"data": data_facts(cfg, cache), "not_run": {}, "diagnostic": {}}
    headline, probe, scores = None, None, {}
    if labelled:
        result["representations"] = {"records": len(reps.rows), "excluded": reps.excluded}
        result["diagnostic"], headline, probe, scores = probe_metrics(cfg, cache, reps)
    else:
        result["not_run"]["probes"] = f"dataset {cfg.data.dataset!r} has no labels (label_levels is empty)"
    eval_rows = cache.select(cfg.data.eval_folds)
    phase_rows = eval_rows[qc_ok[eval_rows]]  # phase-QC failures are left out of phase analyses
    tokens = extract_tokens(model, cache.signals[phase_rows], device=device)
    require_finite_outputs(tokens, phase_rows, "tokens")
    token_phases = phases[phase_rows]
    g1 = g1_gate(tokens, token_phases, symmetry, patients[phase_rows], seed=ev.seed, replicates=ev.bootstrap)
    result["mechanism"] = asdict(g1)
    result["geometry"] = {"effective_rank": effective_rank(tokens, token_phases)}
    if symmetry.spectrum.multiplicities.get(1):  # the loop metrics live in the n = 1 blocks
        result["geometry"]["amplitude"] = fundamental_amplitude(tokens, token_phases, symmetry)
        result["geometry"]["coherence"] = asdict(orbit_coherence(tokens, token_phases, symmetry, bins=8))
    if symmetry.rank > 1:
        names = cache.coordinates or tuple(str(c) for c in range(symmetry.rank))
        result["coordinates"] = coordinate_metrics(tokens, token_phases, symmetry, names, patients[phase_rows], ev)
    result["phase_records"] = {"evaluated": int(len(phase_rows)), "qc_failed": int((~qc_ok[eval_rows]).sum())}
    return CoreMetrics(result, scores, headline, probe, phase_rows)


def coordinate_metrics(tokens, phases, symmetry, names, patients, ev) -> dict[str, dict[str, Any]]:
    """Per cyclic coordinate of a torus (`per_coordinate`, on each coordinate's own U(1)
    sub-representation): the G1 gate (with the gain fraction) and, when every coordinate has a
    fundamental term (frequency e_c), the loop amplitude and the orbit coherence."""
    g1 = per_coordinate(g1_gate, tokens, phases, symmetry, names, patient_ids=patients, seed=ev.seed, replicates=ev.bootstrap)
    out = {name: {"mechanism": asdict(result), "geometry": {}} for name, result in g1.items()}
    vectors = {term.vector for term in symmetry.spectrum.terms}
    if all(tuple(int(c == k) for c in range(symmetry.rank)) in vectors for k in range(symmetry.rank)):
        amplitude = per_coordinate(fundamental_amplitude, tokens, phases, symmetry, names)
        coherence = per_coordinate(orbit_coherence, tokens, phases, symmetry, names, bins=8)
        for name in out:
            out[name]["geometry"] = {"amplitude": amplitude[name], "coherence": asdict(coherence[name])}
    return out


def evaluate_checkpoint(
    cfg: ExperimentConfig, cache: PreparedCache, objective, device: torch.device, progress: bool = False
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Every per-checkpoint metric as a JSON-ready dict, plus per-record scores of the first task
    (empty without labels)."""
    ev = cfg.evaluation
    core = core_metrics(cfg, cache, objective, device, progress)
    words = core.result["data"]
    if len(cache.channels) < 2:
        core.result["not_run"]["robustness"] = f"one {words['channel_word']} ({cache.channels[0]}): nothing to zero beside it"
    elif core.probe is None:
        core.result["not_run"]["robustness"] = "no probe to score the zeroed inputs (no labels)"
    else:
        robustness = lead_zeroing(
            objective.model, cache.signals, cache.phases("centre"), cache.columns["qc_ok"], core.probe,
            core.headline.labels, cache.columns["patient_id"], leads=cache.channels, rows=core.scores["rows"],
            device=device, replicates=ev.bootstrap, seed=ev.seed,
        )
        core.result["robustness"] = asdict(robustness)
    if why := heart_rate_not_applying(cfg, cache):
        core.result["not_run"]["heart_rate_strata"] = why
    if objective.symmetry.rank > 1:  # the battery times beat anomalies by one clock's events
        core.result["anomaly"] = []
        core.result["not_run"]["anomaly"] = f"a torus of {objective.symmetry.rank} coordinates: the battery times anomalies by one clock's events"
        return core.result, core.scores
    battery_rows = core.phase_rows[: ev.anomaly_records] if ev.anomaly_records else core.phase_rows
    battery = anomaly_battery(
        objective.model, objective.symmetry, cache.signals[battery_rows], BeatTimes.from_cache(cache, battery_rows),
        patch=cache.token_patch, families=ev.families, severities=ev.severities, signal_kind=words["signal"],
        detector=ev.detector, seed=ev.seed, device=device,
    )
    core.result["anomaly"] = [asdict(cell) for cell in battery.cells]
    core.result["anomaly_skipped"] = battery.skipped
    return core.result, core.scores


def compare_runs(cfg: ExperimentConfig, cache: PreparedCache, plans, step: int, device: torch.device) -> None:
    """Phase-ring and UMAP figures (one column per run) and, where it applies
    (`heart_rate_not_applying`), the heart-rate stratified arm gap."""
    from cyclejepa.pipeline.pretraining import objective_spec
    from cyclejepa.training import load_trained

    out = evaluation_dir(cfg)
    figures = OutputFolder(Path(cfg.output_dir)).report / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    folds = use_folds(cfg, "figures", "data.train_folds")  # the figures show these folds, drawn now or before
    names = cache.coordinates  # a torus: one ring per coordinate, on its own U(1) terms
    rings = [figures / f"phase-ring-{name}-step{step:06d}.png" for name in names] or [figures / f"phase-ring-step{step:06d}.png"]
    umap = figures / f"umap-step{step:06d}.png"
    if not (all(ring.exists() for ring in rings) and (umap.exists() or not cfg.evaluation.umap)):
        rows = cache.select(folds)
        rows = rows[cache.columns["qc_ok"][rows]][:2000]  # the paper draws both from folds 1-9
        phases = cache.phases("centre")[rows]
        runs = {}
        for plan in plans:
            objective = load_trained(objective_spec(cfg), _checkpoint(cfg, plan, step), device)
            runs[plan.name] = (extract_tokens(objective.model, cache.signals[rows], device=device), phases, objective.symmetry)
        for c, ring in enumerate(rings):
            views = {k: coordinate_view(*v, c) for k, v in runs.items()} if names else {}
            views = {k: (v.tokens, v.phases, v.symmetry) for k, v in views.items()} or runs
            phase_ring_figure(views, bins=24, path=ring)
        if cfg.evaluation.umap:  # coloured by the first coordinate's phase
            umap_figure({k: (v[0], v[1][..., 0] if names else v[1]) for k, v in runs.items()},
                        max_points=cfg.evaluation.umap_points, seed=cfg.evaluation.seed, path=umap)  # fmt: skip
    if heart_rate_not_applying(cfg, cache) is None:
        _write_hr_strata(cfg, cache.label_levels[0].name, step, out)


def heart_rate_not_applying(cfg: ExperimentConfig, cache: PreparedCache) -> str | None:
    """Why the heart-rate strata do not apply, or None when they do: they need two arms to
    compare, a probe (labels) and ECG beats (an ``"ecg"`` phase provider of one coordinate)."""
    if len(cfg.runs.arms) != 2:
        return f"{len(cfg.runs.arms)} arm(s): the strata compare two"
    if not cache.label_levels:
        return "no probe scores to stratify (no labels)"
    if cache.coordinates:
        return f"a torus of {len(cache.coordinates)} phase coordinates: the strata take the heart rate of one ECG clock"
    signal = getattr(PHASE_PROVIDERS.get(cfg.phase.provider), "signal", "any")
    if signal != "ecg":
        return f"phase provider {cfg.phase.provider!r} reads {signal!r} signals: no ECG beats to take a heart rate from"
    return None


def _write_hr_strata(cfg: ExperimentConfig, task: str, step: int, out: Path) -> None:
    """``hr-strata-stepNNNNNN.json``: per seed, the arms' ``task`` AUROC gap within heart-rate strata."""
    arms = [a.name for a in cfg.runs.arms]
    strata = {}
    for seed in cfg.runs.seeds:
        cells = {arm: out / f"{arm}-seed{seed}-step{step:06d}" for arm in arms}
        loaded = {arm: read_scores(cell.with_suffix(".npz"), read_result(cell.with_suffix(".json"))) for arm, cell in cells.items()}
        first = loaded[arms[0]]
        if not all(np.array_equal(first["rows"], loaded[a]["rows"]) for a in arms):
            continue  # the arms scored different records: no paired comparison
        result = hr_stratified_auroc(
            {arm: loaded[arm]["scores"] for arm in arms}, first["labels"], first["heart_rate"],
            groups=first["patients"], replicates=cfg.evaluation.bootstrap, seed=cfg.evaluation.seed,
        )
        strata[f"seed{seed}"] = asdict(result)
    strata_result = {"task": task, "seeds": strata, "evaluation_hash": _evaluation_hash(cfg)}
    write_json(out / f"hr-strata-step{step:06d}.json", with_checksum(strata_result))


def _write_protocol(cfg: ExperimentConfig, cache: PreparedCache, out: Path) -> None:
    """``protocol.json``: the cache, its counts and rejections, the cohort table (without a
    "Patients" row when the dataset does not know whose each recording is: it would count
    recordings) and the evaluation's hash."""
    train_folds, eval_folds = (use_folds(cfg, "cohort table", key) for key in ("data.train_folds", "data.eval_folds"))
    facts = data_facts(cfg, cache)
    table = cohort_table(cache, train_folds, eval_folds, event=facts["event"])
    if not facts["subjects_known"]:
        table = table.drop(index="Patients")
    protocol = {
        "cache": str(cache.path),
        "counts": cache.manifest["counts"],
        "rejections": [
            {"record": str(r.record_id), "check": r.check, "detail": r.detail} for r in cache.rejections
        ],
        "cohort_markdown": cohort_markdown(table),
        "evaluation_hash": _evaluation_hash(cfg),
    }
    write_json(out / "protocol.json", with_checksum(protocol))


def _evaluation_hash(cfg: ExperimentConfig) -> str:
    """What a result depends on (`cyclejepa.pipeline.identity.evaluation_identity`): results made with
    another unseal flag, device, name or report setting are kept."""
    return identity_hash(evaluation_identity(cfg))


def _current(path: Path, cfg: ExperimentConfig, checkpoint: Path) -> bool:
    """A finished result of this evaluation whose checksums hold: its content's, its arrays'
    (``.npz``, where it has them) and its checkpoint's (the weights are the ones it was
    computed from); an altered one is recomputed."""
    if not path.exists():
        return False
    result = read_json(path)
    arrays = path.with_suffix(".npz")
    return (
        result.get("evaluation_hash") == _evaluation_hash(cfg)
        and result.get(CHECKSUM) == content_checksum(result)
        and result.get("checkpoint", {}).get("model_sha256") == model_digest(checkpoint)
        and (not result.get("diagnostic") or (arrays.exists() and result.get(SCORES_DIGEST) == sha256_file(arrays)))
    )
