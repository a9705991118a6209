"""Atomic JSON files holding numpy values, the sha256 of a value's canonical JSON, and JSON values
flattened to ``{key path: leaf}`` and compared key by key."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np


def write_json(path: str | Path, value: Any) -> Path:
    """Write ``value`` (numpy values as lists/scalars) as JSON through a temporary file that then
    replaces ``path``: concurrent writers never mix bytes; a failed write's `OSError` names ``path``."""
    path = Path(path)
    text = json.dumps(value, indent=1, default=_plain)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(temporary, "x") as stream:
                stream.write(text)
            os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Re-raise an `OSError` of the block that names no file (e.g. "No space left on device") as one
    naming ``path``, of the same errno."""
    try:
        yield
    except OSError as error:
        if error.filename is not None:
            raise
        if error.errno is None:
            raise OSError(f"cannot write {path}: {error}") from None
        raise OSError(error.errno, f"cannot write {path}: {error.strerror or error}") from None


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def json_sha256(value: Any, *, compact: bool = False, default: Callable[[Any], Any] | None = None) -> str:
    """sha256( utf-8( json.dumps(value, sort_keys=True, separators, default) ) ) in hex, the one
    hash of every identity and checksum; ``separators`` ``(",", ":")`` when ``compact``, else json's."""
    separators = (",", ":") if compact else None
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=separators, default=default).encode()).hexdigest()


def short_hash(value: Any) -> str:
    """The first 16 hex digits of `json_sha256` of ``value``: the hash of a config or an identity."""
    return json_sha256(value)[:16]


def flat_json(path: str, value: Any) -> dict[str, Any]:
    """``{leaf key path: value}`` of the JSON ``value`` at ``path``: dict items as ``path.key``, a
    list of dicts' as ``path[i]``; anything else is one leaf."""
    if isinstance(value, dict) and value:
        return {key: leaf for name, item in value.items() for key, leaf in flat_json(f"{path}.{name}", item).items()}
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return {key: leaf for index, item in enumerate(value) for key, leaf in flat_json(f"{path}[{index}]", item).items()}
    return {path: value}


def identity_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old → new`` for every key path whose value differs between two flat identities."""
    absent = "(absent)"
    return [
        f"{key}: {json.dumps(old.get(key, absent))} → {json.dumps(new.get(key, absent))}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key, absent) != new.get(key, absent)
    ]


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
