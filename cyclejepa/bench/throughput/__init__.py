"""Measured speed of the trainer and its parts (``cyclejepa benchmark throughput``).

What is measured, for the configured model (the paper's by default) at its batch size:

- **training**: steps/s of `Trainer.train_step` (batch draw, augmentation, forward, objectives,
  backward, optimiser) per precision/compile variant: the median of device-synchronised timed
  steps after warm-up, the sustained rate of a window of unsynchronised steps (CUDA), peak
  memory, the split of a step into phases (an instrumented pass that synchronises at every
  phase boundary: nine phases for eager variants, the step's own four parts — inputs, compiled
  forward, backward, clipping + optimiser — for compiled ones) and, on CUDA, every host
  synchronisation of an eager step;
- **transport**: the O(T) transport loss against the all-pairs evaluation at T = 125 and 1,000;
- **sigreg**: the SIGReg regulariser on all B × T tokens, forward and forward + backward;
- **inference**: records/s of the deployed path (encoder + projector), no grad, batch 256;
- **prepare**: records/s per worker of `prepare_cache` on a synthetic corpus in a temp folder;
- **ensemble**: aggregate steps/s of N = 1, 2, 4 runs stepped as one stacked ensemble
  (`cyclejepa.training.stacked`) against the same runs stepped in turn, eager;
- **equality**: the first training steps' losses of every variant against strict float32.

Results go to one JSON file plus a Markdown report beside it (``.md``).

The config is read by the command layer (`cyclejepa.bench.commands`), which hands this package a
`ThroughputSpec`. Modules: `spec`, `common` (settings, variants, budgets), one per section
(`training`, `equality`, `parts` for transport, SIGReg and inference, `prepare`, `ensemble`) and
`run` (`measure_throughput` and the command line's arguments).
"""

from cyclejepa.bench.throughput.common import SECTIONS, SPLIT_GROUPS, VARIANTS, Budget, Variant
from cyclejepa.bench.throughput.equality import compare_traces
from cyclejepa.bench.throughput.run import measure_throughput, throughput_arguments
from cyclejepa.bench.throughput.spec import ThroughputSpec
from cyclejepa.bench.throughput.training import instrumented_step, product_step, synthetic_training_arrays

__all__ = [
    "SECTIONS",
    "SPLIT_GROUPS",
    "VARIANTS",
    "Budget",
    "ThroughputSpec",
    "Variant",
    "compare_traces",
    "instrumented_step",
    "product_step",
    "measure_throughput",
    "synthetic_training_arrays",
    "throughput_arguments",
]
