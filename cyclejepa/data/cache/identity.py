"""Which experiment a cache serves: every reader compares the cache's manifest with its config.

Two experiments may share a ``data.cache_dir``; when the second rebuilds it, the first's
evaluation, embedding or training would read another corpus without a word. `open_cache` loads
a cache only when what it was built from (dataset, its options and root, the corpus there,
channels, rates, window, normalisation folds, amplitude limits, phase provider and options) is
what the config asks for, and names both sides otherwise.

The corpus is compared by its listing (`corpus_listing`: file names, sizes and modification
times, one ``stat`` per file, no file read), recorded when the cache is built and taken again
from the root at each read; where the root is absent (``embed`` on another machine) the name,
options and root are compared without it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cyclejepa.config import ExperimentConfig
from cyclejepa.facts import data_facts
from cyclejepa.data.cache.files import as_json
from cyclejepa.data.cache.prepared import PreparedCache
from cyclejepa.data.datasets import DatasetNotFound, amplitude_limit, corpus_listing
from cyclejepa.pipeline.plans import cache_dir
from cyclejepa.registry import DATASETS

__all__ = ["CacheMismatch", "cache_identity", "config_identity", "open_cache"]


class CacheMismatch(ValueError):
    """A cache built for another experiment than the config that reads it."""


def config_identity(cfg: ExperimentConfig) -> dict[str, Any]:
    """What the config asks of its cache (see `cache_identity` for the same keys from a manifest);
    None for a key the config cannot tell (no root configured, the corpus absent)."""
    facts = data_facts(cfg.data)
    channels = list(facts.channels) if not isinstance(facts, str) else None
    dataset = DATASETS.build(cfg.data.dataset, root=cfg.data.root, **cfg.data.options)  # reads nothing
    try:
        root = dataset.root
    except DatasetNotFound:
        root = None
    limits = cfg.data.amplitude_limits
    return {
        "dataset": cfg.data.dataset,
        "dataset_options": as_json(cfg.data.options),
        "root": str(Path(root).resolve()) if root is not None else None,
        "corpus": corpus_listing(root),
        "channels": channels,
        "fs": float(cfg.data.fs),
        "decimation": cfg.data.decimation,
        "token_patch": cfg.data.token_patch,
        "window_s": float(cfg.data.window_s),
        "train_folds": sorted(cfg.data.train_folds),
        "amplitude_limits": {c: amplitude_limit(dataset.unit_of(c), limits) for c in dataset.channels},
        "phase_provider": cfg.phase.provider,
        "phase_options": dict(cfg.phase.options),
    }


def cache_identity(cache: PreparedCache) -> dict[str, Any]:
    """What a cache was built from, from its manifest (keys of `config_identity`; None for a key
    a cache built before it was recorded lacks)."""
    arguments = cache.manifest["arguments"]
    return {
        "dataset": cache.manifest.get("dataset", {}).get("name"),
        "dataset_options": arguments.get("dataset_options"),
        "root": arguments.get("root"),
        "corpus": arguments.get("corpus"),
        "channels": list(arguments["channels"]),
        "fs": float(arguments["fs"]),
        "decimation": arguments.get("decimation", round(arguments["fs"] / cache.manifest["fs"])),
        "token_patch": arguments["token_patch"],
        "window_s": float(arguments["window_s"]),
        "train_folds": sorted(arguments["train_folds"]),
        "amplitude_limits": arguments.get("amplitude_limits"),
        "phase_provider": arguments["phase_provider"],
        "phase_options": dict(arguments["phase_options"]),
    }


def open_cache(cfg: ExperimentConfig, path: str | os.PathLike | None = None) -> PreparedCache:
    """The cache at ``path`` (default the config's, ``data.cache_dir`` or ``<output_dir>/cache``),
    refused with `CacheMismatch` naming each differing key, the cache's value and the config's,
    when it was built for another experiment."""
    path = Path(path) if path is not None else cache_dir(cfg)
    cache = PreparedCache(path)
    built, wanted = cache_identity(cache), config_identity(cfg)
    differences = [f"{key}: cache {built[key]!r}, config {wanted[key]!r}" for key in wanted
                   if wanted[key] is not None and built[key] != wanted[key]]  # fmt: skip
    if differences:
        raise CacheMismatch(
            f"the cache {path} was built for another experiment ({'; '.join(differences)}); rebuild it with "
            "`cyclejepa prepare CONFIG`, or give this experiment its own data.cache_dir"
        )
    return cache
