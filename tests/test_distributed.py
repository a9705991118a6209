"""Two gloo processes on the CPU train exactly like one process on the same global batch; under
DDP no collective lies in a compiled region."""

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from test_training import corpus, tiny_config

from cyclejepa.pipeline import training_spec
from cyclejepa.training import Distributed, Trainer, process_group

STEPS = 2


def run(directory, dist_info=None):
    """Train ``STEPS`` steps; return the logged metrics of each step and the first step's gradients."""
    cfg = tiny_config(training={"steps": STEPS, "batch_size": 4, "checkpoint_every": 100})
    x, phi = corpus(12)
    phi[3, :120] = np.nan  # a record with < 2 valid tokens changes the per-rank transport counts
    trainer = Trainer(training_spec(cfg, directory, seed=5, transport_weight=1.0), x, phi, model_fs=100.0, dist=dist_info)
    metrics = [trainer.train_step()]
    gradients = {name: p.grad.clone() for name, p in trainer.objective.named_parameters() if p.grad is not None}
    metrics.append(trainer.train_step())
    return torch.stack(metrics), gradients


def _worker(rank, world, port, directory, result):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        metrics, gradients = run(directory, Distributed(rank, world, rank))
        if rank == 0:
            torch.save((metrics, gradients), result)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_two_gloo_ranks_match_one_process_on_the_global_batch(tmp_path):
    expected_metrics, expected_gradients = run(tmp_path / "single")
    result = tmp_path / "rank0.pt"
    mp.start_processes(_worker, args=(2, free_port(), tmp_path / "ddp", result), nprocs=2, start_method="spawn")
    metrics, gradients = torch.load(result, weights_only=True)
    # loss terms, grad norm and learning rate of both steps
    assert torch.allclose(metrics, expected_metrics, rtol=2e-4, atol=1e-6)  # float32 reduction order
    assert gradients.keys() == expected_gradients.keys()
    for name, grad in expected_gradients.items():
        assert torch.allclose(gradients[name], grad, rtol=1e-4, atol=1e-6), name


def _compiled_worker(rank, world, port, directory, result):
    """One training step on two ranks with ``training.compile: true``; rank 0 saves what
    `torch.compile` was given, the operators of every graph it compiled, and the metrics."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    compiled, operators, real_compile = [], [], torch.compile

    def recording_compile(function, **options):  # Dynamo's graphs, run eagerly (no Inductor)
        compiled.append(type(getattr(function, "__self__", function)).__name__)

        def backend(graph, inputs):
            operators.extend(str(node.target) for node in graph.graph.nodes)
            return graph.forward

        return real_compile(function, backend=backend)

    torch.compile = recording_compile
    try:
        cfg = tiny_config(training={"steps": 1, "batch_size": 4, "checkpoint_every": 100, "compile": True})
        x, phi = corpus(12)
        trainer = Trainer(
            training_spec(cfg, directory, seed=5, transport_weight=1.0),
            x,
            phi,
            model_fs=100.0,
            dist=Distributed(rank, world, rank),
        )
        metrics = trainer.train_step()
        if rank == 0:
            torch.save(
                {
                    "compiled": compiled,
                    "operators": operators,
                    "step_module": type(trainer.step_module).__name__,
                    "metrics": metrics,
                },
                result,
            )
    finally:
        torch.compile = real_compile
        dist.destroy_process_group()


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_under_ddp_only_the_networks_are_compiled_and_no_collective_is(tmp_path):
    """The encoder + projector and the predictor are compiled in place; DDP, SIGReg's all-reduce
    and the transport loss's rank mean stay eager, outside every compiled graph."""
    result = tmp_path / "rank0.pt"
    mp.start_processes(_compiled_worker, args=(2, free_port(), tmp_path / "ddp", result), nprocs=2, start_method="spawn")
    seen = torch.load(result, weights_only=True)
    assert seen["step_module"] == "DistributedDataParallel"  # not compiled as a whole
    assert sorted(seen["compiled"]) == ["Augmenter", "CausalTransformerPredictor", "JEPAModel"]
    assert seen["operators"], "nothing was compiled"
    collectives = [op for op in seen["operators"] if any(word in op for word in ("all_reduce", "c10d", "wait_tensor"))]
    assert not collectives
    cfg = tiny_config(training={"steps": 1, "batch_size": 4, "checkpoint_every": 100})
    x, phi = corpus(12)
    eager = Trainer(training_spec(cfg, tmp_path / "single", seed=5, transport_weight=1.0), x, phi, model_fs=100.0).train_step()
    assert torch.allclose(seen["metrics"], eager, rtol=2e-4, atol=1e-6)


@pytest.fixture
def torchrun_rank1(monkeypatch):
    """Rank 1 of 2 as torchrun starts it, on a machine with two (pretended) GPUs; every call to
    the process group and to `torch.cuda.set_device` is recorded, in order."""
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", str(device))))

    def init_process_group(backend, device_id=None):
        calls.append(("init_process_group", backend, device_id and str(device_id)))
        monkeypatch.setattr(dist, "get_backend", lambda: backend)

    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "barrier", lambda device_ids=None: calls.append(("barrier", device_ids)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: calls.append(("destroy_process_group",)))
    return calls


def test_torchrun_binds_the_rank_gpu_before_any_collective_and_leaves_the_group_at_exit(torchrun_rank1):
    with pytest.raises(RuntimeError, match="training failed"), process_group("auto") as group:
        assert (group.rank, group.world, group.local_rank) == (1, 2, 1)
        group.barrier()
        raise RuntimeError("training failed")
    assert torchrun_rank1 == [
        ("set_device", "cuda:1"),  # before the group exists: no context on GPU 0
        ("init_process_group", "nccl", "cuda:1"),  # NCCL bound to the rank's GPU
        ("barrier", [1]),
        ("destroy_process_group",),  # also when training raised
    ]


def test_torchrun_on_the_cpu_joins_gloo_and_one_process_joins_nothing(torchrun_rank1, monkeypatch):
    with process_group("cpu") as group:
        group.barrier()
    assert torchrun_rank1 == [("init_process_group", "gloo", None), ("barrier", None), ("destroy_process_group",)]
    torchrun_rank1.clear()
    monkeypatch.setenv("WORLD_SIZE", "1")
    with process_group("auto") as group:
        group.barrier()
    assert not group.enabled and torchrun_rank1 == []
