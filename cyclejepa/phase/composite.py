"""The ``"composite"`` phase provider: several cyclic coordinates of one record at once.

Each coordinate has its own provider (e.g. cardiac phase from ``ecg-rpeak`` on the ECG leads,
breathing phase from a respiration provider on RESP), so every token gets a point of the torus
U(1)^C, C the number of coordinates, for a `TorusSymmetry` of rank C. In a config::

    phase:
      provider: composite
      options:
        coordinates:
          cardiac: {provider: ecg-rpeak, lead: II}
          respiratory: {provider: resp-breath, lead: RESP}

Coordinate c of the torus is the c-th entry, in the mapping's order; each entry's ``provider``
names a registered provider and its other keys are that provider's options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cyclejepa.phase.provider import PhaseProvider
from cyclejepa.phase.track import Convention, PhaseTrack, QCVerdict
from cyclejepa.declarations.providers import CompositeDeclaration
from cyclejepa.registry import PHASE_PROVIDERS, UnknownComponentError


@dataclass(eq=False)
class CompositeTrack:
    """Phase tracks of C named cyclic coordinates of one record, in torus order, on one time
    axis (a `Track`); ``qc``: the joint verdict (`CompositePhaseProvider.qc_tracks`)."""

    names: tuple[str, ...]
    tracks: tuple[PhaseTrack, ...]
    qc: QCVerdict | None = None

    def __post_init__(self) -> None:
        if not self.tracks or len(self.names) != len(self.tracks):
            raise ValueError(
                f"a composite track needs one name per track, got {len(self.names)} names for {len(self.tracks)} tracks"
            )
        axes = {(track.fs, track.n_samples) for track in self.tracks}
        if len(axes) > 1:
            raise ValueError(f"the tracks lie on different time axes (fs, samples): {sorted(axes)}")

    @property
    def fs(self) -> float:
        return self.tracks[0].fs

    @property
    def n_samples(self) -> int:
        return self.tracks[0].n_samples

    @property
    def coordinate_qc(self) -> dict[str, QCVerdict | None]:
        """``{name: QC verdict of that coordinate's track}``."""
        return {name: track.qc for name, track in zip(self.names, self.tracks, strict=True)}

    @property
    def phase(self) -> np.ndarray:
        """(n_samples, C) phase of every native sample; NaN where a coordinate is undefined."""
        return np.stack([track.phase for track in self.tracks], axis=-1)

    @property
    def phase_yield(self) -> float:
        """Fraction of samples where every coordinate's phase is defined."""
        if any(len(track.events) < 2 for track in self.tracks) or self.n_samples == 0:
            return 0.0
        first = max(track.events[0] for track in self.tracks)
        last = min(track.events[-1] for track in self.tracks)
        return max(float(last - first), 0.0) / self.n_samples

    def at_tokens(
        self,
        patch: int,
        fs_out: float,
        convention: Convention = "centre",
        n_tokens: int | None = None,
    ) -> np.ndarray:
        """(n_tokens, C) token phases: `PhaseTrack.at_tokens` of each coordinate, stacked."""
        columns = [track.at_tokens(patch, fs_out, convention, n_tokens) for track in self.tracks]
        return np.stack(columns, axis=-1)


def _build(name: str, spec: PhaseProvider | Mapping[str, Any]) -> PhaseProvider:
    """The provider of coordinate ``name``: an instance, or ``{provider: NAME, **options}``."""
    if isinstance(spec, PhaseProvider):
        return spec
    where = f"coordinates.{name}"
    if not isinstance(spec, Mapping) or "provider" not in spec:
        raise ValueError(
            f"{where}: expected a mapping with a 'provider' key and that provider's options, "
            f"e.g. {{provider: ecg-rpeak, lead: II}}; got {spec!r}"
        )
    options = {key: value for key, value in spec.items() if key != "provider"}
    try:
        component = PHASE_PROVIDERS.get(spec["provider"])
    except UnknownComponentError as error:
        raise ValueError(f"{where}.provider: {error}") from None
    try:
        return component(**options)
    except TypeError as error:
        raise TypeError(f"{where}: provider {spec['provider']!r} refuses {options}: {error}") from None


@PHASE_PROVIDERS.register("composite")
class CompositePhaseProvider(CompositeDeclaration):
    """Phase of several cyclic coordinates: ``coordinates`` ``{name: provider}`` in torus order,
    each a `PhaseProvider` or ``{"provider": NAME, **options}``; the joint verdict fails
    (``"low_phase_yield"``) when every coordinate is defined on under ``min_phase_yield``."""

    def __init__(
        self,
        coordinates: Mapping[str, PhaseProvider | Mapping[str, Any]],
        *,
        min_phase_yield: float = 0.5,
    ):
        if not isinstance(coordinates, Mapping) or not coordinates:
            raise ValueError(
                f"coordinates: give a non-empty mapping {{name: {{provider: NAME, **options}}}}, got {coordinates!r}"
            )
        self.providers = {str(name): _build(str(name), spec) for name, spec in coordinates.items()}
        self.min_phase_yield = min_phase_yield

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.providers)

    @property  # the first coordinate's word, known once its providers are built
    def event_name(self) -> str:  # type: ignore[override]
        """The first coordinate's event word (its events are the cache's ``beats`` column)."""
        return next(iter(self.providers.values())).event_name

    def rate_problem(self, fs: float) -> str | None:
        """The first coordinate's `PhaseProvider.rate_problem` at ``fs`` Hz; None if none has one."""
        problems = (provider.rate_problem(fs) for provider in self.providers.values())
        return next((problem for problem in problems if problem), None)

    def phase(self, signal: np.ndarray, fs: float, channel_names: Sequence[str]) -> CompositeTrack:
        """Each coordinate's `PhaseProvider.phase` on the same record, and the joint QC."""
        tracks = tuple(provider.phase(signal, fs, channel_names) for provider in self.providers.values())
        track = CompositeTrack(self.names, tracks)
        track.qc = self.qc_tracks(track)
        return track

    def qc_tracks(self, track: CompositeTrack) -> QCVerdict:
        """Ok when every coordinate passes and the joint yield reaches ``min_phase_yield``; a
        coordinate's entries are prefixed (``"respiratory:too_few_breaths"``, ``"cardiac.rate_per_min"``)."""
        reasons: list[str] = []
        details: list[str] = []
        metrics: dict[str, float | int | None] = {}
        for name, verdict in track.coordinate_qc.items():
            verdict = verdict or QCVerdict(ok=True)
            reasons += [f"{name}:{reason}" for reason in verdict.reasons]
            details += [f"{name}: {detail}" for detail in verdict.details]
            metrics |= {f"{name}.{key}": value for key, value in verdict.metrics.items()}
        joint = track.phase_yield
        if joint < self.min_phase_yield:
            reasons.append("low_phase_yield")
            details.append(
                f"low_phase_yield: all {len(track.names)} coordinates defined on {joint:.1%} of "
                f"the record, below {self.min_phase_yield:.0%}"
            )
        metrics["phase_yield"] = joint
        return QCVerdict(ok=not reasons, reasons=reasons, metrics=metrics, details=details)
