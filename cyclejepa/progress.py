"""The one progress display of the library's long loops: a rich bar on a terminal, plain lines
in a log (rich imported only when shown)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol


class ProgressUpdate(Protocol):
    """``update(advance=0, *, completed=None, **fields)``: move the bar and set its fields."""

    def __call__(self, advance: int = 0, *, completed: int | None = None, **fields: str) -> None: ...


def _ignore(advance: int = 0, *, completed: int | None = None, **fields: str) -> None:
    """The update of a hidden bar."""


PLAIN_EVERY_S = 30.0
"""Seconds between two plain progress lines (stderr not a terminal)."""


def _terminal() -> bool:
    return sys.stderr.isatty()


@contextlib.contextmanager
def progress_bar(
    total: int,
    description: str,
    *,
    enabled: bool = True,
    completed: int = 0,
    fields: Sequence[str] = (),
    rate: bool = False,
    unit: str = "it",
    every: float | None = None,
) -> Iterator[ProgressUpdate]:
    """Progress of ``total`` units on stderr, yielding a `ProgressUpdate` (nothing when not ``enabled``).

    On a terminal a rich bar: description, bar, M/N, the text ``fields``, [mean ``rate`` in ``unit``/s,]
    time remaining. Elsewhere a line at the first update, every ``every`` seconds (default
    `PLAIN_EVERY_S`) and at the end: ``description: M/N (P%) fields, R unit/s, ETA h:mm:ss``.
    """
    if not enabled:
        yield _ignore
        return
    if not _terminal():
        with _plain_lines(total, description, completed, PLAIN_EVERY_S if every is None else every, unit) as update:
            yield update
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    shown = (*fields, "rate") if rate else tuple(fields)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(bar_width=20 if shown else 40),  # narrower when text columns follow
        MofNCompleteColumn(),
        *(TextColumn(f"{{task.fields[{name}]}}") for name in shown),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        blank: dict[str, Any] = dict.fromkeys(shown, "")  # rich's **fields, not its named options
        task = bar.add_task(description, total=total, completed=completed, **blank)
        began, first, done = time.perf_counter(), completed, completed

        def update(advance: int = 0, *, completed: int | None = None, **values: str) -> None:
            nonlocal done
            done = (done if completed is None else completed) + advance
            if rate:
                values["rate"] = f"{(done - first) / max(time.perf_counter() - began, 1e-9):.1f} {unit}/s"
            shown_values: dict[str, Any] = values  # rich's **fields, not its named options
            bar.update(task, completed=done, **shown_values)

        yield update


@contextlib.contextmanager
def _plain_lines(total: int, description: str, completed: int, every: float, unit: str) -> Iterator[ProgressUpdate]:
    began, first = time.monotonic(), completed
    done = completed
    fields: dict[str, str] = {}
    printed: float | None = None
    last: int | None = None

    def line() -> None:
        nonlocal printed, last
        elapsed = time.monotonic() - began
        speed = (done - first) / elapsed if elapsed > 0 else 0.0
        eta = _clock_text((total - done) / speed) if speed > 0 else "?"
        parts = [f"{description}: {done}/{total} ({100 * done / max(total, 1):.0f}%)", *fields.values()]
        print(f"{' '.join(parts)}, {speed:.1f} {unit}/s, ETA {eta}", file=sys.stderr, flush=True)
        printed, last = time.monotonic(), done

    def update(advance: int = 0, *, completed: int | None = None, **values: str) -> None:
        nonlocal done
        done = (done if completed is None else completed) + advance
        fields.update(values)
        if printed is None or time.monotonic() - printed >= every:
            line()

    yield update
    if last != done:
        line()


def _clock_text(seconds: float) -> str:
    """``h:mm:ss`` of a duration."""
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
