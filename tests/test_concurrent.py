"""Runs trained, and checkpoints evaluated, side by side in processes (`runs.at_once`,
`evaluation.at_once`) equal those done in turn in one process."""

import json

import numpy as np
import pytest

from cyclejepa import runner
from cyclejepa.config import parse_config
from cyclejepa.training.concurrent import RunJob, runs_at_once, train_concurrently
from test_training import TINY

TERMS = ("loss", "prediction", "regulariser", "transport", "grad_norm")


def tiny(out, corpus, at_once):
    """The training tests' tiny model on a 40-record synthetic corpus, both arms, one seed."""
    return parse_config({
        **TINY,
        "output_dir": str(out),
        "data": {"root": str(corpus), "dataset": "synthetic", "options": {"records": 40}, "cache_dir": str(corpus.parent / "cache"),
                 "train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]},
        "training": {**TINY["training"], "steps": 4, "checkpoint_every": 2, "device": "cpu"},
        "runs": {"seeds": [0], "at_once": at_once},
    })


def metrics(cfg, name):
    path = cfg.output_dir / "runs" / name / "metrics.jsonl"
    return np.array([[json.loads(line)[k] for k in TERMS] for line in path.read_text().splitlines()])


def test_concurrent_processes_train_what_the_sequential_runs_train(tmp_path):
    corpus = tmp_path / "corpus"
    side_by_side, in_turn = tiny(tmp_path / "a", corpus, 2), tiny(tmp_path / "b", corpus, 1)
    cache = runner.prepare(side_by_side, progress=False)
    for cfg in (side_by_side, in_turn):
        runner.pretrain_all(cfg, cache, runner.write_resolved_config(cfg), progress=False)
    for name in ("winder-seed0", "control-seed0"):
        assert (side_by_side.output_dir / "runs" / name / "train.log").exists()  # it ran in a process
        assert not (in_turn.output_dir / "runs" / name / "train.log").exists()
        assert runner._finished(side_by_side, runner.RunPlan(next(a for a in side_by_side.runs.arms if name.startswith(a.name)), 0))
        np.testing.assert_allclose(metrics(side_by_side, name), metrics(in_turn, name), rtol=1e-6)


def test_a_failed_process_is_named_with_the_end_of_its_log(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("training: {steps: banana}\n")
    job = RunJob("winder", 0, tmp_path / "runs" / "winder-seed0")
    with pytest.raises(RuntimeError, match=r"(?s)run winder-seed0 failed.*training.steps"):
        train_concurrently(config, [job, RunJob("control", 0, tmp_path / "runs" / "control-seed0")], 2, 4, progress=False)


def test_auto_trains_every_run_at_once_on_cuda_and_one_on_the_cpu():
    assert runs_at_once("auto", "cuda", 4) == 4 and runs_at_once("auto", "cpu", 4) == 1
    assert runs_at_once(8, "cuda", 3) == 3 and runs_at_once(2, "cpu", 0) == 1


def test_checkpoints_evaluated_in_processes_equal_those_evaluated_in_turn(tmp_path):
    import shutil

    from cyclejepa.evaluation.stage import evaluate_grid, evaluations_at_once

    corpus = tmp_path / "corpus"
    evaluation = {"steps": [2, 4], "bootstrap": 10, "anomaly_records": 4, "severities": [0.0, 2.0],
                  "umap": False, "eligible_min_positives": 1}
    raw = tiny(tmp_path / "a", corpus, 1).model_dump(mode="json")
    in_turn = parse_config({**raw, "evaluation": evaluation})
    side_by_side = parse_config({**raw, "output_dir": str(tmp_path / "b"), "evaluation": {**evaluation, "at_once": 2}})
    cache = runner.prepare(in_turn, progress=False)
    runner.pretrain_all(in_turn, cache, runner.write_resolved_config(in_turn), progress=False)
    shutil.copytree(tmp_path / "a" / "runs", tmp_path / "b" / "runs")
    plans, steps = runner.plan_runs(in_turn), [2, 4]
    assert evaluations_at_once(side_by_side.evaluation.at_once, "cpu", 4) == 2
    for cfg in (in_turn, side_by_side):
        evaluate_grid(cfg, cache, plans, steps, progress=False)
    for plan in plans:
        for step in steps:
            name = f"{plan.name}-step{step:06d}.json"
            a, b = (json.loads((tmp_path / d / "evaluation" / name).read_text()) for d in ("a", "b"))
            assert a["diagnostic"]["superclass"]["macro_auroc"]["point"] == pytest.approx(
                b["diagnostic"]["superclass"]["macro_auroc"]["point"], abs=1e-6)
            assert a["mechanism"]["true"]["gain_fraction"] == pytest.approx(b["mechanism"]["true"]["gain_fraction"], abs=1e-6)
    assert (tmp_path / "b" / "evaluation" / "hr-strata-step000004.json").exists()
