"""cyclejepa."""

from cyclejepa.version import __version__

__all__ = ["__version__", "load_encoder", "load_pretrained"]


def __getattr__(name: str):
    """`load_encoder` and `load_pretrained`, imported on first use (``import cyclejepa`` stays
    free of torch)."""
    if name == "load_encoder":
        from cyclejepa.embed import load_encoder

        return load_encoder
    if name == "load_pretrained":
        from cyclejepa.export import load_pretrained

        return load_pretrained
    raise AttributeError(f"module 'cyclejepa' has no attribute {name!r}")
