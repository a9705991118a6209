"""Cheap diagnostics of a model while it trains, on a fixed batch of its training records.

`HeldBatch` keeps ``records`` training windows spread evenly over the training set and their
token phases, and on each call runs the model's deployed path on them (no gradient, float32,
no random draw: training is unchanged) and returns

- ``geometry/effective_rank``: `effective_rank` of the phase-valid tokens, which collapse drives
  towards 1;
- ``mechanism/gain_fraction`` and ``mechanism/mean_gain``: `transport_gain` of the tokens with
  their phases, which stay near 0 when the transport term is dead;
- ``mechanism/token_similarity``: the mean untransported similarity E[c_I]; from
  `cyclejepa.evaluation.mechanism.COLLAPSE_SIMILARITY` (0.9) on, the tokens have collapsed and
  the gain fraction means nothing.

`cyclejepa.training.tensorboard.TensorBoardLog` writes them every ``training.diagnostics_every`` steps.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch
from torch import nn

from cyclejepa.evaluation.geometry import effective_rank
from cyclejepa.evaluation.mechanism import transport_gain
from cyclejepa.objectives.transport import Canonicalizer, valid_tokens

__all__ = ["HeldBatch"]


class HeldBatch:
    """Effective rank and transport gain of a model on ``records`` fixed training windows.

    Parameters
    ----------
    signals, phases
        The training windows (N, channels, samples) and their token phases (N, T) or (N, T, C),
        NaN where undefined (the trainer's inputs).
    records
        Windows held, at evenly spaced rows of the training set.
    """

    def __init__(self, signals: np.ndarray, phases: np.ndarray, records: int = 64):
        if len(signals) != len(phases) or not len(signals):
            raise ValueError(f"HeldBatch needs as many phase rows as windows (>0), got {len(signals)} and {len(phases)}")
        rows = np.unique(np.linspace(0, len(signals) - 1, min(records, len(signals))).round().astype(np.int64))
        self.signals = torch.as_tensor(np.asarray(signals[rows], dtype=np.float32))
        self.phases = torch.as_tensor(np.asarray(phases[rows], dtype=np.float32))

    def __call__(self, objective: nn.Module) -> dict[str, float]:
        """Diagnostics of ``objective.model`` with its phase action ``objective.symmetry``."""
        device = next(objective.parameters()).device
        model = objective.model
        assert isinstance(model, nn.Module), f"the objective's model is a module, got {type(model).__name__}"
        # nn.Module types its attributes as Tensor | Module; the objective's symmetry is a PhaseSymmetry
        symmetry = cast(Canonicalizer, objective.symmetry)
        with torch.no_grad():
            tokens = model(self.signals.to(device)).float()
            gain = transport_gain(tokens, self.phases.to(device), symmetry)
        enough = int(valid_tokens(self.phases).sum()) >= 2  # else no rank to measure (e.g. every record failed QC)
        return {
            "geometry/effective_rank": effective_rank(tokens.cpu(), self.phases) if enough else math.nan,
            "mechanism/gain_fraction": gain.gain_fraction,
            "mechanism/mean_gain": gain.mean_gain,
            "mechanism/token_similarity": gain.mean_c_i,
        }
