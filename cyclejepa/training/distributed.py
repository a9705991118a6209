"""Data-parallel training: process group set-up and the global-batch SIGReg reduction.

``torchrun --nproc_per_node N -m cyclejepa train CONFIG`` starts N processes; each draws the
same global batch (same data, augmentation and mask streams), keeps its contiguous shard of
``B / N`` records, and DDP averages the gradients. SIGReg sees the global batch through an
all-reduced empirical characteristic function, and the transport loss is re-weighted so that
the average over ranks is the mean over all records of the global batch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The average of ``value`` over ranks (no gradient)."""
        if not self.enabled:
            return value
        value = value.detach().clone()
        dist.all_reduce(value)
        return value / self.world

    def ecf_reduce(self, ecf: torch.Tensor, n: int | torch.Tensor):
        """Regulariser hook: the n-weighted mean of the ranks' per-sample means, and the total n
        (SIGReg: characteristic functions over token rows; VICReg: moments).

        Differentiable: the backward of the sum all-reduce is an all-reduce of the gradients,
        which DDP's averaging turns back into the gradient of the global statistic.
        """
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


def init_distributed(device_type: str) -> Distributed:
    """Join the process group torchrun describes in the environment (NCCL on GPU, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Distributed()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return Distributed(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
