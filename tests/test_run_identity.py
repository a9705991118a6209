"""Run identity: a run is the keys that change its weights. Evaluation, reporting, unsealing,
workers, devices and names never invalidate training; other keys are refused, named."""

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

from conftest import TINY_MODEL
from cyclejepa import pipeline
from cyclejepa.cli import app
from cyclejepa.config import ConfigError, apply_overrides, parse_config
from cyclejepa.pipeline.identity import evaluation_identity, identity_differences, training_identity
from cyclejepa.jsonio import write_json

TINY = {
    "name": "tiny",
    **TINY_MODEL,
    "training": {"steps": 2, "batch_size": 8, "checkpoint_every": 2, "device": "cpu"},
    "runs": {"seeds": [0]},
    "evaluation": {
        "steps": [2],
        "bootstrap": 10,
        "anomaly_records": 4,
        "families": ["ectopic"],
        "severities": [0.0, 2.0],
        "umap": False,
        "eligible_min_positives": 1,
    },
}

EXECUTION_ONLY = [
    "name=renamed",
    "output_dir=elsewhere",
    "data.root=/moved",
    "data.cache_dir=/c",
    "data.workers=4",
    "data.eval_folds=[9]",
    "training.compile=true",
    "training.checkpoint_every=1",
    "runs.at_once=2",
    "runs.seeds=[0,5]",
    "evaluation.unseal=true",
    "evaluation.bootstrap=7",
    "evaluation.device=cpu",
    "evaluation.steps=[1]",
    "evaluation.umap=false",
    "objectives.transport_weight=0.3",
]
WEIGHT_KEYS = [
    ("model.encoder.width=24", "model.encoder.width: 16 → 24"),
    ("optimiser.lr=0.01", "optimiser.lr: 0.0003 → 0.01"),
    ("training.steps=4", "training.steps: 2 → 4"),
    ("training.batch_size=4", "training.batch_size: 8 → 4"),
    ("training.precision=bf16", 'training.precision: "float32" → "bf16"'),  # auto: float32 on the CPU
    ("training.device=cuda", 'training.device: "cpu" → "cuda"'),
    ("data.train_folds=[1,2,3]", "data.train_folds: [1, 2, 3, 4, 5, 6, 7, 8, 9] → [1, 2, 3]"),
    ("phase.options={lead: V1}", 'phase.options.lead: "(absent)" → "V1"'),
]


def identity(overrides=(), transport_weight=1.0, seed=0):
    return training_identity(parse_config(apply_overrides(TINY, list(overrides))), transport_weight, seed)


@pytest.mark.parametrize("override", EXECUTION_ONLY)
def test_execution_and_evaluation_keys_leave_the_identity_unchanged(override):
    assert identity([override]) == identity()


@pytest.mark.parametrize("override, named", WEIGHT_KEYS)
def test_a_key_that_changes_the_weights_changes_the_identity_and_is_named(override, named):
    assert named in identity_differences(identity(), identity([override]))


def test_the_device_counts_by_its_kind_and_the_precision_as_resolved():
    def on(device, precision="auto"):
        return identity([f"training.device={device}", f"training.precision={precision}"])

    assert on("cuda") == on("cuda:1") == on("cuda", "bf16")  # no index; auto is bf16 on CUDA ...
    assert on("cpu") == on("cpu", "float32")  # ... and float32 on the CPU
    assert identity_differences(on("cpu"), on("cuda")) == [
        'training.device: "cpu" → "cuda"',
        'training.precision: "float32" → "bf16"',
    ]
    assert identity_differences(on("cpu", "float32"), on("cuda", "float32")) == ['training.device: "cpu" → "cuda"']
    evaluation = {d: evaluation_identity(parse_config(apply_overrides(TINY, [f"training.device={d}"]))) for d in ("cpu", "cuda")}
    assert identity_differences(evaluation["cpu"], evaluation["cuda"]) == [
        'training.device: "cpu" → "cuda"',
        'training.precision: "float32" → "bf16"',
    ]


def test_runs_trained_on_cuda_are_evaluated_on_a_machine_without_one(tmp_path, monkeypatch):
    """`training.device: cuda` keeps the runs' identity; it need not exist once every run is done."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = parse_config(apply_overrides(dict(TINY, output_dir=str(tmp_path)), ["training.device=cuda"]))
    with pytest.raises(ConfigError, match="training.device: device 'cuda': this machine has 0 CUDA"):
        pipeline.preflight(cfg)  # a run is left to train
    for plan in pipeline.plan_runs(cfg):  # as trained on a GPU machine
        write_json(plan.directory / "done.json", {"identity": plan.identity})
    pipeline.preflight(cfg)


def test_the_arm_and_seed_are_part_of_the_identity():
    assert identity_differences(identity(), identity(transport_weight=0.0, seed=3)) == [
        "arm.transport_weight: 1.0 → 0.0",
        "seed: 0 → 3",
    ]
    paper, changed = (parse_config(dict(TINY, augmentations=[{"name": "tone", "p": p}])) for p in (0.5, 0.1))
    assert identity_differences(training_identity(paper, 1.0, 0), training_identity(changed, 1.0, 0)) == [
        "augmentations[0].p: 0.5 → 0.1"
    ]


pytestmark = pytest.mark.xdist_group("run_identity")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The README's several-GPU flow on a tiny config: `cyclejepa train` per arm (the entry point
    torchrun starts), then later `cyclejepa run --unseal` with other evaluation keys."""
    out = tmp_path_factory.mktemp("identity")
    config = out / "tiny.yaml"
    raw = dict(
        TINY, output_dir=str(out / "run"), data={"root": str(out / "corpus"), "dataset": "synthetic", "options": {"records": 150}}
    )
    config.write_text(yaml.safe_dump(raw))
    for arm in ("winder", "control"):
        result = CliRunner().invoke(app, ["train", str(config), "--arm", arm, "--seed", "0"])
        assert result.exit_code == 0, result.output
    return config, out / "run"


def snapshot(run):
    return {p: p.stat().st_mtime_ns for p in sorted((run / "runs").rglob("*")) if p.is_file()}


def test_train_then_run_unsealed_with_other_evaluation_keys_reuses_the_checkpoints(trained):
    config, run = trained
    before = snapshot(run)
    assert any(p.name == "step_000002.pt" for p in before) and any(p.name == "done.json" for p in before)
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(config),
            "--unseal",
            "--set",
            "evaluation.bootstrap=12",
            "--set",
            "name=later",
            "--set",
            "data.workers=2",
            "--set",
            "training.device=cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    assert snapshot(run) == before  # no checkpoint, metrics row or done.json rewritten: nothing retrained
    report = (run / "report" / "report.md").read_text()
    assert "Sealed fold 10 was read by: cohort table, evaluation;" in report and "not touched" not in report
    assert "| pre-training | `data.train_folds` | [1, 2, 3, 4, 5, 6, 7, 8, 9] | 2 |" in report
    audit = [json.loads(line) for line in (run / "unseal_audit.jsonl").read_text().splitlines()]
    assert {(e["stage"], tuple(e["folds"])) for e in audit} == {("cohort table", (10,)), ("evaluation", (10,))}


def test_a_checkpoint_from_another_configuration_is_refused_with_the_keys_named(trained):
    config, run = trained
    for command in (["validate"], ["run", "--dry-run", "--unseal"], ["run", "--unseal"]):
        result = CliRunner().invoke(
            app, [command[0], str(config), *command[1:], "--set", "model.encoder.width=24", "--set", "optimiser.lr=0.01"]
        )
        assert result.exit_code == 2, result.output
        flat = " ".join(result.output.split())
        assert f"{run / 'runs' / 'winder-seed0'} was trained with other settings" in flat
        assert "model.encoder.width: 16 → 24; optimiser.lr: 0.0003 → 0.01" in flat
    cfg = parse_config(apply_overrides(yaml.safe_load(config.read_text()), ["training.steps=4", "evaluation.steps=[4]"]))
    with pytest.raises(ConfigError, match="training.steps: 2 → 4"):
        pipeline.preflight(cfg)


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_torchrun_train_on_two_ranks_then_run_unsealed(tmp_path):
    """The README's several-GPU flow as launched, on two CPU ranks (gloo): `torchrun … train` (one
    arm here), then `cyclejepa run --unseal` evaluates those runs without training again."""
    import os
    import subprocess
    import sys

    config = tmp_path / "tiny.yaml"
    one_arm = {"seeds": [0], "arms": [{"name": "winder", "transport_weight": 1.0}]}
    raw = dict(TINY, output_dir=str(tmp_path / "run"), runs=one_arm,
               data={"root": str(tmp_path / "corpus"), "dataset": "synthetic", "options": {"records": 120}})  # fmt: skip
    config.write_text(yaml.safe_dump(raw))
    CliRunner().invoke(app, ["prepare", str(config)])  # once, before the ranks start
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for arm in ("winder",):
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                  "-m", "cyclejepa", "train", str(config), "--arm", arm, "--seed", "0"]  # fmt: skip
        done = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "runs" / "winder-seed0" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]  # one writer (rank 0), each step once
    before = snapshot(run)
    result = CliRunner().invoke(app, ["run", str(config), "--unseal", "--set", "evaluation.bootstrap=12"])
    assert result.exit_code == 0, result.output
    assert snapshot(run) == before
    assert (run / "report" / "report.md").is_file()
