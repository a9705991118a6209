"""Closed-form actions of U(1) and of tori on the latent space.

In the canonical basis every coordinate k has an angle multiplier n_k (a frequency vector on
a torus), a partner index p_k and a sign s_k, and the action is

    (B(g) y)_k = y_k cos(theta_k) + s_k y_{p_k} sin(theta_k),   theta_k = <n_k, g>,

which on a pair (x, y) is the rotation [[cos, -sin], [sin, cos]] of the paper (x: s = -1,
y: s = +1) and leaves invariant coordinates (n = 0, p_k = k, s = 0) fixed. With a basis Q the
action is rho(g) = Q B(g) Q^T; Q is built once per call and applied as two K x K products.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cyclejepa.registry import BASES, SYMMETRIES
from cyclejepa.symmetry.bases import Basis
from cyclejepa.symmetry.spectrum import HarmonicSpectrum


def pair_tables(spectrum: HarmonicSpectrum) -> tuple[Tensor, Tensor, Tensor]:
    """Per-coordinate frequency vectors (K, rank), partner indices (K,) and signs (K,)."""
    partner, sign = [], []
    for term, span in zip(spectrum.terms, spectrum.term_slices, strict=True):
        for k in range(span.start, span.stop):
            if term.is_invariant:
                partner.append(k)
                sign.append(0)
            elif (k - span.start) % 2 == 0:  # x of a pair: x' = x cos - y sin
                partner.append(k + 1)
                sign.append(-1)
            else:  # y of a pair: y' = y cos + x sin
                partner.append(k - 1)
                sign.append(1)
    frequencies = torch.tensor(spectrum.coordinate_frequencies(), dtype=torch.long)
    return frequencies, torch.tensor(partner), torch.tensor(sign)


class PhaseSymmetry(nn.Module):
    """Orthogonal representation rho of a torus of ``rank`` cyclic coordinates on R^K.

    Subclasses fix how the group element ``g`` is shaped (`_group_coordinates`).
    """

    basis: Basis
    frequencies: Tensor  # buffers of `pair_tables`: (K, rank) n_k, (K,) p_k and (K,) s_k
    partner: Tensor
    sign: Tensor

    def __init__(self, spectrum: str | HarmonicSpectrum, basis: str | Basis = "canonical", **basis_kwargs: object):
        super().__init__()
        self._spectrum = HarmonicSpectrum(spectrum)
        if isinstance(basis, str):
            self.basis = BASES.build(basis, dim=self._spectrum.dim, **basis_kwargs)
        elif basis_kwargs:
            raise TypeError(f"basis options {sorted(basis_kwargs)} need a basis given by name")
        else:
            self.basis = basis
        if self.basis.dim != self._spectrum.dim:
            raise ValueError(f"basis dim {self.basis.dim} != spectrum {self._spectrum} dim {self.dim}")
        frequencies, partner, sign = pair_tables(self._spectrum)
        self.register_buffer("frequencies", frequencies, persistent=False)
        self.register_buffer("partner", partner, persistent=False)
        self.register_buffer("sign", sign, persistent=False)

    @property
    def spectrum(self) -> HarmonicSpectrum:
        return self._spectrum

    @property
    def dim(self) -> int:
        return self._spectrum.dim

    @property
    def rank(self) -> int:
        return self._spectrum.rank

    def _group_coordinates(self, g: Tensor) -> Tensor:
        """``g`` as (..., rank) group coordinates in radians."""
        raise NotImplementedError

    def element(self, coordinates: Tensor) -> Tensor:
        """The group element ``g`` (as `act` takes it) of (..., rank) ``coordinates``: the inverse of
        `_group_coordinates` (on U(1) it drops the last axis, so (..., T, 1) phases act like (..., T))."""
        if coordinates.shape[-1:] != (self.rank,):
            raise ValueError(
                f"group coordinates have shape {tuple(coordinates.shape)}; spectrum "
                f"{self._spectrum} has rank {self.rank}, so expected (..., {self.rank})"
            )
        return coordinates

    def _angles(self, g: Tensor | float, like: Tensor | None = None) -> Tensor:
        """theta_k = <n_k, g> of shape (..., K) on ``like``'s device, in at least float32."""
        g = torch.as_tensor(g, device=None if like is None else like.device)
        dtype = torch.get_default_dtype() if like is None else like.dtype
        if g.is_floating_point():
            dtype = torch.promote_types(g.dtype, dtype)
        coords = self._group_coordinates(g.to(torch.promote_types(dtype, torch.float32)))
        return coords @ self.frequencies.to(coords).mT

    def _rotate(self, y: Tensor, theta: Tensor) -> Tensor:
        """B(g) y in the canonical basis: cos/sin on coordinate pairs."""
        cos, sin = torch.cos(theta).to(y.dtype), torch.sin(theta).to(y.dtype)
        return y * cos + self.sign.to(y) * y[..., self.partner.to(y.device)] * sin

    def _check_latent(self, z: Tensor) -> None:
        if z.shape[-1:] != (self.dim,):
            raise ValueError(f"latent has shape {tuple(z.shape)}; expected (..., {self.dim}) for spectrum {self._spectrum}")

    def _transport(self, z: Tensor, theta: Tensor) -> Tensor:
        q = self.basis.matrix()
        if q is None:
            return self._rotate(z, theta)
        q = q.to(z)
        return self._rotate(z @ q, theta) @ q.mT

    def act(self, z: Tensor, g: Tensor | float) -> Tensor:
        """rho(g) z for z of shape (..., K); ``g`` broadcasts against z's leading dimensions."""
        self._check_latent(z)
        return self._transport(z, self._angles(g, like=z))

    def canonicalize(self, z: Tensor, g: Tensor | float) -> Tensor:
        """rho(g)^{-1} z = rho(-g) z."""
        self._check_latent(z)
        return self._transport(z, -self._angles(g, like=z))

    def matrix(self, g: Tensor | float) -> Tensor:
        """rho(g) as an explicit (..., K, K) matrix (for tests and analysis, not the hot path)."""
        theta = self._angles(g)
        block = torch.diag_embed(torch.cos(theta))
        # diag(s sin) P with P[k, p_k] = 1; p is an involution, so P permutes columns by p.
        sin = torch.diag_embed(self.sign.to(theta) * torch.sin(theta))
        block = block + sin[..., self.partner.to(theta.device)]
        q = self.basis.matrix()
        return block if q is None else q.to(block) @ block @ q.to(block).mT

    def extra_repr(self) -> str:
        return f"spectrum='{self._spectrum}', dim={self.dim}"


@SYMMETRIES.register("u1")
class U1Symmetry(PhaseSymmetry):
    """Action of U(1) (one cyclic coordinate): rho(g) = Q B(g) Q^T with g in radians.

    ``spectrum`` is a rank-1 `HarmonicSpectrum` or its string (``"4x0+24x1+24x2"``), ``basis`` a
    registered basis name or a `Basis`, ``basis_kwargs`` the named basis's options.

    Examples
    --------
    One invariant coordinate, then a pair at harmonic 1: a quarter turn rotates the pair by 90°.

    >>> import torch
    >>> symmetry = U1Symmetry("1x0+1x1")
    >>> z = torch.tensor([[2.0, 1.0, 0.0]])
    >>> symmetry.act(z, torch.tensor([torch.pi / 2])).round(decimals=4) + 0.0
    tensor([[2., 0., 1.]])
    >>> torch.allclose(symmetry.canonicalize(symmetry.act(z, torch.tensor([0.3])), torch.tensor([0.3])), z)
    True
    """

    def __init__(self, spectrum: str | HarmonicSpectrum, basis: str | Basis = "canonical", **basis_kwargs: object):
        super().__init__(spectrum, basis, **basis_kwargs)
        if self.rank != 1:
            raise ValueError(f"U1Symmetry needs a rank-1 spectrum; {self._spectrum} has rank {self.rank}: use TorusSymmetry")

    def _group_coordinates(self, g: Tensor) -> Tensor:
        return g.unsqueeze(-1)

    def element(self, coordinates: Tensor) -> Tensor:
        return super().element(coordinates).squeeze(-1)


@SYMMETRIES.register("torus")
class TorusSymmetry(PhaseSymmetry):
    """Action of the torus U(1)^rank: g has shape (..., rank), theta_k = <n_k, g>; parameters as
    `U1Symmetry`'s, with integer-vector frequencies (``"4x(0,0)+8x(1,0)+8x(0,1)+4x(1,-1)"``)."""

    def _group_coordinates(self, g: Tensor) -> Tensor:
        if g.shape[-1:] != (self.rank,):
            raise ValueError(f"torus element has shape {tuple(g.shape)}; expected (..., {self.rank}) angles")
        return g
