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
