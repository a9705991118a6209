"""The one process pool (`cyclejepa.workers`): workers get their thread limit, their GPU and the
initializer's state; a task's exception reaches the caller with its type, naming the task; the
block ends with no task left running."""

import multiprocessing
import os
import subprocess
import sys
import time

import pytest
import torch

from cyclejepa import workers
from cyclejepa.devices import THREAD_VARIABLES
from cyclejepa.workers import process_pool, shared_threads

_STATE: dict[str, object] = {}


def _remember(value: object) -> None:
    _STATE["value"] = value


def _state_and_pid(_: int) -> tuple[object, int]:
    return _STATE.get("value"), os.getpid()


def _thread_pools_and_state() -> tuple[dict, object]:
    """In a worker: torch's threads and those of every BLAS and OpenMP library loaded; its state."""
    import scipy.linalg  # noqa: F401  (loads scipy's BLAS, as the evaluation's probes do)
    import sklearn.linear_model  # noqa: F401
    from threadpoolctl import threadpool_info

    pools = {"torch": {torch.get_num_threads()}}
    for pool in threadpool_info():
        pools.setdefault(pool["user_api"], set()).add(pool["num_threads"])
    return pools, _STATE.get("value")


def _fail_on(value: int, bad: int) -> int:
    if value == bad:
        raise ValueError(f"value {value} is bad")
    return value


def _sleep_and_mark(marks: str, index: int) -> None:
    time.sleep(0.3)
    with open(os.path.join(marks, str(index)), "w"):
        pass


@pytest.mark.slow
def test_spawned_workers_limit_the_blas_and_openmp_threads_and_hold_the_initializer_state(monkeypatch):
    """numpy, scipy and scikit-learn in a worker use its share of the cores, not every core."""
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # 2 workers: one thread each
    assert shared_threads(2) == 1 and shared_threads(3) == 1
    with process_pool(2, threads=shared_threads(2), initializer=_remember, initargs=("dataset",)) as pool:
        pools, state = pool.submit(_thread_pools_and_state).result()
    assert pools == {"torch": {1}, "blas": {1}, "openmp": {1}}
    assert state == "dataset" and "value" not in _STATE  # set in the worker only
    assert all(name not in os.environ for name in THREAD_VARIABLES)  # restored in this process


@pytest.mark.slow
def test_every_forkserver_worker_holds_the_initializer_state():
    with process_pool(2, initializer=_remember, initargs=({"dataset": [1, 2]},)) as pool:
        seen = list(pool.map(_state_and_pid, range(8)))
    assert {state == {"dataset": [1, 2]} for state, _ in seen} == {True}
    assert os.getpid() not in {pid for _, pid in seen}
    assert "value" not in _STATE  # set in the workers only


@pytest.mark.slow
def test_a_task_error_keeps_its_type_and_names_the_task():
    with pytest.raises(ValueError, match="value 3 is bad") as caught, process_pool(2) as pool:
        for future in [pool.submit(_fail_on, value, 3) for value in range(5)]:
            future.result()
    if sys.version_info >= (3, 11):
        assert caught.value.__notes__ == ["in a worker process: _fail_on(3, 3)"]


@pytest.mark.slow
def test_an_error_in_the_block_cancels_the_tasks_not_started(tmp_path):
    """Twenty 0.3 s tasks on one worker: the block's error leaves after the running one, not all."""
    with pytest.raises(KeyboardInterrupt), process_pool(1) as pool:
        futures = [pool.submit(_sleep_and_mark, str(tmp_path), index) for index in range(20)]
        futures[0].result()
        raise KeyboardInterrupt
    assert all(future.done() for future in futures)
    assert sum(future.cancelled() for future in futures) >= 15
    assert len(list(tmp_path.iterdir())) <= 5


def test_task_names_cut_long_arguments_short():
    name = workers.task_name(_fail_on, (list(range(1000)), "x" * 500), {"bad": 2})
    assert name.startswith("_fail_on([0, 1, 2, ...], 'xxx") and name.endswith("', bad=2)") and len(name) < 120


def test_a_pool_needs_a_worker():
    with pytest.raises(ValueError, match="at least one worker, got 0"), process_pool(0):
        pass


@pytest.mark.parametrize(("gpus", "expected"), [(2, [0, 1, 0, 1]), (4, [0, 1, 2, 3]), (0, [])])
def test_workers_take_the_gpus_in_turn(monkeypatch, gpus, expected):
    made_current = []
    monkeypatch.setattr(torch.cuda, "set_device", made_current.append)
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)
    devices = workers._device_counter(multiprocessing.get_context("spawn"), gpus)
    for _ in range(4):  # four workers start
        workers._start_worker(2, devices, None, ())
    assert made_current == expected


@pytest.mark.slow
def test_a_pool_of_ten_thousand_workers_runs_its_task_without_deadlock():
    """Nothing is written for workers before they start: a pipe filled ahead blocked the parent."""
    script = (
        "import operator\n"
        "from cyclejepa.workers import process_pool\n"
        "with process_pool(10_000) as pool:\n"
        "    assert pool.submit(operator.add, 1, 2).result() == 3\n"
        "print('ran')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "ran" in done.stdout, done.stderr


def test_a_pool_starts_no_more_workers_than_tasks():
    with process_pool(10_000, tasks=2) as pool:
        assert pool._max_workers == 2
        assert sorted(pool.map(abs, [-1, -2])) == [1, 2]
