"""Runner plan, sealed-fold guard and audit log, grids, stage skipping."""

import json

import pytest
from typer.testing import CliRunner

from cyclejepa import pipeline
from cyclejepa.cli import app
from cyclejepa.config import ConfigError, expand_grid, parse_config
from cyclejepa.grid import grid_cells


def config(tmp_path, **sections):
    return parse_config({"output_dir": str(tmp_path / "out"), **sections})


def test_plan_covers_every_arm_and_seed_and_refuses_steps_never_checkpointed(tmp_path):
    cfg = config(tmp_path, training={"steps": 7000, "checkpoint_every": 2500}, evaluation={"steps": [2500, 7000]})
    assert [p.name for p in pipeline.plan_runs(cfg)] == ["winder-seed0", "winder-seed1", "control-seed0", "control-seed1"]
    assert pipeline.evaluation_steps(cfg) == [2500, 7000]  # the final step is always written
    bad = config(tmp_path, training={"steps": 7000, "checkpoint_every": 2500}, evaluation={"steps": [2500, 6000, 7000, 9000]})
    with pytest.raises(ConfigError) as caught:
        pipeline.preflight(bad)
    problems = caught.value.problems
    assert len(problems) == 2
    assert problems[0].startswith("evaluation.steps: step 6000 is never checkpointed") and "Did you mean 5000?" in problems[0]
    assert problems[1] == "evaluation.steps: 9000 is beyond training.steps (7000)"


def test_dry_run_prints_the_plan_without_touching_anything(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        f"output_dir: {tmp_path / 'out'}\ntraining: {{steps: 10, checkpoint_every: 5}}\nevaluation: {{steps: [5, 10]}}\n"
    )
    result = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--set", "runs.seeds=[4]"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "pre-train winder-seed4" in result.output and "pre-train control-seed4" in result.output
    assert "evaluate the random baseline of seeds [4]: each seed's untrained weights, no training" in result.output
    assert "needs --unseal" in result.output
    assert not (tmp_path / "out").exists()


def test_describe_plan_runs_the_preflight_of_run_experiment(tmp_path):
    """`describe_plan` (`run --dry-run`) refuses, before it lists anything or writes anything,
    the config that `run_experiment` refuses, with the same problems."""
    bad = config(tmp_path, training={"steps": 10, "checkpoint_every": 5}, evaluation={"steps": [5, 7, 10]})
    with pytest.raises(ConfigError) as planned:
        pipeline.describe_plan(bad)
    with pytest.raises(ConfigError) as run:
        pipeline.run_experiment(bad, progress=False)
    assert planned.value.problems == run.value.problems
    assert planned.value.problems[0].startswith("evaluation.steps: step 7 is never checkpointed")
    assert not (tmp_path / "out").exists()


def test_grid_expands_every_combination_with_a_shared_cache(tmp_path):
    cfg = config(tmp_path, grid={"model.predictor.depth": [1, 2], "objectives.regulariser.weight": [0.1, 0.2, 0.3]})
    cells = expand_grid(cfg)
    assert len(cells) == 6
    combos = {(c.model.predictor.depth, c.objectives.regulariser.weight) for _, c in cells}
    assert combos == {(d, w) for d in (1, 2) for w in (0.1, 0.2, 0.3)}
    assert len({str(c.output_dir) for _, c in cells}) == 6
    assert {str(c.data.cache_dir) for _, c in cells} == {str(tmp_path / "out" / "cache")}


def test_dry_run_of_a_grid_lists_each_cell_under_its_label(tmp_path):
    """`describe_plan` of a grid: the cells that `preflight` checked, each cell's plan under its
    label in its own folder, then the grid summary; nothing written."""
    cfg = config(tmp_path, training={"steps": 10, "checkpoint_every": 5}, evaluation={"steps": [5, 10]},
                 grid={"model.predictor.depth": [1, 2]})  # fmt: skip
    lines = pipeline.describe_plan(cfg)
    assert lines[0] == "grid of 2 experiments over model.predictor.depth:"
    assert [line for line in lines if " output: " in line] == [
        f"[g00] output: {tmp_path / 'out' / 'grid' / 'g00'}",
        f"[g01] output: {tmp_path / 'out' / 'grid' / 'g01'}",
    ]
    assert lines[-1] == f"grid summary: {tmp_path / 'out' / 'grid_summary.md'}"
    assert not (tmp_path / "out").exists()


def test_grid_cells_leave_out_the_grid_and_the_keys_derived_from_the_data(tmp_path):
    """A cell is the config less its grid and less the keys derived from the data (derived
    again for the cell), with the cell's own values and folders."""
    cfg = config(tmp_path, grid={"optimiser.lr": [0.001, 0.01]})
    assert cfg._derived  # the rates and the window's keys, filled from the dataset's facts
    cells = grid_cells(cfg.model_dump(mode="json"), cfg._derived)
    assert [cell.label for cell in cells] == ["g00", "g01"]
    for cell in cells:
        assert "grid" not in cell.base
        for key in cfg._derived:
            *parents, leaf = key.split(".")
            node = cell.base
            for part in parents:
                node = node[part]
            assert leaf not in node, key
    assert cells[1].overrides == [
        "optimiser.lr=0.01", f"output_dir={json.dumps(str(tmp_path / 'out' / 'grid' / 'g01'))}",
        f"data.cache_dir={json.dumps(str(tmp_path / 'out' / 'cache'))}",
    ]  # fmt: skip


def test_grid_with_an_invalid_value_fails_at_load_with_its_key(tmp_path):
    with pytest.raises(ConfigError) as caught:
        config(tmp_path, grid={"model.predictor.dept": [1, 2]})
    assert "model.predictor.dept: unknown key" in str(caught.value) and "Did you mean 'depth'?" in str(caught.value)


@pytest.mark.parametrize(("dataset", "tasks", "label", "aurocs"), [
    ("ptbxl", ["superclass", "subclass-eligible", "subclass-all"], "Superclass macro-AUROC, 5 classes ↑", ("0.7000", "0.8000")),
    ("synthetic", ["superclass", "subclass-eligible", "subclass-all"], "Superclass macro-AUROC, 5 classes ↑", ("0.7000", "0.8000")),
    ("challenge2021", ["superclass"], "`superclass` macro-AUROC ↑", ("0.7000", "0.8000")),  # PTB-XL's title is PTB-XL's
    ("npz-ecg", ["rhythm"], "`rhythm` macro-AUROC ↑", ("0.7000", "0.8000")),  # not registered here
    ("ptbxl", [], None, ("–", "–")),  # an unlabelled dataset: no probe row
])  # fmt: skip
def test_grid_summary_shows_each_cells_headline_task_auroc(tmp_path, dataset, tasks, label, aurocs):
    from cyclejepa.evaluation.bootstrap import BootstrapCI
    from cyclejepa.evaluation.probe import ProbeResult
    from cyclejepa.evaluation.report import headline_rows
    from cyclejepa.evaluation.results import CheckpointResult, ReportResult, Validity, write_result
    from cyclejepa.evaluation.spec import DataDescription
    from cyclejepa.pipeline.reporting import write_grid_summary

    def probe(task, point):
        return ProbeResult(task, [], {}, [], BootstrapCI(point, 0.0, 1.0, 10, 0.95), 1.0, {}, {})

    data = DataDescription(dataset, True, ("I",), ("mV",), "lead", "ecg", "beat")
    enough = Validity(collapsed=False, token_similarity=0.1, collapse_similarity=0.9, degenerate_probes={}, too_few=None,
                      meaningful=True)  # enough data: the figures print as numbers  # fmt: skip
    cells = []
    for i, weight in enumerate([0.1, 0.2]):
        cfg = config(tmp_path / f"cell{i}", objectives={"regulariser": {"weight": weight}})
        diagnostic = {task: probe(task, 0.7 + i / 10 + k / 100) for k, task in enumerate(tasks)}
        result = CheckpointResult.model_construct(diagnostic=diagnostic, data=data)
        rows = headline_rows([result])
        probes = [row for row in rows if row.section == "Diagnostic accuracy"]
        assert [row.label for row in probes[:1]] == ([label] if label else [])
        headline = {row.label: {"point": row.value(result)} for row in probes}
        headline |= {"Transport gain fraction ↑": 0.5 + i, "G1 shuffled-φ gate": "Pass"}
        report = ReportResult(headline={"winder": headline}, headline_cell={"seed": 0, "step": 2}, bottom_line_seeds=[0],
                              validity={"winder": enough}, phase_qc_flags=[], probe_rows=[row.label for row in probes],
                              grid=[], figures=[], checksums={})  # fmt: skip
        write_result(tmp_path / f"cell{i}" / "out" / "report" / "report.json", report)
        cells.append((f"c{i}", cfg))
    text = write_grid_summary(tmp_path, cells).read_text()
    assert f"| c0 | objectives.regulariser.weight=0.1 | winder | {aurocs[0]} | 0.5000 | Pass |" in text
    assert f"| c1 | objectives.regulariser.weight=0.2 | winder | {aurocs[1]} | 1.5000 | Pass |" in text


def test_anomaly_section_says_why_nothing_ran():
    from cyclejepa.evaluation.report import anomaly_markdown
    from cyclejepa.evaluation.results import CheckpointResult

    skipped = CheckpointResult.model_construct(
        arm="winder", anomaly=[], anomaly_skipped={"lead-dropout": "needs at least 2 channels; the records have 1"}
    )
    text = anomaly_markdown([skipped])
    assert "**winder**: no family applies to this data." in text and "lead-dropout: needs at least 2 channels" in text
    torus = CheckpointResult.model_construct(arm="winder", anomaly=[], not_run={"anomaly": "a torus of 2 coordinates"})
    assert anomaly_markdown([torus]).endswith("Not run: a torus of 2 coordinates.")


def test_an_arm_named_random_is_refused_while_the_random_baseline_is_on(tmp_path):
    """The random baseline's results are the arm ``random``: an arm of that name is refused by
    name before any work, and allowed with the baseline off."""
    arms = [{"name": "random", "transport_weight": 1.0}]
    with pytest.raises(ConfigError, match="arm name 'random' is the random baseline's"):
        pipeline.preflight(config(tmp_path, runs={"arms": arms}))
    from cyclejepa.pipeline.checks import consistency_problems

    off = config(tmp_path, runs={"arms": arms}, evaluation={"random_baseline": False})
    assert not [problem for problem in consistency_problems(off) if "'random'" in problem]
