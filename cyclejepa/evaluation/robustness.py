"""Single-lead robustness: zero one lead at evaluation, keep the probe fitted on intact data.

The encoder sees z-scored leads, so "zero" is the normalised value 0: the lead is replaced by
a flat line at its training-fold mean. Token phases come from the R-peaks of the intact
recording and are not recomputed, so every variant pools the same tokens of the same records.
Each change is signed (zeroed − intact): negative means the lead's loss hurts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch import nn

from cyclejepa.evaluation.bootstrap import BootstrapCI, patient_bootstrap_weights, percentile_interval
from cyclejepa.evaluation.embeddings import embed_records
from cyclejepa.evaluation.probe import LinearProbe, macro_auroc, replicate_macro_auroc

__all__ = ["RobustnessResult", "lead_zeroing", "zero_lead"]


@dataclass
class RobustnessResult:
    """Macro-AUROC with each lead zeroed, against the intact score of the same probe.

    Attributes
    ----------
    intact : macro-AUROC on intact signals.
    zeroed : lead → macro-AUROC with that lead zeroed.
    delta : lead → zeroed − intact, with a paired patient-clustered percentile interval.
    mean_delta : mean of the per-lead changes, with its paired interval.
    worst_delta, worst_lead : the most negative change and its lead.
    records : records scored; excluded : records without a representation, by reason.
    """

    intact: float
    zeroed: dict[str, float]
    delta: dict[str, BootstrapCI]
    mean_delta: BootstrapCI
    worst_delta: float
    worst_lead: str
    records: int
    excluded: dict[str, int]


def zero_lead(x: torch.Tensor, lead: int) -> torch.Tensor:
    """A copy of the batch ``x`` (B, leads, samples) with channel ``lead`` set to 0."""
    return x.index_fill(1, torch.tensor([lead], device=x.device), 0.0)


def lead_zeroing(
    model: nn.Module,
    signals: np.ndarray,
    phases: np.ndarray,
    qc_ok: np.ndarray | None,
    probe: LinearProbe,
    Y: np.ndarray,
    groups: np.ndarray,
    *,
    leads: Sequence[str],
    rows: np.ndarray | None = None,
    device: str | torch.device = "cpu",
    batch_size: int = 256,
    replicates: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    progress: bool = False,
) -> RobustnessResult:
    """Zero each lead in turn, re-embed, and score with ``probe`` (fitted on intact data).

    Parameters
    ----------
    model : the frozen `JEPAModel`.
    signals : (N, leads, samples) z-scored signals (e.g. the cache memmap).
    phases, qc_ok : (N, T) token phases and (N,) QC verdicts, as for `embed_records`.
    probe : a `LinearProbe` fitted on intact training representations.
    Y, groups : (N, C) multi-hot labels and (N,) patients, aligned with ``signals``.
    leads : the name of each channel of ``signals``, in order (``cache.channels``).
    rows : the rows to evaluate (default all), e.g. a task's evaluation rows.
    device, batch_size, progress : as in `embed_records`.
    replicates, seed, level : the paired patient-clustered bootstrap of the changes (the same
        resampled patients score the intact and every zeroed variant).
    """
    if len(leads) != np.shape(signals)[1]:
        raise ValueError(f"{len(leads)} lead names for signals with {np.shape(signals)[1]} channels")
    embed = partial(
        embed_records, model, signals, phases, qc_ok,
        rows=rows, device=device, batch_size=batch_size, progress=progress,
    )  # fmt: skip
    intact = embed()
    Y, groups = np.asarray(Y)[intact.rows], np.asarray(groups)[intact.rows]
    intact_scores = probe.decision_function(intact.features)
    zeroed_scores = {
        lead: probe.decision_function(embed(transform=partial(zero_lead, lead=i)).features)
        for i, lead in enumerate(leads)
    }

    weights = patient_bootstrap_weights(groups, replicates, seed)
    intact_auroc = macro_auroc(Y, intact_scores)
    intact_replicates = replicate_macro_auroc(Y, intact_scores, weights)
    zeroed = {lead: macro_auroc(Y, s) for lead, s in zeroed_scores.items()}
    changes = {
        lead: replicate_macro_auroc(Y, s, weights) - intact_replicates for lead, s in zeroed_scores.items()
    }
    delta = {lead: percentile_interval(zeroed[lead] - intact_auroc, changes[lead], level) for lead in leads}
    mean_change = np.mean([d.point for d in delta.values()])
    worst = min(delta, key=lambda lead: delta[lead].point)
    return RobustnessResult(
        intact=intact_auroc,
        zeroed=zeroed,
        delta=delta,
        mean_delta=percentile_interval(mean_change, np.mean(list(changes.values()), axis=0), level),
        worst_delta=delta[worst].point,
        worst_lead=worst,
        records=len(Y),
        excluded=intact.excluded,
    )
