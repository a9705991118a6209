"""What a package's ``config.json`` may hold, checked before anything is read or built from it.

A package is input like any other: a config.json whose checksums were recomputed can still ask
for any file, any size or any normalisation. `check_files` confines ``files`` to plain names
inside the package and requires the weights' checksum; `check_config` bounds every size before
a model is built and checks the normalisation and channel names. Each refusal is a
`PackageError` naming the field (``config.json model.encoder.width: ...``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any
from cyclejepa.data.channels import channel_key

__all__ = ["MAX_ABS_MEAN", "MAX_SIZE", "MIN_STD", "PackageError", "check_channels_known", "check_config", "check_files"]

MAX_SIZE = {
    "leads": 1024,
    "patch": 4096,
    "width": 16384,
    "hidden": 65536,
    "kernel": 64,
    "dilation": 4096,
    "dilations": 64,
    "in_dim": 16384,
    "out_dim": 16384,
    "window": 100_000_000,
    "decimation": 1000,
    "token_patch": 4096,
}
"""Largest value of each size a package may declare (the paper model: 12 channels, width 256, hidden 512)."""
MIN_STD = 1e-9
"""Smallest normalisation std, in the data's units: below it a z-score overflows float32 on ordinary input."""
MAX_ABS_MEAN = 1e12
"""Largest |mean| of the normalisation, in the data's units."""
_SHA256 = re.compile(r"[0-9a-f]{64}")


class PackageError(ValueError):
    """A package that is damaged, changed after export, malformed, or not a cyclejepa encoder package."""


def _fail(field: str, problem: str) -> PackageError:
    return PackageError(f"config.json {field}: {problem}")


def _section(config: dict, field: str) -> dict:
    value = config.get(field)
    if not isinstance(value, dict):
        raise _fail(field, f"must be an object, got {type(value).__name__}")
    return value


def _integer(section: dict, key: str, field: str, low: int = 1, high: int | None = None) -> int:
    """``section[key]``, an integer in [low, high] (high: `MAX_SIZE` of ``key``)."""
    return _bounded(section.get(key), f"{field}.{key}", low, MAX_SIZE[key] if high is None else high)


def _bounded(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= high):
        raise _fail(field, f"must be an integer in [{low}, {high}], got {str(value)[:80]}")
    return value


def _number(value: Any, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and low <= value <= high):
        raise _fail(field, f"must be a finite number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _string(section: dict, key: str, field: str) -> str:
    value = section.get(key)
    if not isinstance(value, str) or not value:
        raise _fail(f"{field}.{key}", f"must be a non-empty string, got {value!r}")
    return value


def _strings(section: dict, key: str, field: str, count: int) -> list[str]:
    value = section.get(key)
    if not isinstance(value, list) or len(value) != count or not all(isinstance(v, str) and v for v in value):
        raise _fail(f"{field}.{key}", f"must be a list of {count} non-empty strings, got {str(value)[:200]}")
    return value


def check_files(path: Path, config: dict, required: tuple[str, ...]) -> dict[str, str]:
    """``files``: plain names of regular files inside ``path`` (no folder, no ``..``, no link),
    each with a sha256; every ``required`` name listed."""
    files = _section(config, "files")
    for name, digest in files.items():
        if name in ("", ".", "..") or "/" in name or "\\" in name or name == "config.json" or name.startswith("~"):
            raise _fail(f"files[{name!r}]", "must name a file of the package folder (no path, no '..', not config.json)")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise _fail(f"files[{name!r}]", f"must be a sha256 in hex, got {str(digest)[:80]!r}")
        if (path / name).is_symlink():
            raise _fail(f"files[{name!r}]", f"{path / name} is a symbolic link; a package holds its own files")
    missing = [name for name in required if name not in files]
    if missing:
        raise _fail("files", f"has no checksum of {missing}: the weights must be verifiable")
    return files


def check_config(config: dict) -> None:
    """Sizes, normalisation, channels and names of ``config`` (see the module's docstring)."""
    model = _section(config, "model")
    encoder, projector = _section(model, "encoder"), _section(model, "projector")
    _string(encoder, "name", "model.encoder")
    channel_count = _integer(encoder, "leads", "model.encoder")
    patch = _integer(encoder, "patch", "model.encoder")
    width = _integer(encoder, "width", "model.encoder")
    for key in ("hidden", "kernel"):
        _integer(encoder, key, "model.encoder")
    dilations = encoder.get("dilations")
    if not isinstance(dilations, list) or not 1 <= len(dilations) <= MAX_SIZE["dilations"]:
        raise _fail(
            "model.encoder.dilations", f"must be a list of 1 to {MAX_SIZE['dilations']} integers, got {str(dilations)[:200]}"
        )
    for i, dilation in enumerate(dilations):
        _bounded(dilation, f"model.encoder.dilations[{i}]", 1, MAX_SIZE["dilation"])
    if _integer(projector, "in_dim", "model.projector") != width:
        raise _fail("model.projector.in_dim", f"{projector['in_dim']} is not the encoder width {width}")
    _integer(projector, "hidden", "model.projector", high=MAX_SIZE["hidden"])
    _integer(projector, "out_dim", "model.projector")
    symmetry = _section(config, "symmetry")
    for key in ("name", "spectrum", "basis"):
        _string(symmetry, key, "symmetry")
    if not isinstance(symmetry.get("basis_options", {}), dict):
        raise _fail("symmetry.basis_options", "must be an object")
    _check_preprocessing(_section(config, "preprocessing"), channel_count, patch)
    run = _section(config, "run")
    _string(run, "run", "run")
    _integer(run, "step", "run", low=0, high=10**12)


def _check_preprocessing(prep: dict, channel_count: int, patch: int) -> None:
    field = "preprocessing"
    channels = _strings(prep, "channels", field, channel_count)
    keys = [channel_key(c) for c in channels]
    repeated = sorted({c for c in channels if keys.count(channel_key(c)) > 1})
    if repeated:
        raise _fail(
            f"{field}.channels",
            f"names {repeated} more than once (channels match by channel_key: case, "
            "surrounding space and trailing punctuation aside)",
        )
    _strings(prep, "units", field, channel_count)
    from cyclejepa.data.preprocess import MAX_FS, MIN_FS

    rate = "cache_fs" if "cache_fs" in prep else "fs"  # fs: a package of format 2 or 3
    _number(prep.get(rate), f"{field}.{rate}", MIN_FS, MAX_FS)
    window = _integer(prep, "window", field)
    decimation = _integer(prep, "decimation", field)
    if _integer(prep, "token_patch", field) != patch:
        raise _fail(f"{field}.token_patch", f"{prep['token_patch']} is not the encoder's patch {patch}")
    if window % (decimation * patch):
        raise _fail(f"{field}.window", f"{window} samples are not whole tokens of {decimation} × {patch} samples")
    if not (isinstance(prep.get("window_s"), (int, float)) and window == round(prep["window_s"] * prep[rate])):
        raise _fail(f"{field}.window_s", f"{prep.get('window_s')!r} s at {prep[rate]:g} Hz is not the window of {window} samples")
    _string(prep, "phase_provider", field)
    if not isinstance(prep.get("phase_options"), dict):
        raise _fail(f"{field}.phase_options", "must be an object")
    dataset = _section(prep, "dataset")
    _string(dataset, "name", f"{field}.dataset")
    if not isinstance(dataset.get("options"), dict):
        raise _fail(f"{field}.dataset.options", "must be an object")
    _check_normalisation(_section(prep, "normalisation"), channels)


def _check_normalisation(norm: dict, channels: list[str]) -> None:
    field = "preprocessing.normalisation"
    if norm.get("leads", channels) != channels:
        raise _fail(f"{field}.leads", f"{str(norm.get('leads'))[:200]} are not the channels {channels}")
    for key, low, high in (("mean", -MAX_ABS_MEAN, MAX_ABS_MEAN), ("std", MIN_STD, 1 / MIN_STD)):
        values = norm.get(key)
        if not isinstance(values, list) or len(values) != len(channels):
            raise _fail(f"{field}.{key}", f"must be a list of {len(channels)} numbers, got {str(values)[:200]}")
        for channel, value in zip(channels, values, strict=True):
            _number(value, f"{field}.{key} of {channel}", low, high)


def check_channels_known(prep: dict, declared: tuple[str, ...], dataset: str) -> None:
    """The package's channels among those its ``dataset`` declares (when it declares any)."""
    if not declared:
        return
    known = {channel_key(c) for c in declared}
    unknown = [c for c in prep["channels"] if channel_key(c) not in known]
    if unknown:
        raise _fail("preprocessing.channels", f"{unknown} are not channels of dataset {dataset!r} ({list(declared)})")
