"""Run identity: what a run's weights and an evaluation's results depend on, and their hashes.

Only the keys listed here count; training.precision and the kind of training.device count as
resolved (bf16 changes every step's arithmetic, a CUDA generator draws other numbers than a
CPU one). See docs/configuration.md, "Run identity".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cyclejepa.jsonio import flat_json, identity_differences, short_hash

__all__ = ["config_hash", "evaluation_identity", "identity_differences", "identity_hash", "training_identity"]

if TYPE_CHECKING:
    from cyclejepa.config import ExperimentConfig

TRAINING_KEYS = (
    "data.dataset",
    "data.options",
    "data.cache_fs",
    "data.decimation",
    "data.token_patch",
    "data.window_s",
    "data.train_folds",
    "phase",
    "symmetry",
    "model",
    "objectives.prediction",
    "objectives.regulariser",
    "optimiser",
    "training.steps",
    "training.batch_size",
    "training.precision",
    "augmentations",
)
"""Key paths (sections or leaves) that change a run's weights."""
EVALUATION_KEYS = (
    "data.eval_folds",
    "evaluation.bootstrap",
    "evaluation.seed",
    "evaluation.probe_c",
    "evaluation.detector",
    "evaluation.families",
    "evaluation.severities",
    "evaluation.anomaly_records",
    "evaluation.eligible_min_positives",
)
"""Key paths that change a checkpoint's evaluation results besides its weights."""


def config_hash(cfg: ExperimentConfig) -> str:
    """`short_hash` of the whole configuration's JSON dump."""
    return short_hash(cfg.model_dump(mode="json"))


def training_identity(cfg: ExperimentConfig, transport_weight: float, seed: int) -> dict[str, Any]:
    """What one arm × seed's weights depend on, as ``{key path: value}`` (`TRAINING_KEYS`, resolved)."""
    identity = {**_flat_keys(cfg, TRAINING_KEYS), **_resolved_training_keys(cfg)}
    return {**identity, "arm.transport_weight": transport_weight, "seed": seed}


def evaluation_identity(cfg: ExperimentConfig) -> dict[str, Any]:
    """What a checkpoint's evaluation results depend on (`TRAINING_KEYS`, `EVALUATION_KEYS`)."""
    return {**_flat_keys(cfg, TRAINING_KEYS + EVALUATION_KEYS), **_resolved_training_keys(cfg)}


def _resolved_training_keys(cfg: ExperimentConfig) -> dict[str, str]:
    """``training.device`` as a kind of device and ``training.precision`` as it runs there."""
    from cyclejepa.devices import device_type, resolved_precision

    kind = device_type(cfg.training.device)
    return {"training.device": kind, "training.precision": resolved_precision(cfg.training.precision, kind)}


def identity_hash(identity: dict[str, Any]) -> str:
    """`short_hash` of an identity."""
    return short_hash(identity)


def _flat_keys(cfg: ExperimentConfig, keys: tuple[str, ...]) -> dict[str, Any]:
    """``{leaf key path: JSON value}`` of the sections at ``keys`` (list items as ``key[i]``)."""
    dumped = cfg.model_dump(mode="json")
    flat: dict[str, Any] = {}
    for key in keys:
        value = dumped
        for part in key.split("."):
            value = value[part]
        flat.update(flat_json(key, value))
    return flat
