"""Typed options of a registered component: the base of every component's options model and the
declaration that names it.

A component declares its options as a pydantic model (``class PulseOptions(Options)``) on its
declaration (``Options = PulseOptions``); a config's ``options`` mapping is validated into that
model when the config loads (unknown keys, wrong types and values out of range are key-path
errors), and `cyclejepa.registry.Registry.build` calls the component with `Options.arguments`.
A plugin that declares no model takes `OpenOptions`: any keywords, checked by its constructor.
"""

from __future__ import annotations

import contextlib
import difflib
import sys
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_serializer
from pydantic_core import PydanticCustomError

__all__ = [
    "REGISTRIES",
    "UNKNOWN_OPTION",
    "Choice",
    "Declaration",
    "NoOptions",
    "OpenOptions",
    "Options",
    "Pair",
    "registered",
    "typed_options",
]

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


REGISTRIES: dict[str, Any] = {}
"""`cyclejepa.registry.ALL_REGISTRIES`, filled when the registry loads: what an option that names
another component (`registered`, `typed_options`) is checked against, without this layer
importing the registry (which imports it)."""

UNKNOWN_OPTION = "unknown_option"
"""The error type of an option its component does not take (`typed_options`)."""


def registered(registry: str, name: str) -> str:
    """``name`` when the registry keyed ``registry`` (`REGISTRIES`) knows it, else a ValueError
    listing its names and the closest one (a validator of an option that names a component)."""
    known = REGISTRIES.get(registry)
    if known is not None and name not in known:
        from_registry = sys.modules[type(known).__module__]
        raise ValueError(from_registry.unknown_name_message(known.kind, name, known.names()))
    return name


def typed_options(registry: str, name: str | None, value: Any, where: tuple[str | int, ...] = ()) -> Options:
    """``value`` (a mapping or options) validated into the options model that the component
    ``name`` of the registry keyed ``registry`` declares; `OpenOptions` for an unknown or missing
    name (said by the name's own check). Errors name each option under ``where``; an unknown one
    with the component's options and the closest of them (type `UNKNOWN_OPTION`)."""
    if isinstance(value, Options) and not isinstance(value, OpenOptions):
        return value
    known, model = REGISTRIES.get(registry), OpenOptions
    if known is not None and name is not None and name in known:
        with contextlib.suppress(KeyError):  # a plugin's name that failed to load: said by the name's check
            model = known.options_model(name)
    try:
        return model.model_validate(value.model_dump() if isinstance(value, Options) else value)
    except ValidationError as error:
        component = f"{getattr(known, 'kind', registry)} {name!r}"
        lines = [_option_error(e, where, component, sorted(model.model_fields)) for e in error.errors()]
        raise ValidationError.from_exception_data(error.title, lines) from None  # type: ignore[arg-type]


def _option_error(error: Any, where: tuple[str | int, ...], component: str, allowed: list[str]) -> dict[str, Any]:
    """One error of a component's options, under ``where``; an unknown option as `UNKNOWN_OPTION`."""
    line: dict[str, Any] = {"type": error["type"], "loc": (*where, *error["loc"]), "input": error["input"]}
    if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
        hint = difflib.get_close_matches(str(error["loc"][0]), allowed, n=1, cutoff=0.5)
        message = f"unknown option of {component}; allowed: {', '.join(allowed) or '(none)'}"
        line["type"] = PydanticCustomError(UNKNOWN_OPTION, message + (f". Did you mean {hint[0]!r}?" if hint else ""))
    elif error["type"] == UNKNOWN_OPTION:  # a nested component's, said already
        line["type"] = PydanticCustomError(UNKNOWN_OPTION, error["msg"])
    elif "ctx" in error:
        line["ctx"] = error["ctx"]
    return line


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
