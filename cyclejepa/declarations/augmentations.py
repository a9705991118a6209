"""The built-in augmentations' typed options (`cyclejepa.data.augment`): ranges are (lower, upper)
pairs from which each record draws its value; frequencies are in Hz and amplitudes a fraction of
the record's RMS."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import Field, model_validator

from cyclejepa.declarations.options import Declaration, declaration, Options, Pair


class RangeOptions(Options):
    """Options whose pairs are ranges: 0 <= lower <= upper."""

    @model_validator(mode="after")
    def _ordered(self) -> RangeOptions:
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, tuple) and not 0 <= value[0] <= value[1]:
                raise ValueError(f"{name} must be a pair (lower, upper) with 0 <= lower <= upper, got {value}")
        return self


class GaussianNoiseOptions(RangeOptions):
    std: float = Field(0.05, ge=0)


class ToneOptions(RangeOptions):
    """``frequency`` None: 25 Hz where it lies below the Nyquist frequency, else a quarter of the
    model rate (`Tone.default_frequency`)."""

    frequency: float | None = Field(None, gt=0)
    amplitude: Pair = (0.05, 0.20)


class DriftOptions(RangeOptions):
    components: tuple[int, int] = (1, 3)
    frequency: Pair = (0.05, 0.4)
    amplitude: Pair = (0.05, 0.20)


class AmplitudeModulationOptions(RangeOptions):
    depth: Pair = (0.02, 0.10)
    frequency: Pair = (0.05, 0.3)


class LeadDropoutOptions(RangeOptions):
    """``count`` None: up to C - 1 of C channels (none of one channel)."""

    count: tuple[int, int] | None = None


class LeadGainOptions(RangeOptions):
    gain: Pair = (0.7, 1.3)


DECLARED: Mapping[str, type[Declaration]] = MappingProxyType(
    {
        "gaussian-noise": declaration(GaussianNoiseOptions),
        "tone": declaration(ToneOptions),
        "drift": declaration(DriftOptions),
        "amplitude-modulation": declaration(AmplitudeModulationOptions),
        "lead-dropout": declaration(LeadDropoutOptions),
        "lead-gain": declaration(LeadGainOptions),
    }
)
"""Registered name -> declaration (`cyclejepa.registry.AUGMENTATIONS`)."""
