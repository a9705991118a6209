"""The one process pool of the library (cache records, synthetic chunks, checkpoints to evaluate).

Workers never ``fork`` (a process forked from a threaded one can deadlock on a lock a thread
held). They start from a ``forkserver`` that imported ``preload`` once (milliseconds instead of
the two seconds of importing torch), or by ``spawn`` where there is none or the workers get a
thread limit: libraries size their thread pools from `THREAD_VARIABLES` once, when loaded.
"""

from __future__ import annotations

import multiprocessing
import os
import reprlib
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

T = TypeVar("T")

_ARGUMENTS = reprlib.Repr()
_ARGUMENTS.maxstring, _ARGUMENTS.maxother, _ARGUMENTS.maxlist, _ARGUMENTS.maxdict = 60, 60, 3, 3


def shared_threads(workers: int) -> int:
    """CPU threads per worker when ``workers`` processes share the machine: ⌊cores / workers⌋ ≥ 1."""
    return max(1, (os.cpu_count() or 1) // workers)


def task_name(function: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """``function(args…)`` with each argument's repr cut short: what a failed task is called."""
    shown = [_ARGUMENTS.repr(a) for a in args] + [f"{k}={_ARGUMENTS.repr(v)}" for k, v in kwargs.items()]
    return f"{getattr(function, '__qualname__', repr(function))}({', '.join(shown)})"


class WorkerPool(ProcessPoolExecutor):
    """A `ProcessPoolExecutor` whose tasks' exceptions keep their type and (Python ≥ 3.11) carry the
    note ``in a worker process: <task_name>``."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(_named_task, fn, args, kwargs)


def _named_task(function: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    try:
        return function(*args, **kwargs)
    except Exception as error:
        if sys.version_info >= (3, 11):
            error.add_note(f"in a worker process: {task_name(function, args, kwargs)}")
        raise


@contextmanager
def process_pool(
    workers: int,
    *,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[Any, ...] = (),
    threads: int | None = None,
    gpus: int = 0,
    preload: Sequence[str] = (),
    tasks: int | None = None,
) -> Iterator[WorkerPool]:
    """``workers`` worker processes (at most ``tasks``), shut down when the block ends.

    Each worker runs ``initializer(*initargs)`` once, after ``torch.set_num_threads(threads)`` (with
    `THREAD_VARIABLES` set while the pool starts workers; None: unchanged) and making
    ``cuda:<k mod gpus>`` worker k's current device. Leaving by an exception cancels the tasks
    not yet started; either way the block waits for the running ones.
    """
    from cyclejepa.devices import thread_environment  # imports torch: when a pool starts, not with the modules that use one

    if workers < 1:
        raise ValueError(f"a process pool needs at least one worker, got {workers}")
    workers = min(workers, max(1, tasks)) if tasks is not None else workers
    context = _start_context(threads is not None, preload)
    pool = WorkerPool(
        workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(threads, _device_counter(context, gpus), initializer, initargs),
    )
    with environment(thread_environment(threads) if threads is not None else {}):
        try:
            yield pool
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


def _start_context(thread_limit: bool, preload: Sequence[str]) -> BaseContext:
    """``spawn`` for workers with a thread limit or without a forkserver, else ``forkserver``."""
    if thread_limit or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, *preload])
    return context


def _device_counter(context: BaseContext, gpus: int) -> Any:
    """A shared count of the workers started, handing worker k the GPU ``k mod gpus`` (None
    without GPUs; a pipe filled ahead would block the parent once its buffer is full)."""
    return (context.Value("q", 0), gpus) if gpus else None


def _next_gpu(devices: Any) -> int | None:
    if devices is None:
        return None
    counter, gpus = devices
    with counter.get_lock():
        started = counter.value
        counter.value = started + 1
    return started % gpus


def _start_worker(
    threads: int | None, devices: Any, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
) -> None:
    gpu = _next_gpu(devices)
    if threads is not None or gpu is not None:
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        if gpu is not None:
            torch.cuda.set_device(gpu)
    if initializer is not None:
        initializer(*initargs)


@contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` set in ``os.environ`` for the block, then restored."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
