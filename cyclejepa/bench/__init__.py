"""Benchmarks behind ``cyclejepa benchmark NAME``, importable from an installed package.

`cyclejepa.bench.throughput` measures the speed of the trainer and its parts,
`cyclejepa.bench.allocations` compares harmonic allocations, and `cyclejepa.bench.timing` holds
the device-synchronised timing helpers. Nothing is imported here, so that one benchmark does not
load the other's dependencies.
"""
