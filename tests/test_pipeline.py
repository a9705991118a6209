"""End to end on a small synthetic corpus: run → report, skipping finished stages, resuming a killed run."""

import json
from pathlib import Path

import pytest
import torch

from conftest import TINY_MODEL, synthetic_data
from cyclejepa import pipeline
from cyclejepa.config import parse_config
from cyclejepa.pipeline.reporting import report_experiment
from cyclejepa.training.checkpoint import load_checkpoint


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
    assert superclass_row.count("[") == 2  # a patient-clustered interval for each arm
    summary = json.loads((report.parent / "report.json").read_text())
    assert set(summary["headline"]) == {"winder", "control"}
    assert len(summary["grid"]) == 4  # 2 arms × 1 seed × 2 steps
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
    checkpoint's probe fitting then evaluation, then the figures of each step."""
    cfg, _ = experiment
    lines = (Path(cfg.output_dir) / "folds_used.jsonl").read_text().splitlines()
    train, evaluation = "data.train_folds", "data.eval_folds"
    checkpoint = [("probe fitting", train), ("evaluation", evaluation)]
    expected = [("normalisation statistics", train), *[("pre-training", train)] * 2,
                ("cohort table", train), ("cohort table", evaluation), *checkpoint * 4, *[("figures", train)] * 2]  # fmt: skip
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
    assert text.count("objectives.regulariser.weight=0.1") == 2 and text.count("objectives.regulariser.weight=0.3") == 2
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
    assert "step000002.json was changed after the evaluation wrote it" in refused.output.replace("\n", "")
    assert report.read_text() == before  # nothing written
    pipeline.evaluate_experiment(cfg, progress=False)  # an altered result is not kept: recomputed
    assert json.loads(path.read_text())["diagnostic"]["superclass"]["macro_auroc"]["point"] == honest

    del result["checksum"]  # a result without a checksum is reported, and marked loudly
    path.write_text(json.dumps(result, indent=1))
    assert (
        "**Warning: unverified results.** `winder-seed0-step000002.json` carry no checksum" in report_experiment(out).read_text()
    )
    pipeline.evaluate_experiment(cfg, progress=False)
    assert "unverified" not in report.read_text()

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
