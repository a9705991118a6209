"""Shared test fixtures."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("CYCLEJEPA_SHARED", Path(__file__).resolve().parents[2] / "shared"))
SAMPLES = SHARED / "data" / "physionet-samples"
EXAMPLE_PROVIDER = Path(__file__).resolve().parents[1] / "examples" / "custom_phase_provider.py"

# The tiny Winder model of the end-to-end tests (K = 16, one predictor block): config sections.
TINY_MODEL = {
    "symmetry": {"spectrum": "2x0+3x1+2x2+2x3"},
    "model": {
        "encoder": {"width": 16, "hidden": 32},
        "projector": {"hidden": 32, "dim": 16},
        "predictor": {"depth": 1, "heads": 2, "ffn": 32, "max_relative_position": 124},
    },
    "objectives": {"regulariser": {"options": {"num_directions": 16}}},
}


def synthetic_data(folder: Path, records: int, **settings) -> dict:
    """The ``data`` section of the end-to-end tests: ``records`` synthetic records written to
    ``folder / "corpus"``, folds 1-8 trained on, fold 9 scored; ``settings`` add or replace keys."""
    return {"root": str(folder / "corpus"), "dataset": "synthetic", "options": {"records": records},
            "train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9], **settings}  # fmt: skip


@pytest.fixture(scope="session", autouse=True)
def builtin_components():
    """Every built-in component registered before any test: a test that swaps a registry's entries
    (``monkeypatch.setattr(REG, "_entries", ...)``) would otherwise keep the registration of a
    built-in module first imported inside it, and the restored registry would lack that name."""
    from cyclejepa import registry

    registry.load_builtins()


@pytest.fixture
def physionet_samples() -> Path:
    """Folder of the real PhysioNet sample records in ../shared; skips the test when absent."""
    if not SAMPLES.is_dir():
        pytest.skip(f"real PhysioNet samples not found at {SAMPLES}")
    return SAMPLES


@pytest.fixture(scope="module")
def example():
    """The example provider module, imported once as a plugin would be (registers "resp-breath")."""
    name = "custom_phase_provider_example"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE_PROVIDER)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]
