"""Named component registries and plugin discovery.

Every swappable part of the library is registered under a name, and the YAML config refers to it
by that name::

    from cyclejepa.registry import PHASE_PROVIDERS

    @PHASE_PROVIDERS.register("resp-breath")
    class BreathPhase(PhaseProvider):
        ...

A registry knows its built-ins' modules (imported on first use) and their torch-free
declarations (`cyclejepa.declarations`: facts and typed options), so that a config is checked
without importing any component. Third-party packages register theirs from an entry point of
the ``cyclejepa.plugins`` group (a module or callable), loaded at the first name that is not a
built-in.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, TypeVar

from cyclejepa.declarations.options import REGISTRIES, Choice, OpenOptions, Options
from cyclejepa.declarations.providers import RPEAK_DETECTORS as BUILTIN_RPEAK_DETECTORS

log = logging.getLogger(__name__)

T = TypeVar("T")

PLUGIN_GROUP = "cyclejepa.plugins"

UNAVAILABLE: dict[str, str] = {}  # built-in module -> the optional package it misses


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
    """``". Did you mean 'X'?"`` with the closest of ``choices`` to ``name``; empty when none is close."""
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
    """Message for an unknown name: the registered names and the fix (a close name, or `KNOWN_ELSEWHERE`)."""
    message = f"unknown {kind} {name!r}; registered: {', '.join(sorted(available)) or '(none)'}"
    elsewhere = KNOWN_ELSEWHERE.get((kind, name))
    message += f"; {name!r} {elsewhere}" if elsewhere else did_you_mean(name, available)
    missing = "; ".join(f"{module} needs {package}" for module, package in UNAVAILABLE.items())
    return message + (f" (not loaded: {missing})" if missing else "")


class Registry:
    """A name -> component mapping with decorator registration.

    ``builtins``: each built-in name -> the module whose import registers it. ``declarations``:
    ``"module"`` or ``"module:MAPPING"`` (default ``DECLARED``), each built-in name -> its declaration.
    """

    def __init__(self, kind: str, builtins: dict[str, str] | None = None, declarations: str | None = None):
        self.kind = kind
        self.builtins: dict[str, str] = dict(builtins or {})
        self.declarations = declarations
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering a class or function under ``name`` (a built-in name only from its module)."""

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
        """The component registered as ``name``, imported on first use; else `UnknownComponentError`."""
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

    def build(self, name: str, options: Options | Mapping[str, Any] | None = None, /, **keywords: Any) -> Any:
        """The component ``name`` called with its options (``options`` and the ``keywords`` that are
        fields of its `options_model`, validated into it; a `Choice` built into an object) and the
        other ``keywords`` as given."""
        model = self.options_model(name)
        own = {key: keywords.pop(key) for key in list(keywords) if key in model.model_fields}
        if isinstance(options, Options) and not own:
            typed = options
        else:
            given = options.model_dump() if isinstance(options, Options) else dict(options or {})
            typed = model.model_validate(given | own)
        arguments = {key: _built(value) for key, value in typed.arguments().items()}
        return self.get(name)(**arguments, **keywords)

    def options_model(self, name: str) -> type[Options]:
        """The options model component ``name`` declares (`OpenOptions` for none)."""
        return getattr(self.declared(name), "Options", OpenOptions)

    def declared(self, name: str) -> Any:
        """A built-in's declaration (not importing the component), else the registered component itself."""
        if name in self.builtins and self.declarations is not None:
            module, _, mapping = self.declarations.partition(":")
            declared: Mapping[str, Any] = getattr(importlib.import_module(module), mapping or "DECLARED")
            if name in declared:
                return declared[name]
        return self.get(name)

    def unknown(self, name: str) -> str:
        """The message for ``name`` when it is not registered (`unknown_name_message`)."""
        return unknown_name_message(self.kind, name, self.names())

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


def _built(value: Any) -> Any:
    """``value``, or the component a `Choice` names, built from its registry."""
    return ALL_REGISTRIES[value.registry].build(value.name, value.options) if isinstance(value, Choice) else value


def _table(module: str, *names: str) -> dict[str, str]:
    """``{name: module}`` for the built-ins that ``module`` registers."""
    return dict.fromkeys(names, module)


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
BASES = Registry(
    "basis", _table("cyclejepa.symmetry.bases", "canonical", "householder", "stiefel"), "cyclejepa.declarations.symmetry"
)
MODELS = Registry("model", _table("cyclejepa.models.jepa", "winder"))
ENCODERS = Registry("encoder", _table("cyclejepa.models.encoder", "winder-conv"))
PREDICTORS = Registry("predictor", _table("cyclejepa.models.predictor", "causal-transformer"))
STATISTICS = Registry(
    "univariate statistic",
    _table("cyclejepa.objectives.statistics", "epps-pulley", "moments"),
    "cyclejepa.declarations.objectives:DECLARED_STATISTICS",
)
REGULARISERS = Registry(
    "regulariser",
    {**_table("cyclejepa.objectives.sigreg", "sigreg"), **_table("cyclejepa.objectives.vicreg", "vicreg")},
    "cyclejepa.declarations.objectives:DECLARED_REGULARISERS",
)
OBJECTIVES = Registry(
    "objective",
    {
        **_table("cyclejepa.objectives.prediction", "prediction"),
        **_table("cyclejepa.objectives.transport", "transport"),
    },
)
AUGMENTATIONS = Registry(  # in the order of the paper's table, and of application
    "augmentation",
    _table("cyclejepa.data.augment", "gaussian-noise", "tone", "drift", "amplitude-modulation", "lead-dropout", "lead-gain"),
    "cyclejepa.declarations.augmentations",
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
    _table("cyclejepa.phase.ecg.detectors", *BUILTIN_RPEAK_DETECTORS),
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

REGISTRIES.update(ALL_REGISTRIES)  # the declarations check the names their options give against these

_plugins_loaded = False


def _import_builtin(module: str) -> None:
    """Import the built-in ``module``; one missing an optional package is recorded in `UNAVAILABLE`."""
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
    """Import every built-in component and load the installed plugins (once)."""
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
    """A PEP 562 ``__getattr__`` importing ``package.name`` from ``package.<homes[name]>`` on first use."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)

    return __getattr__
