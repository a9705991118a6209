"""The library's benchmarks, behind ``cyclejepa benchmark NAME``: the one home of their code.

Two layers. On top, `cyclejepa.bench.commands`: each benchmark's command, the only module here
that reads the experiment config; it runs the pipeline stages a benchmark needs and hands the
layer below a spec. Below it, the benchmarks themselves, which take specs and never the config:
`cyclejepa.bench.throughput` (the speed of the trainer and its parts), `cyclejepa.bench.allocations`
(harmonic allocations compared), `cyclejepa.bench.ptbxl` (the PTB-XL statement tasks) and
`cyclejepa.bench.experiment` (the wall time of a whole experiment's stages); and what every
benchmark and every script of ``benchmarks/`` measures and writes with: `cyclejepa.bench.timing`
(device-synchronised clocks, step statistics, peak memory and resident set size, machine and
versions) and `cyclejepa.bench.report` (Markdown tables). The bench sits above the pipeline;
nothing in the package imports it but the command line. Nothing is imported here, so that one
benchmark does not load the other's dependencies.
"""
