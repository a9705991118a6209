"""One writer per output directory: a second writer is refused with the holder's pid and host,
a stale lock is taken over with a notice, the holder's child processes enter."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cyclejepa import pipeline
from cyclejepa.cli import app
from cyclejepa.config import load_config
from cyclejepa.lock import LOCK_FILE, OutputLocked, output_lock

HOLD = (
    "import sys, time\n"
    "from cyclejepa.lock import output_lock\n"
    "with output_lock(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(float(sys.argv[2]))\n"
)


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of ``tmp_path / 'out'``; killed (SIGKILL) at the end."""
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(out), "60"], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    yield out, process
    process.kill()
    process.wait()


def test_a_second_writer_is_refused_naming_pid_and_host(holder):
    out, process = holder
    with pytest.raises(OutputLocked) as refused, output_lock(out):
        pytest.fail("entered a directory another process holds")
    message = str(refused.value)
    assert f"pid {process.pid}" in message and socket.gethostname() in message and LOCK_FILE in message


def test_run_and_train_refuse_before_any_work(holder, tmp_path):
    out, process = holder
    config = tmp_path / "c.yaml"
    config.write_text(
        f"output_dir: {out}\ndata:\n  root: {tmp_path / 'corpus'}\n  dataset: synthetic\n  options: {{records: 20}}\n"
    )
    with pytest.raises(OutputLocked, match=f"pid {process.pid}"):
        pipeline.run_experiment(load_config(config))
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 1 and f"pid {process.pid}" in result.output, result.output
    assert [p for p in out.rglob("*") if p.is_file()] == [out / LOCK_FILE]  # nothing prepared, trained or written
    assert not (tmp_path / "corpus").exists()


def test_a_stale_lock_is_taken_over_with_a_notice(holder, caplog):
    out, process = holder
    process.send_signal(signal.SIGKILL)  # dies holding the lock: the file stays
    process.wait()
    assert json.loads((out / LOCK_FILE).read_text())["pid"] == process.pid
    with caplog.at_level(logging.WARNING, logger="cyclejepa.lock"), output_lock(out):
        assert json.loads((out / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert f"pid {process.pid} no longer runs" in caplog.text
    assert not (out / LOCK_FILE).exists()  # released at the end of the block


def test_children_of_the_holder_enter_and_others_are_refused_after(tmp_path):
    out = tmp_path / "out"
    with output_lock(out):
        child = subprocess.run([sys.executable, "-c", HOLD, str(out), "0"], capture_output=True, text=True)
        assert child.returncode == 0 and child.stdout.strip() == "held", child.stderr
        assert (out / LOCK_FILE).exists()  # the child did not release the parent's lock
    assert not (out / LOCK_FILE).exists()
    with output_lock(out):  # free again
        pass


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_concurrent_training_children_run_under_the_parents_lock(tmp_path):
    """`runs.at_once` starts `cyclejepa train` processes on the locked output directory."""
    from test_concurrent import tiny

    from cyclejepa.training.concurrent import RunJob, train_concurrently

    cfg = tiny(tmp_path / "out", tmp_path / "corpus", 2)
    with output_lock(cfg.output_dir):
        pipeline.prepare(cfg, progress=False)
        config = pipeline.write_resolved_config(cfg)
        plan = pipeline.plan_runs(cfg)[0]
        train_concurrently(config, [RunJob(plan.arm.name, plan.seed, plan.directory)], 1, 4, progress=False)
    assert plan.finished()


def test_runs_of_one_output_directory_train_side_by_side_but_a_run_waits(tmp_path):
    """`train` locks its run's folder: another run's `train` goes ahead, a `run` of the whole
    output directory is refused, and so is a `train` inside a directory a `run` holds."""
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(out / "runs" / "a"), "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        with output_lock(out / "runs" / "b"):
            pass
        with pytest.raises(OutputLocked, match=rf"{out / 'runs' / 'a'} is in use by pid {process.pid}"), output_lock(out):
            pytest.fail("a run entered while another process trains one of its runs")
        assert not (out / LOCK_FILE).exists()  # the refused lock is not left behind
    finally:
        process.kill()
        process.wait()
