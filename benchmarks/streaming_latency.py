"""Per-token CPU latency of the streaming encoder and of the transport monitor (paper model).

    python benchmarks/streaming_latency.py [--steps 1000] [--warmup 100] [--batch 1 32]
                                           [--out latency.json]

Each row streams ``steps`` chunks (B, 12, 8) after ``warmup`` untimed ones and times every
`StreamingEncoder.step` (``encoder``) or `TransportMonitor.step` (``monitor``: encoder, causal
phase and score; a beat is confirmed every 10 tokens, outside the timed call) on its own. Rows
run with one thread and with torch's default thread count. Prints median and p99 per token and
the real-time factor (80 ms token period / median); ``--out`` writes the rows, the machine and
the versions (`cyclejepa.bench.timing`) to JSON.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import torch

from cyclejepa.bench.report import markdown_rows
from cyclejepa.bench.timing import machine_info, versions
from cyclejepa.jsonio import write_json
from cyclejepa.models import build_model
from cyclejepa.models.streaming import StreamingEncoder, TransportMonitor
from cyclejepa.symmetry import U1Symmetry

PAPER_SPECTRUM = "4x0+24x1+24x2+20x3+16x4+12x5+10x6+8x7+6x8+4x9+2x10"
TOKEN_PERIOD_MS = 80.0
BEAT_EVERY = 10  # tokens between confirmed beats in the monitor rows (75 bpm)


def time_steps(component: str, batch: int, steps: int, warmup: int) -> np.ndarray:
    """Milliseconds of each of ``steps`` timed calls of ``component``'s step."""
    model = build_model("winder", seed=0)
    streamer = TransportMonitor(model, U1Symmetry(PAPER_SPECTRUM)) if component == "monitor" else StreamingEncoder(model)
    streamer.reset(batch)
    chunks = torch.randn(warmup + steps, batch, 12, 8, generator=torch.Generator().manual_seed(0))
    elapsed = np.empty(warmup + steps)
    for t, chunk in enumerate(chunks):
        if component == "monitor" and t % BEAT_EVERY == 0:
            for record in range(batch):
                streamer.add_peak(8.0 * t, record)
        start = time.perf_counter_ns()
        streamer.step(chunk)
        elapsed[t] = (time.perf_counter_ns() - start) / 1e6
    return elapsed[warmup:]


def measure(batches: Sequence[int], steps: int, warmup: int) -> list[dict]:
    """One row per (threads, component, batch): median, p99 and mean ms per token."""
    default_threads = torch.get_num_threads()
    rows = []
    for threads in sorted({1, default_threads}):
        torch.set_num_threads(threads)
        for component in ("encoder", "monitor"):
            for batch in batches:
                ms = time_steps(component, batch, steps, warmup)
                rows.append(
                    {
                        "component": component,
                        "threads": threads,
                        "batch": batch,
                        "steps": steps,
                        "median_ms": float(np.median(ms)),
                        "p99_ms": float(np.percentile(ms, 99)),
                        "mean_ms": float(ms.mean()),
                        "realtime_factor": TOKEN_PERIOD_MS / float(np.median(ms)),
                    }
                )
    torch.set_num_threads(default_threads)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="timed tokens per row")
    parser.add_argument("--warmup", type=int, default=100, help="untimed tokens first")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--out", help="write the rows and the machine as JSON here")
    args = parser.parse_args(argv)
    rows = measure(args.batch, args.steps, args.warmup)
    host, found = machine_info(torch.device("cpu")), versions()  # the load average at the end of the run
    print(
        f"paper model (1,232,384 deployed parameters), CPU, torch {found['torch']}, "
        f"{host['cpu_count']} CPUs, load average {host['load_average']}"
    )
    header = ["component", "threads", "batch", "median ms/token", "p99 ms/token", "real-time factor"]
    cells = [
        [r["component"], r["threads"], r["batch"], f"{r['median_ms']:.3f}", f"{r['p99_ms']:.3f}", f"{r['realtime_factor']:.0f}x"]
        for r in rows
    ]
    print(*markdown_rows(header, cells, align="l" * 6), sep="\n")
    if args.out:
        write_json(args.out, {"machine": host, "versions": found, "rows": rows})


if __name__ == "__main__":
    main()
