"""Causal anomaly detectors, registered in `DETECTORS`: one score per token t from tokens ≤ t."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cyclejepa.evaluation.embeddings import extract_tokens
from cyclejepa.evaluation.geometry import dephase
from cyclejepa.evaluation.tokens import ArrayLike, record_chunks
from cyclejepa.models.predictor import CausalTransformerPredictor
from cyclejepa.registry import DETECTORS
from cyclejepa.symmetry import PhaseSymmetry


def _detector_tokens(
    model: nn.Module, signals: ArrayLike, phases: ArrayLike, device: str | torch.device, batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Projected tokens (N, T, K) of ``signals`` and the phases as float64, shapes checked."""
    x = signals.detach().cpu().numpy() if isinstance(signals, Tensor) else signals
    tokens = extract_tokens(model, x, batch_size=batch_size, device=device)
    phases = np.asarray(phases.cpu() if isinstance(phases, Tensor) else phases, dtype=np.float64)
    if phases.shape != tokens.shape[:2]:
        raise ValueError(f"phases must be (N, T) = {tokens.shape[:2]} like the model's tokens, got {phases.shape}")
    return tokens, phases


def _completed_cycles(phases: Tensor) -> Tensor:
    """(N, T) phase wraps (decreases between consecutive valid tokens) up to each token: on a
    causal track, the beats seen beyond the first two."""
    valid = torch.isfinite(phases)
    position = torch.arange(phases.shape[1]).expand_as(phases)
    last_valid = torch.where(valid, position, -1).cummax(1).values
    before = torch.cat((torch.full_like(last_valid[:, :1], -1), last_valid[:, :-1]), 1)
    previous = phases.gather(1, before.clamp_min(0))
    wraps = valid & (before >= 0) & (phases < previous)
    return wraps.cumsum(1)


@DETECTORS.register("transport-violation")
def transport_violation(
    model: nn.Module,
    symmetry: PhaseSymmetry,
    signals: ArrayLike,
    phases: ArrayLike,
    *,
    device: str | torch.device = "cpu",
    batch_size: int = 64,
    warmup_beats: int = 2,
) -> np.ndarray:
    """Cosine distance of each dephased token from the causal template of the earlier ones.

    With w_t = ρ(φ_t)⁻¹ z_t / ‖z_t‖, the score is 1 − ⟨w_t, m_t⟩ / ‖m_t‖ where m_t = Σ w_s over
    the valid tokens s < t (the cumulative mean's direction). Scores (N, T) lie in [0, 2];
    NaN where φ_t is undefined and before the (2 + ``warmup_beats``)-th beat: the batch form of
    `cyclejepa.models.streaming.TransportMonitor`.
    """
    if warmup_beats < 0:
        raise ValueError(f"transport-violation: warmup_beats must be >= 0, got {warmup_beats}")
    tokens, phases = _detector_tokens(model, signals, phases, device, batch_size)
    scores = []
    for chunk in record_chunks(len(tokens)):
        phi = torch.from_numpy(phases[chunk])
        w = F.normalize(dephase(tokens[chunk], phi, symmetry), dim=-1).nan_to_num(0.0)
        template = F.pad(w.cumsum(1)[:, :-1], (0, 0, 1, 0))  # Σ of the earlier w
        cosine = (w * F.normalize(template, dim=-1)).sum(-1)
        seen = torch.isfinite(phi).cumsum(1) - torch.isfinite(phi).long()
        scored = torch.isfinite(phi) & (seen > 0) & (_completed_cycles(phi) >= warmup_beats)
        scores.append(torch.where(scored, 1.0 - cosine, math.nan))
    return torch.cat(scores).numpy()


def _one_pass_predictions(predictor: CausalTransformerPredictor, z: Tensor) -> Tensor:
    """All next-token predictions in one forward of [z_0 … z_{T−1}, mask_0 … mask_{T−1}], mask_t at
    position t: z_i attends to z_{j ≤ i}, mask_t to z_{j < t} and itself, so mask_t computes what the
    training forward with cutoff t − 1 computes at t."""
    batch, tokens, dim = z.shape
    x = torch.cat((z, predictor.mask_token.to(z.dtype).expand(batch, tokens, dim)), 1)
    position = torch.arange(tokens, device=z.device).repeat(2)
    is_mask = torch.arange(2 * tokens, device=z.device) >= tokens
    offset = position[None, :] - position[:, None]  # key − query
    sees_real = ~is_mask[None, :] & ((offset < 0) | ((offset == 0) & ~is_mask[:, None]))
    sees_itself = torch.eye(2 * tokens, dtype=torch.bool, device=z.device) & is_mask[:, None]
    m = predictor.max_relative_position
    bias = predictor.relative_bias[:, offset.clamp(-m, m) + m]
    bias = bias.masked_fill(~(sees_real | sees_itself), float("-inf"))
    for block in predictor.blocks:
        x = block(x, bias)
    return predictor.output(x[:, tokens:])


def next_token_predictions(predictor: nn.Module, z: Tensor) -> Tensor:
    """(B, T, K): output t is ``predictor(z, cutoff=t − 1)[:, t]`` (one forward for a
    `CausalTransformerPredictor`, T forwards for any other predictor)."""
    if isinstance(predictor, CausalTransformerPredictor):
        return _one_pass_predictions(predictor, z)
    cutoffs = torch.arange(-1, z.shape[1] - 1, device=z.device)
    return torch.stack([predictor(z, c.expand(z.shape[0]))[:, c + 1] for c in cutoffs], dim=1)


@DETECTORS.register("predictor-error")
def predictor_error(
    model: nn.Module,
    symmetry: PhaseSymmetry,
    signals: ArrayLike,
    phases: ArrayLike,
    *,
    device: str | torch.device = "cpu",
    batch_size: int = 64,
) -> np.ndarray:
    """(N, T) next-token error ‖ẑ_t − z_t‖², ẑ_t predicted from z_{<t} (NaN at token 0);
    ``symmetry`` and ``phases`` unused."""
    predictor = model.predictor
    if not isinstance(predictor, nn.Module):
        raise ValueError(
            f"the predictor-error detector needs the model's predictor; its predictor is {predictor!r} (a deployed model has none)"
        )
    tokens, _ = _detector_tokens(model, signals, phases, device, batch_size)
    errors = []
    with torch.inference_mode():
        for start in range(0, len(tokens), batch_size):
            z = torch.from_numpy(tokens[start : start + batch_size]).to(device)
            prediction = next_token_predictions(predictor, z)
            errors.append((prediction - z).double().square().sum(-1).cpu())
    scores = torch.cat(errors)
    scores[:, 0] = math.nan
    return scores.numpy()
