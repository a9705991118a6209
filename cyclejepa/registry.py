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

An option of a component may name a component of another registry (SIGReg's ``statistic``):
the entry declares it as `Injected`, and `Registry.build` builds that component from its name
and options and passes the object, so that the component itself takes objects, not names.

A built-in's facts that a config needs when it loads (a dataset's channels and rates, a phase
provider's cycle band) are declared in a torch-free module of `cyclejepa.declarations` that the
implementation inherits them from; `Registry.declared` reads them without importing the
implementation.

Third-party packages add components without touching the library by declaring an entry point
in the ``cyclejepa.plugins`` group whose target is a module (or callable) that registers them;
they are loaded the first time a registry is asked for a name that is not a built-in, or for
its names.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Injected:
    """An option of a registered component that names a component of ``registry``: a config
    gives the name as ``option`` (default ``default``) and its options as ``option_options``, or
    as the ``shorthand`` keys beside them (options of ``default`` only); `Registry.build` builds
    that component and passes it as ``option``."""

    option: str
    registry: Registry
    default: str
    shorthand: tuple[str, ...] = ()

    @property
    def options_key(self) -> str:
        """The key of the injected component's options: ``<option>_options``."""
        return f"{self.option}_options"

    def resolve(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` with the injected component built in place of its name and options; a
        ValueError names an unknown component, options it refuses, or shorthand keys given with
        another component or also among its options."""
        options = dict(options)
        name = options.pop(self.option, self.default)
        nested = dict(options.pop(self.options_key, None) or {})
        short = {key: options.pop(key) for key in self.shorthand if key in options}
        if not isinstance(name, str):  # an object already: nothing to build
            if short or nested:
                raise ValueError(f"{sorted(short | nested)} are options of a {self.registry.kind} named by {self.option}")
            return {**options, self.option: name}
        if short and name != self.default:
            raise ValueError(
                f"{', '.join(short)} are options of the {self.registry.kind} {self.default!r}, but "
                f"{self.option} is {name!r}; give that one's options in {self.options_key}"
            )
        if set(short) & set(nested):
            raise ValueError(f"{sorted(set(short) & set(nested))} given both as options and in {self.options_key}")
        try:
            component = self.registry.get(name)
        except UnknownComponentError as error:
            raise ValueError(f"{self.option}: {error}") from None
        try:
            built = component(**short, **nested)
        except TypeError as error:
            raise ValueError(f"{self.options_key}: {self.registry.kind} {name!r} refuses {short | nested}: {error}") from None
        return {**options, self.option: built}


class Registry:
    """A name -> component mapping with decorator registration.

    ``builtins`` maps each built-in name to the module whose import registers it, so that the
    names are known without importing any component: `get` imports that one module on first use.
    ``options`` maps a built-in name to the keyword options a config gives it, for the built-ins
    whose module a config check should not import (torch-backed ones); a test checks them
    against the registered classes. ``injected``: the options of a name that name a component of
    another registry (`Injected`), built by `build`. ``declarations``: the torch-free module whose
    ``DECLARED`` maps each built-in name to its declaration (`declared`).
    """

    def __init__(
        self,
        kind: str,
        builtins: dict[str, str] | None = None,
        options: dict[str, tuple[str, ...]] | None = None,
        injected: Mapping[str, Injected] | None = None,
        declarations: str | None = None,
    ):
        self.kind = kind
        self.builtins: dict[str, str] = dict(builtins or {})
        self.options: dict[str, tuple[str, ...]] = dict(options or {})
        self.injected: dict[str, Injected] = dict(injected or {})
        self.declarations = declarations
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
        """Call the component registered as ``name`` with ``kwargs``, an `Injected` option's
        component built from its name and options first."""
        injected = self.injected.get(name)
        return self.get(name)(**(injected.resolve(kwargs) if injected else kwargs))

    def declared(self, name: str) -> Any:
        """What the component registered as ``name`` declares of itself (its facts as class
        attributes): a built-in's declaration from the `declarations` module, without importing
        the component; else the registered component itself (a plugin's class). Unknown names
        raise `UnknownComponentError`."""
        if name in self.builtins and self.declarations is not None:
            declared: Mapping[str, Any] = importlib.import_module(self.declarations).DECLARED
            if name in declared:
                return declared[name]
        return self.get(name)

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

PHASE_PROVIDERS = Registry(
    "phase provider",
    {
        **_table("cyclejepa.phase.breath", "breath"),
        **_table("cyclejepa.phase.composite", "composite"),
        **_table("cyclejepa.phase.ecg.provider", "ecg-rpeak"),
        **_table("cyclejepa.phase.pulse", "pulse"),
    },
    declarations="cyclejepa.declarations.providers",
)
SYMMETRIES = Registry("symmetry", _table("cyclejepa.symmetry.groups", "u1", "torus"))
BASES = Registry("basis", _table("cyclejepa.symmetry.bases", "canonical", "householder", "stiefel"))
MODELS = Registry("model", _table("cyclejepa.models.jepa", "winder"))
ENCODERS = Registry("encoder", _table("cyclejepa.models.encoder", "winder-conv"))
PREDICTORS = Registry("predictor", _table("cyclejepa.models.predictor", "causal-transformer"))
STATISTICS = Registry("univariate statistic", _table("cyclejepa.objectives.statistics", "epps-pulley", "moments"))
REGULARISERS = Registry(
    "regulariser",
    {**_table("cyclejepa.objectives.sigreg", "sigreg"), **_table("cyclejepa.objectives.vicreg", "vicreg")},
    options={
        "sigreg": ("num_directions", "knots", "t_max", "sample_size", "statistic", "statistic_options"),
        "vicreg": ("variance_weight", "covariance_weight", "std_target", "eps"),
    },
    injected={"sigreg": Injected("statistic", STATISTICS, "epps-pulley", shorthand=("knots", "t_max"))},
)
OBJECTIVES = Registry(
    "objective",
    {
        **_table("cyclejepa.objectives.prediction", "prediction"),
        **_table("cyclejepa.objectives.transport", "transport"),
    },
)
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
DATASETS = Registry(
    "dataset",
    {
        **_table("cyclejepa.data.ptbxl", "ptbxl"),
        **_table("cyclejepa.data.synthetic.dataset", "synthetic"),
        **_table("cyclejepa.data.challenge", "challenge2021"),
        **_table("cyclejepa.data.wfdb_folder", "wfdb"),
    },
    declarations="cyclejepa.declarations.datasets",
)
DETECTORS = Registry("detector", _table("cyclejepa.evaluation.anomaly.detectors", "transport-violation", "predictor-error"))
RPEAK_DETECTORS = Registry(
    "R-peak detector",
    _table(
        "cyclejepa.phase.ecg.detectors",
        "cyclejepa",
        "pan-tompkins",
        "wfdb-xqrs",
        *(f"neurokit2:{method}" for method in _NEUROKIT),
    ),
)
PERTURBATIONS = Registry(
    "anomaly family",
    _table(
        "cyclejepa.evaluation.anomaly.perturbations",
        "ectopic",
        "t-inversion",
        "st-shift",
        "attenuation",
        "lead-dropout",
        "baseline-wander",
    ),
)

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
