"""The parts of a step timed alone: the transport loss (O(T) against all pairs), SIGReg and
inference of the deployed path."""

from __future__ import annotations

import importlib.util
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from cyclejepa.bench.throughput.common import INFERENCE_BATCH, SAMPLES, TRANSPORT_TOKENS, Budget
from cyclejepa.bench.throughput.spec import ThroughputSpec
from cyclejepa.bench.timing import device_sync, summarise, time_calls
from cyclejepa.objectives import transport_loss
from cyclejepa.registry import REGULARISERS
from cyclejepa.symmetry import U1Symmetry
from cyclejepa.training.trainer import build_configured_model


def measure_transport(spec: ThroughputSpec, budget: Budget) -> dict[str, Any]:
    """O(T) transport loss vs the all-pairs evaluation of benchmarks/transport_speed.py.

    The all-pairs version holds (chunk, T, T, K) tensors, so it runs on
    ``budget.naive_records`` records and its batch time is extrapolated linearly (records are
    independent), which the row says.
    """
    speed, device = _transport_speed_module(), spec.device
    symmetry = U1Symmetry(spec.objective.symmetry.spectrum).to(device)
    batch, dim = spec.batch_size, symmetry.dim
    sync = device_sync(device)
    rows = []
    for tokens, naive_records in zip(TRANSPORT_TOKENS, budget.naive_records, strict=True):
        z, phi = speed.synthetic_batch(batch, tokens, symmetry, str(device))
        chunk = max(1, min(8, 2**25 // (tokens * tokens * dim)))  # ≤ 128 MiB per float32 intermediate

        def all_pairs(z, phi, symmetry, chunk=chunk):
            return speed.all_pairs_transport_loss(z, phi, symmetry, records_per_chunk=chunk)

        n = min(batch, naive_records)
        with torch.no_grad():
            difference = float((transport_loss(z[:n], phi[:n], symmetry) - all_pairs(z[:n], phi[:n], symmetry)).abs())
        fast = _time_loss(transport_loss, z, phi, symmetry, budget.part_warmup, budget.repeats, sync)
        slow = _time_loss(all_pairs, z[:n], phi[:n], symmetry, budget.part_warmup, budget.naive_repeats, sync)
        common = {"tokens": tokens, "batch": batch, "dim": dim, "abs_difference": difference}
        rows.append({**common, "method": "O(T) identity", "records_measured": batch, "extrapolated": False, **fast})
        rows.append(
            {
                **common,
                "method": "all pairs",
                "records_measured": n,
                "extrapolated": n < batch,
                **{key: value * batch / n for key, value in slow.items()},
                "speedup_forward": slow["forward_ms"] * batch / n / fast["forward_ms"],
                "speedup_forward_backward": slow["forward_backward_ms"] * batch / n / fast["forward_backward_ms"],
            }
        )
    return {"status": "ok", "rows": rows}


def _time_loss(loss_fn, z, phi, symmetry, warmup: int, repeats: int, sync) -> dict[str, float]:
    """Median forward (no grad) and forward + backward ms of ``loss_fn(z, phi, symmetry)``."""
    leaf = z.detach().clone().requires_grad_(True)

    def forward() -> None:
        with torch.no_grad():
            loss_fn(leaf, phi, symmetry)

    def forward_backward() -> None:
        leaf.grad = None
        loss_fn(leaf, phi, symmetry).backward()

    return {
        name: summarise(time_calls(fn, warmup=warmup, repeats=repeats, sync=sync))["median_ms"]
        for name, fn in (("forward_ms", forward), ("forward_backward_ms", forward_backward))
    }


def measure_sigreg(spec: ThroughputSpec, budget: Budget) -> dict[str, Any]:
    """SIGReg on N = B × T random tokens with fresh directions per call (as in training)."""
    device, configured = spec.device, spec.objective.objectives.regulariser
    regulariser = REGULARISERS.build("sigreg", configured.options if configured.name == "sigreg" else None)
    tokens = spec.batch_size * spec.tokens
    generator = torch.Generator(device=device).manual_seed(0)
    z = torch.randn(tokens, spec.objective.model.projector.dim, generator=generator, device=device).requires_grad_(True)
    sync = device_sync(device)

    def forward() -> None:
        with torch.no_grad():
            regulariser(z, generator=generator)

    def forward_backward() -> None:
        z.grad = None
        regulariser(z, generator=generator).backward()

    row: dict[str, Any] = {
        "status": "ok",
        "N": tokens,
        "K": z.shape[1],
        "M": regulariser.num_directions,
        "J": getattr(regulariser.statistic, "knots", None),  # Epps–Pulley's quadrature knots
    }
    for name, fn in (("forward", forward), ("forward_backward", forward_backward)):
        row[name] = summarise(time_calls(fn, warmup=budget.part_warmup, repeats=budget.repeats, sync=sync))
    return row


def measure_inference(spec: ThroughputSpec, budget: Budget) -> dict[str, Any]:
    """Records/s of the deployed path (encoder + projector), no grad, batch `INFERENCE_BATCH`."""
    device = spec.device
    model = build_configured_model(spec.objective.model, seed=0).to(device).eval()
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(INFERENCE_BATCH, spec.channels, SAMPLES, generator=generator, device=device)
    sync = device_sync(device)
    rows = []
    for precision in ("float32", "bf16") if device.type == "cuda" else ("float32",):
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else nullcontext()

        def forward(autocast=autocast) -> None:
            with torch.no_grad(), autocast:
                model(x)

        step = summarise(time_calls(forward, warmup=budget.part_warmup, repeats=budget.repeats, sync=sync))
        rows.append(
            {
                "precision": precision,
                "batch": INFERENCE_BATCH,
                "batch_ms": step,
                "records_per_s": INFERENCE_BATCH * 1e3 / step["median_ms"],
            }
        )
    return {"status": "ok", "rows": rows}


def _transport_speed_module():
    """benchmarks/transport_speed.py of the source checkout (its all-pairs reference).

    It is a script beside the package, not part of it: found in editable installs and
    checkouts, absent from a wheel install (the transport section then fails with this message).
    """
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "transport_speed.py"
    if not path.is_file():
        raise FileNotFoundError(f"the all-pairs transport reference {path} is not there (not a source checkout)")
    spec = importlib.util.spec_from_file_location("cyclejepa_benchmarks_transport_speed", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
