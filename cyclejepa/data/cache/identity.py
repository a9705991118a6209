"""Which experiment a cache serves: every reader compares the cache's manifest with its spec.

Two experiments may share a ``data.cache_dir``; when the second rebuilds it, the first's
evaluation, embedding or training would read another corpus without a word. `open_cache` loads
a cache only when what it was built from (dataset, its options and root, the corpus there,
channels, rates, window, normalisation folds, amplitude limits, phase provider and options) is
what its `CacheSpec` (built from the experiment's config) asks for, and names both sides otherwise.

The corpus is compared by its listing (`corpus_listing`: file names, sizes and modification
times, one ``stat`` per file, no file read), recorded when the cache is built and taken again
from the root at each read; where the root is absent (``embed`` on another machine) the name,
options and root are compared without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cyclejepa.data.cache.files import as_json
from cyclejepa.data.cache.prepared import PreparedCache
from cyclejepa.data.cache.spec import CacheSpec
from cyclejepa.data.datasets import DatasetNotFound, amplitude_limit, corpus_listing
from cyclejepa.registry import DATASETS

__all__ = ["CacheMismatch", "cache_differences", "cache_identity", "spec_identity", "open_cache"]


class CacheMismatch(ValueError):
    """A cache built for another experiment than the spec that reads it."""


def spec_identity(spec: CacheSpec) -> dict[str, Any]:
    """What the spec asks of its cache (see `cache_identity` for the same keys from a manifest);
    None for a key the spec cannot tell (no dataset named, no root configured, the corpus absent)."""
    if spec.dataset is None:
        dataset = root = None
    else:
        dataset = DATASETS.build(spec.dataset, root=spec.root, **spec.dataset_options)  # reads nothing
        try:
            root = dataset.root
        except DatasetNotFound:
            root = None
    return {
        "dataset": spec.dataset,
        "dataset_options": as_json(spec.dataset_options),
        "root": str(Path(root).resolve()) if root is not None else None,
        "corpus": corpus_listing(root),
        "channels": list(dataset.channels) if dataset is not None else None,
        "cache_fs": float(spec.cache_fs) if spec.cache_fs is not None else None,
        "decimation": spec.decimation,
        "token_patch": spec.token_patch,
        "window_s": float(spec.window_s) if spec.window_s is not None else None,
        "train_folds": sorted(spec.train_folds) if spec.train_folds is not None else None,
        "amplitude_limits": {c: amplitude_limit(dataset.unit_of(c), spec.amplitude_limits) for c in dataset.channels}
        if dataset is not None
        else None,
        "phase_provider": spec.phase_provider,
        "phase_options": dict(spec.phase_options),
    }


def cache_identity(cache: PreparedCache) -> dict[str, Any]:
    """What a cache was built from, from its manifest (keys of `spec_identity`)."""
    arguments = cache.manifest["arguments"]
    return {
        "dataset": cache.manifest["dataset"]["name"],
        "dataset_options": arguments["dataset_options"],
        "root": arguments["root"],
        "corpus": arguments["corpus"],
        "channels": list(cache.geometry.channels),
        "cache_fs": cache.geometry.cache_fs,
        "decimation": cache.geometry.decimation,
        "token_patch": cache.geometry.token_patch,
        "window_s": cache.geometry.window_s,
        "train_folds": sorted(arguments["train_folds"]),
        "amplitude_limits": arguments["amplitude_limits"],
        "phase_provider": arguments["phase_provider"],
        "phase_options": dict(arguments["phase_options"]),
    }


def open_cache(spec: CacheSpec, *, corpus: bool = True) -> PreparedCache:
    """The cache in ``spec.directory``, refused with `CacheMismatch` naming each differing key,
    the cache's value and the spec's, when it was built for another experiment. ``corpus``
    False: the corpus listing is not compared (a reader of the cache's preprocessing alone, such
    as ``embed``, which never reads the corpus, still works after ``cp -r`` gave it new mtimes)."""
    cache = PreparedCache(spec.directory)
    differences = cache_differences(cache, spec, corpus=corpus)
    if differences:
        raise CacheMismatch(
            f"the cache {spec.directory} was built for another experiment ({'; '.join(differences)}); rebuild it with "
            "`cyclejepa prepare CONFIG`, or give this experiment its own data.cache_dir"
        )
    return cache


def cache_differences(cache: PreparedCache, spec: CacheSpec, *, corpus: bool = True) -> list[str]:
    """``key: cache <value>, config <value>`` for each key of `spec_identity` that the spec tells
    and the cache was built with otherwise (``corpus`` False: the corpus listing left out)."""
    built, wanted = cache_identity(cache), spec_identity(spec)
    if not corpus:
        wanted["corpus"] = None
    return [
        f"{key}: cache {built[key]!r}, config {wanted[key]!r}"
        for key in wanted
        if wanted[key] is not None and built[key] != wanted[key]
    ]
