"""Typed options of a registered component.

A component declares its options model on its declaration (``Options = PulseOptions``); a
config's ``options`` are validated into it when the config loads, and `Registry.build` calls
the component with `Options.arguments`. A plugin that declares none takes `OpenOptions`.
"""

from __future__ import annotations

import contextlib
import difflib
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
    "declaration",
    "registered",
    "typed_options",
]

Pair = tuple[float, float]
"""A (lower, upper) range."""


class Options(BaseModel):
    """Options of one component: immutable, unknown keys refused; serialised, only the options
    set (identities read as written); `arguments` holds every option."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_serializer(mode="wrap")
    def _set_only(self, handler: Any) -> dict[str, Any]:
        dumped = handler(self)
        return {key: value for key, value in dumped.items() if key in self.model_fields_set or key in (self.model_extra or {})}

    def arguments(self) -> dict[str, Any]:
        """The component's keyword arguments, defaults included."""
        return {name: getattr(self, name) for name in type(self).model_fields} | dict(self.model_extra or {})


class OpenOptions(Options):
    """The options of a component that declares no model (a plugin's): any keywords, passed on."""

    model_config = ConfigDict(extra="allow", frozen=True)


class NoOptions(Options):
    """The options of a component that takes none."""


REGISTRIES: dict[str, Any] = {}
"""`cyclejepa.registry.ALL_REGISTRIES`, filled when the registry loads (it imports this layer)."""

UNKNOWN_OPTION = "unknown_option"
"""The error type of an option its component does not take (`typed_options`)."""


def registered(registry: str, name: str) -> str:
    """``name`` if registry ``registry`` knows it, else a ValueError listing its names and the closest."""
    known = REGISTRIES.get(registry)
    if known is not None and name not in known:
        raise ValueError(known.unknown(name))
    return name


def typed_options(registry: str, name: str | None, value: Any, where: tuple[str | int, ...] = ()) -> Options:
    """``value`` validated into the options model of component ``name`` of registry ``registry``
    (`OpenOptions` for an unknown name); errors name each option under ``where``."""
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
    """An option naming a component of another registry (SIGReg's statistic); `Registry.build`
    builds it and passes the object in its place."""

    registry: str
    name: str
    options: Options


def declaration(options: type[Options]) -> type[Declaration]:
    """A declaration whose one fact is its options model (a component with no other facts to declare)."""
    return type(options.__name__.removesuffix("Options") + "Declaration", (Declaration,), {"Options": options})


class Declaration:
    """What any registered component declares: ``Options``, its options model."""

    Options: type[Options] = OpenOptions
