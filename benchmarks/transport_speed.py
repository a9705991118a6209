"""Speed of the O(T·K) transport loss against the vectorised all-pairs O(T²·K) evaluation.

Run ``python benchmarks/transport_speed.py [--batch 64 --tokens 125 --device cpu]``; prints a
table of median forward and forward+backward times and the largest difference between the two.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import torch
from torch.utils.benchmark import Timer

from cyclejepa.bench.throughput.parts import all_pairs_transport_loss, synthetic_batch
from cyclejepa.objectives import transport_loss
from cyclejepa.symmetry import U1Symmetry

PAPER_SPECTRUM = "4x0+24x1+24x2+20x3+16x4+12x5+10x6+8x7+6x8+4x9+2x10"


def _median_seconds(fn: Callable[[], object], min_run_time: float) -> float:
    timer = Timer(stmt="fn()", globals={"fn": fn})
    return timer.blocked_autorange(min_run_time=min_run_time).median


def measure(batch: int, tokens: int, spectrum: str, device: str, min_run_time: float) -> list[tuple[str, float, float, float]]:
    """Rows (method, forward s, forward+backward s, |float32 loss − float64 O(T) loss|)."""
    symmetry = U1Symmetry(spectrum).to(device)
    z, phi = synthetic_batch(batch, tokens, symmetry, device)
    reference = transport_loss(z.double(), phi.double(), symmetry).item()
    z.requires_grad_(True)
    rows = []
    methods = (("O(T) identity", transport_loss), ("all pairs", all_pairs_transport_loss))
    for name, loss_fn in methods:

        def forward(loss_fn=loss_fn):
            with torch.no_grad():
                return loss_fn(z, phi, symmetry)

        def forward_backward(loss_fn=loss_fn):
            loss_fn(z, phi, symmetry).backward()

        difference = abs(forward().item() - reference)
        seconds = [_median_seconds(fn, min_run_time) for fn in (forward, forward_backward)]
        rows.append((name, *seconds, difference))
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=125)
    parser.add_argument("--spectrum", default=PAPER_SPECTRUM)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds per measurement")
    args = parser.parse_args(argv)
    rows = measure(args.batch, args.tokens, args.spectrum, args.device, args.min_run_time)
    print(
        f"transport loss, B={args.batch} T={args.tokens} K={U1Symmetry(args.spectrum).dim} "
        f"on {args.device} ({torch.get_num_threads()} threads)"
    )
    print(f"{'method':<16}{'forward ms':>12}{'fwd+bwd ms':>12}{'|Δ| vs f64':>13}")
    for name, forward, both, difference in rows:
        print(f"{name:<16}{forward * 1e3:>12.2f}{both * 1e3:>12.2f}{difference:>13.1e}")
    speedup = rows[1][1] / rows[0][1], rows[1][2] / rows[0][2]
    print(f"identity speed-up: {speedup[0]:.0f}x forward, {speedup[1]:.0f}x forward+backward")


if __name__ == "__main__":
    main()
