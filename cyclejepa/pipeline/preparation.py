"""Stage 1, prepare: the configured dataset (its corpus written when it is synthetic and
missing), then the cache of its windows."""

from __future__ import annotations

from cyclejepa.config import ExperimentConfig
from cyclejepa.pipeline.plans import cache_dir
from cyclejepa.pipeline.seal import refuse_sealed, use_folds


def build_dataset(cfg: ExperimentConfig, progress: bool = False):
    """The configured `Dataset`: ``data.dataset`` built with ``data.root`` and ``data.options``
    (nothing is read or written; `prepare` calls its `fetch`)."""
    import inspect

    from cyclejepa.registry import DATASETS

    options, cls = dict(cfg.data.options), DATASETS.get(cfg.data.dataset)
    if "progress" in inspect.signature(cls).parameters:  # a dataset that writes its corpus shows its progress
        options.setdefault("progress", progress)
    return cls(root=cfg.data.root, **options)


def prepare(cfg: ExperimentConfig, progress: bool = True):
    """Stage 1: build the configured dataset (writing the synthetic corpus when configured and
    missing), then the cache of its windows."""
    from cyclejepa.data.cache import prepare_cache

    refuse_sealed(cfg, "normalisation statistics", "data.train_folds")
    dataset = build_dataset(cfg, progress)
    dataset.fetch()  # a missing corpus is named before any fold is recorded as used
    train_folds = use_folds(cfg, "normalisation statistics", "data.train_folds")
    data = cfg.data
    return prepare_cache(
        dataset,
        cache_dir(cfg),
        train_folds=tuple(train_folds),
        phase_provider=cfg.phase.provider,
        phase_options=cfg.phase.options,
        fs=data.fs,
        decimation=data.decimation,
        token_patch=data.token_patch,
        window_s=data.window_s,
        amplitude_limits=data.amplitude_limits,
        dataset_options=data.options,
        workers=cfg.data.workers,
        progress=progress,
    )
