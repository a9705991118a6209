"""Single-channel robustness: zero one channel at evaluation, keep the probe fitted on intact data.

"Zero" is the z-scored 0 (a flat line at the training-fold mean); token phases stay those of the
intact recording. A change is zeroed − intact: negative means the channel's loss hurts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch import nn

from cyclejepa.evaluation.bootstrap import BootstrapCI, n_clusters, patient_bootstrap_weights, percentile_interval
from cyclejepa.evaluation.embeddings import embed_records
from cyclejepa.evaluation.probe import LinearProbe, macro_auroc, replicate_macro_auroc

__all__ = ["RobustnessResult", "channel_zeroing", "zero_channel"]


@dataclass
class RobustnessResult:
    """Macro-AUROC ``intact`` and with each channel ``zeroed``; ``delta`` (zeroed − intact),
    their mean and the worst carry paired patient-clustered intervals."""

    intact: float
    zeroed: dict[str, float]
    delta: dict[str, BootstrapCI]
    mean_delta: BootstrapCI
    worst_delta: float
    worst_channel: str
    records: int
    excluded: dict[str, int]


def zero_channel(x: torch.Tensor, channel: int) -> torch.Tensor:
    """A copy of ``x`` (B, channels, samples) with ``channel`` set to 0."""
    return x.index_fill(1, torch.tensor([channel], device=x.device), 0.0)


def channel_zeroing(
    model: nn.Module,
    signals: np.ndarray,
    phases: np.ndarray,
    qc_ok: np.ndarray | None,
    probe: LinearProbe,
    Y: np.ndarray,
    groups: np.ndarray,
    *,
    channels: Sequence[str],
    rows: np.ndarray | None = None,
    device: str | torch.device = "cpu",
    batch_size: int = 256,
    replicates: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    progress: bool = False,
) -> RobustnessResult:
    """Zero each of the named ``channels`` in turn, re-embed the ``rows`` (`embed_records`), and
    score with ``probe`` against labels Y (N, C) and patients ``groups`` (N,); the same resampled
    patients score the intact and every zeroed variant."""
    if len(channels) != np.shape(signals)[1]:
        raise ValueError(f"{len(channels)} channel names for signals with {np.shape(signals)[1]} channels")
    embed = partial(
        embed_records, model, signals, phases, qc_ok, rows=rows, device=device, batch_size=batch_size, progress=progress
    )
    intact = embed()
    Y, groups = np.asarray(Y)[intact.rows], np.asarray(groups)[intact.rows]
    weights, patients = patient_bootstrap_weights(groups, replicates, seed), n_clusters(groups)
    intact_scores = probe.decision_function(intact.features)
    zeroed_scores = {
        channel: probe.decision_function(embed(transform=partial(zero_channel, channel=i)).features)
        for i, channel in enumerate(channels)
    }

    intact_auroc = macro_auroc(Y, intact_scores)
    intact_replicates = replicate_macro_auroc(Y, intact_scores, weights)
    zeroed = {channel: macro_auroc(Y, s) for channel, s in zeroed_scores.items()}
    changes = {channel: replicate_macro_auroc(Y, s, weights) - intact_replicates for channel, s in zeroed_scores.items()}
    delta = {
        channel: percentile_interval(zeroed[channel] - intact_auroc, changes[channel], level, patients) for channel in channels
    }
    mean_change = np.mean([d.point for d in delta.values()])
    worst = min(delta, key=lambda channel: delta[channel].point)
    return RobustnessResult(
        intact=intact_auroc,
        zeroed=zeroed,
        delta=delta,
        mean_delta=percentile_interval(float(mean_change), np.mean(list(changes.values()), axis=0), level, patients),
        worst_delta=delta[worst].point,
        worst_channel=worst,
        records=len(Y),
        excluded=intact.excluded,
    )
