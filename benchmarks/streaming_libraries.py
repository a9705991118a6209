"""Three streaming-data libraries on one corpus: data-path throughput, exact resumption, shares per rank.

    python benchmarks/streaming_libraries.py --cache CACHE [--records 600] [--batch 8 64]
                                             [--batches 300] [--out libraries.json]

Each library writes the first ``records`` rows of the prepared cache ``CACHE`` (signals and
centre-convention token phases, read in contiguous blocks) in its own shard format, then:

- ``batches_per_s``: shuffled batches of ``batch`` (signals (B, C, L) float32 + phases) read in
  this process (no loader workers), median of three passes of ``batches`` batches;
- ``exact_resume``: the batches after a state saved at batch 7 and restored into a fresh reader
  are the batches of the uninterrupted run (``None``: the library keeps no reader state);
- ``disjoint_shares``: the record ids two ranks (``RANK``, ``WORLD_SIZE`` and the like 0/2 and 1/2) read in
  one epoch do not overlap and cover at least all but the dropped tail.

MosaicML ``streaming`` imports ``transformers`` and ``torchvision`` when the package loads; where
``torchvision`` is absent (it pins its own torch build) an empty stand-in module is installed
before the import, which the code paths measured here never call.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from cyclejepa.data.cache.prepared import PreparedCache
from cyclejepa.jsonio import write_json

BLOCK = 256  # cache rows read at once when writing shards
RESUME_AT = 7
# Two machines of one process each, as torchrun describes them (litdata reads GLOBAL_RANK and NNODES).
RANK_KEYS = {"RANK": "0", "GLOBAL_RANK": "0", "NODE_RANK": "0", "WORLD_SIZE": "2", "NNODES": "2",
             "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}  # fmt: skip


def cache_blocks(cache: PreparedCache, records: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first row, signals, phases) of contiguous blocks of the first ``records`` rows."""
    for start in range(0, records, BLOCK):
        stop = min(start + BLOCK, records)
        yield start, np.asarray(cache.signals[start:stop]), np.asarray(cache.phase_centre[start:stop])


def batches_of(items: Iterator[dict], batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[int]]]:
    """Stack per-record dicts (signal, phase, id) into batches."""
    rows: list[dict] = []
    for item in items:
        rows.append(item)
        if len(rows) == batch:
            yield (torch.as_tensor(np.stack([r["signal"] for r in rows])), torch.as_tensor(np.stack([r["phase"] for r in rows])),
                   [int(r["id"]) for r in rows])  # fmt: skip
            rows = []


# --- Lightning litdata ---------------------------------------------------------------------------


def litdata_write(cache: PreparedCache, records: int, out: Path) -> None:
    from litdata.streaming.writer import BinaryWriter

    writer = BinaryWriter(str(out), chunk_bytes="16MB")
    for start, signals, phases in cache_blocks(cache, records):
        for i, (signal, phase) in enumerate(zip(signals, phases, strict=True)):
            writer[start + i] = {"id": start + i, "signal": signal, "phase": phase}
    writer.done()
    writer.merge()


def litdata_reader(out: Path, batch: int, state: dict | None = None):
    from litdata import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(str(out), shuffle=True, drop_last=True, seed=0)
    loader = StreamingDataLoader(dataset, batch_size=batch, num_workers=0, collate_fn=_collate)
    if state is not None:
        loader.load_state_dict(state)
    return loader


def _collate(rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    return (torch.as_tensor(np.stack([r["signal"] for r in rows])), torch.as_tensor(np.stack([r["phase"] for r in rows])),
            [int(r["id"]) for r in rows])  # fmt: skip


def litdata_resume(out: Path, batch: int) -> list[list[int]]:
    loader = litdata_reader(out, batch)
    seen = []
    for i, (_, _, ids) in enumerate(loader):
        seen.append(ids)
        if i + 1 == RESUME_AT:
            break
    state = loader.state_dict()
    return seen + [ids for _, _, ids in litdata_reader(out, batch, state)]


# --- MosaicML streaming --------------------------------------------------------------------------


def _import_streaming():
    if "torchvision" not in sys.modules:
        try:
            import torchvision  # noqa: F401
        except ImportError:
            names = ("torchvision", "torchvision.datasets", "torchvision.transforms", "torchvision.transforms.functional")
            stand_in, datasets, transforms, functional = (_empty_module(name) for name in names)
            datasets.VisionDataset, datasets.CIFAR10, functional.to_tensor = object, object, None  # type: ignore[attr-defined]
            sys.modules.update({"torchvision": stand_in, "torchvision.datasets": datasets,
                                "torchvision.transforms": transforms, "torchvision.transforms.functional": functional})  # fmt: skip
    import streaming

    return streaming


def _empty_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return module


def mosaic_write(cache: PreparedCache, records: int, out: Path) -> None:
    streaming = _import_streaming()
    columns = {"id": "int", "signal": "ndarray:float32", "phase": "ndarray:float32"}
    with streaming.MDSWriter(out=str(out), columns=columns, size_limit="16mb") as writer:
        for start, signals, phases in cache_blocks(cache, records):
            for i, (signal, phase) in enumerate(zip(signals, phases, strict=True)):
                writer.write({"id": start + i, "signal": signal, "phase": phase})


def mosaic_reader(out: Path, batch: int, state: dict | None = None):
    streaming = _import_streaming()
    streaming.base.util.clean_stale_shared_memory()
    dataset = streaming.StreamingDataset(local=str(out), shuffle=True, shuffle_seed=0, batch_size=batch)
    loader = streaming.StreamingDataLoader(dataset, batch_size=batch, num_workers=0, collate_fn=_collate)
    if state is not None:
        loader.load_state_dict(state)
    return loader


def mosaic_resume(out: Path, batch: int) -> list[list[int]]:
    loader = mosaic_reader(out, batch)
    seen = []
    for i, (_, _, ids) in enumerate(loader):
        seen.append(ids)
        if i + 1 == RESUME_AT:
            break
    state = loader.state_dict()
    del loader
    return seen + [ids for _, _, ids in mosaic_reader(out, batch, state)]


# --- WebDataset ------------------------------------------------------------------------------------


def webdataset_write(cache: PreparedCache, records: int, out: Path) -> None:
    import webdataset as wds

    out.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxsize=16 * 2**20, verbose=0) as writer:
        for start, signals, phases in cache_blocks(cache, records):
            for i, (signal, phase) in enumerate(zip(signals, phases, strict=True)):
                writer.write({"__key__": f"{start + i:09d}", "signal.npy": signal, "phase.npy": phase})


def webdataset_reader(out: Path, batch: int, state: dict | None = None):
    import webdataset as wds

    urls = sorted(str(p) for p in out.glob("shard-*.tar"))
    dataset = (
        wds.WebDataset(urls, shardshuffle=len(urls), seed=0, nodesplitter=wds.split_by_node, empty_check=False)
        .shuffle(1000, rng=__import__("random").Random(0))
        .map(_decode_npy)
    )
    return batches_of(iter(dataset), batch)


def _decode_npy(sample: dict) -> dict:
    return {"id": int(sample["__key__"]), "signal": np.load(io.BytesIO(sample["signal.npy"])),
            "phase": np.load(io.BytesIO(sample["phase.npy"]))}  # fmt: skip


LIBRARIES: dict[str, tuple[Callable, Callable, Callable | None]] = {
    "litdata": (litdata_write, litdata_reader, litdata_resume),
    "mosaicml-streaming": (mosaic_write, mosaic_reader, mosaic_resume),
    "webdataset": (webdataset_write, webdataset_reader, None),
}


def throughput(reader: Callable, out: Path, batch: int, batches: int) -> float:
    """Median batches/s of three shuffled passes of ``batches`` batches."""
    rates = []
    for _ in range(3):
        count, start = 0, time.perf_counter()
        for _ in reader(out, batch):
            count += 1
            if count == batches:
                break
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def straight(reader: Callable, out: Path, batch: int) -> list[list[int]]:
    return [ids for _, _, ids in reader(out, batch)]


def shares(reader: Callable, out: Path, batch: int) -> dict:
    """Whether two ranks' ids of one epoch are disjoint, and how many records they cover."""
    seen = []
    for rank in (0, 1):
        os.environ.update({**RANK_KEYS, "RANK": str(rank), "GLOBAL_RANK": str(rank), "NODE_RANK": str(rank)})
        try:
            seen.append({i for ids in straight(reader, out, batch) for i in ids})
        finally:
            for key in RANK_KEYS:
                os.environ.pop(key, None)
    return {"disjoint": not (seen[0] & seen[1]), "covered": len(seen[0] | seen[1])}


def attempt(row: dict, key: str, measurement: Callable) -> None:
    """``row[key]`` = the measurement's result, or the error it raised (a failing library or
    check is reported, not fatal to the others)."""
    try:
        result = measurement()
        if result is not None:
            row[key] = result
    except Exception as error:
        row[key] = f"{type(error).__name__}: {str(error)[:160]}"


def measure_library(name: str, cache: PreparedCache, records: int, batch_sizes: list[int], batches: int) -> dict:
    """One row of the table: ``name``'s write time, throughput, resumption and shares."""
    write, reader, resume = LIBRARIES[name]
    folder = Path(tempfile.mkdtemp(prefix=f"shards-{name}-"))
    shards, row = folder / "shards", {"library": name}
    try:
        start = time.perf_counter()
        attempt(row, "write", lambda: write(cache, records, shards))
        row["write_s"] = round(time.perf_counter() - start, 3)
        for batch in batch_sizes:
            attempt(row, f"batches_per_s_b{batch}", lambda b=batch: round(throughput(reader, shards, b, batches), 1))
        if resume is not None:
            attempt(row, "exact_resume", lambda: resume(shards, batch_sizes[0]) == straight(reader, shards, batch_sizes[0]))
        attempt(row, "shares", lambda: shares(reader, shards, batch_sizes[0]))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return row


def measure(cache: PreparedCache, records: int, batch_sizes: list[int], batches: int) -> list[dict]:
    rows = []
    for name in LIBRARIES:
        rows.append(measure_library(name, cache, records, batch_sizes, batches))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--records", type=int, default=600)
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cache = PreparedCache(args.cache)
    rows = measure(cache, min(args.records, len(cache)), args.batch, args.batches)
    if args.out:
        write_json(args.out, {"records": args.records, "rows": rows})


if __name__ == "__main__":
    main()
