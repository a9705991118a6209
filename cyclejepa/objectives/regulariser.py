"""The regulariser interface, and the slicing test that lifts a univariate statistic to K dimensions.

A regulariser is an ``nn.Module`` whose random inputs are drawn by ``draw`` (outside compiled
code: ``torch.compile`` cannot trace a ``torch.Generator``) and passed to ``forward`` as
keywords; ``forward(z, **draws, reduce=None)`` returns a scalar. `SlicingTest` is the one that
draws: M unit directions a_m per step, the projections x_{r,m} = a_mᵀ z_r of the R rows of z,
and the mean over directions of a `UnivariateStatistic` of each column of projections against
N(0, 1) (LeJEPA's sliced test; SIGReg is slicing ∘ Epps–Pulley).

A univariate statistic is a function of sample means of per-sample features, S(m̂, N) with
m̂ = (1/R) Σ_r f(x_r), so that under DDP the ranks' means are combined (``reduce``) before S is
taken and every rank computes the statistic of the global batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor, nn

MeanReduce = Callable[[Tensor, int | Tensor], tuple[Tensor, int | Tensor]]
"""``reduce(means, n) -> (means, n)``: local means of per-sample statistics and the local sample
count in; global means (the n-weighted average of the local means) and global count out."""

SAMPLE_SIZES = ("records", "tokens")
"""What N counts for a (B, T, K) batch: its B records, or its B × T tokens."""


def sample_directions(
    dim: int,
    num: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Uniform random unit directions on the sphere S^{dim−1}.

    Gaussian draws normalised to unit length. They are drawn on the generator's device (so a
    CPU generator gives the same directions whatever the training device) and then moved to
    ``device``.

    Returns
    -------
    Tensor
        Shape (dim, num); each column has unit Euclidean norm.
    """
    if dim < 1 or num < 1:
        raise ValueError(f"sample_directions needs dim >= 1 and num >= 1, got dim={dim}, num={num}")
    draw_device = generator.device if generator is not None else device
    gaussian = torch.randn(dim, num, generator=generator, device=draw_device, dtype=dtype)
    return (gaussian / gaussian.norm(dim=0, keepdim=True)).to(device)


class Regulariser(nn.Module):
    """A regulariser of projected tokens: ``draw`` this step's random inputs, then ``forward``.

    The base draws nothing (an empty dict); subclasses that need random inputs override `draw`.
    """

    def draw(
        self,
        dim: int,
        generator: torch.Generator | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> dict[str, Tensor]:
        """This step's random inputs for tokens of dimension ``dim``, keyed by `forward`'s keywords."""
        return {}


class UnivariateStatistic(ABC):
    """A test statistic of univariate samples against N(0, 1), computed per column.

    ``sample_means`` maps projections x (R, M) to the means over rows of per-sample features,
    shape (..., M); ``statistic`` maps those means (after any DDP reduction) and the sample size
    N to the statistic of each column, shape (M,). Subclasses register in
    `cyclejepa.registry.STATISTICS` to be selectable by name.
    """

    @abstractmethod
    def sample_means(self, projections: Tensor) -> Tensor:
        """Means over the R rows of per-sample features of ``projections`` (R, M): (..., M)."""

    @abstractmethod
    def statistic(self, means: Tensor, samples: float | Tensor) -> Tensor:
        """The statistic of each column, (M,), from its feature ``means`` and sample size N."""


def sliced_statistic(
    z: Tensor,
    directions: Tensor,
    statistic: UnivariateStatistic,
    *,
    rows_per_sample: int = 1,
    reduce: MeanReduce | None = None,
    caller: str = "sliced_statistic",
) -> Tensor:
    """Mean over directions a_m of ``statistic`` of the projections aᵀz_r of the rows of ``z``.

    Parameters
    ----------
    z
        Rows (tokens), shape (R, K).
    directions
        Unit projection directions as columns, shape (K, M).
    statistic
        The univariate statistic (e.g. `EppsPulley`).
    rows_per_sample
        Rows of ``z`` that make one sample of the size N = R / rows_per_sample (1: every row is
        a sample; T: the T tokens of a record).
    reduce
        Optional ``reduce(means, n) -> (means, n)`` applied to the statistic's sample means and
        the count ``n`` of rows (under DDP: the row-weighted average over ranks and the total).
    caller
        Name used in error messages.

    Returns
    -------
    Tensor
        Scalar, in the promoted dtype of ``z`` and ``directions`` (at least float32).
    """
    if z.dim() != 2 or z.shape[0] < 1:
        raise ValueError(f"{caller}: z must have shape (N, K) with N >= 1, got {tuple(z.shape)}")
    if rows_per_sample < 1 or z.shape[0] % rows_per_sample:
        raise ValueError(f"{caller}: {z.shape[0]} rows do not split into samples of {rows_per_sample} rows")
    if directions.dim() != 2 or directions.shape[0] != z.shape[1]:
        raise ValueError(f"{caller}: directions must have shape (K, M) = ({z.shape[1]}, M), got {tuple(directions.shape)}")
    dtype = torch.promote_types(torch.promote_types(z.dtype, directions.dtype), torch.float32)
    means = statistic.sample_means(z.to(dtype) @ directions.to(dtype))
    rows: int | Tensor = z.shape[0]
    if reduce is not None:
        means, rows = reduce(means, rows)
    return statistic.statistic(means, rows / rows_per_sample).mean()


class SlicingTest(Regulariser):
    """Sliced univariate test with M fresh random unit directions at every step.

    Parameters
    ----------
    statistic
        The univariate statistic applied to each direction's projections.
    num_directions
        Directions M sampled per step.
    sample_size
        What N counts for a batch z of shape (B, T, K): ``"records"`` (N = B; under DDP the
        global record count) or ``"tokens"`` (N = B × T). Either way the sample means pool all
        B × T tokens.
    """

    def __init__(self, statistic: UnivariateStatistic, num_directions: int = 256, sample_size: str = "records"):
        super().__init__()
        if num_directions < 1:
            raise ValueError(f"{type(self).__name__}: num_directions must be >= 1, got {num_directions}")
        if sample_size not in SAMPLE_SIZES:
            raise ValueError(f"{type(self).__name__}: sample_size must be one of {SAMPLE_SIZES}, got {sample_size!r}")
        self.statistic, self.num_directions, self.sample_size = statistic, num_directions, sample_size

    def draw(
        self,
        dim: int,
        generator: torch.Generator | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> dict[str, Tensor]:
        """One step's random inputs: ``{"directions": (dim, num_directions) unit columns}``."""
        return {"directions": sample_directions(dim, self.num_directions, generator, device=device, dtype=dtype)}

    def forward(
        self,
        z: Tensor,
        directions: Tensor | None = None,
        *,
        generator: torch.Generator | None = None,
        reduce: MeanReduce | None = None,
    ) -> Tensor:
        """The sliced statistic of all tokens of ``z`` (shape (B, T, K), or (N, K) for N records
        of one token). ``directions`` come from `draw`; without them, fresh ones are drawn from
        ``generator``."""
        tokens = z.reshape(-1, z.shape[-1])
        per_record = z.shape[-2] if z.dim() > 2 and self.sample_size == "records" else 1
        if directions is None:
            dtype = torch.promote_types(z.dtype, torch.float32)
            directions = self.draw(tokens.shape[1], generator, device=z.device, dtype=dtype)["directions"]
        return sliced_statistic(
            tokens, directions, self.statistic, rows_per_sample=per_record, reduce=reduce, caller=type(self).__name__
        )

    def extra_repr(self) -> str:
        return f"statistic={self.statistic!r}, num_directions={self.num_directions}, sample_size={self.sample_size!r}"
