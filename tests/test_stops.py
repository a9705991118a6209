"""Clean stops: SIGTERM and SIGINT during training write a checkpoint at the next step, release
the output directory's lock, print the command that resumes, and exit with 128 + the signal."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from typer.testing import CliRunner

from cyclejepa import interrupts, pipeline
from cyclejepa.cli import app
from cyclejepa.config import load_config
from cyclejepa.lock import LOCK_FILE
from cyclejepa.outputs import RunFolder
from cyclejepa.interrupts import Stopped, deferred_stops
from cyclejepa.training import latest_checkpoint, load_checkpoint
from test_training import TINY

STEPS = 300


def test_the_first_signal_is_noted_and_only_a_later_ctrl_c_stops_at_once(monkeypatch):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with deferred_stops() as request:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # the same stop passed on twice: still only noted
        os.kill(os.getpid(), signal.SIGTERM)
        assert request.signum == signal.SIGTERM
        monkeypatch.setattr(interrupts, "INSIST_S", 0.0)
        with pytest.raises(Stopped, match="^stopped by SIGINT$") as insisted:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
        assert insisted.value.exit_code == 130
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # restored


pytestmark = pytest.mark.xdist_group("stops")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A tiny config (both arms, one seed) whose cache is built; runs of 300 steps, checkpointed
    only at the end."""
    root = tmp_path_factory.mktemp("stops")
    raw = {
        **TINY,
        "data": {"root": str(root / "corpus"), "dataset": "synthetic", "options": {"records": 40},
                 "cache_dir": str(root / "cache"), "train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]},
        "training": {**TINY["training"], "steps": STEPS, "checkpoint_every": STEPS, "device": "cpu"},
        "runs": {"seeds": [0]},
        "evaluation": {"steps": [STEPS], "umap": False},
    }  # fmt: skip
    config = root / "base.yaml"
    config.write_text(yaml.safe_dump(raw))
    pipeline.prepare(load_config(config), progress=False)
    return raw


def config_in(tmp_path, raw, **changes):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**raw, "output_dir": str(tmp_path / "out"), **changes}))
    return path


def start(*args, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "cyclejepa", *map(str, args)]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def steps_logged(run):
    path = run / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def wait_for_training(process, runs, timeout=120):
    """Wait until every run of ``runs`` has logged its first rows (training is under way)."""
    deadline = time.monotonic() + timeout
    while not all(steps_logged(run) for run in runs):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "training did not start"
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_a_signal_during_train_saves_a_checkpoint_releases_the_lock_and_says_how_to_resume(prepared, tmp_path, monkeypatch, sig):
    config = config_in(tmp_path, prepared)
    run = tmp_path / "out" / "runs" / "winder-seed0"
    process = start("train", config.name, "--arm", "winder", "--seed", "0", cwd=tmp_path)
    wait_for_training(process, [run])
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + sig, stderr
    checkpoint = latest_checkpoint(RunFolder(run))
    step = load_checkpoint(checkpoint)["step"]
    assert 0 < step < STEPS and checkpoint.name == f"step_{step:06d}.pt"
    assert steps_logged(run) == list(range(1, step + 1))  # flushed up to the checkpoint
    message = " ".join(stderr.split())
    assert (f"stopped by {sig.name} at step {step}, checkpoint {checkpoint} written; "
            f"resume with: cyclejepa train {config.name} --arm winder --seed 0") in message, stderr  # fmt: skip
    assert "Traceback" not in stderr
    assert not list((tmp_path / "out").rglob(LOCK_FILE))  # released
    if sig == signal.SIGINT:
        return
    monkeypatch.chdir(tmp_path)  # the printed command, typed where the first one was
    result = CliRunner().invoke(app, ["train", config.name, "--arm", "winder", "--seed", "0"])
    assert result.exit_code == 0, result.output
    assert steps_logged(run) == list(range(1, STEPS + 1))
    assert (run / "done.json").is_file()


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_a_run_passes_sigterm_on_to_its_training_processes(prepared, tmp_path):
    """`runs.at_once`: the parent passes SIGTERM on; each training process writes its checkpoint."""
    config = config_in(tmp_path, prepared, runs={"seeds": [0], "at_once": 2})
    runs = [tmp_path / "out" / "runs" / name for name in ("winder-seed0", "control-seed0")]
    process = start("run", config.name, "--set", "evaluation.bootstrap=10", cwd=tmp_path)
    wait_for_training(process, runs, timeout=240)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert f"stopped by SIGTERM; resume with: cyclejepa run {config.name} --set evaluation.bootstrap=10" in " ".join(
        stderr.split()
    )
    for run in runs:
        step = load_checkpoint(latest_checkpoint(RunFolder(run)))["step"]
        assert 0 < step < STEPS and steps_logged(run) == list(range(1, step + 1))
        assert f"stopped by SIGTERM at step {step}" in (run / "train.log").read_text()
    assert not list((tmp_path / "out").rglob(LOCK_FILE))


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_ranks_under_torchrun_agree_on_the_step_to_stop_at(prepared, tmp_path):
    """torchrun passes SIGTERM on to every rank; they stop together at a flush of the metrics
    (every 25 steps), rank 0 writes the checkpoint, none waits forever in a collective."""
    config = config_in(tmp_path, prepared, runs={"seeds": [0], "arms": [{"name": "winder", "transport_weight": 1.0}]})
    run = tmp_path / "out" / "runs" / "winder-seed0"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
              "-m", "cyclejepa", "train", config.name, "--arm", "winder", "--seed", "0"]  # fmt: skip
    process = subprocess.Popen(launch, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_training(process, [run])
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    step = load_checkpoint(latest_checkpoint(RunFolder(run)))["step"]
    assert step % 25 == 0 and 0 < step < STEPS, stderr
    assert f"stopped by SIGTERM at step {step}" in stderr
    assert steps_logged(run) == list(range(1, step + 1))
    assert not list((tmp_path / "out").rglob(LOCK_FILE))


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_a_signal_outside_training_stops_at_once_and_releases_the_lock(tmp_path):
    """SIGTERM while `prepare` writes the corpus and the cache: the lock is released, the line
    says how to go on, and the status is 143 (no traceback)."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "out"),
                                      "data": {"root": str(tmp_path / "corpus"), "dataset": "synthetic", "options": {"records": 2000}}}))  # fmt: skip
    process = start("prepare", config.name, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not (tmp_path / "out" / LOCK_FILE).exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert f"stopped by SIGTERM; resume with: cyclejepa prepare {config.name}" in " ".join(stderr.split())
    assert "Traceback" not in stderr
    assert not (tmp_path / "out" / LOCK_FILE).exists()
