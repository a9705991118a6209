"""Hostile command-line input, each refused or printed as written, run as users run the command
(a fresh interpreter): arm names that would leave the output folder, a worker count that
deadlocked the pool, unbounded hyperparameters, `synth` arguments out of range, and paths or
messages holding rich markup (``[/]``) or emoji codes (``:x:``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cyclejepa.config import MAX_WORKERS, ConfigError, parse_config


def cyclejepa(*words: str, cwd: Path) -> subprocess.CompletedProcess:
    """``cyclejepa WORDS`` in a fresh interpreter, in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "cyclejepa", *words], capture_output=True, text=True, cwd=cwd, timeout=120)


def synthetic_config(folder: Path) -> Path:
    """A config of the synthetic dataset (no corpus on disk: validate does not need one)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "c.yaml"
    path.write_text("output_dir: out\ndata: {dataset: synthetic}\n")
    return path


def test_arm_names_that_leave_the_output_folder_are_refused_by_key_path(tmp_path):
    arms = 'runs.arms=[{name: "../../escaped", transport_weight: 1.0}, {name: "", transport_weight: 0.0}]'
    done = cyclejepa("validate", str(synthetic_config(tmp_path)), "--set", arms, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "runs.arms.0.name: arm name '../../escaped' cannot name a folder inside output_dir" in done.stderr
    assert "runs.arms.1.name: an arm name may not be empty" in done.stderr
    assert not (tmp_path.parent.parent / "escaped-seed0").exists()


@pytest.mark.parametrize("name", ["a/b", "a\\b", "..", "a..b", ".hidden", "x" * 65, "a b", "a:b"])
def test_an_arm_name_unsafe_in_a_folder_name_is_refused(name):
    with pytest.raises(ConfigError, match=r"runs\.arms\.0\.name: .*arm name"):
        parse_config({"runs": {"arms": [{"name": name, "transport_weight": 1.0}]}})


@pytest.mark.parametrize("name", ["winder", "control", "λ-0.5", "arm_2+aug"])
def test_ordinary_arm_names_still_load(name):
    assert parse_config({"runs": {"arms": [{"name": name, "transport_weight": 1.0}]}}).runs.arms[0].name == name


@pytest.mark.parametrize(("key", "value", "bound"), [
    ("data.workers", 10_000, f"less than or equal to {MAX_WORKERS}"),
    ("runs.at_once", 10_000, f"less than or equal to {MAX_WORKERS}"),
    ("evaluation.at_once", 10_000, f"less than or equal to {MAX_WORKERS}"),
    ("optimiser.lr", 1e308, "less than or equal to 10000"),
    ("optimiser.weight_decay", 1e6, "less than or equal to 1"),
    ("optimiser.grad_clip", 1e300, "less than or equal to 1000000000000"),
    ("optimiser.eps", 10.0, "less than or equal to 1"),
    ("training.steps", 10**12, "less than or equal to 100000000"),
    ("training.batch_size", 10**9, "less than or equal to 65536"),
    ("evaluation.bootstrap", 10**9, "less than or equal to 1000000"),
])  # fmt: skip
def test_unbounded_numbers_are_refused_by_key_path(key, value, bound):
    section, leaf = key.split(".")
    with pytest.raises(ConfigError, match=rf"{key}\S*: Input should be {bound}"):
        parse_config({section: {leaf: value}})


def test_a_minimum_learning_rate_above_the_learning_rate_is_refused():
    with pytest.raises(ConfigError, match=r"optimiser: Value error, min_lr 0.01 is above lr 0.001|min_lr 0.01 is above lr 0.001"):
        parse_config({"optimiser": {"lr": 1e-3, "min_lr": 1e-2}})


def test_validate_refuses_ten_thousand_workers_before_prepare_can_start_them(tmp_path):
    done = cyclejepa("validate", str(synthetic_config(tmp_path)), "--set", "data.workers=10000", cwd=tmp_path)
    assert done.returncode == 2 and f"data.workers: Input should be less than or equal to {MAX_WORKERS}" in done.stderr


@pytest.mark.parametrize(("option", "value", "word"), [("--records", "1000000000", "--records"), ("--seed", "-1", "--seed")])
def test_synth_arguments_out_of_range_are_usage_errors_before_any_work(tmp_path, option, value, word):
    done = cyclejepa("synth", "--out", str(tmp_path / "corpus"), option, value, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"Invalid value for '{word}'" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "corpus").exists()


def test_paths_with_markup_and_emoji_codes_are_printed_as_written(tmp_path):
    folder = tmp_path / "a[/]b[red]:x:"
    config = synthetic_config(folder)
    valid = cyclejepa("validate", str(config), cwd=tmp_path)
    assert valid.returncode == 0, valid.stderr
    assert f"valid {config} (hash" in valid.stdout
    invalid = cyclejepa("validate", str(config), "--set", "data.workers=0", cwd=tmp_path)
    assert invalid.returncode == 2 and "MarkupError" not in invalid.stderr
    assert f"invalid config {config}: data.workers:" in invalid.stderr and "❌" not in invalid.stderr
