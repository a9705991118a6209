"""Training batches streamed from shards on disk (or an object store), through Lightning ``litdata``.

A training set above ``training.memory_budget_gb`` is written once as litdata chunks
(`write_shards`) and each rank streams its share of each epoch (`StreamBatches`), holding a few
chunks in memory. The order is litdata's shuffle seeded by ``seed + epoch`` (the seed: the first
draw of the ``data`` stream); litdata's loader state travels in every checkpoint, so a resumed run
draws exactly the batches it would have drawn. Why litdata: docs/scale.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cyclejepa.devices import indexed
from cyclejepa.training.distributed import Distributed
from cyclejepa.workers import environment

CHUNK_BYTES = "64MB"
"""Bytes per shard (litdata chunk): what a rank's reader holds in memory at a time is a few of these."""
COMPLETE = "index.json"
"""litdata's index of the chunks, written last: a shard folder without it is incomplete."""


def training_set_bytes(records: int, record_shape: tuple[int, ...], phase_shape: tuple[int, ...]) -> int:
    """Host bytes of a training set held in memory: records × (∏ record_shape + ∏ phase_shape) × 4 (float32)."""
    return records * 4 * (int(np.prod(record_shape)) + int(np.prod(phase_shape)))


def shard_key(identity: dict[str, Any]) -> str:
    """The name of a shard folder: the first 16 hex digits of the sha256 of ``identity`` (JSON),
    which holds what the records are (the cache's manifest, the rows, the phase convention)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def write_shards(blocks: Iterable[tuple[np.ndarray, np.ndarray]], folder: Path) -> Path:
    """Write the records of ``blocks`` ((signals (n, C, L), phases (n, T…)) pairs) as litdata chunks in
    ``folder`` unless a complete set is there; via a temporary folder renamed into place (a killed
    writer leaves no half-written set), holding one block and one chunk in memory."""
    folder = Path(folder)
    if (folder / COMPLETE).is_file():
        return folder
    BinaryWriter = _litdata().streaming.writer.BinaryWriter

    temporary = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    with environment(_WRITER_WORLD):  # litdata's writer as rank 0 of 1, also inside a process group
        writer, index = BinaryWriter(str(temporary), chunk_bytes=CHUNK_BYTES), 0
        for signals, phases in blocks:
            if len(signals) != len(phases):
                raise ValueError(f"a block of {len(signals)} records has {len(phases)} phase rows")
            for signal, phase in zip(np.asarray(signals, dtype=np.float32), np.asarray(phases, dtype=np.float32), strict=True):
                writer[index] = {"signal": signal, "phase": phase}
                index += 1
        writer.done()
        writer.merge()
    if not (temporary / COMPLETE).is_file():
        raise RuntimeError(f"litdata wrote no {COMPLETE} for {index} records in {temporary}")
    try:
        temporary.rename(folder)
    except OSError:  # another process renamed a complete set into place first
        shutil.rmtree(temporary, ignore_errors=True)
    return folder


def _litdata():
    """The litdata package (the ``stream`` extra), or an ImportError saying how to install it."""
    try:
        import litdata
        import litdata.streaming.writer
    except ImportError as error:
        raise ImportError(
            f"streamed training needs litdata ({error}): pip install 'cyclejepa[stream]', or raise "
            "training.memory_budget_gb so that the training set is held in memory"
        ) from error
    return litdata


_WRITER_WORLD = {"WORLD_SIZE": "1", "GLOBAL_RANK": "0", "NNODES": "1"}
"""litdata's writer takes its world from these first: set, it writes alone instead of waiting for
the other ranks' indexes."""


class StreamBatches:
    """This rank's share of each epoch's shuffled batches, streamed from a `write_shards` folder (or an
    ``s3://``, ``gs://``, ``azure://`` URL of a copy); ``generator``'s first draw seeds the shuffle.

    A `BatchSampler` drop-in, except that ``next`` gives this rank's ``batch_size / world`` records
    (``local``). Read in the main process (no loader workers), so the state is exact at every step.
    """

    local = True

    def __init__(
        self,
        source: str | Path,
        batch_size: int,
        generator: torch.Generator,
        device: torch.device | str = "cpu",
        dist: Distributed | None = None,
    ):
        litdata = _litdata()
        StreamingDataLoader, StreamingDataset = litdata.StreamingDataLoader, litdata.StreamingDataset
        dist = dist or Distributed()
        self.device, self.source = indexed(device), str(source)
        seed = int(torch.randint(2**31 - 1, (1,), generator=generator, device=generator.device))
        self.dataset = StreamingDataset(self.source, shuffle=True, drop_last=True, seed=seed)
        found = self.dataset.distributed_env
        if (found.world_size, found.global_rank) != (dist.world, dist.rank):
            raise RuntimeError(
                f"litdata sees rank {found.global_rank} of {found.world_size}, the trainer rank {dist.rank} of {dist.world}: "
                "join the process group (torchrun) before streaming, or unset WORLD_SIZE and GLOBAL_RANK"
            )
        if len(self.dataset) * dist.world < batch_size:
            raise ValueError(f"batch size {batch_size} exceeds the {len(self.dataset) * dist.world} training records")
        self.loader = StreamingDataLoader(self.dataset, batch_size=batch_size // dist.world, num_workers=0, drop_last=True)
        self._batches: Iterator[dict[str, torch.Tensor]] | None = None
        self.epoch = 0

    def __len__(self) -> int:
        """Records this rank reads per epoch."""
        return len(self.dataset)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's next batch (signals (b, channels, samples), phases (b, tokens…)), reshuffled per epoch."""
        if self._batches is None:
            self._batches = iter(self.loader)
        try:
            batch = next(self._batches)
        except StopIteration:
            self._batches, self.epoch = iter(self.loader), self.epoch + 1
            batch = next(self._batches)
        return batch["signal"].to(self.device, non_blocking=True), batch["phase"].to(self.device, non_blocking=True)

    def state_dict(self) -> dict[str, Any]:
        """litdata's loader state (epoch and records yielded: the same on every rank) and ours."""
        return {"stream": self.loader.state_dict(), "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "stream" not in state:
            raise ValueError(
                "the checkpoint was taken on batches held in memory; resume it with the same training.memory_budget_gb"
            )
        self.loader.load_state_dict(state["stream"])
        self._batches, self.epoch = None, int(state["epoch"])
