"""The ``>>>`` examples of the public docstrings run as written (every module that has one)."""

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cyclejepa"
WITH_EXAMPLES = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py")
    if ">>> " in path.read_text()
)


def test_the_main_public_docstrings_have_examples():
    for module in (
        "cyclejepa.data.datasets",
        "cyclejepa.data.wfdb_format",
        "cyclejepa.symmetry.spectrum",
        "cyclejepa.symmetry.groups",
    ):
        assert module in WITH_EXAMPLES


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
