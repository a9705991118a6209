"""Per-token MLPs: the shared Linear → GELU → Linear block and the projector head."""

from __future__ import annotations

from torch import nn


class TokenMLP(nn.Sequential):
    """Linear → GELU (exact, erf) → Linear, both with bias, on the last dimension (each token alone)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int):
        super().__init__(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, out_dim))
        self.in_dim, self.hidden, self.out_dim = in_dim, hidden, out_dim


class ProjectorMLP(TokenMLP):
    """Projector head h_t → z_t per token: the paper's 256 → 512 → 256 (262,912 parameters), its
    output unnormalised so that SIGReg controls the scale of z."""

    def __init__(self, in_dim: int = 256, hidden: int = 512, out_dim: int = 256):
        super().__init__(in_dim, hidden, out_dim)
