"""SIGReg: the sketched Epps–Pulley test of isotropic Gaussianity (LeJEPA), a `SlicingTest`.

For each unit direction ``a`` the projections ``x_r = aᵀz_r`` of the R rows (tokens) of z are
compared with N(0, 1) through their characteristic functions,

    EP(a; z) = N ∫_R |φ̂_a(t) − e^{−t²/2}|² e^{−t²/2} dt,    φ̂_a(t) = (1/R) Σ_r e^{i t x_r},

and SIGReg averages EP over the directions (slicing ∘ `EppsPulley`, as LeJEPA's
``SlicingUnivariateTest(univariate_test=EppsPulley(), num_slices=M)``; another
`UnivariateStatistic` object replaces EP through ``statistic``). N is the sample size.
`SIGReg` takes ``sample_size="records"`` (the paper's: N = B, the records of a (B, T, K) batch,
although all R = B × T tokens enter φ̂) or ``"tokens"`` (LeJEPA's pooled convention:
N = R = B × T). The two differ by the factor T in front of the integral, i.e. in the effective
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
    """SIGReg statistic: the Epps–Pulley statistic averaged over projection directions.

    Parameters
    ----------
    z
        Rows (tokens), shape (R, K).
    directions
        Unit projection directions as columns, shape (K, M).
    knots, t_max
        Trapezoid quadrature on ``knots`` equally spaced points of [0, t_max].
    rows_per_sample
        Rows of ``z`` that make one sample of the factor N in front of the integral:
        N = R / rows_per_sample (1: every row is a sample; T: the T tokens of a record).
    reduce
        Optional ``reduce(ecf, n) -> (ecf, n)`` applied to the empirical characteristic function
        ``ecf`` (shape (2, knots, M): the means of cos(t aᵀz) and sin(t aᵀz)) and the count
        ``n`` of rows. Under DDP it returns the row-weighted average of the ranks' ECFs and the
        total count of rows, so that every rank computes the statistic of the global batch.

    Returns
    -------
    Tensor
        Scalar, in the promoted dtype of ``z`` (at least float32).
    """
    statistic = EppsPulley(knots, t_max)
    return sliced_statistic(z, directions, statistic, rows_per_sample=rows_per_sample, reduce=reduce, caller="sigreg")


@REGULARISERS.register("sigreg")
class SIGReg(SlicingTest):
    """SIGReg regulariser: a univariate statistic (Epps–Pulley by default) on fresh random
    directions at every step.

    Parameters
    ----------
    num_directions
        Directions M sampled per call (the paper: 256).
    statistic
        The `UnivariateStatistic` object (default ``EppsPulley()``: the paper's 17 knots on [0, 3]),
        e.g. ``Moments(order=4)``. A config names it instead (``statistic``, ``statistic_options``,
        and ``knots`` / ``t_max`` for Epps–Pulley): `cyclejepa.registry.REGULARISERS` builds it
        from `cyclejepa.registry.STATISTICS` and passes the object (`cyclejepa.registry.Injected`).
    sample_size
        What N in front of the integral counts for a batch z of shape (B, T, K): ``"records"``
        (N = B, the paper's; under DDP the global record count) or ``"tokens"`` (N = B × T,
        LeJEPA's pooled convention). Either way φ̂ is the mean over all B × T tokens.
    """

    def __init__(self, num_directions: int = 256, statistic: UnivariateStatistic | None = None, sample_size: str = "records"):
        if statistic is not None and not isinstance(statistic, UnivariateStatistic):
            raise TypeError(f"SIGReg: statistic must be a UnivariateStatistic object, got {statistic!r}")
        super().__init__(EppsPulley() if statistic is None else statistic, num_directions, sample_size)
