"""The export stage: the weights package of a run's checkpoint (`export_run`, ``cyclejepa
export``) or of an `Encoder` in memory (`save_pretrained`); `export_spec` turns the run's config,
cache manifest and evaluation result into the `ExportSpec` that `write_package` takes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from cyclejepa.config import ExperimentConfig
from cyclejepa.embed import Encoder
from cyclejepa.export import CardSpec, ExportSpec, check_target, source_run, write_package
from cyclejepa.pipeline.embedding import locate_run, run_encoder
from cyclejepa.pipeline.plans import RunPlan
from cyclejepa.pipeline.seal import folds_of

if TYPE_CHECKING:
    from cyclejepa.evaluation.results import CheckpointResult

__all__ = ["evaluation_result", "export_run", "export_spec", "save_pretrained"]


def export_run(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    step: int | None = None,
    arm: str | None = None,
    seed: int | None = None,
    onnx: bool = False,
    torchscript: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write the weights package of a run's checkpoint to the folder ``out``; returns ``out``.

    ``run_dir``, ``step``, ``arm`` and ``seed`` choose the checkpoint as `load_encoder` does;
    ``onnx``, ``torchscript`` and ``overwrite`` as in `write_package`, whose refusals of ``out``
    come before the run is read.
    """
    check_target(out, onnx=onnx, overwrite=overwrite)
    cfg, plan = locate_run(Path(run_dir), arm, seed)
    encoder = run_encoder(cfg, plan, step, "cpu")
    spec = export_spec(cfg, plan, encoder.source["step"])
    return write_package(encoder, spec, out, onnx=onnx, torchscript=torchscript, overwrite=overwrite)


def save_pretrained(
    model_or_run,
    out: str | os.PathLike,
    *,
    onnx: bool = False,
    torchscript: bool = False,
    overwrite: bool = False,
    **checkpoint,
) -> Path:
    """Write a package to ``out``: of a run folder's checkpoint (`export_run`; ``checkpoint``:
    its ``step``, ``arm``, ``seed``), or of an `Encoder` from `load_encoder` with the weights it
    holds now (changed in memory after loading, e.g. fine-tuned, they are saved as they are, and
    ``config.json`` and the card say that the run's evaluation does not apply to them)."""
    if not isinstance(model_or_run, Encoder):
        return export_run(model_or_run, out, onnx=onnx, torchscript=torchscript, overwrite=overwrite, **checkpoint)
    run = source_run(model_or_run)
    if checkpoint:
        raise ValueError(f"{sorted(checkpoint)} choose a checkpoint of a run folder; an encoder is saved as it is")
    cfg, plan = locate_run(run.path)
    spec = export_spec(cfg, plan, model_or_run.source["step"])
    return write_package(model_or_run, spec, out, onnx=onnx, torchscript=torchscript, overwrite=overwrite)


def export_spec(cfg: ExperimentConfig, plan: RunPlan, step: int) -> ExportSpec:
    """What `write_package` needs of run ``plan`` of ``cfg`` at checkpoint ``step``: its names,
    architecture, symmetry, cache manifest facts, evaluation result and training facts (the folds
    are named, never read: no fold use is recorded)."""
    from cyclejepa.pipeline.preparation import configured_cache
    from cyclejepa.registry import DATASETS

    manifest = configured_cache(cfg).manifest
    dataset = DATASETS.get(cfg.data.dataset)
    card = CardSpec(
        dataset=cfg.data.dataset,
        dataset_options=cfg.data.options.model_dump(mode="json"),
        data_licence=dataset.licence,
        data_citation=dataset.citation,
        train_folds=tuple(folds_of(cfg, "data.train_folds")),
        eval_folds=tuple(folds_of(cfg, "data.eval_folds")),
        steps=cfg.training.steps,
        batch_size=cfg.training.batch_size,
        lr=cfg.optimiser.lr,
        augmentations=tuple(a.name for a in cfg.augmentations),
        counts=dict(manifest["counts"]),
    )
    return ExportSpec(
        experiment=cfg.name,
        run=plan.name,
        arm=plan.arm.name,
        model_name=cfg.model.name,
        encoder=cfg.model.encoder.model_dump(mode="json"),
        symmetry=cfg.symmetry.model_dump(mode="json"),
        phase_convention=cfg.phase.convention,
        phase_coordinates=list(manifest.get("phase_coordinates", [])),
        phase_revision=manifest["arguments"]["phase_revision"],
        cache_hash=manifest["config_hash"],
        evaluation=evaluation_result(cfg, plan, step),
        card=card,
    )


def evaluation_result(cfg: ExperimentConfig, plan: RunPlan, step: int) -> CheckpointResult | None:
    """The evaluation stage's result of ``plan`` at ``step`` (``evaluation/<run>-step*.json``), or
    None; an altered one, or one of another schema version, is refused (`read_result`)."""
    from cyclejepa.evaluation.results import CheckpointResult, read_result
    from cyclejepa.pipeline.evaluation import evaluation_dir

    for path in sorted(evaluation_dir(cfg).glob(f"{plan.name}-step*.json")):
        result = read_result(path, CheckpointResult)
        if result.step == step:
            return result
    return None
