"""Bounds on what a config may ask: finite hyperparameters, betas in [0, 1), a bounded number of
runs, windows of at least one token, and YAML bounded in bytes and expanded nodes before it is walked."""

import math
from pathlib import Path

import pytest

from cyclejepa.pipeline.checks import consistency_problems
from cyclejepa.config import MAX_RUNS, MAX_YAML_BYTES, MAX_YAML_NODES, ConfigError, load_config, parse_config


def _alias_bomb(levels: int, width: int) -> str:
    """A document whose last key expands to width**levels scalars through nested aliases."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines + [f"name: *a{levels - 1}"]) + "\n"


def test_an_alias_bomb_is_refused_before_it_is_walked(tmp_path: Path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(9, 9))  # 532 bytes, 9**9 = 387 M scalars expanded: a walk of minutes
    with pytest.raises(ConfigError, match=rf"{path}.*more than {MAX_YAML_NODES} nodes once its aliases are expanded"):
        load_config(path)


def test_aliases_below_the_cap_still_load(tmp_path: Path):
    path = tmp_path / "shared.yaml"
    path.write_text("evaluation: {steps: &s [10, 20]}\ngrid: {evaluation.steps: [*s, *s]}\n")
    assert load_config(path).grid == {"evaluation.steps": [[10, 20], [10, 20]]}


def test_a_long_list_is_refused_by_its_node_count(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("cyclejepa.config.MAX_YAML_NODES", 1000)
    path = tmp_path / "long.yaml"
    path.write_text("augmentations:\n" + "- {name: tone}\n" * 400)  # the list: 1 + 400 × 3 nodes
    with pytest.raises(ConfigError, match=r"more than 1000 nodes once its aliases are expanded \(1201 at line 2\)"):
        load_config(path)
    path.write_text("augmentations:\n" + "- {name: tone}\n" * 300)
    assert len(load_config(path).augmentations) == 300


def test_a_file_over_the_byte_cap_is_refused_before_it_is_read(tmp_path: Path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * MAX_YAML_BYTES + "\n")
    monkeypatch.setattr(Path, "read_text", lambda *a, **k: pytest.fail("the file was read"))
    with pytest.raises(ConfigError, match=rf"{MAX_YAML_BYTES + 3} bytes, more than the {MAX_YAML_BYTES}"):
        load_config(path)


def test_an_override_over_the_byte_cap_is_refused(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("{}\n")
    with pytest.raises(ConfigError, match="runs.seeds: value .* is not valid YAML .*more than"):
        load_config(path, ["runs.seeds=[" + "1," * MAX_YAML_BYTES + "1]"])


@pytest.mark.parametrize("key, value", [
    ("optimiser.lr", math.inf), ("optimiser.weight_decay", math.inf), ("optimiser.eps", math.inf),
    ("optimiser.min_lr", math.nan), ("optimiser.grad_clip", math.inf), ("objectives.regulariser.weight", math.inf),
    ("objectives.prediction.weight", math.nan),
])  # fmt: skip
def test_non_finite_hyperparameters_are_refused_by_key_path(key, value):
    section, *middle, leaf = key.split(".")
    raw: dict = {}
    node = raw.setdefault(section, {})
    for part in middle:
        node = node.setdefault(part, {})
    node[leaf] = value
    with pytest.raises(ConfigError, match=rf"{key}: Input should be a finite number"):
        parse_config(raw)


def test_an_arm_with_infinite_transport_weight_is_refused():
    with pytest.raises(ConfigError, match=r"runs.arms.0.transport_weight: Input should be a finite number"):
        parse_config({"runs": {"arms": [{"name": "a", "transport_weight": math.inf}]}})


def test_betas_outside_zero_one_are_refused():
    with pytest.raises(ConfigError) as caught:
        parse_config({"optimiser": {"betas": [math.nan, 2]}})
    assert "optimiser.betas.0: Input should be a finite number" in str(caught.value)
    assert "optimiser.betas.1: Input should be less than 1" in str(caught.value)
    assert parse_config({"optimiser": {"betas": [0.0, 0.999]}}).optimiser.betas == (0.0, 0.999)


def test_runs_are_bounded_across_arms_seeds_and_grid():
    seeds = list(range(MAX_RUNS // 2 + 1))  # 2 arms: MAX_RUNS + 2 runs
    with pytest.raises(ConfigError, match=rf"runs: 2 arms × {len(seeds)} seeds × 1 grid cells = {MAX_RUNS + 2} runs"):
        parse_config({"runs": {"seeds": seeds}})
    grid = {"optimiser.lr": [1e-4 * (i + 1) for i in range(129)]}  # 129 cells × 2 arms × 4 seeds = 1032
    with pytest.raises(ConfigError, match=r"runs: 2 arms × 4 seeds × 129 grid cells = 1032 runs"):
        parse_config({"grid": grid, "runs": {"seeds": [0, 1, 2, 3]}})


def test_a_million_seeds_are_refused_by_their_count():
    with pytest.raises(ConfigError, match=rf"runs.seeds: List should have at most {MAX_RUNS} items"):
        parse_config({"runs": {"seeds": list(range(10**6))}})


def test_a_window_of_less_than_one_token_is_refused():
    cfg = parse_config({"data": {"dataset": "synthetic", "window_s": 1e-9}})
    assert any(p.startswith("data.window_s: window_s 1e-09 s at fs 500 Hz is 5e-07 samples, less than one token of 40")
               for p in consistency_problems(cfg))  # fmt: skip


def test_cli_validate_refuses_the_alias_bomb_and_infinite_rates(tmp_path: Path):
    from typer.testing import CliRunner

    from cyclejepa.cli import app

    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(9, 9))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "nodes once its aliases are expanded" in result.output
    path.write_text("optimiser: {lr: .inf, betas: [.nan, 2]}\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "optimiser.lr: Input should be a finite number" in result.output
