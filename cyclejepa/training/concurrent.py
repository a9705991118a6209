"""Several pre-training runs side by side on one machine, one process each.

The paper-size model leaves most of a GPU idle, so the arm × seed runs of an experiment can share
it: `train_concurrently` starts one ``python -m cyclejepa train CONFIG --arm A --seed S`` process
per run, at most ``at_once`` at a time, logs each to ``<run dir>/train.log``, shows one bar over
all runs' steps and raises naming every failed run with the end of its log. Stopped, it passes a
SIGTERM on to each process and waits while each checkpoints. Each process sees the least busy GPU
(``CUDA_VISIBLE_DEVICES``) and an equal share of the CPU threads, and computes what the in-process
trainer computes (bit for bit on the CPU; on CUDA up to cuDNN's and atomics' nondeterminism).
They are commands one could start by hand, not tasks of the process pool (`cyclejepa.workers`).
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

from cyclejepa.devices import thread_environment
from cyclejepa.outputs import RunFolder
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
    """Processes to train at once: ``auto`` is every run on CUDA (spread over the GPUs by
    `train_concurrently`) and one on the CPU."""
    if setting == "auto":
        return runs if device_type == "cuda" else 1
    return max(1, min(int(setting), runs))


def train_concurrently(
    config: Path, jobs: Sequence[RunJob], at_once: int, steps: int, *, gpus: Sequence[str] = (), progress: bool = True
) -> None:
    """Train ``jobs`` from the resolved config file ``config``, ``at_once`` processes at a time, each
    on the one of ``gpus`` (`cyclejepa.devices.child_gpus`; none: the environment's) running the
    fewest. Raises a RuntimeError, once all have ended, naming each failed run with its log's end."""
    pending, failed = list(jobs), []
    running: dict[RunJob, tuple[subprocess.Popen, str | None]] = {}
    with progress_bar(steps * len(jobs), f"{len(jobs)} runs, {at_once} at a time", enabled=progress) as update:
        try:
            while pending or running:
                while pending and len(running) < at_once:
                    job = pending.pop(0)
                    gpu = _least_busy(gpus, [held for _, held in running.values()])
                    running[job] = (_start(config, job, _child_environment(at_once, gpu)), gpu)
                time.sleep(POLL_S)
                for job, (process, _) in list(running.items()):
                    if process.poll() is not None:
                        del running[job]
                        if process.returncode != 0:
                            failed.append(job)
                update(completed=sum(_last_step(job.directory) for job in jobs))
        except KeyboardInterrupt:  # SIGINT, or SIGTERM under the command line (`cyclejepa.interrupts`)
            _stop([process for process, _ in running.values()])
            raise
    if failed:
        raise RuntimeError("\n".join(_failure(job) for job in failed))


def _start(config: Path, job: RunJob, env: dict[str, str]) -> subprocess.Popen:
    job.directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "cyclejepa", "train", str(config), "--arm", job.arm, "--seed", str(job.seed)]
    with open(job.directory / "train.log", "a") as log:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def _stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM each running process and wait while it checkpoints and ends (`cyclejepa.interrupts`)."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        process.wait()


def _least_busy(gpus: Sequence[str], held: list[str | None]) -> str | None:
    """The GPU of ``gpus`` that the fewest running processes hold (None without GPUs)."""
    return min(gpus, key=held.count) if gpus else None


def _child_environment(at_once: int, gpu: str | None) -> dict[str, str]:
    """The parent's environment with the CPU threads shared out (where the user set none) and only ``gpu`` visible."""
    env = dict(os.environ)
    for name, value in thread_environment(max(1, (os.cpu_count() or 1) // at_once)).items():
        env.setdefault(name, value)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def _last_step(directory: Path) -> int:
    """The last step logged in a run's ``metrics.jsonl`` (0 before the first flush)."""
    try:
        lines = RunFolder(directory).metrics.read_text().splitlines()
        return int(json.loads(lines[-1])["step"]) if lines else 0
    except (OSError, ValueError, KeyError):  # not written yet, or caught mid-write
        return 0


def _failure(job: RunJob) -> str:
    log = job.directory / "train.log"
    tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:] if log.exists() else []
    return f"run {job.name} failed (log {log}):\n" + "\n".join(f"    {line}" for line in tail)
