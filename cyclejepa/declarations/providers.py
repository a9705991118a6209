"""The built-in phase providers' declarations (facts and typed options), inherited by the providers."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from cyclejepa.declarations.kinds import ProviderDeclaration
from cyclejepa.declarations.options import NoOptions, OpenOptions, Options, Pair, registered, typed_options

# Thresholds of the cycle quality control, between the real channels' and the noises' figures
# (docs/phase.md, "Cycle quality": `python benchmarks/bidmc_rates.py`).
MIN_CYCLE_QUALITY = 0.8
"""A cycle is good when its correlation with the median template reaches this."""
MIN_GOOD_SHARE = 0.6
"""Fails (``"few_good_cycles"``) with a smaller share of good cycles."""
MIN_TEMPLATE_SHARE = 0.55
"""Fails (``"aperiodic"``) when the template explains a smaller share of the cycles' variance."""
MIN_PERIODICITY = 0.1
"""Fails (``"aperiodic"``) below this autocorrelation at the median interval."""
MIN_FUNDAMENTAL_SHARE = 0.2
"""Fails (``"no_fundamental"``) when the template's first harmonic carries less of its power
(a 45/min sine read as 22.5/min: 0.00)."""

NEUROKIT_METHODS = ("neurokit", "pantompkins1985", "hamilton2002", "elgendi2010", "engzeemod2012", "kalidas2017")
"""NeuroKit2's ECG methods registered as R-peak detectors ``neurokit2:<method>``."""
RPEAK_DETECTORS = ("cyclejepa", "pan-tompkins", "wfdb-xqrs", *(f"neurokit2:{method}" for method in NEUROKIT_METHODS))
"""The registered R-peak detectors (`cyclejepa.phase.ecg.detectors`)."""

Lead = str | tuple[str, ...] | None
_LEAD = r"i{1,3}|d(i{1,3}|[1-3])|a?v[rlf]|v\d{0,2}r?|v?[xyz]|ml(i{1,3}|\d)?|mcl\d?|c[mc]\d"


class PhaseQcOptions(Options):
    """The quality control every provider applies (`cyclejepa.phase.provider.PhaseProvider`):
    events per record, plausible intervals (s) and their ratio, phase yield, cycle quality."""

    min_events: int = Field(4, ge=1)
    interval_range_s: Pair = (0.25, 2.0)
    max_interval_ratio: float | None = Field(2.5, ge=1)
    min_phase_yield: float = Field(0.5, ge=0, le=1)
    min_cycle_quality: float = Field(MIN_CYCLE_QUALITY, ge=-1, le=1)
    min_good_share: float = Field(MIN_GOOD_SHARE, ge=0, le=1)
    min_template_share: float = Field(MIN_TEMPLATE_SHARE, ge=0, le=1)
    min_periodicity: float = Field(MIN_PERIODICITY, ge=-1, le=1)
    min_fundamental_share: float = Field(MIN_FUNDAMENTAL_SHARE, ge=0, le=1)

    @model_validator(mode="after")
    def _ordered_intervals(self) -> PhaseQcOptions:
        low, high = self.interval_range_s
        if not 0 < low < high:
            raise ValueError(f"interval_range_s must satisfy 0 < low < high, got {self.interval_range_s}")
        return self


class EcgRPeakOptions(PhaseQcOptions):
    """``lead``: the timing lead (None: the best-quality lead; "all"; or several); ``detector``: a
    registered R-peak detector; ``detection_leads``: "all" or the leads detection reads;
    ``refine_window_s``: half-width (s) of the peak refinement."""

    lead: Lead = None
    detector: Annotated[str, AfterValidator(lambda name: registered("rpeak_detectors", name))] = "cyclejepa"
    detection_leads: Literal["all"] | tuple[str, ...] = "all"
    refine_window_s: float = Field(0.06, gt=0)


class CycleDetectorOptions(PhaseQcOptions):
    """A band-pass cycle detector's options: the channel it reads (None: the first whose name is
    of its kind), the point of each cycle, the wave's sign, the band (Hz) and the shortest
    interval between events as a fraction of the median (``refractory``)."""

    lead: str | None = None
    band_hz: Pair
    refractory: float = Field(gt=0, lt=1)

    @model_validator(mode="after")
    def _ordered_band(self) -> CycleDetectorOptions:
        if not 0 < self.band_hz[0] < self.band_hz[1]:
            raise ValueError(f"band_hz must satisfy 0 < low < high, got {self.band_hz}")
        return self


class PulseOptions(CycleDetectorOptions):
    """`CycleDetectorOptions` of ``pulse``; ``min_slope``: the upstroke's share of the largest."""

    fiducial: Literal["foot", "max-slope", "peak"] = "foot"
    polarity: Literal["auto", "upright", "inverted"] = "auto"
    band_hz: Pair = (0.5, 8.0)
    min_slope: float = Field(0.3, gt=0, lt=1)
    refractory: float = Field(0.5, gt=0, lt=1)
    interval_range_s: Pair = (0.27, 2.0)


class BreathOptions(CycleDetectorOptions):
    """`CycleDetectorOptions` of ``breath``; ``min_prominence``: a breath's share of the median."""

    fiducial: Literal["peak", "onset"] = "peak"
    polarity: Literal["upright", "inverted"] = "upright"
    band_hz: Pair = (0.05, 0.7)
    min_prominence: float = Field(0.25, gt=0, lt=1)
    refractory: float = Field(0.4, gt=0, lt=1)
    interval_range_s: Pair = (1.4, 15.0)
    max_interval_ratio: float | None = Field(None, ge=1)


class CompositeOptions(Options):
    """``coordinates``: ``{name: {provider: NAME, **its options}}`` in torus order, each checked
    against its provider's options; ``min_phase_yield``: the joint phase yield a record needs."""

    coordinates: dict[str, dict[str, Any]] = Field(min_length=1)
    min_phase_yield: float = Field(0.5, ge=0, le=1)

    def readers(self) -> list[tuple[str, str, Options]]:
        """(key, phase provider, its typed options) of each torus coordinate."""
        return [
            (f"coordinates.{name}", spec["provider"], _coordinate_options(name, spec)) for name, spec in self.coordinates.items()
        ]

    @field_validator("coordinates")
    @classmethod
    def _coordinates_typed(cls, coordinates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, spec in coordinates.items():
            if not isinstance(spec.get("provider"), str):
                raise ValueError(f"coordinates.{name}: name its phase provider (provider: NAME)")
            registered("phase_providers", spec["provider"])
            _coordinate_options(name, spec)
        return coordinates


def _coordinate_options(name: str, spec: Mapping[str, Any]) -> Options:
    """A composite coordinate's options (``spec`` but its ``provider``), typed by its provider's model."""
    options = {key: value for key, value in spec.items() if key != "provider"}
    return typed_options("phase_providers", spec["provider"], options, (name,))


class EcgRPeakDeclaration(ProviderDeclaration):
    """The ECG R-peak provider (`cyclejepa.phase.ecg.provider.EcgRPeakProvider`): heartbeats."""

    signal = "ecg"
    event_name = "beat"
    cycle_band_hz: tuple[float, float] | None = (0.5, 3.5)
    channel_kinds: tuple[str, ...] = ("ECG lead",)
    channel_pattern: str | None = rf"-?(mod\.?\s*)?({_LEAD})(\s*-\s*({_LEAD}))?|.*(ecg|ekg).*|lead.+"
    """The whole name (any case) of an ECG lead: the limb and augmented leads (I, II, III, aVR, aVL,
    aVF; DI-DIII, D1-D3), the chest leads (V, V1-V9, V3R-V6R), the orthogonal leads (X, Y, Z,
    VX-VZ), the monitoring and Holter leads (MLI-MLIII, ML5, MCL1-MCL6, CM5, CC5), a modified lead
    (``mod.V1``), a bipolar pair of them (``V1-V2``), and any name containing ECG/EKG (``ECG1``)
    or starting with "lead" (``Lead I``). Arterial pressure, pleth, respiration or EEG are not."""
    Options = EcgRPeakOptions


class PulseDeclaration(ProviderDeclaration):
    """The pulse-wave provider (`cyclejepa.phase.pulse.PulseProvider`): heartbeats."""

    signal = "pulse"
    event_name = "pulse"
    cycle_band_hz: tuple[float, float] | None = (0.5, 3.5)
    channel_kinds: tuple[str, ...] = ("PPG", "arterial pressure")
    channel_pattern: str | None = r".*(pleth|ppg|bvp).*|a?bp|art\w*|ibp\d*|fap"
    Options = PulseOptions


class BreathDeclaration(ProviderDeclaration):
    """The respiration provider (`cyclejepa.phase.breath.BreathProvider`): breaths."""

    signal = "resp"
    event_name = "breath"
    cycle_band_hz: tuple[float, float] | None = (0.1, 0.7)
    channel_kinds: tuple[str, ...] = ("respiration belt", "impedance pneumography")
    channel_pattern: str | None = r".*(resp|breath|thor|abdo|chest|airflow|nasal|impedance).*|rip|flow"
    Options = BreathOptions


class CompositeDeclaration(ProviderDeclaration):
    """The composite provider (`cyclejepa.phase.composite.CompositePhaseProvider`): several
    providers' coordinates, no cycle band of its own."""

    Options = CompositeOptions


DECLARED: Mapping[str, type[ProviderDeclaration]] = MappingProxyType(
    {
        "ecg-rpeak": EcgRPeakDeclaration,
        "pulse": PulseDeclaration,
        "breath": BreathDeclaration,
        "composite": CompositeDeclaration,
    }
)
"""Registered name -> declaration (`cyclejepa.registry.PHASE_PROVIDERS`)."""

__all__ = [
    "DECLARED",
    "NEUROKIT_METHODS",
    "RPEAK_DETECTORS",
    "BreathOptions",
    "CompositeOptions",
    "EcgRPeakOptions",
    "NoOptions",
    "OpenOptions",
    "PhaseQcOptions",
    "PulseOptions",
]
