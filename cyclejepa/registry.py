"""Named component registries and plugin discovery.

Every swappable part of the library (phase providers, symmetries, bases, encoders, ...) is
registered under a name in one of the registries below, and the YAML config refers to it by
that name::

    from cyclejepa.registry import PHASE_PROVIDERS

    @PHASE_PROVIDERS.register("resp-breath")
    class BreathPhase(PhaseProvider):
        ...

Each registry holds a table of its built-ins, name -> the module whose import registers it
(`Registry.builtins`), so that a config's names are checked without importing any component:
`Registry.get` imports the one module it needs, `load_builtins` all of them.

Third-party packages add components without touching the library by declaring an entry point
in the ``cyclejepa.plugins`` group whose target is a module (or callable) that registers them;
they are loaded the first time a registry is asked for a name that is not a built-in, or for
its names.
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


def did_you_mean(name: str, choices: list[str]) -> str:
    """``". Did you mean 'X'?"`` with the closest of ``choices`` to ``name`` (`closest_match`);
    empty when none is close."""
    hint = closest_match(name, choices)
    return f". Did you mean {hint!r}?" if hint else ""


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
    message += f"; {name!r} {elsewhere}" if elsewhere else did_you_mean(name, available)
    missing = "; ".join(f"{module} needs {package}" for module, package in UNAVAILABLE.items())
    return message + (f" (not loaded: {missing})" if missing else "")


class Registry:
    """A name -> component mapping with decorator registration.

    ``builtins`` maps each built-in name to the module whose import registers it, so that the
    names are known without importing any component: `get` imports that one module on first use.
    ``options`` maps a built-in name to the keyword options its constructor takes, for the
    built-ins whose module a config check should not import (torch-backed ones); a test checks
    both tables against the registered classes.
    """

    def __init__(self, kind: str, builtins: dict[str, str] | None = None, options: dict[str, tuple[str, ...]] | None = None):
        self.kind = kind
        self.builtins: dict[str, str] = dict(builtins or {})
        self.options: dict[str, tuple[str, ...]] = dict(options or {})
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering a class or function under ``name``; a built-in name is refused
        to any object but the one its module defines."""

        def decorate(obj: T) -> T:
            existing = self._entries.get(name)
            if existing is not None and existing is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered to {existing!r}")
            home = self.builtins.get(name)
            if home is not None and getattr(obj, "__module__", None) != home:
                raise ValueError(f"{self.kind} {name!r} is the built-in of {home}; {obj!r} cannot take its name")
            self._entries[name] = obj
            return obj

        return decorate

    def get(self, name: str) -> Any:
        """The component registered as ``name`` (a built-in's module is imported now, a plugin's
        at the first name that is not a built-in); unknown names raise `UnknownComponentError`."""
        if name not in self._entries:
            if name in self.builtins:
                _import_builtin(self.builtins[name])
            else:
                _load_plugins_once()
        try:
            return self._entries[name]
        except KeyError:
            available = [known for known in self.names() if self.builtins.get(known) not in UNAVAILABLE]
            raise UnknownComponentError(self.kind, name, available) from None

    def build(self, name: str, /, **kwargs: Any) -> Any:
        """Call the component registered as ``name`` with ``kwargs``."""
        return self.get(name)(**kwargs)

    def names(self) -> list[str]:
        """The built-in names and the plugins' (the plugins are loaded; no built-in is imported)."""
        _load_plugins_once()
        return sorted(set(self.builtins) | set(self._entries))

    def __contains__(self, name: object) -> bool:
        if name in self.builtins or name in self._entries:
            return True
        _load_plugins_once()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(set(self.builtins) | set(self._entries))})"


def _table(module: str, *names: str) -> dict[str, str]:
    """``{name: module}`` for the built-ins that ``module`` registers."""
    return dict.fromkeys(names, module)


_NEUROKIT = ("neurokit", "pantompkins1985", "hamilton2002", "elgendi2010", "engzeemod2012", "kalidas2017")
"""The neurokit2 methods registered as R-peak detectors ``neurokit2:<method>``
(`cyclejepa.phase.ecg.detectors.NEUROKIT_METHODS`; `tests/test_registry.py` keeps the two equal)."""

PHASE_PROVIDERS = Registry("phase provider", {
    **_table("cyclejepa.phase.breath", "breath"), **_table("cyclejepa.phase.composite", "composite"),
    **_table("cyclejepa.phase.ecg.provider", "ecg-rpeak"), **_table("cyclejepa.phase.pulse", "pulse"),
})  # fmt: skip
SYMMETRIES = Registry("symmetry", _table("cyclejepa.symmetry.groups", "u1", "torus"))
BASES = Registry("basis", _table("cyclejepa.symmetry.bases", "canonical", "householder", "stiefel"))
MODELS = Registry("model", _table("cyclejepa.models.jepa", "winder"))
ENCODERS = Registry("encoder", _table("cyclejepa.models.encoder", "winder-conv"))
PREDICTORS = Registry("predictor", _table("cyclejepa.models.predictor", "causal-transformer"))
REGULARISERS = Registry(
    "regulariser",
    {**_table("cyclejepa.objectives.sigreg", "sigreg"), **_table("cyclejepa.objectives.vicreg", "vicreg")},
    options={
        "sigreg": ("num_directions", "knots", "t_max", "sample_size", "statistic", "statistic_options"),
        "vicreg": ("variance_weight", "covariance_weight", "std_target", "eps"),
    },
)
STATISTICS = Registry("univariate statistic", _table("cyclejepa.objectives.statistics", "epps-pulley", "moments"))
OBJECTIVES = Registry("objective", {
    **_table("cyclejepa.objectives.prediction", "prediction"), **_table("cyclejepa.objectives.transport", "transport"),
})  # fmt: skip
AUGMENTATIONS = Registry(
    "augmentation",
    _table("cyclejepa.data.augment", "gaussian-noise", "tone", "drift", "amplitude-modulation", "lead-dropout", "lead-gain"),
    options={
        "gaussian-noise": ("std",),
        "tone": ("amplitude", "frequency"),
        "drift": ("amplitude", "components", "frequency"),
        "amplitude-modulation": ("depth", "frequency"),
        "lead-dropout": ("count",),
        "lead-gain": ("gain",),
    },
)
DATASETS = Registry("dataset", {
    **_table("cyclejepa.data.ptbxl", "ptbxl"), **_table("cyclejepa.data.synthetic.dataset", "synthetic"),
    **_table("cyclejepa.data.challenge", "challenge2021"), **_table("cyclejepa.data.wfdb_folder", "wfdb"),
})  # fmt: skip
DETECTORS = Registry("detector", _table("cyclejepa.evaluation.anomaly.detectors", "transport-violation", "predictor-error"))
RPEAK_DETECTORS = Registry("R-peak detector", _table(
    "cyclejepa.phase.ecg.detectors", "cyclejepa", "pan-tompkins", "wfdb-xqrs", *(f"neurokit2:{method}" for method in _NEUROKIT),
))  # fmt: skip
PERTURBATIONS = Registry("anomaly family", _table(
    "cyclejepa.evaluation.anomaly.perturbations",
    "ectopic", "t-inversion", "st-shift", "attenuation", "lead-dropout", "baseline-wander",
))  # fmt: skip

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

_plugins_loaded = False


def _import_builtin(module: str) -> None:
    """Import the built-in module ``module``; one that needs a missing optional package is
    recorded in `UNAVAILABLE` (its names then stay unregistered), never our own missing code."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] == "cyclejepa":
            raise
        UNAVAILABLE[module] = error.name
        log.info("%s not loaded: it needs %s", module, error.name)


def _load_plugins_once() -> None:
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        load_plugins()


def load_builtins() -> None:
    """Import every built-in component and load the installed plugins (once): `cyclejepa info`
    and tests that need every class registered; a config check imports only what it names."""
    for module in sorted({module for reg in ALL_REGISTRIES.values() for module in reg.builtins.values()}):
        _import_builtin(module)
    _load_plugins_once()


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


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """The PEP 562 ``__getattr__`` of a package face: ``package.name`` is imported from the
    submodule ``package.<homes[name]>`` on first use, so importing one module of a package does
    not import its siblings (and their dependencies)."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)

    return __getattr__
