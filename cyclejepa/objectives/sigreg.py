"""SIGReg: the sketched Epps–Pulley test of isotropic Gaussianity (LeJEPA), a `SlicingTest`.

For each unit direction a the projections x_r = aᵀz_r of the R rows (tokens) of z give

    EP(a; z) = N ∫_R |φ̂_a(t) − e^{−t²/2}|² e^{−t²/2} dt,    φ̂_a(t) = (1/R) Σ_r e^{i t x_r},

averaged over the directions (LeJEPA's ``SlicingUnivariateTest(EppsPulley(), num_slices=M)``).
N is B, the records of a (B, T, K) batch, for ``sample_size="records"`` (the paper's, although
all B × T tokens enter φ̂) or B × T for ``"tokens"`` (LeJEPA's): a factor T in the effective
weight of the regulariser (docs/objectives.md).
"""

from __future__ import annotations

from torch import Tensor

from cyclejepa.objectives.regulariser import MeanReduce, SlicingTest, UnivariateStatistic, sliced_statistic
from cyclejepa.objectives.statistics import EppsPulley
from cyclejepa.registry import REGULARISERS


def sigreg(
    z: Tensor,
    directions: Tensor,
    *,
    knots: int = 17,
    t_max: float = 3.0,
    rows_per_sample: int = 1,
    reduce: MeanReduce | None = None,
) -> Tensor:
    """Mean EP over the directions (K, M) of rows z (R, K), with ``knots`` trapezoid knots on
    [0, t_max] and N = R / ``rows_per_sample``: `sliced_statistic` of `EppsPulley`, whose ``reduce``
    sees the empirical characteristic function (2, knots, M) and the row count."""
    statistic = EppsPulley(knots, t_max)
    return sliced_statistic(z, directions, statistic, rows_per_sample=rows_per_sample, reduce=reduce, caller="sigreg")


@REGULARISERS.register("sigreg")
class SIGReg(SlicingTest):
    """SIGReg: a `SlicingTest` of ``statistic`` (default ``EppsPulley()``, the paper's 17 knots on
    [0, 3]; e.g. ``Moments(order=4)``) on ``num_directions`` fresh directions per step (the paper:
    256), N as ``sample_size`` says (module docstring). A config names the statistic instead
    (``statistic``, ``statistic_options``; ``knots`` / ``t_max`` for Epps–Pulley), built from
    `cyclejepa.registry.STATISTICS` and passed as an object (`SIGRegOptions` hands it over as a
    `cyclejepa.declarations.options.Choice`).
    """

    def __init__(self, num_directions: int = 256, statistic: UnivariateStatistic | None = None, sample_size: str = "records"):
        if statistic is not None and not isinstance(statistic, UnivariateStatistic):
            raise TypeError(f"SIGReg: statistic must be a UnivariateStatistic object, got {statistic!r}")
        super().__init__(EppsPulley() if statistic is None else statistic, num_directions, sample_size)
