"""The one process pool of the library: worker processes that share the machine out.

Records of a cache (`cyclejepa.data.cache.build`), chunks of a synthetic corpus
(`cyclejepa.data.synthetic.corpus`) and checkpoints to evaluate (`cyclejepa.evaluation.checkpoint_evaluation`)
are handed to `process_pool`'s workers. How a worker starts is decided here, once:

- never ``fork``: the parent may run threads (a progress bar, torch's pools), and a process
  forked from a threaded one can deadlock on a lock some thread held;
- ``forkserver`` where the platform has it: workers are forked from a single-threaded server
  that imported ``preload`` once, so a worker starts in milliseconds rather than in the two
  seconds that importing torch anew takes;
- ``spawn`` (fresh interpreters) when the workers get a thread limit, and where there is no
  forkserver. numpy, scipy and scikit-learn (BLAS, OpenMP) and torch size their thread pools
  from `cyclejepa.devices.THREAD_VARIABLES` once, when loaded: the limit holds only in a process
  that loads them after the variables are set, which a forkserver started earlier has not.

Training runs side by side are not workers of this pool (`cyclejepa.training.concurrent`): each
is a ``cyclejepa train`` command with its own log file, checkpoints and stop signal.
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
    """A `ProcessPoolExecutor` whose tasks' exceptions reach the caller naming the task.

    The exception keeps its type; on Python ≥ 3.11 it carries the note ``in a worker process:
    <task_name>``, shown under its traceback.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(_named_task, fn, args, kwargs)


def _named_task(function: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    """``function(*args, **kwargs)`` in a worker; an exception leaves it noting the task."""
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

    Parameters
    ----------
    workers
        How many processes.
    tasks
        How many tasks the block submits, when known: no more than that many workers start.
    initializer, initargs
        Called once in each worker as ``initializer(*initargs)``, after its threads and GPU are
        set: state sent once per worker (e.g. a dataset), not once per task.
    threads
        CPU threads of each worker (`shared_threads` shares the machine): `THREAD_VARIABLES`
        are set while the pool starts its workers (on submission; restored after the block) and
        ``torch.set_num_threads(threads)`` in each. None leaves the threads as they are.
    gpus
        With ``gpus`` > 0 CUDA devices, worker k makes ``cuda:<k mod gpus>`` its current device,
        so that an index-less ``cuda`` is each worker's own GPU.
    preload
        Modules the forkserver imports once for all workers (the modules of the tasks).

    Leaving the block by an exception (a task's error, KeyboardInterrupt) cancels the tasks not
    yet started and waits for the running ones; otherwise it waits for every task.
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
    """What hands worker k (in start order) the GPU ``k mod gpus``: a shared count of the workers
    started (None without GPUs). Nothing is written ahead for workers not yet started: a pipe
    filled before any worker reads it blocks the parent once the pipe's buffer is full."""
    return (context.Value("q", 0), gpus) if gpus else None


def _next_gpu(devices: Any) -> int | None:
    """The GPU of the worker starting now: the count of workers started so far, mod the GPUs."""
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
    """A worker's start: torch's threads, its GPU (`_next_gpu` of ``devices``), then ``initializer``."""
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
