"""Training on two cyclic coordinates: token phases (N, T, C) through a torus symmetry."""

import numpy as np
import torch
from test_training import corpus, losses, tiny_config

from cyclejepa.objectives import transport_loss
from cyclejepa.pipeline import training_spec
from cyclejepa.symmetry import TorusSymmetry
from cyclejepa.training import Trainer

KEYS = ("loss", "prediction", "regulariser", "transport", "grad_norm", "lr")
TORUS = "4x(0,0)+2x(1,0)+2x(0,1)+2x(1,1)"  # K = 16, the tiny projector's width


def test_phases_as_n_t_1_train_bit_identically_to_n_t(tmp_path):
    cfg = tiny_config(training={"steps": 3, "checkpoint_every": 3})
    x, phi = corpus()
    for name, phases in (("flat", phi), ("column", phi[..., None])):
        Trainer(training_spec(cfg, tmp_path / name, seed=1, transport_weight=1.0), x, phases, model_fs=100.0).fit(progress=False)
    flat, column = ([[row[k] for k in KEYS] for row in losses(tmp_path / n)] for n in ("flat", "column"))
    assert len(flat) == 3 and flat == column


def test_torus_training_transports_both_coordinates(tmp_path):
    cfg = tiny_config(symmetry={"name": "torus", "spectrum": TORUS}, training={"steps": 3, "checkpoint_every": 3})
    x, cardiac = corpus()
    breathing = (0.1 * np.arange(125)[None] + np.linspace(0, 6, len(x))[:, None]) % (2 * np.pi)
    breathing[:, -20:] = np.nan  # undefined after the last breath
    phases = np.stack([cardiac, breathing], -1)
    trainer = Trainer(training_spec(cfg, tmp_path / "torus", seed=1, transport_weight=1.0), x, phases, model_fs=100.0)
    assert isinstance(trainer.objective.symmetry, TorusSymmetry)
    trainer.fit(progress=False)
    rows = losses(tmp_path / "torus")
    assert len(rows) == 3 and all(np.isfinite(row["transport"]) for row in rows)
    # the logged term is the transport of the model's tokens under both coordinates
    objective = trainer.objective
    with torch.no_grad():
        z = objective.model(torch.as_tensor(x[:4]))
        both = transport_loss(z, torch.as_tensor(phases[:4], dtype=torch.float32), objective.symmetry)
        cardiac_only = phases[:4].copy()
        cardiac_only[..., 1] = np.where(np.isnan(phases[:4, :, 1]), np.nan, 0.0)
        one = transport_loss(z, torch.as_tensor(cardiac_only, dtype=torch.float32), objective.symmetry)
    assert both.item() != one.item()  # the breathing coordinate enters the loss
