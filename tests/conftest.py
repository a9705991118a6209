"""Shared test fixtures."""

import os
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("CYCLEJEPA_SHARED", Path(__file__).resolve().parents[2] / "shared"))
SAMPLES = SHARED / "data" / "physionet-samples"


@pytest.fixture
def physionet_samples() -> Path:
    """Folder of the real PhysioNet sample records in ../shared; skips the test when absent."""
    if not SAMPLES.is_dir():
        pytest.skip(f"real PhysioNet samples not found at {SAMPLES}")
    return SAMPLES
