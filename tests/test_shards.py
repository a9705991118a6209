"""Streamed training: shards written from the cache in blocks, each rank's share, exact resumption.

The trainer on `cyclejepa.training.shards` (litdata) is compared with itself: a run stopped and
resumed from a checkpoint draws the batches (and so the losses and weights) of the run that was
never stopped; the in-memory path is `tests/test_training.py`'s.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL, synthetic_data
from test_training import corpus, losses, tiny_config

from cyclejepa.config import ConfigError, load_config
from cyclejepa.pipeline import training_spec
from cyclejepa.pipeline.pretraining import RowView, streams, training_blocks, training_phases, training_shards
from cyclejepa.training import Distributed, Trainer, load_checkpoint
from cyclejepa.training.shards import StreamBatches, write_shards


class SliceOnly:
    """An (N, C, L) array that, like the cache's signals must be read, answers contiguous slices only."""

    def __init__(self, array):
        self.array, self.reads = array, []
        self.shape, self.dtype = array.shape, array.dtype

    def __len__(self):
        return len(self.array)

    def __getitem__(self, index):
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise AssertionError(f"read with {index!r}, not a contiguous slice")
        self.reads.append((index.start, index.stop))
        return self.array[index]


class FakeCache:
    """What the streamed path reads of a `PreparedCache`: signals, phases, QC, manifest, path."""

    def __init__(self, folder, records=10):
        x, phi = corpus(records)
        self.signals: SliceOnly | np.ndarray = SliceOnly(x)
        self.phase_centre = phi.astype(np.float32)
        self.columns = {"qc_ok": np.arange(records) % 3 != 1}
        self.manifest = {"files": {"signals.npy": "abc"}, "counts": {"kept": records}}
        self.path = folder / "cache"

    def phases(self, convention):
        return self.phase_centre


def shard_trainer(cfg, directory, shards):
    return Trainer(training_spec(cfg, directory, seed=3, transport_weight=1.0), None, None, model_fs=100.0, shards=shards)


def test_a_streamed_run_stopped_and_resumed_draws_the_batches_of_the_straight_run(tmp_path):
    x, phi = corpus(14)
    shards = write_shards([(x[:6], phi[:6]), (x[6:], phi[6:])], tmp_path / "shards")
    cfg = tiny_config(training={"steps": 8, "checkpoint_every": 5})  # 3 batches of 4 an epoch
    straight = shard_trainer(cfg, tmp_path / "straight", shards)
    straight.fit(progress=False)
    shard_trainer(cfg, tmp_path / "resumed", shards).fit(until=7, progress=False)  # "killed" after step 7
    resumed = shard_trainer(cfg, tmp_path / "resumed", shards)
    resumed.resume(tmp_path / "resumed" / "checkpoints" / "step_000005.pt")
    assert resumed.step == 5 and resumed.batches.epoch == 1  # mid-epoch, the next epoch ahead
    resumed.fit(progress=False)
    keys = ("loss", "prediction", "regulariser", "transport", "grad_norm")
    a = [[row[k] for k in keys] for row in losses(tmp_path / "straight")]
    b = [[row[k] for k in keys] for row in losses(tmp_path / "resumed")]
    assert len(a) == len(b) == 8 and a == b
    for name, tensor in straight.objective.state_dict().items():
        assert torch.equal(tensor, resumed.objective.state_dict()[name]), name


def test_each_epoch_streams_every_record_once_and_reshuffles(tmp_path):
    x, phi = corpus(12)
    phi[:, 0] = np.arange(12)  # the record's row, carried through the shards
    shards = write_shards([(x, phi)], tmp_path / "shards")
    batches = StreamBatches(shards, 4, torch.Generator().manual_seed(0))
    epochs = [[int(p) for _ in range(3) for p in batches.next()[1][:, 0]] for _ in range(2)]
    assert [sorted(epoch) for epoch in epochs] == [list(range(12))] * 2
    assert epochs[0] != epochs[1]
    signals, _ = StreamBatches(shards, 4, torch.Generator().manual_seed(0)).next()
    np.testing.assert_array_equal(signals.numpy(), x[[epochs[0][:4]]][0])  # the records themselves, float32


def test_two_ranks_stream_disjoint_shares_of_half_the_batch(tmp_path, monkeypatch):
    x, phi = corpus(16)
    phi[:, 0] = np.arange(16)
    shards = write_shards([(x, phi)], tmp_path / "shards")
    seen = []
    for rank in (0, 1):
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("GLOBAL_RANK", str(rank))  # what litdata reads outside a process group
        batches = StreamBatches(shards, 8, torch.Generator().manual_seed(0), dist=Distributed(rank, 2))
        rows = [batches.next()[1][:, 0] for _ in range(2)]
        assert [len(r) for r in rows] == [4, 4]
        seen.append({int(p) for r in rows for p in r})
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 16


def test_shards_are_written_from_contiguous_blocks_and_reused_until_the_cache_changes(tmp_path):
    cache, rows = FakeCache(tmp_path, records=10), np.array([0, 2, 3, 7, 9])
    blocks = list(training_blocks(cache, rows, "centre", block=2))
    np.testing.assert_array_equal(np.concatenate([s for s, _ in blocks]), cache.signals.array[rows])
    np.testing.assert_array_equal(np.concatenate([p for _, p in blocks]), training_phases(cache, rows, "centre"))
    assert cache.signals.reads == [(0, 3), (3, 8), (9, 10)]
    first = training_shards(cache, rows, "centre", Distributed())
    written = sorted(p.stat().st_mtime_ns for p in first.iterdir())
    assert training_shards(cache, rows, "centre", Distributed()) == first  # reused, not written again
    assert sorted(p.stat().st_mtime_ns for p in first.iterdir()) == written
    assert first.parent == tmp_path / "cache-shards"
    cache.manifest["files"]["signals.npy"] = "def"  # a rebuilt cache
    assert training_shards(cache, rows, "centre", Distributed()) != first
    assert training_shards(cache, rows[:4], "centre", Distributed()) != first


def test_the_memory_budget_keeps_small_sets_in_memory_and_streams_the_rest(tmp_path):
    cache, rows = FakeCache(tmp_path), np.arange(10)  # 10 × (12,000 + 125) float32: 485,000 bytes
    assert not streams(tiny_config(), cache, rows)  # the default budget: in memory
    assert streams(tiny_config(training={"memory_budget_gb": 4.8e-4}), cache, rows)
    assert not streams(tiny_config(training={"memory_budget_gb": 4.9e-4}), cache, rows)
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"training": {"memory_budget_gb": -1}}))
    with pytest.raises(ConfigError, match="training.memory_budget_gb"):
        load_config(config)


def test_a_checkpoint_of_the_other_data_path_is_refused_naming_the_budget(tmp_path):
    x, phi = corpus()
    shards = write_shards([(x, phi)], tmp_path / "shards")
    cfg = tiny_config(training={"steps": 4})
    shard_trainer(cfg, tmp_path / "streamed", shards).fit(progress=False)
    in_memory = Trainer(training_spec(cfg, tmp_path / "memory", seed=3, transport_weight=1.0), x, phi, model_fs=100.0)
    with pytest.raises(ValueError, match="training.memory_budget_gb"):
        in_memory.resume(tmp_path / "streamed" / "checkpoints" / "step_000004.pt")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_machines_under_torchrun_train_from_streamed_shards(tmp_path):
    """Two "machines" (torchrun --nnodes 2 --nproc_per_node 1, node ranks 0 and 1, gloo, static
    rendezvous on 127.0.0.1) train a tiny model three steps from shards (memory budget 0)."""
    config = tmp_path / "two.yaml"
    config.write_text(json.dumps({
        "name": "two-machines", "output_dir": str(tmp_path / "run"), "data": synthetic_data(tmp_path, 40), **TINY_MODEL,
        "training": {"steps": 3, "batch_size": 4, "checkpoint_every": 3, "device": "cpu", "memory_budget_gb": 0},
        "evaluation": {"steps": [3]},
    }))  # fmt: skip
    port = free_port()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
                "--rdzv_backend", "static", "--master_addr", "127.0.0.1", "--master_port", str(port)]  # fmt: skip
    machines = [
        subprocess.Popen([*torchrun, "--node_rank", str(node), "-m", "cyclejepa", "train", str(config)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        for node in (0, 1)
    ]  # fmt: skip
    outputs = [machine.communicate(timeout=600)[0] for machine in machines]
    assert [m.returncode for m in machines] == [0, 0], "\n".join(out[-3000:] for out in outputs)
    assert "winder-seed0: trained" in outputs[0]
    rows = losses(tmp_path / "run" / "runs" / "winder-seed0")
    assert [row["step"] for row in rows] == [1, 2, 3] and all(np.isfinite(row["loss"]) for row in rows)
    shards = list((tmp_path / "run" / "cache-shards").glob("*/index.json"))
    assert len(shards) == 1  # written once, by rank 0, read by both
    state = load_checkpoint(tmp_path / "run" / "runs" / "winder-seed0" / "checkpoints" / "step_000003.pt")
    assert state["batches"]["stream"]["dataset"]["world_size"] == 2
    assert state["batches"]["stream"]["num_samples_yielded"] == 3 * 2  # rank 0's share: 2 records a step


def resident_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set from /proc (Linux)")
def test_reading_a_mapped_cache_through_for_shards_leaves_its_pages_out_of_the_resident_set(tmp_path):
    np.save(tmp_path / "signals.npy", np.ones((800, 12, 1000), dtype=np.float32))  # 38 MB
    cache = FakeCache(tmp_path, records=800)
    cache.signals = np.load(tmp_path / "signals.npy", mmap_mode="r")
    before = resident_mb()
    total = sum(float(signals.sum()) for signals, _ in training_blocks(cache, np.arange(800), "centre", block=100))
    assert total == 800 * 12 * 1000  # every record read
    assert resident_mb() - before < 10  # one 4.8 MB block at a time, not the 38 MB mapped


def test_a_streamed_run_holds_its_diagnostic_batch_through_row_views(tmp_path):
    from cyclejepa.evaluation.training_diagnostics import HeldBatch

    cache, rows = FakeCache(tmp_path, records=10), np.array([1, 2, 4, 5, 8, 9])
    cache.signals = cache.signals.array  # the memmap's row indexing
    views = RowView(lambda i: cache.signals[i], rows), RowView(lambda i: training_phases(cache, i, "centre"), rows)
    held, expected = (
        HeldBatch(*views, records=4),
        HeldBatch(cache.signals[rows], training_phases(cache, rows, "centre"), records=4),
    )
    assert torch.equal(held.signals, expected.signals)
    assert torch.allclose(held.phases, expected.phases, equal_nan=True) and held.phases.isnan().any()
