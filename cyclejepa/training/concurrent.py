"""Several pre-training runs side by side on one machine, one process each.

The paper-size model leaves most of an H100 idle (a step is a few milliseconds of small kernels),
so the arm × seed runs of an experiment can share the GPU: `train_concurrently` starts one
``python -m cyclejepa train CONFIG --arm A --seed S`` process per run, at most ``at_once`` at a
time, logs each to ``<run dir>/train.log``, shows one bar over the steps of all runs (read from
their ``metrics.jsonl``), and raises naming every run that failed with the end of its log.
A process computes exactly what the in-process trainer computes, from the same seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cyclejepa.progress import progress_bar

POLL_S = 2.0
LOG_TAIL = 20  # lines of a failed run's log in the error


@dataclass(frozen=True)
class RunJob:
    """One pre-training run: its arm, seed and output folder."""

    arm: str
    seed: int
    directory: Path

    @property
    def name(self) -> str:
        return self.directory.name


def runs_at_once(setting: int | str, device_type: str, runs: int) -> int:
    """Processes to train at once: ``auto`` is every run on CUDA and one on the CPU."""
    if setting == "auto":
        return runs if device_type == "cuda" else 1
    return max(1, min(int(setting), runs))


def train_concurrently(
    config: Path, jobs: Sequence[RunJob], at_once: int, steps: int, *, progress: bool = True
) -> None:
    """Train ``jobs`` from the resolved config file ``config``, ``at_once`` processes at a time.

    Raises
    ------
    RuntimeError
        After every process has ended, when any exited with an error: names each and quotes
        the end of its log.
    """
    pending, running, failed = list(jobs), {}, []
    env = _child_environment(at_once)
    with progress_bar(steps * len(jobs), f"{len(jobs)} runs, {at_once} at a time", enabled=progress) as update:
        while pending or running:
            while pending and len(running) < at_once:
                job = pending.pop(0)
                running[job] = _start(config, job, env)
            time.sleep(POLL_S)
            for job, process in list(running.items()):
                if process.poll() is not None:
                    del running[job]
                    if process.returncode != 0:
                        failed.append(job)
            update(completed=sum(_last_step(job.directory) for job in jobs))
    if failed:
        raise RuntimeError("\n".join(_failure(job) for job in failed))


def _start(config: Path, job: RunJob, env: dict[str, str]) -> subprocess.Popen:
    job.directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "cyclejepa", "train", str(config), "--arm", job.arm, "--seed", str(job.seed)]
    with open(job.directory / "train.log", "a") as log:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def _child_environment(at_once: int) -> dict[str, str]:
    """The parent's environment; CPU threads shared out between the processes unless set."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // at_once)))
    return env


def _last_step(directory: Path) -> int:
    """The last step logged in a run's ``metrics.jsonl`` (0 before the first flush)."""
    try:
        lines = (directory / "metrics.jsonl").read_text().splitlines()
        return int(json.loads(lines[-1])["step"]) if lines else 0
    except (OSError, ValueError, KeyError):  # not written yet, or caught mid-write
        return 0


def _failure(job: RunJob) -> str:
    log = job.directory / "train.log"
    tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:] if log.exists() else []
    return f"run {job.name} failed (log {log}):\n" + "\n".join(f"    {line}" for line in tail)
