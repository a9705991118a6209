"""cyclejepa."""

from cyclejepa.version import __version__

__all__ = ["__version__", "from_pretrained", "load_encoder", "load_pretrained", "save_pretrained"]


def __getattr__(name: str):
    """`load_encoder`, `load_pretrained` / `from_pretrained` and `save_pretrained`, imported on
    first use (``import cyclejepa`` stays free of torch)."""
    if name == "load_encoder":
        from cyclejepa.embed import load_encoder

        return load_encoder
    if name in ("load_pretrained", "from_pretrained", "save_pretrained"):
        from cyclejepa import export

        return getattr(export, name)
    raise AttributeError(f"module 'cyclejepa' has no attribute {name!r}")
