"""cyclejepa."""

from cyclejepa.version import __version__

__all__ = ["__version__", "load_encoder"]


def __getattr__(name: str):
    """`load_encoder`, imported on first use (``import cyclejepa`` stays free of torch)."""
    if name == "load_encoder":
        from cyclejepa.embed import load_encoder

        return load_encoder
    raise AttributeError(f"module 'cyclejepa' has no attribute {name!r}")
