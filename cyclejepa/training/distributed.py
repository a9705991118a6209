"""Data-parallel training: the process group's lifetime and the global-batch SIGReg reduction.

Under ``torchrun --nproc_per_node N -m cyclejepa train CONFIG`` each process draws the same global
batch, keeps its contiguous shard of ``B / N`` records, and DDP averages the gradients. SIGReg sees
the global batch through an all-reduced characteristic function; the transport loss is re-weighted
so that the average over ranks is the mean over the global batch's records.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from cyclejepa.devices import resolve_device


@dataclass(frozen=True)
class Distributed:
    """Where this process stands in the process group (rank 0 of 1 when not distributed)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, batch: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous slice of a global batch."""
        size = batch.shape[0] // self.world
        return batch[self.rank * size : (self.rank + 1) * size]

    def barrier(self) -> None:
        """Wait until every rank is here (on NCCL, on this rank's GPU, ``cuda:<local_rank>``)."""
        if not self.enabled:
            return
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()

    def largest(self, value: int) -> int:
        """The largest of the ranks' ``value`` (one all-reduce; on NCCL, on this rank's GPU)."""
        if not self.enabled:
            return value
        device = torch.device("cuda", self.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")
        tensor = torch.tensor([value], dtype=torch.int64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The average of ``value`` over ranks (no gradient)."""
        if not self.enabled:
            return value
        value = value.detach().clone()
        dist.all_reduce(value)
        return value / self.world

    def ecf_reduce(self, ecf: torch.Tensor, n: int | torch.Tensor):
        """Regulariser hook: the n-weighted mean of the ranks' sample means, and the total n.
        Differentiable: DDP's averaging of the all-reduced gradients gives the global statistic's."""
        count = torch.as_tensor(float(n), device=ecf.device, dtype=ecf.dtype)
        total = count.clone()
        dist.all_reduce(total)
        return _SumOverRanks.apply(ecf * count) / total, total


class _SumOverRanks(torch.autograd.Function):
    """All-reduce (sum) whose backward is the all-reduce (sum) of the incoming gradients."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        total = tensor.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


@contextmanager
def process_group(device: str) -> Iterator[Distributed]:
    """Join the process group torchrun describes (none when ``WORLD_SIZE`` is unset or 1); leave it at exit.

    On CUDA, ``cuda:<LOCAL_RANK>`` becomes the current device first and NCCL is bound to it
    (``device_id``, where torch has it), so no rank opens a context on GPU 0; on the CPU, gloo.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        yield Distributed()
        return
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    target = resolve_device(device, local_rank)
    options: dict[str, Any] = {}
    if target.type == "cuda":
        torch.cuda.set_device(target)
        if "device_id" in inspect.signature(dist.init_process_group).parameters:
            options["device_id"] = target
    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group("nccl" if target.type == "cuda" else "gloo", **options)
    try:
        yield Distributed(dist.get_rank(), dist.get_world_size(), local_rank)
    finally:
        if joined:
            dist.destroy_process_group()
