"""SIGReg: the sketched Epps–Pulley test of isotropic Gaussianity (LeJEPA).

For each unit direction ``a`` the projections ``x_r = aᵀz_r`` of the R rows (tokens) of z are
compared with N(0, 1) through their characteristic functions,

    EP(a; z) = N ∫_R |φ̂_a(t) − e^{−t²/2}|² e^{−t²/2} dt,    φ̂_a(t) = (1/R) Σ_r e^{i t x_r},

and SIGReg averages EP over the directions. N is the sample size. `SIGReg` takes
``sample_size="records"`` (the paper's: N = B, the records of a (B, T, K) batch, although all
R = B × T tokens enter φ̂) or ``"tokens"`` (LeJEPA's pooled convention: N = R = B × T). The two
differ by the factor T in front of the integral, i.e. in the effective weight of the
regulariser (docs/objectives.md). The integrand is even in ``t``, so the integral over R is
twice the one over [0, ∞), truncated to [0, t_max] and evaluated by the trapezoid rule on
``knots`` equally spaced points: weights Δ·[1, 2, …, 2, 1] with Δ = t_max / (knots − 1).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from cyclejepa.registry import REGULARISERS

MeanReduce = Callable[[Tensor, int | Tensor], tuple[Tensor, int | Tensor]]
"""``reduce(means, n) -> (means, n)``: local means of per-sample statistics and the local sample
count in; global means (the n-weighted average of the local means) and global count out."""


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


def _trapezoid(
    knots: int,
    t_max: float,
    *,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """Knots on [0, t_max] and weights Δ·[1, 2, …, 2, 1] for an even integrand on [−t_max, t_max]."""
    if knots < 2 or t_max <= 0:
        raise ValueError(f"SIGReg quadrature needs knots >= 2 and t_max > 0, got {knots}, {t_max}")
    t = torch.linspace(0.0, t_max, knots, device=device, dtype=dtype)
    weights = torch.full_like(t, 2.0 * t_max / (knots - 1))
    weights[0] /= 2
    weights[-1] /= 2
    return t, weights


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
    if z.dim() != 2 or z.shape[0] < 1:
        raise ValueError(f"sigreg: z must have shape (N, K) with N >= 1, got {tuple(z.shape)}")
    if rows_per_sample < 1 or z.shape[0] % rows_per_sample:
        raise ValueError(f"sigreg: {z.shape[0]} rows do not split into samples of {rows_per_sample} rows")
    if directions.dim() != 2 or directions.shape[0] != z.shape[1]:
        raise ValueError(
            f"sigreg: directions must have shape (K, M) = ({z.shape[1]}, M), "
            f"got {tuple(directions.shape)}"
        )
    dtype = torch.promote_types(torch.promote_types(z.dtype, directions.dtype), torch.float32)
    t, weights = _trapezoid(knots, t_max, device=z.device, dtype=dtype)
    # (R, M, J) phases: the one tensor autograd keeps for cos/sin backward (see docs/objectives.md).
    phases = (z.to(dtype) @ directions.to(dtype)).unsqueeze(-1) * t
    ecf = torch.stack((phases.cos().mean(0), phases.sin().mean(0))).transpose(1, 2)  # (2, J, M)
    rows: int | Tensor = z.shape[0]
    if reduce is not None:
        ecf, rows = reduce(ecf, rows)
    target = torch.exp(-0.5 * t.square()).unsqueeze(-1)  # φ0(t_j) = e^{−t²/2}, shape (J, 1)
    squared_error = (ecf[0] - target).square() + ecf[1].square()  # |φ̂ − φ0|², shape (J, M)
    per_direction = (rows / rows_per_sample) * ((weights.unsqueeze(-1) * target) * squared_error).sum(0)
    return per_direction.mean()


@REGULARISERS.register("sigreg")
class SIGReg(nn.Module):
    """SIGReg regulariser with fresh random directions at every step.

    A regulariser's random inputs are drawn by ``draw`` and passed to ``forward`` as keywords,
    so that the drawing stays outside compiled code (``torch.compile`` cannot trace a
    ``torch.Generator``).

    Parameters
    ----------
    num_directions
        Directions M sampled per call (the paper: 256).
    knots, t_max
        Quadrature (the paper: 17 knots on [0, 3]).
    sample_size
        What N in front of the integral counts for a batch z of shape (B, T, K): ``"records"``
        (N = B, the paper's; under DDP the global record count) or ``"tokens"`` (N = B × T,
        LeJEPA's pooled convention). Either way φ̂ is the mean over all B × T tokens.
    """

    SAMPLE_SIZES = ("records", "tokens")

    def __init__(self, num_directions: int = 256, knots: int = 17, t_max: float = 3.0, sample_size: str = "records"):
        super().__init__()
        _trapezoid(knots, t_max)  # validates early
        if num_directions < 1:
            raise ValueError(f"SIGReg: num_directions must be >= 1, got {num_directions}")
        if sample_size not in self.SAMPLE_SIZES:
            raise ValueError(f"SIGReg: sample_size must be one of {self.SAMPLE_SIZES}, got {sample_size!r}")
        self.num_directions, self.knots, self.t_max = num_directions, knots, t_max
        self.sample_size = sample_size

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
        """SIGReg of all tokens of ``z`` (shape (B, T, K), or (N, K) for N records of one token).

        ``directions`` come from `draw`; without them, fresh ones are drawn from ``generator``.
        """
        tokens = z.reshape(-1, z.shape[-1])
        per_record = z.shape[-2] if z.dim() > 2 and self.sample_size == "records" else 1
        if directions is None:
            dtype = torch.promote_types(z.dtype, torch.float32)
            directions = self.draw(tokens.shape[1], generator, device=z.device, dtype=dtype)["directions"]
        return sigreg(
            tokens, directions, knots=self.knots, t_max=self.t_max, rows_per_sample=per_record, reduce=reduce
        )

    def extra_repr(self) -> str:
        return (
            f"num_directions={self.num_directions}, knots={self.knots}, t_max={self.t_max}, "
            f"sample_size={self.sample_size!r}"
        )
