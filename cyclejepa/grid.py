"""The grid: a config's ``grid`` of ``key.path: [values]`` as one experiment per combination,
labelled ``g00``, ``g01``, … in the order of `itertools.product` over the sorted key paths.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_GRID_CELLS = 256
"""Most experiments one ``grid`` may hold (each is validated, trained and evaluated in full)."""


@dataclass(frozen=True)
class GridCell:
    """One combination of a grid: label, base config (less the grid), ``key.path=value`` values and directories."""

    label: str
    base: dict[str, Any]
    values: list[str]
    directories: list[str]

    @property
    def overrides(self) -> list[str]:
        """The cell's values, then its directories, as overrides of `base`."""
        return self.values + self.directories

    @property
    def source(self) -> str:
        """How an error in this cell names it: ``grid g01 (optimiser.lr=0.001)``."""
        return f"grid {self.label} ({', '.join(self.values)})"


def grid_size(grid: dict[str, list[Any]]) -> int:
    """Experiments in a grid: the product of its value counts (1 for no grid)."""
    return math.prod(len(values) for values in grid.values())


def grid_size_problem(grid: dict[str, list[Any]]) -> str | None:
    """The line refusing a grid of more than `MAX_GRID_CELLS` experiments, or None."""
    cells = grid_size(grid)
    if cells <= MAX_GRID_CELLS:
        return None
    sizes = " × ".join(f"{len(grid[key])} ({key})" for key in sorted(grid))
    return f"grid: {sizes} = {cells} experiments, more than the {MAX_GRID_CELLS} a grid may hold; split it"


def grid_cells(dumped: dict[str, Any], derived: set[str]) -> list[GridCell]:
    """Every combination of a config's ``grid`` from its JSON dump, less the grid and the
    ``derived`` keys (derived again per cell), in ``<output_dir>/grid/<label>``, sharing the cache."""
    grid, output_dir = dumped["grid"], Path(dumped["output_dir"])
    cache_dir = dumped["data"]["cache_dir"] or output_dir / "cache"
    base = _without(dumped, {"grid", *derived})
    keys = sorted(grid)
    cells = []
    for index, values in enumerate(itertools.product(*(grid[k] for k in keys))):
        label = f"g{index:02d}"
        directories = [
            f"output_dir={json.dumps(str(output_dir / 'grid' / label))}",
            f"data.cache_dir={json.dumps(str(cache_dir))}",
        ]
        cells.append(
            GridCell(label, base, [f"{key}={json.dumps(value)}" for key, value in zip(keys, values, strict=True)], directories)
        )
    return cells


def _without(dumped: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """A copy of ``dumped`` less the dotted ``keys``."""
    base = copy.deepcopy(dumped)
    for key in keys:
        *parents, leaf = key.split(".")
        node = base
        for part in parents:
            node = node[part]
        node.pop(leaf, None)
    return base
