"""Harmonic spectra: which irreducible representations of U(1) or a torus the latent carries.

A spectrum is written like e3nn's ``Irreps``: ``"4x0+24x1+24x2"`` is 4 invariant coordinates
followed by 24 two-dimensional blocks rotating at harmonic 1 and 24 at harmonic 2 (K = 100).
On a torus of several cyclic coordinates the frequencies are integer vectors,
``"4x(0,0)+8x(1,0)+8x(0,1)+4x(1,-1)"``.

Layout of the K latent coordinates (the canonical irrep basis): terms in string order; a
term ``mx0`` occupies ``m`` consecutive invariant coordinates; a term ``mxn`` with ``n != 0``
occupies ``m`` consecutive ``(x, y)`` pairs, i.e. ``2m`` coordinates, and each pair rotates by
the angle ``n * g`` (U(1)) or ``<n, g>`` (torus).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

Frequency = int | tuple[int, ...]

_TERM = re.compile(r"^\s*(\d+)\s*x\s*(?:(-?\d+)|\(([^()]*)\))\s*$")


class SpectrumTerm(NamedTuple):
    """``multiplicity`` copies of the irrep at ``frequency`` (int on U(1), tuple on a torus)."""

    multiplicity: int
    frequency: Frequency

    @property
    def vector(self) -> tuple[int, ...]:
        """The frequency as an integer vector (length 1 on U(1))."""
        return self.frequency if isinstance(self.frequency, tuple) else (self.frequency,)

    @property
    def is_invariant(self) -> bool:
        return not any(self.vector)

    @property
    def width(self) -> int:
        """Number of latent coordinates the term occupies."""
        return self.multiplicity * (1 if self.is_invariant else 2)

    def __str__(self) -> str:
        if isinstance(self.frequency, tuple):
            return f"{self.multiplicity}x({','.join(map(str, self.frequency))})"
        return f"{self.multiplicity}x{self.frequency}"


def _parse_term(text: str, index: int, spec: str) -> SpectrumTerm:
    where = f"term {index + 1} ({text.strip()!r}) of spectrum {spec!r}"
    match = _TERM.match(text)
    if match is None:
        raise ValueError(f"malformed {where}: expected 'MxN' (e.g. '24x1') or 'Mx(N1,N2,...)' on a torus")
    multiplicity = int(match.group(1))
    if match.group(2) is not None:
        frequency: Frequency = int(match.group(2))
    else:
        parts = [p.strip() for p in match.group(3).split(",")]
        if not all(re.fullmatch(r"-?\d+", p) for p in parts):
            raise ValueError(f"malformed {where}: frequency vector must be integers like (1,-1)")
        frequency = _as_frequency(int(p) for p in parts)
    return _checked_term(multiplicity, frequency, where)


def _as_frequency(n: int | Iterable[int]) -> Frequency:
    """An int on U(1), a tuple of ints (length > 1) on a torus."""
    if isinstance(n, Iterable):
        vector = tuple(int(x) for x in n)
        return vector if len(vector) > 1 else vector[0]
    return int(n)


def _checked_term(multiplicity: int, frequency: Frequency, where: str) -> SpectrumTerm:
    if multiplicity < 1:
        raise ValueError(f"{where}: multiplicity must be a positive integer, got {multiplicity}")
    if isinstance(frequency, tuple):
        nonzero = [n for n in frequency if n != 0]
        if nonzero and nonzero[0] < 0:
            flipped = ",".join(str(-n) for n in frequency)
            raise ValueError(
                f"{where}: frequency {frequency} is not canonical; irreps n and -n are equivalent "
                f"over the reals and the representative has its first non-zero component "
                f"positive: use ({flipped})"
            )
    elif frequency < 0:
        raise ValueError(f"{where}: U(1) harmonics are non-negative (n and -n give equivalent real irreps); use {-frequency}")
    return SpectrumTerm(multiplicity, frequency)


class HarmonicSpectrum:
    """A direct sum of real irreps of U(1) (rank 1) or of a torus (rank > 1).

    ``spec`` is a string (``"4x0+24x1+24x2"``, ``"4x(0,0)+8x(1,0)"``), another spectrum or an
    iterable of ``(multiplicity, frequency)`` pairs. Raises a ValueError for a malformed or
    non-canonical term (naming it), mixed ranks, a repeated frequency or an empty spectrum.

    Examples
    --------
    >>> spectrum = HarmonicSpectrum("4x0+24x1+24x2")
    >>> spectrum.dim, spectrum.invariant_dim, spectrum.n_max
    (100, 4, 2)
    >>> spectrum.multiplicities
    {1: 24, 2: 24}
    >>> str(spectrum)
    '4x0+24x1+24x2'
    """

    __slots__ = ("_terms", "_rank", "_text")

    def __init__(self, spec: str | HarmonicSpectrum | Iterable[tuple[int, Frequency]]):
        if isinstance(spec, HarmonicSpectrum):
            terms: tuple[SpectrumTerm, ...] = spec.terms
        elif isinstance(spec, str):
            pieces = spec.split("+") if spec.strip() else []
            terms = tuple(_parse_term(piece, i, spec) for i, piece in enumerate(pieces))
        else:
            terms = tuple(_checked_term(int(m), _as_frequency(n), f"term {i + 1} ({m}, {n})") for i, (m, n) in enumerate(spec))
        if not terms:
            raise ValueError("empty harmonic spectrum: give at least one term such as '4x0'")
        self._terms = terms
        self._rank = self._common_rank(terms)
        self._check_distinct(terms)
        self._text = "+".join(str(term) for term in terms)

    @classmethod
    def from_multiplicities(cls, invariant_dim: int, multiplicities: Mapping[Frequency, int]) -> HarmonicSpectrum:
        """``invariant_dim`` invariant coordinates, then ``c_n`` blocks per ``n`` in the mapping's
        order (zero multiplicities skipped)."""
        terms = [(c, n) for n, c in multiplicities.items() if c]
        if invariant_dim:
            rank = len(SpectrumTerm(1, terms[0][1]).vector) if terms else 1
            terms.insert(0, (invariant_dim, 0 if rank == 1 else (0,) * rank))
        return cls(terms)

    @staticmethod
    def _common_rank(terms: tuple[SpectrumTerm, ...]) -> int:
        ranks = {len(term.vector) for term in terms}
        if len(ranks) > 1:
            listing = ", ".join(f"{term} (rank {len(term.vector)})" for term in terms)
            raise ValueError(f"all terms of a spectrum need the same rank; got {listing}")
        return ranks.pop()

    @staticmethod
    def _check_distinct(terms: tuple[SpectrumTerm, ...]) -> None:
        seen: set[tuple[int, ...]] = set()
        for term in terms:
            if term.vector in seen:
                raise ValueError(
                    f"frequency {term.frequency} appears in more than one term; merge them "
                    f"into one term so each harmonic has one contiguous block"
                )
            seen.add(term.vector)

    @property
    def terms(self) -> tuple[SpectrumTerm, ...]:
        return self._terms

    @property
    def rank(self) -> int:
        """Number of cyclic coordinates (1 for U(1))."""
        return self._rank

    @property
    def dim(self) -> int:
        """Latent dimension K = K0 + 2 * sum of the harmonic multiplicities."""
        return sum(term.width for term in self._terms)

    @property
    def invariant_dim(self) -> int:
        """K0, the number of coordinates on which the group acts trivially."""
        return sum(term.multiplicity for term in self._terms if term.is_invariant)

    @property
    def multiplicities(self) -> dict[Frequency, int]:
        """``{n: c_n}`` for the non-trivial harmonics, in term order."""
        return {t.frequency: t.multiplicity for t in self._terms if not t.is_invariant}

    @property
    def n_max(self) -> int:
        """Highest harmonic order (on a torus: the largest absolute frequency component)."""
        return max(max(abs(n) for n in term.vector) for term in self._terms)

    @property
    def term_slices(self) -> tuple[slice, ...]:
        """Coordinate slice of each term, in term order."""
        slices, start = [], 0
        for term in self._terms:
            slices.append(slice(start, start + term.width))
            start += term.width
        return tuple(slices)

    @property
    def harmonic_slices(self) -> dict[Frequency, slice]:
        """``{frequency: coordinate slice}`` for every term, invariant frequency included."""
        return {term.frequency: s for term, s in zip(self._terms, self.term_slices, strict=True)}

    def coordinate_frequencies(self) -> list[tuple[int, ...]]:
        """Frequency vector of each of the K coordinates (both coordinates of a pair share it)."""
        return [term.vector for term in self._terms for _ in range(term.width)]

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"HarmonicSpectrum({self._text!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HarmonicSpectrum):
            return NotImplemented
        return self._text == other._text

    def __hash__(self) -> int:
        return hash(self._text)
