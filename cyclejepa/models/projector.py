"""Per-token MLPs: the shared Linear → GELU → Linear block and the projector head."""

from __future__ import annotations

from torch import nn


class TokenMLP(nn.Sequential):
    """Linear → GELU → Linear applied to the last dimension (each token independently).

    Parameters
    ----------
    in_dim, hidden, out_dim
        Input, hidden and output widths. Both linear layers have a bias; GELU is the exact
        (erf) form.
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int):
        super().__init__(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, out_dim))
        self.in_dim, self.hidden, self.out_dim = in_dim, hidden, out_dim


class ProjectorMLP(TokenMLP):
    """Projector head: encoder token h_t → projected token z_t, no mixing across time.

    The paper's projector is 256 → 512 → 256 (262,912 parameters). Its output is left
    unnormalised so that SIGReg controls the scale of z.
    """

    def __init__(self, in_dim: int = 256, hidden: int = 512, out_dim: int = 256):
        super().__init__(in_dim, hidden, out_dim)
