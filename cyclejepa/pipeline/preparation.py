"""Stage 1, prepare: the configured dataset (its corpus written when it is synthetic and
missing), then the cache of its windows; `cache_spec` is the one place the config's data and
phase sections become a `CacheSpec`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cyclejepa.config import ExperimentConfig
from cyclejepa.data.cache.spec import CacheSpec
from cyclejepa.jsonio import read_json, write_json
from cyclejepa.pipeline.seal import refuse_sealed, use_folds


def cache_dir(cfg: ExperimentConfig) -> Path:
    """The cache's folder: ``data.cache_dir``, else ``<output_dir>/cache``."""
    return Path(cfg.data.cache_dir or Path(cfg.output_dir) / "cache")


def cache_spec(cfg: ExperimentConfig, directory: Path | None = None) -> CacheSpec:
    """The `CacheSpec` of the config's cache: ``data`` and ``phase`` as the cache reads them, in
    ``directory`` (default `cache_dir`: ``data.cache_dir`` or ``<output_dir>/cache``)."""
    data = cfg.data
    return CacheSpec(
        directory=Path(directory) if directory is not None else cache_dir(cfg),
        dataset=data.dataset,
        root=data.root,
        dataset_options=data.options.model_dump(mode="json"),
        cache_fs=data.cache_fs,
        decimation=data.decimation,
        token_patch=data.token_patch,
        window_s=data.window_s,
        phase_provider=cfg.phase.provider,
        phase_options=cfg.phase.options.model_dump(mode="json"),
        amplitude_limits=dict(data.amplitude_limits),
        train_folds=tuple(data.train_folds) if data.train_folds is not None else None,
        workers=data.workers,
    )


def configured_cache(cfg: ExperimentConfig, directory: Path | None = None, *, corpus: bool = True):
    """The config's prepared cache (`cyclejepa.data.cache.open_cache` of `cache_spec`), refused
    with `CacheMismatch` when it was built for another experiment; ``corpus`` False leaves the
    corpus on disk out of the comparison (for a reader that never reads it)."""
    from cyclejepa.data.cache import open_cache

    return open_cache(cache_spec(cfg, directory), corpus=corpus)


def build_dataset(cfg: ExperimentConfig, progress: bool = False):
    """The configured `Dataset`: ``data.dataset`` built with ``data.root`` and ``data.options``
    (nothing is read or written; `prepare` calls its `fetch`)."""
    from cyclejepa.registry import DATASETS

    options = cfg.data.options.model_dump()
    if "progress" in type(cfg.data.options).model_fields:  # a dataset that writes its corpus shows its progress
        options.setdefault("progress", progress)
    return DATASETS.build(cfg.data.dataset, options, root=cfg.data.root)


OWNER = ".experiment.json"
"""The file in a cache folder naming the experiment (its output directory) that last prepared it."""


def prepare(cfg: ExperimentConfig, progress: bool = True, *, overwrite_cache: bool = False, merge: bool = False):
    """Stage 1: build the configured dataset (writing the synthetic corpus when configured and
    missing), then the cache of its windows; with ``merge`` the cache of the shards `prepare_shard`
    prepared (`cyclejepa.data.cache.shards.merge_shards`). A cache that another experiment
    prepared (a shared ``data.cache_dir``) and that this one would rebuild is refused
    (`refuse_foreign_cache`) unless ``overwrite_cache``."""
    from cyclejepa.data.cache import prepare_cache
    from cyclejepa.data.cache.shards import merge_shards

    dataset, spec = _ready(cfg, progress)
    if not overwrite_cache:
        refuse_foreign_cache(cfg)
    cache = merge_shards(dataset, spec) if merge else prepare_cache(dataset, spec, progress=progress)
    write_json(cache.path / OWNER, {"output_dir": _experiment(cfg), "name": cfg.name})
    return cache


def prepare_shard_stage(cfg: ExperimentConfig, index: int, count: int, progress: bool = True) -> dict:
    """Share ``index`` of ``count`` of the config's cache prepared on its own
    (`cyclejepa.data.cache.shards.prepare_shard`); returns its ``share.json``."""
    from cyclejepa.data.cache.shards import prepare_shard as prepare_one

    dataset, spec = _ready(cfg, progress)
    return prepare_one(dataset, spec, index, count, progress=progress)


def _ready(cfg: ExperimentConfig, progress: bool):
    """The configured dataset, fetched, and the cache's spec with the folds its normalisation uses."""
    dataset, spec = build_dataset(cfg, progress), cache_spec(cfg)
    refuse_sealed(cfg, "normalisation statistics", "data.train_folds")
    dataset.fetch()  # a missing corpus is named before any fold is recorded as used
    train_folds = use_folds(cfg, "normalisation statistics", "data.train_folds")
    return dataset, dataclasses.replace(spec, train_folds=tuple(train_folds))


def _experiment(cfg: ExperimentConfig) -> str:
    return str(Path(cfg.output_dir).resolve())


def refuse_foreign_cache(cfg: ExperimentConfig) -> None:
    """Raise `CacheMismatch` when ``cache_dir``, outside this experiment's output directory, holds
    a cache that another experiment prepared and that this config would rebuild (its identity differs),
    naming that experiment, the differences and the remedies; a cache of this experiment, or
    one this config would reuse as it is, passes."""
    from cyclejepa.data.cache import CacheMismatch, PreparedCache
    from cyclejepa.data.cache.identity import cache_differences

    directory = cache_dir(cfg)
    owner_file = directory / OWNER
    if not owner_file.is_file() or directory.resolve().is_relative_to(_experiment(cfg)):
        return  # no owner, or the experiment's own cache (inside its output_dir, also when copied there)
    try:
        owner = read_json(owner_file)
    except (OSError, ValueError):
        return  # unreadable: the cache is treated as before there were owners
    if owner.get("output_dir") == _experiment(cfg):
        return
    try:
        differences = cache_differences(PreparedCache(directory), cache_spec(cfg))
    except (OSError, ValueError, KeyError):
        return  # an unreadable cache is rebuilt, as before
    if differences:
        raise CacheMismatch(
            f"data.cache_dir: the cache {directory} was prepared by experiment {owner.get('name')!r} at "
            f"{owner.get('output_dir')} with other settings ({'; '.join(differences)}); this config would replace it. "
            "Give this experiment its own data.cache_dir, or pass --overwrite-cache to rebuild it (the other experiment's "
            "evaluation and embedding then refuse it)"
        )
