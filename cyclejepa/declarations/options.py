"""Typed options of a registered component: the base of every component's options model and the
declaration that names it.

A component declares its options as a pydantic model (``class PulseOptions(Options)``) on its
declaration (``Options = PulseOptions``); a config's ``options`` mapping is validated into that
model when the config loads (unknown keys, wrong types and values out of range are key-path
errors), and `cyclejepa.registry.Registry.build` calls the component with `Options.arguments`.
A plugin that declares no model takes `OpenOptions`: any keywords, checked by its constructor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, model_serializer

__all__ = ["Choice", "Declaration", "NoOptions", "OpenOptions", "Options", "Pair"]

Pair = tuple[float, float]
"""A (lower, upper) range."""


class Options(BaseModel):
    """Options of one component. Unknown keys are errors; a model is immutable. Serialised, it
    holds the options a config set (so that a config, a cache's identity and a run's identity
    read as they were written); `arguments` holds every option, defaults included."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_serializer(mode="wrap")
    def _set_only(self, handler: Any) -> dict[str, Any]:
        dumped = handler(self)
        return {key: value for key, value in dumped.items() if key in self.model_fields_set or key in (self.model_extra or {})}

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of the component's constructor: every field, defaults included."""
        return {name: getattr(self, name) for name in type(self).model_fields} | dict(self.model_extra or {})


class OpenOptions(Options):
    """The options of a component that declares no model (a plugin's): any keywords, passed on."""

    model_config = ConfigDict(extra="allow", frozen=True)


class NoOptions(Options):
    """The options of a component that takes none."""


@dataclass(frozen=True)
class Choice:
    """An option naming a component of another registry (SIGReg's statistic): `Registry.build`
    builds ``name`` of ``registry`` (a key of `cyclejepa.registry.ALL_REGISTRIES`) with
    ``options`` and passes the object in its place."""

    registry: str
    name: str
    options: Options


class Declaration:
    """What any registered component declares: ``Options``, its options model."""

    Options: type[Options] = OpenOptions
