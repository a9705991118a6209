"""Every module of the package imports alone, in a fresh interpreter.

An import cycle hides when another module happens to be imported first (the test session imports
half the package before any test runs), so each module is imported in a process of its own that
has imported no ``cyclejepa`` module before it. One fresh interpreter imports every third-party
module the package's files import at module level (read from their source) once, then forks
a child per module: the children share those modules but no module of this package.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cyclejepa"
OPTIONAL = {"cyclejepa.symmetry.escnn_adapter": "escnn"}
"""Modules of an optional extra: importing them needs that package (docs/symmetry.md)."""

CHILDREN = textwrap.dedent(
    """
    import importlib, os, sys, traceback

    def forked(job):
        # job() in a child process: (exit status, what it wrote)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            code, text = job()
            os.write(write, text.encode()[-200000:])
            os._exit(code)
        os.close(write)
        message = b""
        while chunk := os.read(read, 65536):
            message += chunk
        os.close(read)
        return os.waitpid(pid, 0)[1], message.decode(errors="replace")

    def own(name):
        return name.split(".")[0] == PACKAGE

    def third_party():
        # every other module the package's files import at module level, read from their source
        import ast, importlib.util, pathlib
        root, names = pathlib.Path(importlib.util.find_spec(PACKAGE).origin).parent, set()  # imports nothing
        for module in MODULES:
            path = root.joinpath(*module.split(".")[1:])
            path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
            tree = ast.parse(path.read_text(encoding="utf-8"))
            stack = list(tree.body)  # module-level statements (and blocks), not function bodies
            while stack:
                node = stack.pop()
                if isinstance(node, (ast.If, ast.Try)):
                    stack += [*node.body, *node.orelse, *getattr(node, "finalbody", []),
                              *[n for h in getattr(node, "handlers", []) for n in h.body]]
                elif isinstance(node, ast.Import):
                    names |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module)
        return 0, "\\n".join(sorted(name for name in names if not own(name)))

    def alone(module):
        try:
            importlib.import_module(module)
            return 0, ""
        except BaseException:
            return 1, traceback.format_exc(limit=4)[-2000:]

    PACKAGE, MODULES = sys.argv[1], sys.argv[2:]
    _, found = third_party()
    for name in found.splitlines():  # imported once here, shared by every child (copy on write)
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    assert not [m for m in sys.modules if own(m)], "a module of the package was imported before the check"
    failed = [f"{m}:\\n{text}" for m in MODULES for status, text in [forked(lambda m=m: alone(m))] if status]
    print("\\n".join(failed))
    sys.exit(1 if failed else 0)
    """
)
"""Imports every third-party module the package uses once, then each package module alone in a
forked child (arguments: the package's name, then its modules)."""


def package_modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name.endswith("__main__"):
            continue  # runs the command line when imported: `python -m cyclejepa` is tested as a command
        if name in OPTIONAL:
            try:
                __import__(OPTIONAL[name])
            except ImportError:
                continue
        names.append(name)
    return names


def test_the_package_has_modules_to_check():
    names = package_modules()
    assert "cyclejepa.phase.records" in names and "cyclejepa.cli" in names and len(names) > 100


@pytest.mark.slow  # a process per module: make test-slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child per module")
def test_every_module_imports_alone_in_a_fresh_interpreter():
    result = subprocess.run(
        [sys.executable, "-c", CHILDREN, "cyclejepa", *package_modules()], capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, f"modules that do not import alone:\n{result.stdout}\n{result.stderr[-3000:]}"


def test_a_module_that_imports_only_after_another_is_found(tmp_path):
    """The check itself: a two-module ring that imports in one order and fails in the other."""
    package = tmp_path / "ringpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("from ringpkg.second import B\nA = 1\n")
    (package / "second.py").write_text("B = 2\nfrom ringpkg.first import A\n")
    result = subprocess.run(
        [sys.executable, "-c", CHILDREN, "ringpkg", "ringpkg.first", "ringpkg.second"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 1
    assert "ringpkg.first:" in result.stdout and "ringpkg.second:" not in result.stdout
    assert "partially initialized module" in result.stdout
