"""The pipeline: the stages of `cyclejepa run` and the only code that reads the experiment config.

Each stage turns its part of an `ExperimentConfig` into the narrow arguments of the layer below
(the cache, the trainer, the evaluation, the export) and returns what it wrote:

    preflight → prepare (`prepare`) → pre-train (`pretrain_all`) → evaluate and report
    (`evaluate_experiment`, `report_experiment`); `run_experiment` runs them in order.

After a run: the embedding stage (`load_encoder`) and the export stage (`export_run`,
`save_pretrained`).

Names are imported on first use (PEP 562), so ``import cyclejepa.pipeline`` costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "finished": "plans",
    "run_folder": "plans",
    "require_unsealed": "seal",
    "plan_runs": "plans",
    "cache_dir": "plans",
    "run_dir": "plans",
    "write_resolved_config": "plans",
    "benchmark_ptbxl": "benchmarking",
    "benchmark_allocations": "benchmarking",
    "time_experiment": "benchmarking",
    "benchmark_throughput": "throughput",
    "throughput_spec": "throughput",
    "load_encoder": "embedding",
    "locate_run": "embedding",
    "run_encoder": "embedding",
    "export_run": "exporting",
    "export_spec": "exporting",
    "evaluation_result": "exporting",
    "save_pretrained": "exporting",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'cyclejepa.pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(f"cyclejepa.pipeline.{_HOMES[name]}"), name)
