"""The throughput benchmark as a pipeline stage: ``cyclejepa benchmark throughput`` (`throughput_main`,
`benchmark_throughput`).

The stage reads the experiment config (the paper's by default) and each training variant of it,
and hands `cyclejepa.bench.throughput` a `ThroughputSpec`: the trainer's spec per variant, the
objective's sections, the array shapes and the config's hash.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from cyclejepa.bench.report import markdown_report
from cyclejepa.bench.throughput import VARIANTS, ThroughputSpec, measure_throughput, throughput_arguments
from cyclejepa.bench.throughput.common import SAMPLES
from cyclejepa.config import ConfigError, ExperimentConfig, apply_overrides, load_config, parse_config
from cyclejepa.devices import resolve_device
from cyclejepa.jsonio import short_hash
from cyclejepa.pipeline.pretraining import objective_spec
from cyclejepa.training.spec import TrainingSpec


def timed_training_spec(cfg: ExperimentConfig, directory: str | Path, *, seed: int, transport_weight: float) -> TrainingSpec:
    """The trainer's spec of a timed run of ``cfg``: the sections `training_spec` gives a run,
    ``seed`` and λ_trans, and no identity (the benchmark's trainers are never saved nor resumed)."""
    return TrainingSpec(
        objective=objective_spec(cfg),
        optimiser=cfg.optimiser,
        augmentations=tuple(cfg.augmentations),
        training=cfg.training,
        transport_weight=transport_weight,
        seed=seed,
        identity={},
        run_hash="",
        directory=Path(directory),
    )


def throughput_spec(config: dict[str, Any] | None, device: torch.device) -> ThroughputSpec:
    """The `ThroughputSpec` of the raw experiment config ``config`` (a nested dict; None or empty:
    the paper's) on ``device``: per variant, the config with ``training.device``,
    ``training.precision`` and ``training.compile`` set to the variant's."""
    raw = copy.deepcopy(config or {})
    cfg = parse_config(raw, source="benchmark config")
    channels, patch = cfg.model.encoder.leads, cfg.model.encoder.patch
    if channels is None or patch is None:
        raise ConfigError(
            [f"model.encoder needs leads and patch for the synthetic training arrays, got {channels} and {patch}"],
            source="benchmark config",
        )

    def trainer(precision: str, compile_mode: str | bool) -> TrainingSpec:
        training = {"device": str(device), "precision": precision, "compile": compile_mode}
        variant = apply_overrides(raw, [f"training.{key}={json.dumps(value)}" for key, value in training.items()])
        return timed_training_spec(parse_config(variant, source="benchmark config"), Path(), seed=0, transport_weight=1.0)

    return ThroughputSpec(
        device=device,
        objective=objective_spec(cfg),
        batch_size=cfg.training.batch_size,
        channels=channels,
        tokens=SAMPLES // patch,
        trainers={name: trainer(variant.precision, variant.compile_mode or False) for name, variant in VARIANTS.items()},
        ensemble=trainer("bf16" if device.type == "cuda" else "float32", False),
        config_hash=short_hash(cfg.model_dump(mode="json")),
        config_overrides=raw,
    )


def benchmark_throughput(
    device: str = "auto",
    quick: bool = False,
    out: str | os.PathLike | None = None,
    *,
    config: dict[str, Any] | None = None,
    sections: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    prepare_records: int | None = None,
    deadline_s: float | None = None,
    threads: int | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the throughput benchmark of ``config`` (nested dict for `parse_config`; default the
    paper's) on ``device`` (``"auto"``: CUDA when present) and return its results; the other
    arguments are those of `cyclejepa.bench.throughput.measure_throughput`."""
    spec = throughput_spec(config, resolve_device(device))
    return measure_throughput(
        spec,
        quick,
        out,
        sections=sections,
        variants=variants,
        prepare_records=prepare_records,
        deadline_s=deadline_s,
        threads=threads,
        log=log,
    )


def throughput_main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command line: ``cyclejepa benchmark throughput [--quick] [--device cuda] [--out PATH] ...``."""
    args = throughput_arguments().parse_args(argv)
    try:
        config = load_config(args.config).model_dump(mode="json") if args.config else None
        out = args.out or Path("runs/benchmarks") / f"throughput-{_device_tag(args.device)}.json"
        report = benchmark_throughput(
            args.device,
            args.quick,
            out,
            config=config,
            sections=args.sections,
            variants=args.variants,
            prepare_records=args.prepare_records,
            deadline_s=args.deadline_s,
            threads=args.threads,
        )
    except ValueError as error:  # a ConfigError (exit status 2), an unknown section or variant
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2 if isinstance(error, ConfigError) else 1) from None
    print(markdown_report(report))
    print(f"\nwrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return report


def _device_tag(device: str) -> str:
    """``device`` as a file-name part: ``auto`` resolved to cuda or cpu, without the colon."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return device.replace(":", "")
