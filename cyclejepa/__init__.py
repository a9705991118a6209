"""cyclejepa."""

import importlib

from cyclejepa.version import __version__

__all__ = ["__version__", "from_pretrained", "load_encoder", "load_pretrained", "save_pretrained"]

_HOMES = {
    "load_encoder": "cyclejepa.pipeline.embedding",
    "save_pretrained": "cyclejepa.pipeline.exporting",
    "load_pretrained": "cyclejepa.export.package",
    "from_pretrained": "cyclejepa.export.package",
}


def __getattr__(name: str):
    """`load_encoder` (a run's encoder), `save_pretrained` (its package), `load_pretrained` /
    `from_pretrained` (a package's encoder), imported on first use (``import cyclejepa`` stays
    free of torch)."""
    if name not in _HOMES:
        raise AttributeError(f"module 'cyclejepa' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
