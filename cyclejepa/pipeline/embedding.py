"""The embedding stage: a run's trained `Encoder` from its output directory (`load_encoder`,
``cyclejepa embed``), with the run's preprocessing read from its config and cache."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cyclejepa.config import ExperimentConfig, load_config
from cyclejepa.embed import CacheSettings, Encoder, find_checkpoint
from cyclejepa.outputs import OutputFolder, checkpoint_step
from cyclejepa.pipeline.plans import RunPlan, plan_runs

__all__ = ["CORPUS_MANIFEST", "CorpusEmbedding", "embed_corpus", "load_encoder", "locate_run", "run_encoder"]


def load_encoder(
    run_dir: str | os.PathLike,
    step: int | None = None,
    device: str = "auto",
    *,
    arm: str | None = None,
    seed: int | None = None,
) -> Encoder:
    """The trained encoder of a run, with the run's preprocessing.

    Parameters
    ----------
    run_dir : output directory of `cyclejepa run` (holds config.yaml), or one run's folder in it
        (``<output_dir>/runs/<arm>-seed<seed>``).
    step : checkpoint step; default ``evaluation.headline_step`` when that checkpoint exists,
        else the latest checkpoint.
    device : ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
    arm, seed : the run of an output directory (default: the first arm and the first seed).
    """
    cfg, plan = locate_run(Path(run_dir), arm, seed)
    return run_encoder(cfg, plan, step, device)


def run_encoder(cfg: ExperimentConfig, plan: RunPlan, step: int | None = None, device: str = "auto") -> Encoder:
    """The `Encoder` of run ``plan`` of ``cfg`` at checkpoint ``step`` (as `load_encoder` chooses
    it) on ``device``: the trained model and symmetry, and the settings of the run's cache
    and dataset."""
    from cyclejepa.pipeline.preparation import configured_cache
    from cyclejepa.devices import resolve_device
    from cyclejepa.pipeline.pretraining import objective_spec
    from cyclejepa.training import load_trained

    checkpoint = find_checkpoint(plan.folder, step, cfg.evaluation.headline_step)
    target = resolve_device(device)
    objective = load_trained(objective_spec(cfg), checkpoint, target)
    settings = CacheSettings.from_cache(
        configured_cache(cfg, corpus=False), cfg.data.dataset, cfg.data.options.model_dump(mode="json")
    )
    source = {"run": str(checkpoint.parents[1]), "step": checkpoint_step(checkpoint)}
    return Encoder(objective.model, settings, target, source, objective.symmetry, root=cfg.data.root)


def locate_run(path: Path, arm: str | None = None, seed: int | None = None) -> tuple[ExperimentConfig, RunPlan]:
    """The config (output_dir set to where it lies now) and the `RunPlan` of ``path`` (as
    `load_encoder` takes ``run_dir``, ``arm`` and ``seed``)."""
    if OutputFolder(path).config.is_file():
        output, name = path, None
    elif path.parent.name == "runs" and OutputFolder(path.parents[1]).config.is_file():
        output, name = path.parents[1], path.name
    else:
        raise FileNotFoundError(
            f"{path} is neither the output directory of `cyclejepa run` (no config.yaml) "
            f"nor a run folder <output_dir>/runs/<arm>-seed<seed> in one"
        )
    cfg = load_config(OutputFolder(output).config).model_copy(update={"output_dir": output})
    if cfg.grid:
        raise ValueError(f"{output} holds a grid of experiments: give one cell, {output / 'grid'}/<label>")
    plans = plan_runs(cfg)
    wanted = [p for p in plans if (name is None or p.name == name) and arm in (None, p.arm.name) and seed in (None, p.seed)]
    if not wanted:
        asked = name or f"arm {arm or 'any'}, seed {'any' if seed is None else seed}"
        raise ValueError(f"{output} has no run {asked}; its runs are {[p.name for p in plans]}")
    return cfg, wanted[0]


CORPUS_MANIFEST = "embedding.json"
"""The file of a corpus embedding folder naming what its shards hold (`embed_corpus`)."""
SHARD = "part-{index:05d}-of-{count:05d}"
"""A shard's file name without suffix: ``.parquet`` (its records' `Embeddings`) or
``.failed.json`` (a shard none of whose records could be embedded: why, per record)."""


@dataclass(frozen=True)
class CorpusEmbedding:
    """What `embed_corpus` wrote: the folder, its shard files, and records embedded and failed
    (all shards, those of an earlier run resumed included)."""

    folder: Path
    shards: tuple[Path, ...]
    embedded: int
    failed: dict[str, str]
    resumed: int


def embed_corpus(
    encoder: Encoder,
    out: str | os.PathLike,
    root: str | os.PathLike | None = None,
    *,
    records_per_shard: int = 1000,
    workers: int = 1,
    batch_size: int = 256,
    keep_tokens: bool = False,
    progress: bool = True,
) -> CorpusEmbedding:
    """Every record of a corpus embedded into a folder of parquet shards of ``records_per_shard``
    records each, with memory bounded by one shard per process.

    The corpus is the run's (``root`` None) or the folder ``root`` read by the run's dataset
    (`Encoder.corpus_dataset`), its records in the dataset's order; shard k of n holds records
    k·s to (k+1)·s − 1 (`SHARD`). Each shard is written whole and renamed into place, so a
    killed run leaves only complete shards: run again with the same arguments and it embeds the
    missing ones (a folder written with other arguments is refused, naming them). ``workers``
    > 1 embeds shards side by side in that many processes, each on the CPU with its share of
    the threads; 1 embeds in this process on the encoder's device.
    """
    if records_per_shard < 1 or workers < 1:
        raise ValueError(f"records_per_shard and workers must be at least 1, got {records_per_shard} and {workers}")
    dataset = encoder.corpus_dataset(root)
    entries = dataset.entries()
    if not entries:
        raise ValueError(f"{dataset.root}: the dataset {encoder.settings.dataset!r} finds no record there")
    count = -(-len(entries) // records_per_shard)
    folder = Path(out)
    manifest = {
        "format": 1,
        "source": encoder.source,
        "dataset": encoder.settings.dataset,
        "root": str(dataset.root),
        "records": len(entries),
        "records_per_shard": records_per_shard,
        "keep_tokens": keep_tokens,
        "first": entries[0].name,
        "last": entries[-1].name,
    }
    _claim_folder(folder, manifest)
    todo = [k for k in range(count) if _shard_file(folder, k, count) is None]
    shards = [(k, entries[k * records_per_shard : (k + 1) * records_per_shard]) for k in todo]
    settings = {"count": count, "batch_size": batch_size, "keep_tokens": keep_tokens}
    _embed_shards(encoder, dataset, folder, shards, settings, workers, progress)
    return _summary(folder, count, resumed=count - len(todo))


def _claim_folder(folder: Path, manifest: dict) -> None:
    """Create ``folder`` with `CORPUS_MANIFEST`, or check that the one there matches ``manifest``
    (ValueError naming the keys that differ); stale partial files of a killed run removed."""
    from cyclejepa.jsonio import read_json, write_json

    path = folder / CORPUS_MANIFEST
    if path.is_file():
        found = read_json(path)
        differ = sorted(key for key in set(found) | set(manifest) if found.get(key) != manifest.get(key))
        if differ:
            raise ValueError(
                f"{folder} holds a corpus embedding of other arguments ({', '.join(differ)} differ): "
                f"give another --out, or remove the folder to start again"
            )
    elif folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty and holds no {CORPUS_MANIFEST}: give an empty or new folder")
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(".part-*.partial"):
        stale.unlink()
    if not path.is_file():
        write_json(path, manifest)


def _shard_file(folder: Path, index: int, count: int) -> Path | None:
    """The complete file of shard ``index`` of ``count`` in ``folder``, None when it is missing."""
    stem = SHARD.format(index=index, count=count)
    return next(
        (folder / f"{stem}{suffix}" for suffix in (".parquet", ".failed.json") if (folder / f"{stem}{suffix}").is_file()), None
    )


def _embed_shards(encoder, dataset, folder: Path, shards: list, settings: dict, workers: int, progress: bool) -> None:
    """Write each (index, entries) of ``shards`` (`_write_shard`), here or in ``workers`` processes."""
    from cyclejepa.progress import progress_bar

    total = sum(len(entries) for _, entries in shards)
    with progress_bar(total, "embedding the corpus", enabled=progress, unit="records", rate=True) as advance:
        if workers == 1 or len(shards) <= 1:
            for index, entries in shards:
                _write_shard(encoder, dataset, folder, index, entries, settings)
                advance(len(entries))
            return
        from concurrent.futures import as_completed

        from cyclejepa.workers import process_pool, shared_threads

        payload = (encoder.to("cpu"), dataset)
        with process_pool(
            workers, initializer=_set_worker, initargs=payload, threads=shared_threads(workers), tasks=len(shards)
        ) as pool:
            futures = {pool.submit(_worker_shard, folder, index, entries, settings): len(entries) for index, entries in shards}
            for future in as_completed(futures):
                future.result()
                advance(futures[future])


_WORKER: dict[str, tuple[Encoder, Any]] = {}


def _set_worker(encoder: Encoder, dataset) -> None:
    """The encoder and dataset of this worker process (sent once per worker)."""
    _WORKER["state"] = (encoder, dataset)


def _worker_shard(folder: Path, index: int, entries: list, settings: dict) -> None:
    _write_shard(*_WORKER["state"], folder, index, entries, settings)


def _write_shard(encoder: Encoder, dataset, folder: Path, index: int, entries: list, settings: dict) -> None:
    """Shard ``index``: its records' `Embeddings` as parquet, or, when none could be embedded,
    why per record as ``.failed.json``; written whole and renamed into place."""
    import json

    from cyclejepa.embed import NothingEmbedded, write_atomically

    stem = SHARD.format(index=index, count=settings["count"])
    try:
        result = encoder.embed_entries(dataset, entries, batch_size=settings["batch_size"], keep_tokens=settings["keep_tokens"])
    except NothingEmbedded as nothing:
        text = json.dumps({"failed": nothing.failed}, indent=1).encode()
        write_atomically(folder / f"{stem}.failed.json", lambda file: file.write(text))
        return
    result.save(folder / f"{stem}.parquet")


def _summary(folder: Path, count: int, resumed: int) -> CorpusEmbedding:
    """Shards, records embedded and failed, read back from the shard files' metadata."""
    import json

    import pyarrow.parquet as pq

    shards, embedded, failed = [], 0, {}
    for index in range(count):
        path = _shard_file(folder, index, count)
        if path is None:
            raise RuntimeError(f"{folder}: shard {index} of {count} is missing after embedding")
        shards.append(path)
        if path.suffix == ".parquet":
            meta = pq.read_metadata(path)
            embedded += meta.num_rows
            failed.update(json.loads(meta.metadata[b"failed"]))
        else:
            failed.update(json.loads(path.read_text())["failed"])
    return CorpusEmbedding(folder, tuple(shards), embedded, failed, resumed)
