"""The regulariser interface, and the slicing test that lifts a univariate statistic to K dimensions.

A regulariser's random inputs are drawn by ``draw`` (outside compiled code: ``torch.compile``
cannot trace a ``torch.Generator``) and passed to ``forward(z, **draws, reduce=None)``, a scalar.
`SlicingTest` draws M unit directions a_m per step and averages a `UnivariateStatistic` of the
projections x_{r,m} = a_mᵀ z_r against N(0, 1) over them (LeJEPA's sliced test; SIGReg is
slicing ∘ Epps–Pulley). A statistic is S(m̂, N) of sample means m̂ = (1/R) Σ_r f(x_r), so that
under DDP the ranks' means are combined (``reduce``) and every rank scores the global batch.
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
    """(dim, num) uniform unit directions on S^{dim−1} as columns: normalised Gaussian draws on the
    generator's device (a CPU generator gives the same whatever the training device), then moved to ``device``."""
    if dim < 1 or num < 1:
        raise ValueError(f"sample_directions needs dim >= 1 and num >= 1, got dim={dim}, num={num}")
    draw_device = generator.device if generator is not None else device
    gaussian = torch.randn(dim, num, generator=generator, device=draw_device, dtype=dtype)
    return (gaussian / gaussian.norm(dim=0, keepdim=True)).to(device)


class Regulariser(nn.Module):
    """A regulariser of projected tokens: ``draw`` this step's random inputs (here none), then ``forward``."""

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
    """A test statistic of univariate samples against N(0, 1), per column; subclasses register in
    `cyclejepa.registry.STATISTICS` to be selectable by name."""

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
    """(1/M) Σ_m S(a_mᵀ z_r over rows r; N) for rows z (R, K) and unit directions a (K, M) as columns.

    N = R / ``rows_per_sample`` (1: each row a sample; T: a record's T tokens). ``reduce`` maps the
    sample means and the row count (under DDP: to the row-weighted mean over ranks and the total).
    A scalar in the promoted dtype of ``z`` and ``directions`` (at least float32); errors name ``caller``.
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
    """Sliced univariate ``statistic`` on M = ``num_directions`` fresh unit directions per step.

    ``sample_size``: N for a batch (B, T, K) is ``"records"`` (B; under DDP the global count) or
    ``"tokens"`` (B × T); either way the sample means pool all B × T tokens.
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
        """The sliced statistic of all tokens of ``z`` ((B, T, K), or (N, K) for N one-token records),
        on ``directions`` from `draw` (None: fresh ones from ``generator``)."""
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
