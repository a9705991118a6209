"""The built-in phase providers' declarations: the facts a config reads when it loads, inherited by
the providers of `cyclejepa.phase` (``class PulseProvider(PulseDeclaration, PhaseProvider)``)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from cyclejepa.declarations.kinds import ProviderDeclaration


class EcgRPeakDeclaration(ProviderDeclaration):
    """The ECG R-peak provider (`cyclejepa.phase.ecg.provider.EcgRPeakProvider`): heartbeats."""

    cycle_band_hz: tuple[float, float] | None = (0.5, 3.5)


class PulseDeclaration(ProviderDeclaration):
    """The pulse-wave provider (`cyclejepa.phase.pulse.PulseProvider`): heartbeats."""

    cycle_band_hz: tuple[float, float] | None = (0.5, 3.5)


class BreathDeclaration(ProviderDeclaration):
    """The respiration provider (`cyclejepa.phase.breath.BreathProvider`): breaths."""

    cycle_band_hz: tuple[float, float] | None = (0.1, 0.7)


class CompositeDeclaration(ProviderDeclaration):
    """The composite provider (`cyclejepa.phase.composite.CompositePhaseProvider`): several
    providers' coordinates, no cycle band of its own."""


DECLARED: Mapping[str, type[ProviderDeclaration]] = MappingProxyType(
    {
        "ecg-rpeak": EcgRPeakDeclaration,
        "pulse": PulseDeclaration,
        "breath": BreathDeclaration,
        "composite": CompositeDeclaration,
    }
)
"""Registered name -> declaration (`cyclejepa.registry.PHASE_PROVIDERS`)."""
