"""Runner plan, sealed-fold guard and audit log, grids, stage skipping."""

import json

import pytest
from typer.testing import CliRunner

from cyclejepa import runner
from cyclejepa.cli import app
from cyclejepa.config import ConfigError, expand_grid, parse_config


def config(tmp_path, **sections):
    return parse_config({"output_dir": str(tmp_path / "out"), **sections})


def test_plan_covers_every_arm_and_seed_and_reachable_checkpoint(tmp_path):
    cfg = config(tmp_path, training={"steps": 7000, "checkpoint_every": 2500}, evaluation={"steps": [2500, 6000, 7000, 9000]})
    assert [p.name for p in runner.plan_runs(cfg)] == ["winder-seed0", "winder-seed1", "control-seed0", "control-seed1"]
    # 6000 is never checkpointed, 9000 is never reached; the final step is always written
    assert runner.evaluation_steps(cfg) == [2500, 7000]


def test_sealed_fold_needs_unseal_and_each_unsealing_is_audited(tmp_path):
    sealed = config(tmp_path)
    with pytest.raises(runner.SealedFoldError, match="--unseal"):
        runner.require_unsealed(sealed)
    with pytest.raises(runner.SealedFoldError):
        runner.audit_unseal(sealed)
    audit = tmp_path / "out" / "unseal_audit.jsonl"
    assert not audit.exists()
    unsealed = config(tmp_path, evaluation={"unseal": True})
    runner.audit_unseal(unsealed)
    runner.audit_unseal(unsealed)
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    assert len(entries) == 2
    assert entries[0]["config_hash"] == unsealed.config_hash() and entries[0]["eval_folds"] == [10]
    assert {"time", "git_revision"} <= entries[0].keys()
    development = config(tmp_path, data={"train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]})
    runner.audit_unseal(development)  # fold 9 is not sealed: nothing to audit
    assert len(audit.read_text().splitlines()) == 2


def test_dry_run_prints_the_plan_without_touching_anything(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"output_dir: {tmp_path / 'out'}\ntraining: {{steps: 10, checkpoint_every: 5}}\nevaluation: {{steps: [5, 10]}}\n")
    result = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--set", "runs.seeds=[4]"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "pre-train winder-seed4" in result.output and "pre-train control-seed4" in result.output
    assert "needs --unseal" in result.output
    assert not (tmp_path / "out").exists()


def test_grid_expands_every_combination_with_a_shared_cache(tmp_path):
    cfg = config(tmp_path, grid={"model.predictor.depth": [1, 2], "objectives.regulariser.weight": [0.1, 0.2, 0.3]})
    cells = expand_grid(cfg)
    assert len(cells) == 6
    combos = {(c.model.predictor.depth, c.objectives.regulariser.weight) for _, c in cells}
    assert combos == {(d, w) for d in (1, 2) for w in (0.1, 0.2, 0.3)}
    assert len({str(c.output_dir) for _, c in cells}) == 6
    assert {str(c.data.cache_dir) for _, c in cells} == {str(tmp_path / "out" / "cache")}


def test_grid_with_an_invalid_value_fails_at_load_with_its_key(tmp_path):
    with pytest.raises(ConfigError) as caught:
        config(tmp_path, grid={"model.predictor.dept": [1, 2]})
    assert "model.predictor.dept: unknown key" in str(caught.value) and "Did you mean 'depth'?" in str(caught.value)
