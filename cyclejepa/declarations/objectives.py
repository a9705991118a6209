"""The built-in regularisers' and univariate statistics' typed options (`cyclejepa.objectives`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, SerializeAsAny, field_validator, model_validator

from cyclejepa.declarations.options import Choice, Declaration, declaration, Options, registered, typed_options


class EppsPulleyOptions(Options):
    """The Epps–Pulley quadrature: ``knots`` trapezoid points on [0, ``t_max``]."""

    knots: int = Field(17, ge=2)
    t_max: float = Field(3.0, gt=0)


class MomentsOptions(Options):
    """The moments matched: 1..``order``."""

    order: int = Field(4, ge=1)


DECLARED_STATISTICS: Mapping[str, type[Declaration]] = MappingProxyType(
    {"epps-pulley": declaration(EppsPulleyOptions), "moments": declaration(MomentsOptions)}
)
"""Registered name -> declaration (`cyclejepa.registry.STATISTICS`)."""

SAMPLE_SIZES = ("records", "tokens")
"""What N counts in a slicing test's statistic: the records of a batch (the paper's) or its tokens."""


class SIGRegOptions(Options):
    """SIGReg's ``num_directions`` M, ``sample_size`` N, and its univariate ``statistic`` (a
    registered name) with that statistic's options in ``statistic_options``; ``knots`` and
    ``t_max`` are short for the default statistic's (Epps–Pulley's) options."""

    num_directions: int = Field(256, ge=1)
    sample_size: Literal["records", "tokens"] = "records"
    statistic: Annotated[str, AfterValidator(lambda name: registered("statistics", name))] = "epps-pulley"
    statistic_options: SerializeAsAny[Options] = Field(default_factory=dict, validate_default=True)
    knots: int | None = Field(None, ge=2)
    t_max: float | None = Field(None, gt=0)

    @field_validator("statistic_options", mode="before")
    @classmethod
    def _typed(cls, value: Any, info: Any) -> Options:
        return typed_options("statistics", info.data.get("statistic"), value)

    @model_validator(mode="after")
    def _shorthand(self) -> SIGRegOptions:
        short = [key for key in ("knots", "t_max") if getattr(self, key) is not None]
        if short and self.statistic != "epps-pulley":
            raise ValueError(
                f"{', '.join(short)} are options of the univariate statistic 'epps-pulley', but statistic is "
                f"{self.statistic!r}; give that one's options in statistic_options"
            )
        both = sorted(set(short) & self.statistic_options.model_fields_set)
        if both:
            raise ValueError(f"{both} given both as options and in statistic_options")
        return self

    def arguments(self) -> dict[str, Any]:
        """SIGReg's keywords, its statistic a `Choice` that `Registry.build` builds and injects."""
        short = {key: getattr(self, key) for key in ("knots", "t_max") if getattr(self, key) is not None}
        chosen = type(self.statistic_options).model_validate(self.statistic_options.model_dump() | short)
        return {
            "num_directions": self.num_directions,
            "sample_size": self.sample_size,
            "statistic": Choice("statistics", self.statistic, chosen),
        }


class VICRegOptions(Options):
    """VICReg's variance and covariance weights, the target standard deviation and ε."""

    variance_weight: float = Field(25.0, ge=0)
    covariance_weight: float = Field(1.0, ge=0)
    std_target: float = Field(1.0, gt=0)
    eps: float = Field(1e-4, gt=0)


DECLARED_REGULARISERS: Mapping[str, type[Declaration]] = MappingProxyType(
    {"sigreg": declaration(SIGRegOptions), "vicreg": declaration(VICRegOptions)}
)
"""Registered name -> declaration (`cyclejepa.registry.REGULARISERS`)."""
