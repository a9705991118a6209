"""One writer per output directory: an advisory lock file holding the writer's pid and host.

`output_lock` creates ``<directory>/.cyclejepa.lock`` (pid, host, command, start time, a random
token) for as long as its ``with`` block runs, and removes it afterwards. A second writer on the
same directory, or on a folder enclosing it or inside it while that one is held (`run` locks the
output directory, `train` its run's folder), is refused with `OutputLocked`, naming the holder.
A lock left by a process that no longer runs on this host is stale: it is taken over with a
warning. Processes started by the holder (``runs.at_once`` training children) inherit its token
through `HOLDER_ENV` and are not refused by it; under ``torchrun`` only rank 0 takes a lock.
`file_lock` holds one lock file alone (a cache's, beside it, while it is prepared).
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

log = logging.getLogger(__name__)

LOCK_FILE = ".cyclejepa.lock"
HOLDER_ENV = "CYCLEJEPA_LOCK_TOKENS"
"""Tokens of the locks held by this process and its ancestors, comma-separated."""


class OutputLocked(FileExistsError):
    """Another live process writes to the output directory."""


@contextlib.contextmanager
def output_lock(directory: str | os.PathLike) -> Iterator[Path]:
    """Hold the lock of ``directory`` (created if missing) for the ``with`` block; yields its path.

    Raises
    ------
    OutputLocked
        When a live process (or one on another host, which cannot be checked) holds it.
    """
    path = Path(directory) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    held = _read(path)
    if held is not None and held.get("token") in _inherited_tokens():
        yield path  # our parent holds it: enter without taking it
        return
    token = uuid.uuid4().hex
    with _guard(path):
        _take(path, token)
    try:
        _check_nested(path)
    except OutputLocked:
        path.unlink(missing_ok=True)
        raise
    previous = os.environ.get(HOLDER_ENV)
    os.environ[HOLDER_ENV] = ",".join(filter(None, (previous, token)))
    try:
        yield path
    finally:
        _restore_env(previous)
        if (_read(path) or {}).get("token") == token:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, subject: str) -> Iterator[Path]:
    """Hold the lock file ``path`` itself for the ``with`` block (its folder must exist): the
    same entry, refusal and stale take-over as `output_lock`, without its checks of enclosing
    and inner folders. ``subject`` names what it guards in the refusal (e.g. "the cache X").

    Raises
    ------
    OutputLocked
        When a live process (or one on another host, which cannot be checked) holds it.
    """
    path = Path(path)
    token = uuid.uuid4().hex
    with _guard(path):
        _take(path, token, subject)
    try:
        yield path
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
    """Refuse when a live process other than our ancestors holds a lock of an enclosing folder
    (a `run` writing the whole output directory) or of a folder inside (a `train` of one run)."""
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


def _restore_env(previous: str | None) -> None:
    if previous is None:
        os.environ.pop(HOLDER_ENV, None)
    else:
        os.environ[HOLDER_ENV] = previous
