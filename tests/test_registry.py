"""The registries' table of built-ins (each name's module, known without importing it) and the
lazy package faces."""

import ast
import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import cyclejepa
from cyclejepa import registry
from cyclejepa.declarations.options import Choice

ROOT = Path(__file__).resolve().parents[1]
FACES = ("data", "data.cache", "evaluation", "export", "models", "phase", "pipeline", "symmetry", "training")
"""The lazy faces; `cyclejepa.objectives` stays eager: its functions `sigreg` and `vicreg` share
their modules' names, which a lazy face would hand out once the module is imported."""


def _python(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (nothing imported yet) and return the JSON it prints."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(result.stdout)


def _every_module() -> list[str]:
    """Every module of the package, imported (a module needing an absent optional package skipped)."""
    names = []
    for info in pkgutil.walk_packages(cyclejepa.__path__, "cyclejepa."):
        if info.name.endswith(".__main__"):
            continue  # runs the command line
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as error:
            if error.name is None or error.name.startswith("cyclejepa"):
                raise
            continue
        names.append(info.name)
    return names


def test_the_builtin_table_names_where_every_registered_component_lives():
    """Each built-in of the table is, once its module is imported, registered under its name by
    that module; and every component the package registers is in the table."""
    _every_module()
    for kind, reg in registry.ALL_REGISTRIES.items():
        for name, module in reg.builtins.items():
            assert name in reg._entries, f"{kind}: {name!r} is not registered by {module}"
            assert reg._entries[name].__module__ == module, f"{kind}: {name!r}"
        registered = {name for name, obj in reg._entries.items() if obj.__module__.startswith("cyclejepa.")}
        assert registered <= set(reg.builtins), f"{kind}: registered but not in the table: {registered - set(reg.builtins)}"


REQUIRED = {"composite": {"coordinates": {"cardiac": {"provider": "pulse"}}}}
"""Options without a default, as a config gives them."""
CONTEXT = {"root", "dim", "generator"}
"""Constructor arguments a stage passes beside a component's options (not options of a config)."""


def _constructor_defaults(cls) -> dict[str, object]:
    """Keyword parameters of a class's constructor and their defaults, through ``**kwargs`` to its bases."""
    found: dict[str, object] = {}
    for klass in inspect.getmro(cls):
        init = vars(klass).get("__init__")
        if init is None or klass is object:
            continue
        parameters = list(inspect.signature(init).parameters.values())
        for p in parameters:
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in CONTEXT | {"self"}:
                found.setdefault(p.name, p.default)
        if all(p.kind is not p.VAR_KEYWORD for p in parameters):
            return found
    return found


@pytest.mark.parametrize(
    "reg, name",
    [(reg, name) for reg in registry.ALL_REGISTRIES.values() if reg.declarations for name in sorted(reg.builtins)],
    ids=lambda value: getattr(value, "kind", value),
)
def test_a_declared_options_model_is_the_constructors(reg, name):
    """Each built-in's options model takes exactly its constructor's keywords, with the same
    defaults, so that a config's defaults build the component the constructor's defaults build
    (a `Choice`, built and injected, stands for an object: SIGReg's statistic)."""
    model, defaults = reg.options_model(name), _constructor_defaults(reg.get(name))
    required = REQUIRED.get(name, {})
    arguments = {key: value for key, value in model.model_validate(required).arguments().items() if key not in required}
    assert set(arguments) | set(required) == set(defaults), f"{reg.kind} {name!r}"
    for key, value in arguments.items():
        if not isinstance(value, Choice):
            assert value == defaults[key], f"{reg.kind} {name!r}: {key} {value!r} != {defaults[key]!r}"


def test_options_are_validated_when_a_component_is_built():
    """`Registry.build` types the options it is given, by mapping or keyword, and builds a
    `Choice` into the object it names (SIGReg's statistic, from the shorthand ``knots``)."""
    built = registry.REGULARISERS.build("sigreg", {"knots": 9}, num_directions=3)
    assert (built.num_directions, built.statistic.knots, built.statistic.t_max) == (3, 9, 3.0)
    with pytest.raises(ValueError, match=r"fiducial\n  Input should be 'foot', 'max-slope' or 'peak'"):
        registry.PHASE_PROVIDERS.build("pulse", fiducial="notch")
    with pytest.raises(ValueError, match=r"knots\n  Extra inputs are not permitted"):
        registry.REGULARISERS.build("vicreg", {"knots": 9})


def test_a_name_is_known_and_found_importing_only_its_module():
    report = _python(
        "import json, sys\n"
        "from cyclejepa import registry\n"
        "known = ['sigreg' in registry.REGULARISERS, 'tone' in registry.AUGMENTATIONS, 'ptbxl' in registry.DATASETS]\n"
        "names = registry.AUGMENTATIONS.names()\n"
        "provider = registry.PHASE_PROVIDERS.get('breath').__module__\n"
        "print(json.dumps({'known': known, 'names': names, 'provider': provider, 'modules': sorted(sys.modules)}))\n"
    )
    assert report["known"] == [True, True, True]
    assert report["names"] == sorted(registry.AUGMENTATIONS.builtins)
    assert report["provider"] == "cyclejepa.phase.breath"
    loaded = {m for m in report["modules"] if m.startswith(("cyclejepa.", "torch"))}
    assert "cyclejepa.phase.breath" in loaded
    unneeded = {"torch", "cyclejepa.objectives.sigreg", "cyclejepa.data.augment", "cyclejepa.data.ptbxl", "cyclejepa.phase.pulse"}
    assert not loaded & unneeded


def test_an_unknown_name_lists_the_builtins_not_yet_imported():
    reg = registry.Registry("widget", {"sprocket": "cyclejepa.no_such_module"})
    with pytest.raises(registry.UnknownComponentError, match=r"registered: sprocket\. Did you mean 'sprocket'\?"):
        reg.get("sprockets")


def test_a_builtin_name_is_refused_to_another_module():
    reg = registry.Registry("widget", {"sprocket": "cyclejepa.widgets"})

    class Sprocket:
        pass

    with pytest.raises(ValueError, match=r"widget 'sprocket' is the built-in of cyclejepa.widgets"):
        reg.register("sprocket")(Sprocket)
    assert reg.register("cog")(Sprocket) is Sprocket and reg.get("cog") is Sprocket


@pytest.mark.parametrize("face", FACES)
def test_a_face_gives_each_public_name_from_its_module(face):
    package = importlib.import_module(f"cyclejepa.{face}")
    submodules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    assert package.__all__ == sorted(package._HOMES)
    assert not set(package.__all__) & submodules  # a submodule attribute would shadow the name
    for name, home in package._HOMES.items():
        assert getattr(package, name) is getattr(importlib.import_module(f"cyclejepa.{face}.{home}"), name)
    with pytest.raises(AttributeError, match=f"module 'cyclejepa.{face}' has no attribute 'nothing'"):
        package.nothing  # noqa: B018


def _type_checking_imports(path: Path) -> dict[str, str]:
    """Name -> home submodule of each ``from cyclejepa.<face>.<home> import name as name`` in the
    ``if TYPE_CHECKING:`` block of the face at ``path``; an import that is not an explicit
    re-export (``name as name``) fails."""
    tree = ast.parse(path.read_text(), filename=str(path))
    blocks = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    assert len(blocks) == 1, f"{path}: one `if TYPE_CHECKING:` block of the faces' names"
    homes = {}
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom) and node.module, f"{path}:{node.lineno}: only `from ... import` here"
        for alias in node.names:
            assert alias.asname == alias.name, f"{path}:{node.lineno}: write `{alias.name} as {alias.name}` (a re-export)"
            homes[alias.name] = node.module
    return homes


@pytest.mark.parametrize("face", FACES)
def test_a_face_shows_type_checkers_the_names_it_gives(face):
    """The face's ``if TYPE_CHECKING:`` imports (what mypy and editors see) are its lazy map, name
    for name and module for module: a name added to one and not the other fails here."""
    package = importlib.import_module(f"cyclejepa.{face}")
    seen = _type_checking_imports(Path(package.__file__))
    assert seen == {name: f"cyclejepa.{face}.{home}" for name, home in package._HOMES.items()}


def test_importing_a_face_or_one_module_does_not_import_torch():
    report = _python(
        "import json, sys\n"
        + "".join(f"import cyclejepa.{face}\n" for face in FACES)
        + "import cyclejepa.data.ptbxl, cyclejepa.workers\n"
        "from cyclejepa.phase import PhaseProvider, PhaseTrack\n"
        "phase = sorted(m for m in sys.modules if m.startswith('cyclejepa.phase'))\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'phase': phase}))\n"
    )
    phase = [
        "cyclejepa.phase",
        "cyclejepa.phase.cycles",
        "cyclejepa.phase.filters",
        "cyclejepa.phase.provider",
        "cyclejepa.phase.track",
    ]
    assert report == {"torch": False, "phase": phase}  # filters: the band-edge constant behind PhaseProvider.min_fs


def test_a_builtin_whose_optional_package_is_missing_is_named_with_it(monkeypatch):
    reg = registry.Registry("widget", {"sprocket": "cyclejepa.widgets_optional", "cog": "cyclejepa.widgets_cog"})

    def missing(name):
        raise ModuleNotFoundError("No module named 'gearbox'", name="gearbox")

    monkeypatch.setattr(registry.importlib, "import_module", missing)
    monkeypatch.setattr(registry, "UNAVAILABLE", {})
    with pytest.raises(registry.UnknownComponentError) as caught:
        reg.get("sprocket")
    expected = "unknown widget 'sprocket'; registered: cog (not loaded: cyclejepa.widgets_optional needs gearbox)"
    assert str(caught.value) == expected
