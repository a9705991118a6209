"""examples/custom_phase_provider.py run as a script: a mistyped record path is an error, never
a silent switch to synthetic data."""

import os
import subprocess
import sys

from conftest import EXAMPLE_PROVIDER as EXAMPLE


def run(*args, shared):
    env = {**os.environ, "CYCLEJEPA_SHARED": str(shared), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(EXAMPLE), *map(str, args)], capture_output=True, text=True, env=env)


def test_a_mistyped_record_is_named_and_fails(tmp_path):
    result = run(tmp_path / "v102z", shared=tmp_path)
    assert result.returncode == 1
    assert f"record {tmp_path / 'v102z'} not found" in result.stderr and "synthetic" not in result.stdout


def test_without_a_record_the_synthetic_fallback_says_so(tmp_path):
    result = run(shared=tmp_path)  # no shared sample there
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("synthetic breathing (") and "v102s not found" in result.stdout
    assert "QC:             ok" in result.stdout
