"""Latent next-token prediction after a random causal cutoff.

Per record a cutoff c is drawn uniformly from {0, …, T−2}; the predictor sees z_0 … z_c (later
inputs are its mask token) and its output at c + 1 is compared with z_{c+1} by the MSE.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from cyclejepa.registry import OBJECTIVES

Predictor = Callable[[Tensor, Tensor], Tensor]
"""``predictor(z, cutoff) -> (B, T, K)``: z (B, T, K) and cutoffs (B,)."""


def sample_cutoffs(
    batch: int, tokens: int, generator: torch.Generator | None = None, device: torch.device | str | None = None
) -> Tensor:
    """(batch,) int64 cutoffs, uniform over {0, …, tokens − 2} per record; drawn on the generator's
    device, then moved to ``device``."""
    if tokens < 2:
        raise ValueError(f"sample_cutoffs: a cutoff needs a next token (tokens >= 2), got {tokens}")
    draw_device = generator.device if generator is not None else device
    cutoffs = torch.randint(tokens - 1, (batch,), generator=generator, device=draw_device)
    return cutoffs.to(device)


def check_cutoffs(cutoff: Tensor, tokens: int) -> None:
    """Refuse cutoffs outside {0, …, tokens − 2}: a ValueError on the CPU; on an accelerator or in
    compiled code an asynchronous device assertion (no host synchronisation, no graph break)."""
    in_range = ((cutoff >= 0) & (cutoff <= tokens - 2)).all()
    message = f"prediction_loss: cutoffs must lie in [0, T - 2] = [0, {tokens - 2}]"
    if cutoff.device.type != "cpu" or torch.compiler.is_compiling():
        torch._assert_async(in_range, message)
    elif not in_range:
        raise ValueError(message)


@OBJECTIVES.register("prediction")
def prediction_loss(predictor: Predictor, z: Tensor, cutoff: Tensor, *, stop_gradient: bool = False) -> Tensor:
    """(1/(B·K)) Σ_b ‖predictor(z, c)[b, c_b + 1] − z[b, c_b + 1]‖² for z (B, T, K) and cutoffs c (B,)
    in {0, …, T − 2}; ``stop_gradient`` detaches the target (the paper does not)."""
    if z.dim() != 3:
        raise ValueError(f"prediction_loss: z must have shape (B, T, K), got {tuple(z.shape)}")
    if cutoff.shape != z.shape[:1]:
        raise ValueError(f"prediction_loss: cutoff must have shape ({z.shape[0]},), got {tuple(cutoff.shape)}")
    if torch.compiler.is_compiling() or not torch._C._functorch.is_functorch_wrapped_tensor(cutoff):
        # under torch.func.vmap (the stacked ensemble) neither a host check nor a device
        # assertion runs per slice: the caller checks the stacked cutoffs before the transform
        check_cutoffs(cutoff, z.shape[1])
    prediction = predictor(z, cutoff)
    if prediction.shape != z.shape:
        raise ValueError(f"prediction_loss: predictor returned shape {tuple(prediction.shape)}, expected {tuple(z.shape)}")
    records = torch.arange(z.shape[0], device=z.device)
    target = z[records, cutoff + 1]
    if stop_gradient:
        target = target.detach()
    return (prediction[records, cutoff + 1] - target).square().mean()
