"""Timing helpers for benchmarks: device-synchronised clocks, step statistics, phase splits.

Every helper takes the clock and the synchronisation as arguments (``time.perf_counter`` and
`device_sync` by default), so the statistics can be checked on a fake clock. On a GPU, work is
queued asynchronously: a duration is only meaningful when the device is synchronised before the
clock is read, which `device_sync` does for CUDA and which is a no-op on the CPU.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

Clock = Callable[[], float]
Sync = Callable[[], None]

__all__ = [
    "PhaseTimer",
    "device_sync",
    "machine_info",
    "peak_memory",
    "peak_rss_bytes",
    "reset_peak_memory",
    "summarise",
    "time_calls",
    "time_window",
    "versions",
]


def device_sync(device: torch.device | str) -> Sync:
    """A function that waits for all queued work on ``device`` (a no-op off CUDA)."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def time_calls(
    fn: Callable[[], object],
    *,
    warmup: int,
    repeats: int,
    sync: Sync = lambda: None,
    clock: Clock = time.perf_counter,
) -> list[float]:
    """Durations (s) of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls.

    The device is synchronised before the clock is read at both ends of every timed call, so a
    duration covers the call's own device work and nothing queued before it.
    """
    if warmup < 0 or repeats < 1:
        raise ValueError(f"time_calls needs warmup >= 0 and repeats >= 1, got {warmup}, {repeats}")
    for _ in range(warmup):
        fn()
    sync()
    durations = []
    for _ in range(repeats):
        start = clock()
        fn()
        sync()
        durations.append(clock() - start)
    return durations


def time_window(fn: Callable[[], object], calls: int, *, sync: Sync = lambda: None, clock: Clock = time.perf_counter) -> float:
    """Seconds for ``calls`` back-to-back calls with one synchronisation at each end.

    Unlike `time_calls`, the host may queue call i + 1 while the device still runs call i, as a
    training loop does; ``calls / seconds`` is the sustained rate.
    """
    if calls < 1:
        raise ValueError(f"time_window needs calls >= 1, got {calls}")
    sync()
    start = clock()
    for _ in range(calls):
        fn()
    sync()
    return clock() - start


def summarise(durations: list[float]) -> dict[str, float]:
    """Median, mean, 10th/90th percentile, min and max of durations (s), in milliseconds."""
    if not durations:
        raise ValueError("summarise needs at least one duration")
    ordered = sorted(durations)

    def percentile(q: float) -> float:  # linear interpolation between order statistics
        position = q * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return {
        "n": len(ordered),
        "median_ms": 1e3 * statistics.median(ordered),
        "mean_ms": 1e3 * statistics.fmean(ordered),
        "p10_ms": 1e3 * percentile(0.1),
        "p90_ms": 1e3 * percentile(0.9),
        "min_ms": 1e3 * ordered[0],
        "max_ms": 1e3 * ordered[-1],
    }


class PhaseTimer:
    """Accumulates the durations of named phases, each timed between two synchronisations.

    The synchronisations serialise host and device at every phase boundary, so an instrumented
    step is slower than a plain one; the split says where the device time goes, not how fast
    the uninstrumented loop runs.
    """

    def __init__(self, sync: Sync = lambda: None, clock: Clock = time.perf_counter):
        self.sync, self.clock = sync, clock
        self.durations: dict[str, list[float]] = defaultdict(list)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the enclosed block as one occurrence of ``name``."""
        self.sync()
        start = self.clock()
        yield
        self.sync()
        self.durations[name].append(self.clock() - start)

    def split(self, groups: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
        """Per phase (and per group of phases) the mean and median ms and the fraction of time.

        Fractions are each phase's total time over the total of all phases, so they sum to 1.
        """
        totals = {name: sum(values) for name, values in self.durations.items()}
        overall = sum(totals.values())
        if overall <= 0:
            raise ValueError("PhaseTimer.split: no time was recorded")
        steps = max(len(values) for values in self.durations.values())
        phases = {
            name: {
                "mean_ms": 1e3 * totals[name] / len(values),
                "median_ms": 1e3 * statistics.median(values),
                "fraction": totals[name] / overall,
            }
            for name, values in self.durations.items()
        }
        result: dict[str, Any] = {"steps": steps, "step_mean_ms": 1e3 * overall / steps, "phases": phases}
        if groups:
            unknown = sorted(set().union(*groups.values()) - set(totals))
            if unknown:
                raise KeyError(f"PhaseTimer.split: groups name unrecorded phases {unknown}")
            result["groups"] = {
                group: {
                    "mean_ms": 1e3 * sum(totals[n] for n in names) / steps,
                    "fraction": sum(totals[n] for n in names) / overall,
                }
                for group, names in groups.items()
            }
        return result


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window on CUDA (the CPU's peak RSS cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict[str, Any]:
    """Peak memory since `reset_peak_memory`: CUDA allocated/reserved bytes, or the process's
    peak resident set size on the CPU (since process start)."""
    if device.type == "cuda":
        return {
            "kind": "cuda_max_memory_allocated",
            "bytes": torch.cuda.max_memory_allocated(device),
            "reserved_bytes": torch.cuda.max_memory_reserved(device),
        }
    return {"kind": "process_max_rss", "bytes": peak_rss_bytes()}


def peak_rss_bytes(children: bool = False) -> int:
    """Peak resident set size in bytes of this process since it started (``children``: of the
    largest of its children waited for), ``ru_maxrss`` of `resource.getrusage`."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_maxrss * (1 if platform.system() == "Darwin" else 1024)  # macOS reports bytes, Linux KiB


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict[str, Any]:
    """CPU model, cores, memory, load, threads and (on CUDA) the GPU's name and memory."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else None,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = {
            "name": props.name,
            "memory_bytes": props.total_memory,
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
        }
    return info


def versions() -> dict[str, str | None]:
    """Versions of python, torch, numpy, cyclejepa and (when present) CUDA, cuDNN and Triton."""
    import numpy

    from cyclejepa.version import __version__

    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "cyclejepa": __version__,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
    }
    try:
        import triton

        found["triton"] = triton.__version__
    except ImportError:
        found["triton"] = None
    return found
