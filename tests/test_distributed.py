"""Two gloo processes on the CPU train exactly like one process on the same global batch."""

import os
import socket

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cyclejepa.training import Distributed, Trainer
from test_training import corpus, tiny_config

STEPS = 2


def run(directory, dist_info=Distributed()):
    """Train ``STEPS`` steps; return the logged metrics of each step and the first step's gradients."""
    cfg = tiny_config(training={"steps": STEPS, "batch_size": 4, "checkpoint_every": 100})
    x, phi = corpus(12)
    phi[3, :120] = np.nan  # a record with < 2 valid tokens changes the per-rank transport counts
    trainer = Trainer(cfg, x, phi, directory, seed=5, transport_weight=1.0, fs=100.0, dist=dist_info)
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


def test_two_gloo_ranks_match_one_process_on_the_global_batch(tmp_path):
    expected_metrics, expected_gradients = run(tmp_path / "single")
    result = tmp_path / "rank0.pt"
    mp.start_processes(
        _worker, args=(2, free_port(), tmp_path / "ddp", result), nprocs=2, start_method="spawn"
    )
    metrics, gradients = torch.load(result, weights_only=True)
    # loss terms, grad norm and learning rate of both steps
    assert torch.allclose(metrics, expected_metrics, rtol=2e-4, atol=1e-6)  # float32 reduction order
    assert gradients.keys() == expected_gradients.keys()
    for name, grad in expected_gradients.items():
        assert torch.allclose(gradients[name], grad, rtol=1e-4, atol=1e-6), name
