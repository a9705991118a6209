"""benchmarks/gpu_check.sh: every module its jobs import is on the GPU machine or among the wheels
it carries, and its commands (three for the paper's figures, a fourth for the PTB-XL benchmark) run every
job, each within the 10 minutes of one command.

The imports are read with `ast` from the test files of the ``tests`` job, the benchmark scripts
and ``python -m cyclejepa``, following every ``cyclejepa`` module they reach, function-local
imports included (a lazy import runs as soon as its path is taken).
"""

import ast
import re
import sys
from importlib.metadata import packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
COMMAND_LIMIT_S = 600
START_S = 30  # installing the wheels, the module check, nvidia-smi


def array(name: str) -> list[str]:
    """The words of the bash array ``NAME=( ... )`` of the script, comments left out."""
    body = re.search(rf"^{name}=\((.*?)\)", SCRIPT.read_text(), re.S | re.M).group(1)
    return " ".join(line.split("#")[0] for line in body.splitlines()).split()


def job_block(job: str) -> str:
    return re.search(rf"^        {re.escape(job)}\)\n(.*?)\n            ;;", SCRIPT.read_text(), re.S | re.M).group(1)


def jobs() -> list[str]:
    return re.findall(r"^        ([a-z-]+)\)$", SCRIPT.read_text(), re.M)


def commands() -> list[list[str]]:
    """The job lists of the script's three commands (``#   benchmarks/gpu_check.sh JOB ...``)."""
    lines = re.findall(r"^#   benchmarks/gpu_check\.sh ((?:[a-z-]+ ?)+)$", SCRIPT.read_text(), re.M)
    return [line.split() for line in lines]


def entry_files() -> list[Path]:
    tests = re.findall(r"tests/test_\w+\.py", job_block("tests"))
    benchmarks = set(re.findall(r"benchmarks/\w+\.py", SCRIPT.read_text()))
    names = [*tests, "tests/conftest.py", *sorted(benchmarks), "cyclejepa/__main__.py"]
    return [ROOT / name for name in names]


def module_file(name: str) -> Path | None:
    """The file of a ``cyclejepa`` module or a test helper module (None for anything else)."""
    parts = name.split(".")
    base = ROOT.joinpath(*parts) if parts[0] == "cyclejepa" else ROOT / "tests" / parts[0]
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def third_party_imports(files: list[Path]) -> dict[str, dict[str, bool]]:
    """``{top-level module: {importing file: whether only inside functions}}`` over every module
    reached from ``files``, the standard library left out."""
    found: dict[str, dict[str, bool]] = {}
    todo, seen = list(files), set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text())
        local = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [(node.module, alias.name) for alias in node.names]
            else:
                continue
            for module, member in names:
                top = module.split(".")[0]
                own = [module_file(module), module_file(f"{module}.{member}") if member else None]
                own += [module_file(".".join(module.split(".")[:k])) for k in range(1, module.count(".") + 1)]
                if top == "cyclejepa" or module_file(top):
                    todo += [f for f in own if f is not None]
                elif top not in sys.stdlib_module_names:
                    where = found.setdefault(top, {})
                    where[str(path.relative_to(ROOT))] = where.get(str(path.relative_to(ROOT)), True) and id(node) in local
    return found


def test_every_module_the_jobs_import_is_on_the_machine_or_carried():
    imported = third_party_imports(entry_files())
    assert "geoopt" in imported and "torch" in imported  # the reader follows the library's imports
    declared = set(array("IMAGE_MODULES")) | set(array("WHEEL_MODULES")) | set(array("UNUSED_MODULES"))
    undeclared = {module: sorted(files) for module, files in imported.items() if module not in declared}
    assert not undeclared, f"modules imported by gpu_check.sh's jobs but declared nowhere in it: {undeclared}"
    for module in array("UNUSED_MODULES"):  # declared unused: only ever imported lazily
        eager = [path for path, lazily in imported.get(module, {}).items() if not lazily]
        assert not eager, f"{module} is imported at module level by {eager}: the jobs need it"


def test_every_carried_module_has_its_wheel_and_every_wheel_its_requirements():
    """Each of WHEEL_MODULES is pinned in REQUIREMENTS, and each pinned wheel's own requirements
    are pinned too or on the machine (IMAGE_MODULES), as installed here."""
    pins = {canonicalize_name(Requirement(pin).name) for pin in array("REQUIREMENTS")}
    distributions = packages_distributions()
    for module in array("WHEEL_MODULES"):
        assert {canonicalize_name(d) for d in distributions[module]} & pins, f"{module}: no wheel in REQUIREMENTS"
    on_machine = {canonicalize_name(d) for module in array("IMAGE_MODULES") for d in distributions.get(module, [])}
    for pin in pins:
        for line in requires(pin) or []:
            need = Requirement(line)
            if need.marker is None or need.marker.evaluate({"extra": ""}):
                name = canonicalize_name(need.name)
                assert name in pins | on_machine, f"{pin} needs {name}: neither a wheel nor on the machine"


def test_three_commands_run_every_job_each_within_the_limit_of_one_command():
    """The paper's figures take three commands (one machine's 30 minutes); the PTB-XL benchmark's
    figures are a fourth command, for another machine's time."""
    assert len(commands()) == 4 and commands()[3] == ["benchmark-ptbxl"]
    assert sorted(job for command in commands() for job in command) == sorted(jobs())
    for command in commands():
        limits = [int(re.search(r'limited "\$\{\w+_S:-(\d+)\}"', job_block(job)).group(1)) for job in command]
        assert sum(limits) + START_S <= COMMAND_LIMIT_S, (command, limits)
