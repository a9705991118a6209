"""Preparing one cache on N machines: `prepare_shard` prepares share I of N of the corpus's
records on its own; `merge_shards` checks that every share is there and of this cache's identity,
fits the normalisation from their statistics and writes the cache.

Share I of N holds the records ``floor(I · M / N)`` to ``floor((I + 1) · M / N) - 1`` of the M
records the dataset lists, in its order (`share_rows`); its folder is
``<cache_dir>.shards/shard-IIIII-of-NNNNN`` beside the cache, built in a temporary folder and
renamed into place when complete, so a killed shard leaves nothing half-written and a re-run
reuses a finished shard of the same arguments. The merged cache equals the one-step
``prepare_cache`` (its normalisation to float64 rounding); the shard folders are removed once it is in
place.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from cyclejepa.data.cache.build import assemble, build_share, cache_arguments, publish, remove_stale_builds
from cyclejepa.data.cache.files import arguments_hash
from cyclejepa.data.cache.prepared import PreparedCache
from cyclejepa.data.cache.shares import SHARE_FILE, read_share
from cyclejepa.data.cache.spec import CacheSpec
from cyclejepa.data.datasets import Dataset
from cyclejepa.lock import file_lock

__all__ = ["ShardMismatch", "merge_shards", "parse_shard", "prepare_shard", "shard_folder", "shards_dir"]

log = logging.getLogger(__name__)
_NAME = re.compile(r"shard-(\d+)-of-(\d+)")


class ShardMismatch(ValueError):
    """A shard that is missing, or prepared for another cache than the one being merged."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as (I, N): share I (0 ≤ I < N) of N; ValueError saying what is wrong otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"--shard {text!r}: expected I/N, two integers such as 0/4 (share I of N, I from 0 to N - 1)")
    index, count = int(match[1]), int(match[2])
    if count < 1:
        raise ValueError(f"--shard {text}: N = {count}, the number of shares must be at least 1")
    if index >= count:
        raise ValueError(f"--shard {text}: I = {index} is not a share of {count}; I runs from 0 to {count - 1}")
    return index, count


def shards_dir(cache_dir: Path) -> Path:
    """The folder of a cache's shards: ``<cache_dir>.shards`` beside it."""
    return Path(cache_dir).with_name(f"{Path(cache_dir).name}.shards")


def shard_folder(cache_dir: Path, index: int, count: int) -> Path:
    return shards_dir(cache_dir) / f"shard-{index:05d}-of-{count:05d}"


def prepare_shard(dataset: Dataset, spec: CacheSpec, index: int, count: int, *, progress: bool = True) -> dict[str, Any]:
    """Prepare share ``index`` of ``count`` of the cache ``spec`` describes (`share_rows`) into
    `shard_folder`; a finished shard of the same arguments is reused. Returns its `SHARE_FILE`."""
    parse_shard(f"{index}/{count}")
    arguments = cache_arguments(dataset, spec)
    target = shard_folder(spec.directory, index, count)
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.with_name(f".{target.name}.lock"), f"the shard {target}"):
        if (target / SHARE_FILE).is_file() and read_share(target).get("config_hash") == arguments_hash(arguments):
            log.info("shard %s is prepared already; reused", target)
            return read_share(target)
        remove_stale_builds(target.parent, f".{target.name}.build-")
        build = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-{os.getpid()}-", dir=target.parent))
        try:
            info = build_share(
                dataset,
                arguments,
                build,
                workers=spec.workers,
                progress=progress,
                part_bytes=spec.part_bytes,
                index=index,
                count=count,
            )
            if target.exists():
                shutil.rmtree(target)
            build.rename(target)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
    return info


def merge_shards(dataset: Dataset, spec: CacheSpec) -> PreparedCache:
    """The cache of the shards in `shards_dir`: every share of N present (`ShardMismatch` naming
    each missing one and the command that prepares it) and prepared with this cache's arguments
    (`ShardMismatch` naming a foreign one and the arguments that differ); the normalisation fitted
    from their statistics, then the cache published as `prepare_cache` does. A current cache is
    reused (the shards left as they are); merged shards are removed once the cache is in place."""
    arguments = cache_arguments(dataset, spec)
    folder, merged = shards_dir(spec.directory), []

    def write(build_dir: Path) -> None:
        shares = _complete_shares(folder, arguments)
        records = sum(read_share(s)["counts"]["records"] for s in shares)
        if records != len(dataset.entries()):
            raise ShardMismatch(f"the shards in {folder} hold {records} records, the corpus lists {len(dataset.entries())}")
        assemble(dataset, shares, build_dir, arguments, spec.directory)
        merged.append(True)

    cache = publish(spec.directory, arguments, write)
    if merged:
        shutil.rmtree(folder)
    return cache


def _complete_shares(folder: Path, arguments: dict[str, Any]) -> list[Path]:
    """The share folders of ``folder`` in order, checked complete and of ``arguments``."""
    found = {}
    for path in sorted(folder.glob("shard-*-of-*")) if folder.is_dir() else []:
        match = _NAME.fullmatch(path.name)
        if match and (path / SHARE_FILE).is_file():
            found[int(match[1]), int(match[2])] = path
    if not found:
        raise ShardMismatch(f"no prepared shard in {folder}: run `cyclejepa prepare CONFIG --shard I/N` for I = 0 … N - 1 first")
    counts = sorted({n for _, n in found})
    if len(counts) > 1:
        raise ShardMismatch(
            f"{folder} holds shards of {' and of '.join(map(str, counts))} shares; remove the ones of the split you do not use"
        )
    count = counts[0]
    missing = [i for i in range(count) if (i, count) not in found]
    if missing:
        raise ShardMismatch(
            f"{len(missing)} of {count} shards missing in {folder}: "
            + ", ".join(f"shard-{i:05d}-of-{count:05d} (`cyclejepa prepare CONFIG --shard {i}/{count}`)" for i in missing)
        )
    wanted = arguments_hash(arguments)
    for (index, _), path in sorted(found.items()):
        share = read_share(path)
        if share["config_hash"] != wanted:
            built = share.get("arguments", {})
            keys = sorted(k for k in set(built) | set(arguments) if built.get(k) != arguments.get(k))
            raise ShardMismatch(
                f"shard {index}/{count} at {path} was prepared for another cache (differs in {', '.join(keys) or 'its hash'}); "
                f"prepare it again with `cyclejepa prepare CONFIG --shard {index}/{count}`"
            )
    return [found[i, count] for i in range(count)]
