"""Harmonic allocations compared on the synthetic corpus (same as `cyclejepa benchmark allocations`).

python benchmarks/harmonic_allocations.py --out runs/allocations --seeds 0 1
"""

from cyclejepa.bench.commands import allocations_main as main

if __name__ == "__main__":
    main()
