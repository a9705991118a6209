"""AdamW with linear warm-up and cosine decay; manifold parameters go to Riemannian Adam."""

from __future__ import annotations

import math

import torch

from cyclejepa.config import OptimiserConfig
from cyclejepa.symmetry.bases import manifold_parameters


def learning_rate(step: int, total_steps: int, optimiser: OptimiserConfig) -> float:
    """The rate at 0-based ``step``: lr·(step + 1)/W for the W = ``warmup_steps`` first steps, then
    min_lr + (lr − min_lr)(1 + cos πp)/2, p = min((step − W) / max(total_steps − W − 1, 1), 1)."""
    if step < optimiser.warmup_steps:
        return optimiser.lr * (step + 1) / optimiser.warmup_steps
    decay_steps = max(total_steps - optimiser.warmup_steps - 1, 1)
    progress = min((step - optimiser.warmup_steps) / decay_steps, 1.0)
    return optimiser.min_lr + 0.5 * (optimiser.lr - optimiser.min_lr) * (1.0 + math.cos(math.pi * progress))


def build_optimisers(model: torch.nn.Module, optimiser: OptimiserConfig) -> list[torch.optim.Optimizer]:
    """AdamW (fused on CUDA) for Euclidean parameters, geoopt's Riemannian Adam for manifold ones."""
    on_manifold = {id(p) for p in manifold_parameters(model)}
    euclidean = [p for p in model.parameters() if p.requires_grad and id(p) not in on_manifold]
    fused = bool(euclidean) and all(p.is_cuda for p in euclidean)
    lr, betas, eps = optimiser.lr, optimiser.betas, optimiser.eps
    optimisers: list[torch.optim.Optimizer] = [
        torch.optim.AdamW(euclidean, lr=lr, betas=betas, eps=eps, weight_decay=optimiser.weight_decay, fused=fused or None)
    ]
    if on_manifold:
        from geoopt.optim import RiemannianAdam

        params = [p for p in model.parameters() if id(p) in on_manifold]
        optimisers.append(RiemannianAdam(params, lr=lr, betas=betas, eps=eps))
    return optimisers


def set_learning_rate(optimisers: list[torch.optim.Optimizer], lr: float) -> None:
    """Set every parameter group's rate to ``lr`` times its ``lr_scale`` (1 when absent)."""
    for optimiser in optimisers:
        for group in optimiser.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
