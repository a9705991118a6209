"""Benchmarks importable by the command line: timing helpers and the throughput benchmark."""

from cyclejepa.bench.throughput import main, run_throughput

__all__ = ["main", "run_throughput"]
