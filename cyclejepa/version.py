"""The library's version (its own module, so that any module may read it without importing the package)."""

__version__ = "0.1.0"
