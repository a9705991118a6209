"""Measured speed of the trainer and its parts: ``python benchmarks/throughput.py [--quick]``.

A thin script over `cyclejepa.bench.commands` (also ``cyclejepa benchmark throughput``);
``--help`` lists the options. Writes runs/benchmarks/throughput-DEVICE.json and .md.
"""

from cyclejepa.bench.commands import throughput_main

if __name__ == "__main__":
    throughput_main()
