"""Runs trained, and checkpoints evaluated, side by side in processes (`runs.at_once`,
`evaluation.at_once`) equal those done in turn in one process; the processes share the GPUs and
the cores out."""

import json
import os
import subprocess

import numpy as np
import pytest
import torch

from cyclejepa import pipeline
from cyclejepa.config import parse_config
from cyclejepa.devices import THREAD_VARIABLES, child_gpus
from cyclejepa.training import concurrent
from cyclejepa.training.concurrent import RunJob, runs_at_once, train_concurrently
from test_training import TINY

TERMS = ("loss", "prediction", "regulariser", "transport", "grad_norm")


def tiny(out, corpus, at_once):
    """The training tests' tiny model on a 40-record synthetic corpus, both arms, one seed."""
    return parse_config(
        {
            **TINY,
            "output_dir": str(out),
            "data": {
                "root": str(corpus),
                "dataset": "synthetic",
                "options": {"records": 40},
                "cache_dir": str(corpus.parent / "cache"),
                "train_folds": [1, 2, 3, 4, 5, 6, 7, 8],
                "eval_folds": [9],
            },
            "training": {**TINY["training"], "steps": 4, "checkpoint_every": 2, "device": "cpu"},
            "evaluation": {"steps": [2, 4]},  # checkpointed steps: `cyclejepa train` preflights the config
            "runs": {"seeds": [0], "at_once": at_once},
        }
    )


def metrics(cfg, name):
    path = cfg.output_dir / "runs" / name / "metrics.jsonl"
    return np.array([[json.loads(line)[k] for k in TERMS] for line in path.read_text().splitlines()])


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_concurrent_processes_train_what_the_sequential_runs_train(tmp_path):
    corpus = tmp_path / "corpus"
    side_by_side, in_turn = tiny(tmp_path / "a", corpus, 2), tiny(tmp_path / "b", corpus, 1)
    cache = pipeline.prepare(side_by_side, progress=False)
    for cfg in (side_by_side, in_turn):
        pipeline.pretrain_all(cfg, cache, pipeline.write_resolved_config(cfg), pipeline.plan_runs(cfg), progress=False)
    for name in ("winder-seed0", "control-seed0"):
        assert (side_by_side.output_dir / "runs" / name / "train.log").exists()  # it ran in a process
        assert not (in_turn.output_dir / "runs" / name / "train.log").exists()
        assert pipeline.run_plan(side_by_side, next(a for a in side_by_side.runs.arms if name.startswith(a.name)), 0).finished()
        np.testing.assert_allclose(metrics(side_by_side, name), metrics(in_turn, name), rtol=1e-6)


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_a_failed_process_is_named_with_the_end_of_its_log(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("training: {steps: banana}\n")
    job = RunJob("winder", 0, tmp_path / "runs" / "winder-seed0")
    with pytest.raises(RuntimeError, match=r"(?s)run winder-seed0 failed.*training.steps"):
        train_concurrently(config, [job, RunJob("control", 0, tmp_path / "runs" / "control-seed0")], 2, 4, progress=False)


def test_auto_trains_every_run_at_once_on_cuda_and_one_on_the_cpu():
    assert runs_at_once("auto", "cuda", 4) == 4 and runs_at_once("auto", "cpu", 4) == 1
    assert runs_at_once(8, "cuda", 3) == 3 and runs_at_once(2, "cpu", 0) == 1


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_checkpoints_evaluated_in_processes_equal_those_evaluated_in_turn(tmp_path):
    import shutil

    from cyclejepa.evaluation.checkpoint_evaluation import evaluations_at_once
    from cyclejepa.pipeline.evaluation import evaluate_grid

    corpus = tmp_path / "corpus"
    evaluation = {
        "steps": [2, 4],
        "bootstrap": 10,
        "anomaly_records": 4,
        "severities": [0.0, 2.0],
        "umap": False,
        "eligible_min_positives": 1,
    }
    raw = tiny(tmp_path / "a", corpus, 1).model_dump(mode="json")
    in_turn = parse_config({**raw, "evaluation": evaluation})
    side_by_side = parse_config({**raw, "output_dir": str(tmp_path / "b"), "evaluation": {**evaluation, "at_once": 2}})
    cache = pipeline.prepare(in_turn, progress=False)
    pipeline.pretrain_all(in_turn, cache, pipeline.write_resolved_config(in_turn), pipeline.plan_runs(in_turn), progress=False)
    shutil.copytree(tmp_path / "a" / "runs", tmp_path / "b" / "runs")
    plans, steps = pipeline.plan_runs(in_turn), [2, 4]
    assert evaluations_at_once(side_by_side.evaluation.at_once, "cpu", 4) == 2
    for cfg in (in_turn, side_by_side):
        evaluate_grid(cfg, cache, pipeline.plan_runs(cfg), steps, progress=False)
    for plan in plans:
        for step in steps:
            name = f"{plan.name}-step{step:06d}.json"
            a, b = (json.loads((tmp_path / d / "evaluation" / name).read_text()) for d in ("a", "b"))
            assert a["diagnostic"]["superclass"]["macro_auroc"]["point"] == pytest.approx(
                b["diagnostic"]["superclass"]["macro_auroc"]["point"], abs=1e-6
            )
            assert a["mechanism"]["true"]["gain_fraction"] == pytest.approx(b["mechanism"]["true"]["gain_fraction"], abs=1e-6)
    assert (tmp_path / "b" / "evaluation" / "hr-strata-step000004.json").exists()


class FakeProcess:
    """A run's process that ends, successfully, at its ``polls``-th poll."""

    def __init__(self, polls: int):
        self.polls, self.returncode = polls, None

    def poll(self):
        self.polls -= 1
        if self.polls <= 0:
            self.returncode = 0
        return self.returncode


@pytest.fixture
def pretend_gpus(monkeypatch):
    """``pretend_gpus(n)``: this machine has n CUDA devices and 8 cores; no thread variable set."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)

    def pretend(count):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    return pretend


@pytest.mark.parametrize(
    ("gpus", "at_once", "polls", "expected"),
    [
        (2, 4, [1, 1, 1, 1], ["0", "1", "0", "1"]),  # two runs per GPU
        (4, 4, [1, 1, 1, 1], ["0", "1", "2", "3"]),  # one run per GPU
        (2, 2, [3, 1, 1, 1], ["0", "1", "1", "1"]),  # a new run goes to the GPU that is free
    ],
)
def test_side_by_side_runs_are_spread_over_the_gpus(tmp_path, monkeypatch, pretend_gpus, gpus, at_once, polls, expected):
    """Four runs: each process sees one GPU, the one the fewest running processes hold."""
    pretend_gpus(gpus)
    lengths, started = iter(polls), []
    monkeypatch.setattr(concurrent, "POLL_S", 0)
    monkeypatch.setattr(subprocess, "Popen", lambda command, env, **_: started.append(env) or FakeProcess(next(lengths)))
    jobs = [RunJob(arm, seed, tmp_path / f"{arm}-seed{seed}") for arm in ("winder", "control") for seed in (0, 1)]
    train_concurrently(tmp_path / "config.yaml", jobs, at_once, 4, gpus=child_gpus("auto"), progress=False)
    assert [env["CUDA_VISIBLE_DEVICES"] for env in started] == expected
    assert all(env[name] == str(8 // at_once) for env in started for name in THREAD_VARIABLES)


def test_runs_stay_where_the_config_puts_them_without_gpus_or_with_an_index(monkeypatch, pretend_gpus):
    pretend_gpus(4)
    assert child_gpus("cuda") == ["0", "1", "2", "3"]
    assert child_gpus("cuda:1") == [] and child_gpus("cpu") == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")  # the GPUs this process was given
    assert child_gpus("auto") == ["3", "5", "6", "7"]
    pretend_gpus(0)
    assert child_gpus("auto") == []
