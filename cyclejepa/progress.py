"""The one progress bar of the library's long loops (rich, imported only when shown)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Protocol


class ProgressUpdate(Protocol):
    """``update(advance=0, *, completed=None, **fields)``: move the bar and set its fields."""

    def __call__(self, advance: int = 0, *, completed: int | None = None, **fields: str) -> None: ...


def _ignore(advance: int = 0, *, completed: int | None = None, **fields: str) -> None:
    """The update of a hidden bar."""


@contextlib.contextmanager
def progress_bar(
    total: int,
    description: str,
    *,
    enabled: bool = True,
    completed: int = 0,
    fields: Sequence[str] = (),
    rate: bool = False,
) -> Iterator[ProgressUpdate]:
    """A rich progress bar: description, bar, M/N, ``fields``, [it/s,] time remaining.

    Parameters
    ----------
    total
        Units of work (records, steps).
    description
        Label at the left of the bar.
    enabled
        Show the bar; when False nothing is imported or drawn and updates do nothing.
    completed
        Units already done (a resumed run starts there).
    fields
        Names of text columns shown after M/N, set by keyword in the update (e.g. loss terms).
    rate
        Show the mean rate since the bar opened, in units per second ("it/s").

    Yields
    ------
    ProgressUpdate
        ``update(advance=0, *, completed=None, **fields)``: advance by ``advance`` units, or set
        the count to ``completed``, and set the named fields.
    """
    if not enabled:
        yield _ignore
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    shown = (*fields, "rate") if rate else tuple(fields)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(bar_width=20 if shown else 40),  # narrower when text columns follow
        MofNCompleteColumn(),
        *(TextColumn(f"{{task.fields[{name}]}}") for name in shown),
        TimeRemainingColumn(),
    )
    with Progress(*columns) as bar:
        task = bar.add_task(description, total=total, completed=completed, **dict.fromkeys(shown, ""))
        began, first, done = time.perf_counter(), completed, completed

        def update(advance: int = 0, *, completed: int | None = None, **values: str) -> None:
            nonlocal done
            done = (done if completed is None else completed) + advance
            if rate:
                values["rate"] = f"{(done - first) / max(time.perf_counter() - began, 1e-9):.1f} it/s"
            bar.update(task, completed=done, **values)

        yield update
