"""One writer per output directory: an advisory lock file holding the writer's pid and host.

A second writer on the directory, or on a folder enclosing it or inside it, is refused with
`OutputLocked` naming the holder; a lock of a process gone from this host is taken over with a
warning. Children of the holder inherit its token through `HOLDER_ENV` and pass.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from cyclejepa.workers import environment

log = logging.getLogger(__name__)

LOCK_FILE = ".cyclejepa.lock"
HOLDER_ENV = "CYCLEJEPA_LOCK_TOKENS"
"""Tokens of the locks held by this process and its ancestors, comma-separated."""


class OutputLocked(FileExistsError):
    """Another live process writes to the output directory."""


@contextlib.contextmanager
def output_lock(directory: str | os.PathLike) -> Iterator[Path]:
    """Hold ``<directory>/.cyclejepa.lock`` for the ``with`` block; `OutputLocked` when a live
    process (or one on another host, which cannot be checked) holds it or a nested one."""
    path = Path(directory) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    held = _read(path)
    if held is not None and held.get("token") in _inherited_tokens():
        yield path  # our parent holds it: enter without taking it
        return
    with _holding(path) as token:
        _check_nested(path)
        with environment({HOLDER_ENV: ",".join(filter(None, (os.environ.get(HOLDER_ENV), token)))}):
            yield path


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, subject: str) -> Iterator[Path]:
    """Hold the lock file ``path`` itself (its folder must exist) like `output_lock`, without the
    checks of nested folders; ``subject`` names what it guards in the refusal."""
    with _holding(Path(path), subject):
        yield Path(path)


@contextlib.contextmanager
def _holding(path: Path, subject: str | None = None) -> Iterator[str]:
    """The lock file ``path`` taken under a new token (yielded), removed after if still ours."""
    token = uuid.uuid4().hex
    with _guard(path):
        _take(path, token, subject)
    try:
        yield token
    finally:
        if (_read(path) or {}).get("token") == token:
            path.unlink(missing_ok=True)


def _take(path: Path, token: str, subject: str | None = None) -> None:
    """Create the lock file, taking over a stale one; raise `OutputLocked` on a live holder."""
    entry = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "token": token,
    }
    try:
        _create(path, entry)
        return
    except FileExistsError:
        pass
    held = _read(path)
    if held is not None and not _stale(held):
        raise _refusal(path, held, subject)
    log.warning(
        "taking over the stale lock %s: %s",
        path,
        "unreadable" if held is None else f"pid {held.get('pid')} no longer runs on {held.get('host')}",
    )
    path.unlink(missing_ok=True)
    _create(path, entry)


def _check_nested(path: Path) -> None:
    """Refuse a live lock, not our ancestors', of an enclosing folder or of a folder inside."""
    directory = path.parent.resolve()
    enclosing = [folder / LOCK_FILE for folder in directory.parents]
    inside = [found for found in directory.rglob(LOCK_FILE) if found != directory / LOCK_FILE]
    inherited = _inherited_tokens()
    for other in (*enclosing, *inside):
        held = _read(other) if other.is_file() else None
        if held is not None and held.get("token") not in inherited and not _stale(held):
            raise _refusal(other, held)


def _refusal(path: Path, held: dict, subject: str | None = None) -> OutputLocked:
    return OutputLocked(
        f"{subject or path.parent} is in use by pid {held.get('pid')} on host {held.get('host')} "
        f"({held.get('command', '?')}, since {held.get('started', '?')}); wait for it to end. "
        f"If that process is gone, delete {path}."
    )


def _create(path: Path, entry: dict) -> None:
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(handle, "w") as stream:
        json.dump(entry, stream)


def _read(path: Path) -> dict | None:
    """The lock's entry; None when absent or unreadable (a writer killed mid-write)."""
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def _stale(held: dict) -> bool:
    """Whether the holder is a process of this host that no longer runs."""
    if held.get("host") != socket.gethostname() or not isinstance(held.get("pid"), int):
        return False
    try:
        os.kill(held["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by another user
        return False
    return False


@contextlib.contextmanager
def _guard(path: Path) -> Iterator[None]:
    """Serialise check-and-take between processes of this host: ``flock`` on the directory."""
    try:
        import fcntl
    except ImportError:  # no flock: the O_EXCL create alone decides
        yield
        return
    handle = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # releases the flock


def _inherited_tokens() -> set[str]:
    return set(filter(None, os.environ.get(HOLDER_ENV, "").split(",")))
