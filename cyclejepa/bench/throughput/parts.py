"""The parts of a step timed alone: the transport loss (O(T) against all pairs,
`all_pairs_transport_loss`, which ``benchmarks/transport_speed.py`` times too), SIGReg and
inference of the deployed path."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from cyclejepa.bench.throughput.common import INFERENCE_BATCH, SAMPLES, TRANSPORT_TOKENS, Budget
from cyclejepa.bench.throughput.spec import ThroughputSpec
from cyclejepa.bench.timing import device_sync, summarise, time_calls
from cyclejepa.objectives import transport_loss
from cyclejepa.registry import REGULARISERS
from cyclejepa.symmetry import U1Symmetry
from cyclejepa.training.trainer import build_configured_model


def measure_transport(spec: ThroughputSpec, budget: Budget) -> dict[str, Any]:
    """O(T) transport loss vs the all-pairs evaluation (`all_pairs_transport_loss`).

    The all-pairs version holds (chunk, T, T, K) tensors, so it runs on
    ``budget.naive_records`` records and its batch time is extrapolated linearly (records are
    independent), which the row says.
    """
    device = spec.device
    symmetry = U1Symmetry(spec.objective.symmetry.spectrum).to(device)
    batch, dim = spec.batch_size, symmetry.dim
    sync = device_sync(device)
    rows = []
    for tokens, naive_records in zip(TRANSPORT_TOKENS, budget.naive_records, strict=True):
        z, phi = synthetic_batch(batch, tokens, symmetry, str(device))
        chunk = max(1, min(8, 2**25 // (tokens * tokens * dim)))  # ≤ 128 MiB per float32 intermediate

        def all_pairs(z, phi, symmetry, chunk=chunk):
            return all_pairs_transport_loss(z, phi, symmetry, records_per_chunk=chunk)

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


def all_pairs_transport_loss(z: Tensor, phi: Tensor, symmetry: U1Symmetry, records_per_chunk: int = 8) -> Tensor:
    """Transport loss from every ρ(φ_t' − φ_t) ẑ_t explicitly: (T, T, K) per record.

    Records are processed in chunks to bound the (chunk, T, T, K) intermediate.
    """
    per_record = []
    for z_chunk, phi_chunk in zip(z.split(records_per_chunk), phi.split(records_per_chunk), strict=True):
        unit = F.normalize(z_chunk, dim=-1)
        valid = torch.isfinite(phi_chunk)
        phases = torch.where(valid, phi_chunk, 0.0)
        shift = phases.unsqueeze(1) - phases.unsqueeze(2)  # [b, t, t'] = φ_t' − φ_t
        moved = symmetry.act(unit.unsqueeze(2).expand(-1, -1, unit.shape[1], -1), shift)
        cosine = (moved * unit.unsqueeze(1)).sum(-1)
        pair = valid.unsqueeze(1) & valid.unsqueeze(2)
        pair &= ~torch.eye(unit.shape[1], dtype=torch.bool, device=z.device)
        counts = pair.sum((1, 2))
        mean = (cosine * pair).sum((1, 2)) / counts.clamp_min(1)
        per_record.append(torch.where(counts > 0, 1 - mean, torch.nan))
    losses = torch.cat(per_record)
    return losses.nanmean()


def synthetic_batch(batch: int, tokens: int, symmetry: U1Symmetry, device: str, seed: int = 0):
    """Noisy equivariant tokens ρ(φ_t) v_b + noise under a linear phase (10–12 tokens per cycle)
    that is undefined before the first and after the last event."""
    gen = torch.Generator().manual_seed(seed)
    cycle_tokens = 10.0 + 2.0 * torch.rand(batch, 1, generator=gen)
    offset = 2 * torch.pi * torch.rand(batch, 1, generator=gen)
    phi = (offset + 2 * torch.pi * torch.arange(tokens) / cycle_tokens) % (2 * torch.pi)
    template = torch.randn(batch, 1, symmetry.dim, generator=gen).expand(-1, tokens, -1)
    z = symmetry.act(template, phi) + torch.randn(batch, tokens, symmetry.dim, generator=gen)
    first = torch.randint(0, 12, (batch, 1), generator=gen)
    last = tokens - torch.randint(1, 12, (batch, 1), generator=gen)
    position = torch.arange(tokens)
    phi = phi.masked_fill((position < first) | (position >= last), float("nan"))
    return z.to(device), phi.to(device)
