"""Named component registries and plugin discovery.

Every swappable part of the library (phase providers, symmetries, bases, encoders, ...) is
registered under a name in one of the registries below, and the YAML config refers to it by
that name::

    from cyclejepa.registry import PHASE_PROVIDERS

    @PHASE_PROVIDERS.register("resp-breath")
    class BreathPhase(PhaseProvider):
        ...

Third-party packages add components without touching the library by declaring an entry point
in the ``cyclejepa.plugins`` group whose target is a module (or callable) that registers them.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

PLUGIN_GROUP = "cyclejepa.plugins"

# Sub-packages whose import registers the built-in components.
_BUILTIN_MODULES = (
    "cyclejepa.symmetry",
    "cyclejepa.objectives",
    "cyclejepa.models",
    "cyclejepa.phase",
    "cyclejepa.data",
    "cyclejepa.evaluation.anomaly",
)

# Built-in modules that could not be imported because an optional package is missing.
UNAVAILABLE: dict[str, str] = {}


class UnknownComponentError(KeyError):
    """A name that no registry entry matches; the message lists the names and the closest one."""

    def __init__(self, kind: str, name: str, available: list[str]):
        self.kind, self.name, self.available = kind, name, available
        super().__init__(unknown_name_message(kind, name, available))

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


def closest_match(name: str, choices: list[str]) -> str | None:
    """The most similar entry of ``choices`` to ``name``, or None when nothing is close."""
    found = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return found[0] if found else None


EXAMPLES_PACKAGE = "the cyclejepa-examples package: `pip install -e examples` in a checkout of the repository"
KNOWN_ELSEWHERE: dict[tuple[str, str], str] = {
    ("phase provider", "resp-breath"): f"is registered by {EXAMPLES_PACKAGE} (the core provider 'breath' reads respiration)",
    ("phase provider", "pulse-phase"): "was the examples' pulse provider; the core provider 'pulse' replaces it",
    ("dataset", "multiparameter"): f"is registered by {EXAMPLES_PACKAGE}",
    ("dataset", "pulse-wave"): f"is registered by {EXAMPLES_PACKAGE}",
}
"""(kind, name) of components that live outside the core, and where they come from."""


def unknown_name_message(kind: str, name: str, available: list[str]) -> str:
    """Message for an unknown name: the registered names and, when there is one, the fix (a
    close registered name, or the package that registers it: `KNOWN_ELSEWHERE`)."""
    message = f"unknown {kind} {name!r}; registered: {', '.join(sorted(available)) or '(none)'}"
    elsewhere = KNOWN_ELSEWHERE.get((kind, name))
    hint = closest_match(name, available)
    if elsewhere:
        message += f"; {name!r} {elsewhere}"
    elif hint:
        message += f". Did you mean {hint!r}?"
    missing = "; ".join(f"{module} needs {package}" for module, package in UNAVAILABLE.items())
    return message + (f" (not loaded: {missing})" if missing else "")


class Registry:
    """A name -> component mapping with decorator registration."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering a class or function under ``name``."""

        def decorate(obj: T) -> T:
            existing = self._entries.get(name)
            if existing is not None and existing is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered to {existing!r}")
            self._entries[name] = obj
            return obj

        return decorate

    def get(self, name: str) -> Any:
        """The component registered as ``name``; unknown names raise `UnknownComponentError`."""
        load_builtins()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownComponentError(self.kind, name, self.names()) from None

    def build(self, name: str, /, **kwargs: Any) -> Any:
        """Call the component registered as ``name`` with ``kwargs``."""
        return self.get(name)(**kwargs)

    def names(self) -> list[str]:
        load_builtins()
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        load_builtins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"


PHASE_PROVIDERS = Registry("phase provider")
SYMMETRIES = Registry("symmetry")
BASES = Registry("basis")
MODELS = Registry("model")
ENCODERS = Registry("encoder")
PREDICTORS = Registry("predictor")
REGULARISERS = Registry("regulariser")
STATISTICS = Registry("univariate statistic")
OBJECTIVES = Registry("objective")
AUGMENTATIONS = Registry("augmentation")
DATASETS = Registry("dataset")
DETECTORS = Registry("detector")
RPEAK_DETECTORS = Registry("R-peak detector")
PERTURBATIONS = Registry("anomaly family")

ALL_REGISTRIES: dict[str, Registry] = {
    "phase_providers": PHASE_PROVIDERS,
    "symmetries": SYMMETRIES,
    "bases": BASES,
    "models": MODELS,
    "encoders": ENCODERS,
    "predictors": PREDICTORS,
    "regularisers": REGULARISERS,
    "statistics": STATISTICS,
    "objectives": OBJECTIVES,
    "augmentations": AUGMENTATIONS,
    "datasets": DATASETS,
    "detectors": DETECTORS,
    "rpeak_detectors": RPEAK_DETECTORS,
    "perturbations": PERTURBATIONS,
}

_loaded = False


def load_builtins() -> None:
    """Import the built-in components and the installed plugins (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:  # an optional dependency, never our own code
            if error.name is None or error.name.split(".")[0] == "cyclejepa":
                raise
            UNAVAILABLE[module] = error.name
            log.info("%s not loaded: it needs %s", module, error.name)
    load_plugins()


def load_plugins() -> list[str]:
    """Load every ``cyclejepa.plugins`` entry point; a broken plugin is logged, not fatal."""
    loaded = []
    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            target = entry.load()
            if callable(target):
                target()
            loaded.append(entry.name)
        except Exception as error:  # a third-party plugin must not take the library down
            log.warning("cyclejepa plugin %r failed to load: %s", entry.name, error)
    return loaded
