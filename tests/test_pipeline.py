"""End to end on a small synthetic corpus: run → report, skipping finished stages, resuming a killed run."""

import json
from pathlib import Path

import pytest
import torch

from conftest import TINY_MODEL, synthetic_data
from cyclejepa import pipeline
from cyclejepa.config import parse_config
from cyclejepa.evaluation.integrity import ResultAltered
from cyclejepa.pipeline.reporting import report_experiment
from cyclejepa.training.checkpoint import load_checkpoint


pytestmark = pytest.mark.xdist_group("pipeline")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipeline")
    cfg = parse_config(
        {
            "name": "tiny",
            "output_dir": str(out / "run"),
            "data": synthetic_data(out, 150),
            **TINY_MODEL,
            "training": {"steps": 4, "batch_size": 8, "checkpoint_every": 2},
            "runs": {"seeds": [0]},
            "evaluation": {
                "steps": [2, 4],
                "bootstrap": 20,
                "anomaly_records": 6,
                "severities": [0.0, 2.0],
                "umap": False,
                "eligible_min_positives": 1,
                "probe_c": 1.0,
            },
        }
    )
    report = pipeline.run_experiment(cfg, progress=False)
    return cfg, report


def test_run_writes_every_section_of_the_report(experiment):
    cfg, report = experiment
    text = report.read_text()
    for heading in (
        "## Bottom line",
        "## Full grid",
        "## Per-class AUROC",
        "## Mechanism validity",
        "## Single-lead zeroing (signed Δ superclass macro-AUROC)",
        "## Orbit-subspace coherence",
        "## Anomaly battery",
        "## Heart-rate stratified superclass AUROC (post hoc)",
        "## Figures",
        "## Protocol",
        "The sealed fold was not touched",
    ):
        assert heading in text, heading
    # PTB-XL's layout keeps the paper's names
    assert "| arm | seed | step | superclass AUROC | eligible-subclass AUROC | gain fraction | G1 | mean Δ lead dropout |" in text
    assert "| Mean signed Δ macro-AUROC, single-lead dropout ↑ |" in text and "Not run" not in text
    superclass_row = next(line for line in text.splitlines() if line.startswith("| Superclass macro-AUROC"))
    assert superclass_row.count("[") == 3  # a patient-clustered interval for each arm and the random baseline
    summary = json.loads((report.parent / "report.json").read_text())
    assert set(summary["headline"]) == {"winder", "control", "random"}
    assert len(summary["grid"]) == 5  # 2 arms × 1 seed × 2 steps, and the seed's random baseline
    assert summary["figures"] == ["phase-ring-step000002.png", "phase-ring-step000004.png"]
    result = json.loads((report.parents[1] / "evaluation" / "winder-seed0-step000004.json").read_text())
    first = json.loads((report.parents[1] / "evaluation" / "winder-seed0-step000002.json").read_text())
    headline = summary["headline"]["winder"]["Superclass macro-AUROC, 5 classes ↑"]
    assert headline["point"] == first["diagnostic"]["superclass"]["macro_auroc"]["point"]  # the report reads the saved cell
    assert set(result["robustness"]["delta"]) == {"I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6"}
    assert {c["family"] for c in result["anomaly"]} == set(cfg.evaluation.families)


def test_the_fold_log_holds_every_use_in_the_order_of_the_reads(experiment):
    """`folds_used.jsonl` of a run (2 arms × 1 seed × steps 2 and 4, with labels): the
    normalisation statistics, each run's pre-training, the cohort table's two keys, each
    checkpoint's (and the random baseline's) probe fitting then evaluation, then the figures of
    each step."""
    cfg, _ = experiment
    lines = (Path(cfg.output_dir) / "folds_used.jsonl").read_text().splitlines()
    train, evaluation = "data.train_folds", "data.eval_folds"
    checkpoint = [("probe fitting", train), ("evaluation", evaluation)]
    expected = [("normalisation statistics", train), *[("pre-training", train)] * 2,
                ("cohort table", train), ("cohort table", evaluation), *checkpoint * 5, *[("figures", train)] * 2]  # fmt: skip
    assert [(entry["stage"], entry["key"]) for entry in map(json.loads, lines)] == expected


def test_rerun_skips_finished_stages_and_report_rebuilds_from_saved_results(experiment):
    cfg, report = experiment
    out = cfg.output_dir
    watched = [out / "runs" / "winder-seed0" / "metrics.jsonl", out / "evaluation" / "control-seed0-step000004.json"]
    before = [p.stat().st_mtime_ns for p in watched]
    pipeline.run_experiment(cfg, progress=False)
    assert [p.stat().st_mtime_ns for p in watched] == before
    text = report.read_text()
    report.unlink()
    assert report_experiment(out).read_text() == text


def test_killed_pretraining_resumes_to_the_same_weights(experiment, caplog):
    cfg, _ = experiment
    plan = pipeline.plan_runs(cfg)[0]
    directory = plan.directory
    finished = load_checkpoint(directory / "checkpoints" / "step_000004.pt")["model"]
    # simulate a kill after the step-2 checkpoint
    (directory / "done.json").unlink()
    (directory / "checkpoints" / "step_000004.pt").unlink()
    from cyclejepa.data.cache import PreparedCache

    with caplog.at_level("INFO", logger="cyclejepa.pipeline.pretraining"):
        pipeline.pretrain(cfg, PreparedCache(pipeline.cache_dir(cfg)), plan, progress=False)
    assert f"{directory.name}: resuming from step 2" in caplog.text
    resumed = load_checkpoint(directory / "checkpoints" / "step_000004.pt")["model"]
    assert all(torch.equal(finished[name], resumed[name]) for name in finished)
    steps = [json.loads(line)["step"] for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_evaluate_recomputes_only_what_is_missing_and_needs_checkpoints(experiment, tmp_path):
    cfg, report = experiment
    evaluation = cfg.output_dir / "evaluation"
    kept = evaluation / "winder-seed0-step000004.json"
    before = kept.stat().st_mtime_ns
    (evaluation / "control-seed0-step000002.json").unlink()
    assert pipeline.evaluate_experiment(cfg, progress=False) == report
    assert (evaluation / "control-seed0-step000002.json").exists()
    assert kept.stat().st_mtime_ns == before
    empty = cfg.model_copy(update={"output_dir": tmp_path / "nothing"})
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        pipeline.evaluate_experiment(empty, progress=False)


def test_a_grid_runs_every_cell_and_summarises_them(experiment, tmp_path):
    cfg, _ = experiment
    raw = cfg.model_dump(mode="json")
    raw.update(output_dir=str(tmp_path / "grid"), grid={"objectives.regulariser.weight": [0.1, 0.3]})
    raw["data"]["cache_dir"] = str(pipeline.cache_dir(cfg))
    raw["training"]["steps"], raw["evaluation"]["steps"] = 2, [2]
    summary = pipeline.run_experiment(parse_config(raw), progress=False)
    text = summary.read_text()
    # each cell's two arms and its random baseline
    assert text.count("objectives.regulariser.weight=0.1") == 3 and text.count("objectives.regulariser.weight=0.3") == 3
    assert (tmp_path / "grid" / "grid" / "g01" / "report" / "report.md").exists()


def test_report_refuses_an_altered_result_and_evaluate_recomputes_it(experiment):
    from typer.testing import CliRunner

    from cyclejepa.cli import app
    from cyclejepa.training.checkpoint import save_checkpoint

    cfg, report = experiment
    out = cfg.output_dir
    path = out / "evaluation" / "winder-seed0-step000002.json"
    result = json.loads(path.read_text())
    assert result["checkpoint"]["path"] == "runs/winder-seed0/checkpoints/step_000002.pt"
    honest = result["diagnostic"]["superclass"]["macro_auroc"]["point"]
    result["diagnostic"]["superclass"]["macro_auroc"]["point"] = 0.99  # an edited AUROC
    path.write_text(json.dumps(result, indent=1))
    before = report.read_text()
    refused = CliRunner().invoke(app, ["report", str(out)])
    assert refused.exit_code == 1
    assert "step000002.json was changed after it was written" in refused.output.replace("\n", "")
    assert report.read_text() == before  # nothing written
    pipeline.evaluate_experiment(cfg, progress=False)  # an altered result is not kept: recomputed
    assert json.loads(path.read_text())["diagnostic"]["superclass"]["macro_auroc"]["point"] == honest

    del result["checksum"]  # a result without a checksum is refused as an altered one
    path.write_text(json.dumps(result, indent=1))
    with pytest.raises(ResultAltered, match="winder-seed0-step000002.json was changed after it was written"):
        report_experiment(out)
    pipeline.evaluate_experiment(cfg, progress=False)
    assert json.loads(path.read_text())["checksum"]

    checkpoint = out / result["checkpoint"]["path"]
    saved = checkpoint.read_bytes()
    state = load_checkpoint(checkpoint)
    state["model"] = {name: tensor + 1e-3 if tensor.is_floating_point() else tensor for name, tensor in state["model"].items()}
    save_checkpoint(state, checkpoint)  # other weights under the evaluated checkpoint's name
    with pytest.raises(ValueError, match="computed from other weights than those in .*step_000002.pt"):
        report_experiment(out)
    checkpoint.write_bytes(saved)
    assert json.loads((report.parent / "report.json").read_text())["checksums"]["winder-seed0-step000002.json"]


def run_copy(cfg, tmp_path, **evaluation):
    """A copy of the experiment's run directory (its cache shared) and its config, with
    ``evaluation`` settings changed."""
    import shutil

    shutil.copytree(cfg.output_dir, tmp_path / "run", ignore=shutil.ignore_patterns("cache"))
    raw = cfg.model_dump(mode="json")
    raw["output_dir"], raw["data"]["cache_dir"] = str(tmp_path / "run"), str(pipeline.cache_dir(cfg))
    raw["evaluation"].update(evaluation)
    return parse_config(raw)


def test_a_tampered_evaluation_npz_is_refused_by_name_and_recomputed(experiment, tmp_path):
    import numpy as np

    from cyclejepa.data.cache import PreparedCache
    from cyclejepa.evaluation.integrity import ResultAltered
    from cyclejepa.pipeline.evaluation import compare_runs, describe_data, evaluation_hash, strata_not_applying

    cfg = run_copy(experiment[0], tmp_path)
    path = cfg.output_dir / "evaluation" / "winder-seed0-step000004.npz"
    with np.load(path) as saved:
        honest = dict(saved)
    np.savez(path, **{**honest, "heart_rate": honest["heart_rate"] + 10.0})  # edited heart rates
    cache = PreparedCache(pipeline.cache_dir(cfg))
    strata = strata_not_applying(cfg, cache, describe_data(cfg, cache))
    with pytest.raises(ResultAltered, match=f"{path} cannot be trusted: its bytes do not match the digest its result records"):
        compare_runs(
            cfg,
            cache,
            pipeline.plan_runs(cfg),
            4,
            torch.device("cpu"),
            pipeline.objective_spec(cfg),
            strata,
            evaluation_hash(cfg),
        )
    pipeline.evaluate_experiment(cfg, progress=False)  # not current: evaluated again
    with np.load(path) as again:
        np.testing.assert_array_equal(again["heart_rate"], honest["heart_rate"])


def test_report_refuses_results_of_an_evaluation_stopped_part_way_with_other_settings(experiment, tmp_path, monkeypatch):
    from cyclejepa.evaluation.report import MixedEvaluations
    from cyclejepa.pipeline import evaluation as stage

    cfg = run_copy(experiment[0], tmp_path, bootstrap=30)
    evaluate_cell, done = stage.evaluate_run_step, []

    def stopped_after_one(*args, **kwargs):
        if done:
            raise KeyboardInterrupt  # killed after the first cell of the new evaluation
        done.append(evaluate_cell(*args, **kwargs))

    monkeypatch.setattr(stage, "evaluate_run_step", stopped_after_one)
    with pytest.raises(KeyboardInterrupt):
        pipeline.evaluate_experiment(cfg, progress=False)
    with pytest.raises(
        MixedEvaluations,
        match="not from the settings of the last evaluation .*control-seed0-step000002.json \\(evaluation_hash [0-9a-f]+\\)",
    ) as refused:
        report_experiment(cfg.output_dir)
    assert "winder-seed0-step000002.json" not in str(refused.value)  # the one cell the new evaluation finished
    assert "hr-strata" in str(refused.value)
    monkeypatch.setattr(stage, "evaluate_run_step", evaluate_cell)
    pipeline.evaluate_experiment(cfg, progress=False)
    results = [json.loads(p.read_text()) for p in (cfg.output_dir / "evaluation").glob("*-seed*-step*.json")]
    assert {r["diagnostic"]["superclass"]["macro_auroc"]["replicates"] for r in results} == {30}


def test_the_random_baseline_is_the_trainers_step_zero_weights(experiment):
    """The random arm of a seed is evaluated from exactly the weights the trainer starts that
    seed's runs from (either arm's: they differ only in λ_trans), and its result records their digest."""
    from cyclejepa.data.cache import PreparedCache
    from cyclejepa.evaluation.integrity import state_digest
    from cyclejepa.pipeline.pretraining import training_spec, training_phases
    from cyclejepa.training import Trainer, initial_objective

    cfg, report = experiment
    cache = PreparedCache(pipeline.cache_dir(cfg))
    rows = cache.select(cfg.data.train_folds)
    untrained = initial_objective(pipeline.objective_spec(cfg), 0).state_dict()
    for arm in cfg.runs.arms:
        spec = training_spec(cfg, cfg.output_dir / "unused", seed=0, transport_weight=arm.transport_weight)
        trainer = Trainer(spec, cache.signals[rows], training_phases(cache, rows, "centre"), model_fs=cache.model_fs)
        step_zero = trainer.objective.state_dict()
        assert trainer.step == 0 and list(step_zero) == list(untrained)
        for name, tensor in step_zero.items():
            torch.testing.assert_close(tensor, untrained[name], rtol=0, atol=0, msg=name)
    other_seed = initial_objective(pipeline.objective_spec(cfg), 1).state_dict()
    assert any(not torch.equal(other_seed[name], untrained[name]) for name in untrained)
    result = json.loads((report.parents[1] / "evaluation" / "random-seed0-step000000.json").read_text())
    assert result["untrained"] and result["step"] == 0 and result["weights"]["model_sha256"] == state_digest(untrained)


def test_the_bottom_line_has_a_random_column_and_says_it_costs_no_training(experiment):
    _, report = experiment
    text = report.read_text()
    header = next(line for line in text.splitlines() if line.startswith("| Metric |"))
    assert header == "| Metric | winder (λ_trans=1) | control (λ_trans=0) | random (untrained) |"
    assert "frozen, probed and measured as the trained arms are. It costs no training" in text
    assert "| random | 0 | 0 (untrained) |" in text  # its row of the full grid


def _arm_cells(text: str, arms: int) -> list[list[str]]:
    """The first ``arms`` figure cells of every bottom-line and full-grid row, bold marks removed."""
    lines = text.split("## Bottom line")[1].split("## Per-class")[0].splitlines()
    rows = [[c.strip() for c in line.replace("**", "").strip().strip("|").split("|")] for line in lines if line.startswith("| ")]
    return [row[: arms + 1] for row in rows if row[0] != "random"]


def test_the_arms_figures_are_the_same_with_the_random_baseline_or_without(experiment, tmp_path):
    """The arms evaluated afresh with the random baseline off give the same bottom-line and grid
    cells as the run with it on: the extra arm shifts no random stream of theirs. Turned off, the
    report leaves out the baseline's results of an earlier evaluation."""
    import shutil

    cfg = run_copy(experiment[0], tmp_path, random_baseline=False)
    kept = pipeline.evaluate_experiment(cfg, progress=False).read_text()  # nothing to compute: every result is current
    assert (cfg.output_dir / "evaluation" / "random-seed0-step000000.json").exists()
    assert "random" not in kept.split("## Protocol")[0]  # turned off, the baseline's earlier results are not shown
    shutil.rmtree(cfg.output_dir / "evaluation")
    shutil.rmtree(cfg.output_dir / "report")
    without = pipeline.evaluate_experiment(cfg, progress=False).read_text()
    with_random = experiment[1].read_text()
    assert "random" not in without.split("## Protocol")[0]
    assert "random (untrained)" in with_random
    assert _arm_cells(without, 2) == _arm_cells(with_random, 2)
    assert len(_arm_cells(without, 2)) > 20  # every row of both tables was compared


def test_a_bottom_line_of_several_seeds_gives_the_mean_and_sd_and_g1_passes_in_k_of_n(experiment):
    """Two seeds: each figure the mean ± SD over the seeds (checked against `statistics`), G1 as
    "passes in k of n seeds"; one seed keeps the single-seed format."""
    import copy
    import statistics

    from cyclejepa.evaluation.report import bottom_line_markdown
    from cyclejepa.evaluation.results import CheckpointResult

    evaluation = experiment[0].output_dir / "evaluation"
    first = [json.loads((evaluation / f"{name}.json").read_text())
             for name in ("winder-seed0-step000002", "control-seed0-step000002", "random-seed0-step000000")]  # fmt: skip
    second = copy.deepcopy(first)
    for result, shift in zip(second, (0.1, -0.05, 0.02), strict=True):
        result["seed"] = 1
        result["diagnostic"]["superclass"]["macro_auroc"]["point"] += shift
        result["geometry"]["amplitude"] *= 2
        result["mechanism"]["passed"] = not result["mechanism"]["passed"]
    typed = {id(r): CheckpointResult.model_validate(r) for r in [*first, *second]}
    text = bottom_line_markdown([typed[id(r)] for r in first], [[typed[id(r)] for r in cell] for cell in (first, second)])
    row = next(line for line in text.splitlines() if line.startswith("| Superclass macro-AUROC"))
    for a, b in zip(first, second, strict=True):
        points = [a["diagnostic"]["superclass"]["macro_auroc"]["point"], b["diagnostic"]["superclass"]["macro_auroc"]["point"]]
        assert f"{statistics.mean(points):.4f} ± {statistics.stdev(points):.4f} (2 seeds)" in row
    assert "[" not in row  # the intervals are per seed: in the detail tables, not in a mean
    g1 = next(line for line in text.splitlines() if line.startswith("| G1 shuffled-φ gate"))
    assert g1.count("passes in 1 of 2 seeds") == 3  # each column passed in exactly one of its two seeds
    assert "mean ± SD (sample standard deviation) over the 2 seeds" in text
    single = bottom_line_markdown([typed[id(r)] for r in first], [[typed[id(r)] for r in first]])
    assert " ± " not in single and "(2 seeds)" not in single and "[" in single
