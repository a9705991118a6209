"""The ``cyclejepa`` command line (typer + rich)."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from cyclejepa import __version__, registry
from cyclejepa.config import ConfigError, load_config

app = typer.Typer(
    name="cyclejepa",
    help="Phase-equivariant self-supervised learning on cyclic biosignals.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True)

ConfigPath = Annotated[Path, typer.Argument(help="experiment YAML file")]
Overrides = Annotated[
    list[str] | None, typer.Option("--set", help="override a config key: a.b.c=value (repeatable)")
]


def _load(config: Path, overrides: list[str] | None):
    """Load a config or exit with its problems listed."""
    try:
        return load_config(config, overrides or [])
    except ConfigError as error:
        errors.print(f"[red]invalid config[/red] {error}", markup=True, highlight=False)
        raise typer.Exit(code=2) from None


@app.command()
def validate(config: ConfigPath, set_: Overrides = None) -> None:
    """Check a config file: unknown keys, wrong types and unknown component names."""
    cfg = _load(config, set_)
    console.print(f"[green]valid[/green] {config} (hash {cfg.config_hash()})")


@app.command()
def info() -> None:
    """Versions, devices and every registered component."""
    import numpy
    import torch

    versions = Table(title="cyclejepa", show_header=False)
    versions.add_row("cyclejepa", __version__)
    versions.add_row("python", platform.python_version())
    versions.add_row("torch", torch.__version__)
    versions.add_row("numpy", numpy.__version__)
    versions.add_row("devices", ", ".join(_devices()))
    console.print(versions)
    components = Table(title="registered components")
    components.add_column("registry")
    components.add_column("names")
    for kind, reg in registry.ALL_REGISTRIES.items():
        components.add_row(kind, ", ".join(reg.names()) or "-")
    console.print(components)


@app.command()
def phase(
    records: Annotated[list[Path], typer.Argument(help="WFDB record paths, without extension")],
    lead: Annotated[str | None, typer.Option(help="lead name, a comma list, or 'all'; default II")] = None,
    provider: Annotated[str, typer.Option(help="registered phase provider")] = "ecg-rpeak",
    format: Annotated[str, typer.Option("--format", help="jsonl or table")] = "jsonl",
) -> None:
    """Detect cycle events (R-peaks) and phase QC for each record: one JSON object per record."""
    import json

    from cyclejepa.phase import phase_record

    if format not in ("jsonl", "table"):
        raise typer.BadParameter(f"--format must be jsonl or table, got {format!r}")
    leads = lead.split(",") if lead and "," in lead else lead
    table = Table("record", "fs", "beats", "phase yield", "qc")
    for record in records:
        try:
            result = phase_record(record, lead=leads, provider=provider)
        except (FileNotFoundError, ValueError, KeyError) as error:
            errors.print(f"[red]{record}[/red]: {error}", highlight=False)
            raise typer.Exit(code=1) from None
        if format == "jsonl":
            print(json.dumps(result))
        else:
            verdict = "ok" if result["qc"]["ok"] else ", ".join(result["qc"]["reasons"])
            table.add_row(result["record"], str(result["fs"]), str(len(result["r_peaks"])), f"{result['phase_yield']:.3f}", verdict)
    if format == "table":
        console.print(table)


def _devices() -> list[str]:
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        found.append("mps")
    return found


def main() -> None:
    app()


if __name__ == "__main__":
    main()
