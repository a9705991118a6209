"""Package layout: no module imports from a later step of the data flow (docs/index.md).

Every ``import`` of every module is read with `ast`, function-local ones included, so a lazy
import inside a function cannot hide a step reaching back up. So are the imports that run
through a name (`runtime_imports`): ``importlib.import_module`` of a literal module, a registry
lookup (``DATASETS.get(name)`` may import every module of the registry's built-in table) and
``load_builtins()``.
"""

import ast
import re
from pathlib import Path

import pytest

from cyclejepa import registry

PACKAGE = Path(__file__).resolve().parents[1] / "cyclejepa"

FOUNDATIONS = (
    "cyclejepa",
    "version",
    "config",
    "facts",
    "signal_geometry",
    "declarations",
    "grid",
    "registry",
    "jsonio",
    "progress",
    "devices",
    "lock",
    "interrupts",
    "outputs",
    "workers",
)
"""Top-level modules every step may use (``cyclejepa`` itself only to reach a submodule)."""
CORPORA = ("cyclejepa.data.ptbxl", "cyclejepa.data.ptbxl_tasks", "cyclejepa.data.challenge")
"""Corpus leaves: imported only by themselves, by the data package (which registers them), and by
what is PTB-XL's by definition: the synthetic corpus (written in its layout), its benchmark tasks
and the PTB-XL benchmark."""
CORPUS_IMPORTERS = ("cyclejepa.data", "cyclejepa.data.synthetic", "cyclejepa.data.ptbxl_tasks", "cyclejepa.bench.ptbxl")
FLOW = (
    "data",
    "phase",
    "symmetry",
    "models",
    "objectives",
    "training",
    "evaluation",
    "embed",
    "export",
    "pipeline",
    "bench",
    "cli",
    "__main__",
)
"""The steps after the foundations, in order; a tuple holds steps that may not import each other."""


def rank(unit: str) -> int:
    """0 for the foundations, then 1, 2, … along `FLOW`."""
    if unit in FOUNDATIONS:
        return 0
    for index, step in enumerate(FLOW, 1):
        if unit == step or unit in step:
            return index
    raise AssertionError(f"{unit}: not placed in tests/test_layout.py's FLOW or FOUNDATIONS; place it")


def unit_of(module: str) -> str:
    """The step a dotted module name belongs to: its folder or top-level module under cyclejepa."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, imported cyclejepa module, inside a function) of every import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    local = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(fn)}  # fmt: skip
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{path}:{node.lineno}: relative import; the package imports by absolute name")
        else:
            continue
        found += [(node.lineno, name, id(node) in local) for name in names if name.split(".")[0] == "cyclejepa"]
    return found


REGISTRIES = {name: value for name, value in vars(registry).items() if isinstance(value, registry.Registry)}
"""The registries by the name the code calls them (``DATASETS``, ...)."""
LOOKUPS = {"get": "builtins", "build": "builtins", "declared": "declarations"}
"""Registry methods that import: ``get`` and ``build`` a built-in's module, ``declared`` the
registry's declarations module (its built-ins' modules when it has none)."""


def registry_targets(reg: registry.Registry, method: str) -> set[str]:
    """The modules a call of ``reg.<method>(name)`` may import."""
    if LOOKUPS[method] == "declarations" and reg.declarations is not None:
        return {reg.declarations}
    return set(reg.builtins.values())


THROUGH_A_NAME_ON_PURPOSE = {
    ("cyclejepa.data.cache.build", "PHASE_PROVIDERS.build"):
        "the cache phases each record with the provider the config names, built by name (the data step running the "
        "phase step); it goes when the cache is handed a provider object",
    ("cyclejepa.data.cache.build", "PHASE_PROVIDERS.get"):
        "the provider's cycle band, which `cyclejepa.facts.cycle_band` reads from its declaration without the import",
    ("cyclejepa.phase.provider", "PHASE_PROVIDERS.get"):
        "`registered_name` names a provider's class and `provider_classes` asks every provider whether it reads a "
        "channel (its channel pattern, a fact its declaration could hold), each provider imported; a search of the "
        "registered entries alone would import nothing",
}  # fmt: skip
"""Lookups through a registry that import a later step or close a ring, left to their owners,
with why: each ``(importer, how)`` is left out of `violations` and `module_graph`, and must
still occur (a fixed one is taken off this list)."""


def runtime_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, how) of each import that runs through a name in ``path``: an
    ``importlib.import_module("cyclejepa...")`` of a literal, a lookup in a registry named by its
    constant (``DATASETS.get(...)``, ``registry.PHASE_PROVIDERS.build(...)``; `LOOKUPS`) and
    ``load_builtins()`` (every registry's built-ins)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
        if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
            module = str(node.args[0].value)
            found += [(node.lineno, module, "importlib")] if module.split(".")[0] == "cyclejepa" else []
        elif name == "load_builtins":
            found += [
                (node.lineno, module, "load_builtins") for reg in REGISTRIES.values() for module in sorted(reg.builtins.values())
            ]
        elif name in LOOKUPS and isinstance(function, ast.Attribute):
            receiver = function.value
            constant = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", None)
            if constant in REGISTRIES:
                how = f"{constant}.{name}"
                found += [(node.lineno, module, how) for module in sorted(registry_targets(REGISTRIES[constant], name))]
    return found


def violations(root: Path = PACKAGE) -> list[str]:
    """Each import of a later step (or of a step beside it) than the importing module's own, the
    imports through a name (`runtime_imports`) included."""
    found = []
    for path in sorted(root.rglob("*.py")):
        importer = module_name(path, root)
        if importer == "cyclejepa":
            continue  # the facade: exposes load_encoder and load_pretrained lazily; only __version__ is imported from it
        edges = [(line, target, "") for line, target, _ in imports(path)]
        edges += [(line, target, f" through {how}") for line, target, how in runtime_imports(path)
                  if (importer, how) not in THROUGH_A_NAME_ON_PURPOSE]  # fmt: skip
        for line, target, how in edges:
            mine, theirs = unit_of(importer), unit_of(target)
            if mine == theirs or (rank(theirs) < rank(mine)) or (rank(mine) == rank(theirs) == 0):
                continue
            found.append(f"{path.relative_to(root.parent)}:{line}: {importer} ({mine}) imports {target} ({theirs}){how}")
    return found


def test_no_module_imports_from_a_later_step():
    assert violations() == []


def test_each_lookup_left_to_its_owner_still_occurs():
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    for importer, how in THROUGH_A_NAME_ON_PURPOSE:
        assert any(found == how for _, _, found in runtime_imports(modules[importer])), f"{importer}: {how} is gone"


def test_a_step_reaching_back_up_through_a_name_is_found(tmp_path):
    """The checker on imports that run through a name: a foundation looking a dataset up in the
    registry (which imports the corpus modules of its built-in table), the data step building a
    model by name, a literal ``importlib.import_module``; a lookup of a declaration is no such
    import (the declarations are foundations)."""
    package = tmp_path / "cyclejepa"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / "__init__.py").write_text("")
    (package / "facts.py").write_text(
        "from cyclejepa import registry\n\n\ndef provider(name):\n    return registry.DATASETS.get(name).phase_provider\n\n\n"
        "def declared(name):\n    return registry.DATASETS.declared(name).phase_provider\n"
    )
    (package / "data" / "stage.py").write_text(
        "import importlib\n\nfrom cyclejepa.registry import MODELS\n\nMODEL = MODELS.build('winder')\n"
        "EVAL = importlib.import_module('cyclejepa.evaluation.report')\n"
    )
    found = violations(package)
    assert (
        "cyclejepa/data/stage.py:5: cyclejepa.data.stage (data) imports cyclejepa.models.jepa (models) through MODELS.build"
        in found
    )
    assert (
        "cyclejepa/data/stage.py:6: cyclejepa.data.stage (data) imports cyclejepa.evaluation.report (evaluation) through importlib"
        in found
    )
    ptbxl = "cyclejepa/facts.py:5: cyclejepa.facts (facts) imports cyclejepa.data.ptbxl (data) through DATASETS.get"
    assert ptbxl in found and not [hit for hit in found if "facts.py:9" in hit]
    assert {hit.split(" imports ")[1].split(" (")[0] for hit in found if hit.startswith("cyclejepa/facts.py")} == set(
        registry.DATASETS.builtins.values()
    )


def test_a_ring_through_a_registry_is_found(tmp_path):
    """A module the registry names that looks the registry up again, closing a ring at run time."""
    package = tmp_path / "cyclejepa"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models" / "__init__.py").write_text("")
    (package / "models" / "jepa.py").write_text("from cyclejepa.models.encoder import Encoder\n")
    (package / "models" / "encoder.py").write_text(
        "from cyclejepa.registry import MODELS\n\nBUILD = MODELS.get\nMODELS.get('x')\n"
    )
    assert import_cycles(package) == [["cyclejepa.models.encoder", "cyclejepa.models.jepa"]]


def test_a_step_reaching_back_up_is_found(tmp_path):
    """The checker itself: the evaluation importing the pipeline, at module level or in a function."""
    package = tmp_path / "cyclejepa"
    (package / "evaluation").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "pipeline").mkdir()
    (package / "pipeline" / "run.py").write_text("from cyclejepa.evaluation.stage import evaluate_grid\n")
    (package / "evaluation" / "__init__.py").write_text("")
    (package / "evaluation" / "stage.py").write_text(
        "from cyclejepa.config import ExperimentConfig\n\n\ndef cell():\n    from cyclejepa.pipeline import run_dir\n"
    )
    (package / "evaluation" / "probe.py").write_text("import cyclejepa.bench.timing\n")
    (package / "pipeline" / "plans.py").write_text("from cyclejepa.bench.commands import benchmark_ptbxl\n")  # bench is above
    assert violations(package) == [
        "cyclejepa/evaluation/probe.py:1: cyclejepa.evaluation.probe (evaluation) imports cyclejepa.bench.timing (bench)",
        "cyclejepa/evaluation/stage.py:5: cyclejepa.evaluation.stage (evaluation) imports cyclejepa.pipeline (pipeline)",
        "cyclejepa/pipeline/plans.py:1: cyclejepa.pipeline.plans (pipeline) imports cyclejepa.bench.commands (bench)",
    ]


def test_steps_beside_each_other_and_unplaced_modules_are_refused(tmp_path):
    package = tmp_path / "cyclejepa"
    package.mkdir()
    (package / "embed.py").write_text("from cyclejepa.bench.timing import versions\n")
    assert violations(package) == ["cyclejepa/embed.py:1: cyclejepa.embed (embed) imports cyclejepa.bench.timing (bench)"]
    (package / "newstep.py").write_text("from cyclejepa.config import load_config\n")
    with pytest.raises(AssertionError, match="newstep: not placed"):
        violations(package)


# ------------------------------------------------------------------ cycles, the root, corpora


def module_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package modules it imports (``from A import B`` reaches ``A.B`` when that is a
    module). Importing ``a.b.c`` first runs the packages ``a`` and ``a.b`` (their ``__init__``), so
    those are edges too, except the importer's own enclosing packages, which are always
    initialised before it."""
    modules = {module_name(path, root): path for path in root.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
                }
        targets |= {target for _, target, how in runtime_imports(path) if (name, how) not in THROUGH_A_NAME_ON_PURPOSE}
        targets |= {package for target in targets for package in enclosing_packages(target)}
        graph[name] = {t for t in targets if t in modules and t != name and t not in enclosing_packages(name)}
    return graph


def enclosing_packages(module: str) -> list[str]:
    """The packages above ``module``, outermost first: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_cycles(root: Path = PACKAGE) -> list[list[str]]:
    """Every set of modules that import each other in a ring, module-level and function-local
    imports alike (Tarjan's strongly connected components of more than one module)."""
    graph, index, low, stack, cycles = module_graph(root), {}, {}, [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            ring = []
            while not ring or ring[-1] != node:
                ring.append(stack.pop())
            if len(ring) > 1:
                cycles.append(sorted(ring))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def upward_imports(root: Path = PACKAGE) -> list[str]:
    """Names taken from a package's ``__init__`` by a module inside that package (e.g.
    ``from cyclejepa import __version__`` in a step), instead of from the module defining them."""
    found = []
    modules = {module_name(path, root) for path in root.rglob("*.py")}
    for path in sorted(root.rglob("*.py")):
        importer = module_name(path, root)
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules):
                continue
            package = node.module
            is_package = (root.parent / package.replace(".", "/") / "__init__.py").exists()
            names = [a.name for a in node.names if f"{package}.{a.name}" not in modules]
            if is_package and names and importer.startswith(package + ".") and importer != "cyclejepa.__main__":
                found.append(
                    f"{path.relative_to(root.parent)}:{node.lineno}: {importer} takes {names} from {package}/__init__.py"
                )
    return found


def corpus_imports(root: Path = PACKAGE) -> list[str]:
    """Imports of a corpus leaf (`CORPORA`) from anywhere but the leaf, the data package and the
    synthetic corpus: generic layers never import a corpus."""
    found = []
    for path in sorted(root.rglob("*.py")):
        importer = module_name(path, root)
        if (
            any(importer == leaf or importer.startswith(leaf + ".") for leaf in CORPUS_IMPORTERS[1:])
            or importer in CORPUS_IMPORTERS
        ):
            continue
        for line, target, _ in imports(path):
            leaf = next((c for c in CORPORA if target == c or target.startswith(c + ".")), None)
            if leaf and not (importer == leaf or importer.startswith(leaf + ".")):
                found.append(f"{path.relative_to(root.parent)}:{line}: {importer} imports the corpus {target}")
    return found


def test_no_import_cycle_no_upward_import_no_corpus_outside_its_leaf():
    assert import_cycles() == []
    assert upward_imports() == []
    assert corpus_imports() == []


def test_cycles_upward_and_corpus_imports_are_found(tmp_path):
    """The checkers themselves, on a package with one ring, one upward import and a corpus import."""
    package = tmp_path / "cyclejepa"
    (package / "data").mkdir(parents=True)
    (package / "evaluation").mkdir()
    (package / "__init__.py").write_text("__version__ = '0'\n")
    (package / "config.py").write_text("def f():\n    from cyclejepa.evaluation.anomaly import PERTURBATIONS\n")
    (package / "data" / "__init__.py").write_text("")
    (package / "data" / "ptbxl.py").write_text("from cyclejepa.config import f\n")
    (package / "data" / "cache.py").write_text("from cyclejepa import __version__\nfrom cyclejepa.data.ptbxl import f\n")
    (package / "evaluation" / "__init__.py").write_text("")
    (package / "evaluation" / "anomaly.py").write_text("from cyclejepa.data.cache import x\n")
    assert import_cycles(package) == [
        ["cyclejepa.config", "cyclejepa.data.cache", "cyclejepa.data.ptbxl", "cyclejepa.evaluation.anomaly"]
    ]
    assert upward_imports(package) == [
        "cyclejepa/data/cache.py:1: cyclejepa.data.cache takes ['__version__'] from cyclejepa/__init__.py"
    ]
    assert corpus_imports(package) == ["cyclejepa/data/cache.py:2: cyclejepa.data.cache imports the corpus cyclejepa.data.ptbxl"]


def test_a_cycle_through_a_package_init_is_found(tmp_path):
    """records -> ecg.provider runs ecg/__init__, which imports ecg.annotations, which imports
    records: a ring only through the package's ``__init__`` (no module imports ecg itself). A
    module importing a sibling inside its own package is no such ring."""
    package = tmp_path / "cyclejepa"
    (package / "phase" / "ecg").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "phase" / "__init__.py").write_text("")
    (package / "phase" / "records.py").write_text("from cyclejepa.phase.ecg.provider import P\n")
    (package / "phase" / "ecg" / "__init__.py").write_text("from cyclejepa.phase.ecg.annotations import A\n")
    (package / "phase" / "ecg" / "provider.py").write_text("P = 1\n")
    (package / "phase" / "ecg" / "annotations.py").write_text("from cyclejepa.phase.records import read\n")
    assert import_cycles(package) == [["cyclejepa.phase.ecg", "cyclejepa.phase.ecg.annotations", "cyclejepa.phase.records"]]
    (package / "phase" / "ecg" / "annotations.py").write_text("from cyclejepa.phase.ecg.provider import P\n")
    assert import_cycles(package) == []  # ecg/__init__ -> annotations -> provider: the package is already running


# ------------------------------------------------------------------ signal-neutral words


NEUTRAL_MODULES = (
    "data/cache", "data/cohort.py", "phase/provider.py", "phase/track.py", "phase/cycles.py", "phase/filters.py",
    "phase/composite.py", "phase/pulse.py", "phase/breath.py",
)  # fmt: skip
"""Generic layers (and the non-ECG providers): they name no ECG thing."""
ECG_WORDS = re.compile(r"ecg_id|(?<!ecg-)rpeaks?|r_peaks?|r-peaks?|too_few_beats|implausible_rr", re.IGNORECASE)
"""The ECG words; the provider name ``ecg-rpeak`` (a default the layers may name) is not one."""


def ecg_words(root: Path = PACKAGE) -> list[str]:
    """Each line of a `NEUTRAL_MODULES` module that holds an `ECG_WORDS` word (code, strings, docs)."""
    found = []
    for place in NEUTRAL_MODULES:
        target = root / place
        for path in sorted(target.rglob("*.py") if target.is_dir() else [target]):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if ECG_WORDS.search(line):
                    found.append(f"{path.relative_to(root.parent)}:{number}: {line.strip()}")
    return found


def test_generic_layers_use_no_ecg_words():
    assert ecg_words() == []


def test_an_ecg_word_in_a_generic_layer_is_found(tmp_path):
    package = tmp_path / "cyclejepa"
    for place in NEUTRAL_MODULES:
        target = package / place
        (target if not place.endswith(".py") else target.parent).mkdir(parents=True, exist_ok=True)
        if place.endswith(".py"):
            target.write_text('"""Cycles."""\n')
    (package / "data" / "cache" / "files.py").write_text('COLUMNS = ("ecg_id", "record")\nEVENTS = "rpeaks.npz"\n')
    (package / "phase" / "provider.py").write_text('reasons.append("too_few_beats")\n')
    assert ecg_words(package) == [
        'cyclejepa/data/cache/files.py:1: COLUMNS = ("ecg_id", "record")',
        'cyclejepa/data/cache/files.py:2: EVENTS = "rpeaks.npz"',
        'cyclejepa/phase/provider.py:1: reasons.append("too_few_beats")',
    ]


# ------------------------------------------------------------------ no corpus or provider named as a default


GENERIC_LAYERS = tuple(place for place in NEUTRAL_MODULES if place not in ("phase/pulse.py", "phase/breath.py")) + (
    "config.py", "pipeline", "outputs.py", "data/datasets.py", "data/preprocess.py", "training", "evaluation",
)  # fmt: skip
"""Modules that receive the dataset and the phase provider from the config: they name none."""
COMPONENT_NAMES = (
    "ptbxl", "synthetic", "challenge2021", "wfdb", "ecg-rpeak", "pulse", "breath",
    "superclass", "subclass", "subclass-eligible", "subclass-all",
)  # fmt: skip
"""The built-in corpora and signal-specific providers, and PTB-XL's label levels and probe tasks."""
NAMED_ON_PURPOSE = {
    ("cyclejepa/config.py", "ptbxl"): "data.dataset of a config that names none",
}
NAMED_IN_OVERRIDE = re.compile(r"\b(?:data\.dataset|phase\.provider)=([\w-]+)")
"""A component named inside a ``--set`` override string (``data.dataset=synthetic``)."""
FOLD_COUNT = re.compile(r"range\(1, 11\)|\ble=10\b|% 10\b|1\.\.10\b")
"""Ten folds written out (`FoldProtocol.count` is the dataset's)."""


def _docstrings(tree: ast.AST) -> set[int]:
    bodies = (
        node.body
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    )
    return {
        id(body[0].value) for body in bodies if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    }


def _names_component(value: object) -> bool:
    """Whether a literal is a component name, or an override string that names one."""
    if not isinstance(value, str):
        return False
    return value in COMPONENT_NAMES or any(name in COMPONENT_NAMES for name in NAMED_IN_OVERRIDE.findall(value))


def named_components(root: Path = PACKAGE) -> list[str]:
    """Each string literal (docstrings aside) of a `GENERIC_LAYERS` module that is one of
    `COMPONENT_NAMES` or an override naming one, and each line writing out ten folds (`FOLD_COUNT`)."""
    found = []
    for place in GENERIC_LAYERS:
        target = root / place
        for path in sorted(target.rglob("*.py") if target.is_dir() else [target]):
            where, text = path.relative_to(root.parent), path.read_text()
            tree = ast.parse(text)
            docs = _docstrings(tree)
            found += [f"{where}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                      if isinstance(node, ast.Constant) and id(node) not in docs and _names_component(node.value)
                      and (str(where), node.value) not in NAMED_ON_PURPOSE]  # fmt: skip
            found += [f"{where}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if FOLD_COUNT.search(line)]
    return sorted(found, key=lambda hit: (hit.split(":")[0], int(hit.split(":")[1])))


def test_generic_layers_name_no_corpus_provider_or_fold_count():
    assert named_components() == []


def test_the_names_cover_every_built_in_corpus_and_signal_provider_and_each_allowance_is_used():
    from cyclejepa import registry

    def built_in(names, registered):  # the library's own (tests register plugins of theirs)
        return {name for name in names if registered.get(name).__module__.startswith("cyclejepa.")}

    generic = {"composite"}  # combines other providers; reads no signal of its own
    assert built_in(registry.DATASETS.names(), registry.DATASETS) <= set(COMPONENT_NAMES)
    assert built_in(registry.PHASE_PROVIDERS.names(), registry.PHASE_PROVIDERS) - generic <= set(COMPONENT_NAMES)
    for (place, name), _ in NAMED_ON_PURPOSE.items():
        assert repr(name) in (PACKAGE.parent / place).read_text() or f'"{name}"' in (PACKAGE.parent / place).read_text()


def test_a_default_corpus_provider_or_fold_count_in_a_generic_layer_is_found(tmp_path):
    package = tmp_path / "cyclejepa"
    for place in GENERIC_LAYERS:
        target = package / place
        (target if not place.endswith(".py") else target.parent).mkdir(parents=True, exist_ok=True)
        if place.endswith(".py"):
            target.write_text('"""The synthetic corpus is named in a docstring: allowed."""\n')
    (package / "data" / "cache" / "build.py").write_text(
        'def prepare_cache(phase_provider="ecg-rpeak"):\n    """Folds 1..10 of ptbxl."""\n    return set(range(1, 11))\n'
    )
    (package / "pipeline" / "run.py").write_text('if dataset == "synthetic":\n    options["progress"] = True\n')
    (package / "evaluation" / "report.py").write_text('LABELS = {"subclass-all": "23 classes"}\n')
    (package / "pipeline" / "plans.py").write_text('sets = [f"data.root={root}", "data.dataset=synthetic"]\n')
    (package / "config.py").write_text('dataset = "ptbxl"\nfolds: list[Annotated[int, Field(ge=1, le=10)]]\n')
    assert named_components(package) == [
        "cyclejepa/config.py:2: folds: list[Annotated[int, Field(ge=1, le=10)]]",
        "cyclejepa/data/cache/build.py:1: 'ecg-rpeak'",
        'cyclejepa/data/cache/build.py:2: """Folds 1..10 of ptbxl."""',
        "cyclejepa/data/cache/build.py:3: return set(range(1, 11))",
        "cyclejepa/evaluation/report.py:1: 'subclass-all'",
        "cyclejepa/pipeline/plans.py:1: 'data.dataset=synthetic'",
        "cyclejepa/pipeline/run.py:1: 'synthetic'",
    ]


# ------------------------------------------------------------------ one layout of an output directory


OUTPUT_NAMES = ("checkpoints", "config.yaml", "metrics.jsonl", "done.json")
"""The files and folders of an output directory that `cyclejepa.outputs` alone spells out."""


def output_names(root: Path = PACKAGE) -> list[str]:
    """Each string literal (docstrings aside) outside ``outputs.py`` that is one of `OUTPUT_NAMES`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "outputs.py" and path.parent == root:
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        found += [f"{path.relative_to(root.parent)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and id(node) not in docs and node.value in OUTPUT_NAMES]  # fmt: skip
    return found


def test_the_output_layout_has_one_home():
    assert output_names() == []


def test_an_output_file_named_outside_the_layout_is_found(tmp_path):
    package = tmp_path / "cyclejepa"
    (package / "training").mkdir(parents=True)
    (package / "outputs.py").write_text('CHECKPOINTS = "checkpoints"\n')
    (package / "training" / "trainer.py").write_text(
        '"""Writes "done.json" (a docstring: allowed)."""\npath = directory / "checkpoints"\n'
    )
    assert output_names(package) == ["cyclejepa/training/trainer.py:2: 'checkpoints'"]


# ------------------------------------------------------------------ the experiment config is read in one place


CONFIG_READERS = ("pipeline", "config.py", "grid.py", "cli.py", "bench/commands.py")
"""Where the whole experiment config may be named: the pipeline (its only reader), its schema and
loading (config, grid), the command line that loads it and hands it to the pipeline, and the
benchmarks' commands (the top layer of `cyclejepa.bench`, above the pipeline)."""
PIPELINE_NAMES = ("ExperimentConfig", "RunPlan", "load_config", "parse_config")


def config_readers(root: Path = PACKAGE) -> list[str]:
    """Each line outside `CONFIG_READERS` that names `ExperimentConfig`, `RunPlan` or the config's
    loaders (code or annotation) or imports `cyclejepa.pipeline`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in CONFIG_READERS or relative.as_posix() in CONFIG_READERS:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            named = (isinstance(node, ast.Name) and node.id in PIPELINE_NAMES) or (
                isinstance(node, ast.alias) and (node.name in PIPELINE_NAMES or node.name.startswith("cyclejepa.pipeline"))
            ) or (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cyclejepa.pipeline")) or (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in PIPELINE_NAMES
            )  # fmt: skip
            if named:
                found.append(f"cyclejepa/{relative}:{node.lineno}")
    return sorted(set(found))


def test_only_the_pipeline_reads_the_experiment_config():
    assert config_readers() == []


def test_a_layer_reading_the_experiment_config_is_found(tmp_path):
    package = tmp_path / "cyclejepa"
    (package / "training").mkdir(parents=True)
    (package / "pipeline").mkdir()
    (package / "pipeline" / "run.py").write_text("from cyclejepa.config import ExperimentConfig\n")
    (package / "training" / "trainer.py").write_text(
        "from __future__ import annotations\n\n\ndef fit(cfg: ExperimentConfig, plan: 'RunPlan'):\n    return cfg\n"
    )
    (package / "training" / "stage.py").write_text("from cyclejepa.pipeline.plans import run_dir\n")
    (package / "training" / "bench.py").write_text("from cyclejepa.config import OptimiserConfig, parse_config\n")
    assert config_readers(package) == [
        "cyclejepa/training/bench.py:1",
        "cyclejepa/training/stage.py:1",
        "cyclejepa/training/trainer.py:4",
    ]


# ------------------------------------------------------------------ one name per public function


NAMED_ALIKE_ON_PURPOSE = {"main"}
"""A command-line entry point of a module (``python -m``) is ``main`` in each."""


def public_names(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Each public module-level function or class name defined in more than one module (the typer
    commands of cli.py, named by the command they serve, aside)."""
    homes: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() == "cli.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                homes.setdefault(node.name, []).append(path.relative_to(root.parent).as_posix())
    return {name: places for name, places in homes.items() if len(places) > 1 and name not in NAMED_ALIKE_ON_PURPOSE}


def test_no_two_public_functions_share_a_name():
    assert public_names() == {}


def test_two_public_functions_of_one_name_are_found(tmp_path):
    package = tmp_path / "cyclejepa"
    (package / "data").mkdir(parents=True)
    (package / "data" / "a.py").write_text("def read_record(path):\n    pass\n\n\ndef main():\n    pass\n")
    (package / "data" / "b.py").write_text(
        "def read_record(root, record):\n    pass\n\n\ndef _read(x):\n    pass\n\n\ndef main():\n    pass\n"
    )
    assert public_names(package) == {"read_record": ["cyclejepa/data/a.py", "cyclejepa/data/b.py"]}
