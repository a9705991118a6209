"""Which experiment a cache serves: every reader compares the cache's manifest with its config.

Two experiments may share a ``data.cache_dir``; when the second rebuilds it, the first's
evaluation, embedding or training would read another corpus without a word. `open_cache` loads
a cache only when what it was built from (dataset, channels, rates, window, normalisation folds,
phase provider and options) is what the config asks for, and names both sides otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cyclejepa.config import ExperimentConfig, data_facts
from cyclejepa.data.cache.prepared import PreparedCache
from cyclejepa.outputs import cache_dir

__all__ = ["CacheMismatch", "cache_identity", "config_identity", "open_cache"]


class CacheMismatch(ValueError):
    """A cache built for another experiment than the config that reads it."""


def config_identity(cfg: ExperimentConfig) -> dict[str, Any]:
    """What the config asks of its cache (see `cache_identity` for the same keys from a manifest)."""
    facts = data_facts(cfg.data)
    channels = list(facts.channels) if not isinstance(facts, str) else None
    return {
        "dataset": cfg.data.dataset,
        "channels": channels,
        "fs": float(cfg.data.fs),
        "decimation": cfg.data.decimation,
        "token_patch": cfg.data.token_patch,
        "window_s": float(cfg.data.window_s),
        "train_folds": sorted(cfg.data.train_folds),
        "phase_provider": cfg.phase.provider,
        "phase_options": dict(cfg.phase.options),
    }


def cache_identity(cache: PreparedCache) -> dict[str, Any]:
    """What a cache was built from, from its manifest (keys of `config_identity`)."""
    arguments = cache.manifest["arguments"]
    return {
        "dataset": cache.manifest.get("dataset", {}).get("name"),
        "channels": list(arguments["channels"]),
        "fs": float(arguments["fs"]),
        "decimation": arguments.get("decimation", round(arguments["fs"] / cache.manifest["fs"])),
        "token_patch": arguments["token_patch"],
        "window_s": float(arguments["window_s"]),
        "train_folds": sorted(arguments["train_folds"]),
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
