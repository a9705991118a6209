"""The pipeline: the stages of `cyclejepa run` and the only code that reads the experiment config.

Each stage turns its part of an `ExperimentConfig` into the narrow arguments of the layer below
(the cache, the trainer, the evaluation, the export) and returns what it wrote:

    preflight → prepare (`prepare`) → pre-train (`pretrain_all`) → evaluate and report
    (`evaluate_experiment`, `report_experiment`); `run_experiment` runs them in order.

After a run: the embedding stage (`load_encoder`) and the export stage (`export_run`,
`save_pretrained`).

Names are imported on first use (PEP 562), so ``import cyclejepa.pipeline`` costs nothing.
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:
    from cyclejepa.pipeline.checks import preflight as preflight
    from cyclejepa.pipeline.embedding import load_encoder as load_encoder, locate_run as locate_run, run_encoder as run_encoder
    from cyclejepa.pipeline.evaluation import (
        evaluate_experiment as evaluate_experiment,
        evaluate_grid as evaluate_grid,
        evaluation_dir as evaluation_dir,
        evaluation_spec as evaluation_spec,
        evaluation_steps as evaluation_steps,
    )
    from cyclejepa.pipeline.exporting import (
        evaluation_result as evaluation_result,
        export_run as export_run,
        export_spec as export_spec,
        save_pretrained as save_pretrained,
    )
    from cyclejepa.pipeline.plans import (
        plan_runs as plan_runs,
        run_plan as run_plan,
        RunPlan as RunPlan,
        write_resolved_config as write_resolved_config,
    )
    from cyclejepa.pipeline.preparation import (
        build_dataset as build_dataset,
        cache_dir as cache_dir,
        cache_spec as cache_spec,
        configured_cache as configured_cache,
        prepare as prepare,
    )
    from cyclejepa.pipeline.pretraining import (
        objective_spec as objective_spec,
        pretrain as pretrain,
        pretrain_all as pretrain_all,
        train_run as train_run,
        training_phases as training_phases,
        training_spec as training_spec,
        watch_run as watch_run,
    )
    from cyclejepa.pipeline.reporting import (
        report_experiment as report_experiment,
        report_spec as report_spec,
        write_grid_summary as write_grid_summary,
    )
    from cyclejepa.pipeline.run import describe_plan as describe_plan, run_experiment as run_experiment
    from cyclejepa.pipeline.seal import require_unsealed as require_unsealed

_HOMES = {
    "preflight": "checks",
    "build_dataset": "preparation",
    "cache_spec": "preparation",
    "configured_cache": "preparation",
    "prepare": "preparation",
    "pretrain": "pretraining",
    "pretrain_all": "pretraining",
    "train_run": "pretraining",
    "evaluate_experiment": "evaluation",
    "evaluation_steps": "evaluation",
    "evaluate_grid": "evaluation",
    "evaluation_spec": "evaluation",
    "evaluation_dir": "evaluation",
    "report_experiment": "reporting",
    "report_spec": "reporting",
    "write_grid_summary": "reporting",
    "run_experiment": "run",
    "describe_plan": "run",
    "training_phases": "pretraining",
    "watch_run": "pretraining",
    "training_spec": "pretraining",
    "objective_spec": "pretraining",
    "RunPlan": "plans",
    "run_plan": "plans",
    "require_unsealed": "seal",
    "plan_runs": "plans",
    "cache_dir": "preparation",
    "write_resolved_config": "plans",
    "load_encoder": "embedding",
    "locate_run": "embedding",
    "run_encoder": "embedding",
    "export_run": "exporting",
    "export_spec": "exporting",
    "evaluation_result": "exporting",
    "save_pretrained": "exporting",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
