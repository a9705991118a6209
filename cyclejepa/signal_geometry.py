"""The signal geometry: which channels a model reads, at which rates, in which windows and tokens.

One frozen value (`SignalGeometry`) built once from a dataset's declaration and a config's data
keys (`cyclejepa.declarations.kinds.DatasetDeclaration.geometry`), recorded in the cache
manifest, carried by ``embed`` and written into an exported package's ``config.json``
(`SignalGeometry.to_dict`; ``reference.py`` reads it back with the standard library alone).
It imports nothing of the library, so every module may use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SignalGeometry", "check_window"]


def check_window(cache_fs: float, decimation: int, token_patch: int, window_s: float) -> int:
    """Tokens per window, T = window_s · cache_fs / (decimation · token_patch); ValueError unless
    whole and at least 1."""
    samples = window_s * cache_fs
    per_token = decimation * token_patch
    if not (cache_fs > 0 and decimation >= 1 and token_patch >= 1 and window_s > 0):
        raise ValueError(f"rates must be positive (fs {cache_fs:g} Hz, decimation {decimation}, token_patch {token_patch})")
    if round(samples) < per_token:
        raise ValueError(
            f"window_s {window_s:g} s at fs {cache_fs:g} Hz is {samples:g} samples, less than one token of {per_token} "
            f"samples (decimation {decimation} x token_patch {token_patch})"
        )
    if abs(samples - round(samples)) > 1e-6 or round(samples) % per_token:
        raise ValueError(
            f"window_s {window_s:g} s at fs {cache_fs:g} Hz is {samples:g} samples, not a whole number of "
            f"tokens of {per_token} samples (decimation {decimation} x token_patch {token_patch})"
        )
    return round(samples) // per_token


@dataclass(frozen=True)
class SignalGeometry:
    """Channels, rates, window and tokens of the signals a model reads.

    A record is resampled to ``cache_fs`` (Hz), phased there, cut into windows of ``window_s``
    seconds, and each window decimated by ``decimation`` to the model rate; the model reads
    tokens of ``token_patch`` samples. Raises ValueError unless the window is a whole number of
    tokens (`check_window`).
    """

    channels: tuple[str, ...]
    cache_fs: float
    decimation: int
    token_patch: int
    window_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "channels", tuple(map(str, self.channels)))
        object.__setattr__(self, "cache_fs", float(self.cache_fs))
        object.__setattr__(self, "decimation", int(self.decimation))
        object.__setattr__(self, "token_patch", int(self.token_patch))
        object.__setattr__(self, "window_s", float(self.window_s))
        check_window(self.cache_fs, self.decimation, self.token_patch, self.window_s)

    @property
    def model_fs(self) -> float:
        """The rate the model reads (Hz): model_fs = cache_fs / decimation."""
        return self.cache_fs / self.decimation

    @property
    def window(self) -> int:
        """Samples of one window at the cache rate: round(window_s · cache_fs)."""
        return round(self.window_s * self.cache_fs)

    @property
    def window_samples(self) -> int:
        """Samples of one window at the model rate: window / decimation."""
        return self.window // self.decimation

    @property
    def n_tokens(self) -> int:
        """Tokens per window: T = window_s · cache_fs / (decimation · token_patch)."""
        return self.window_samples // self.token_patch

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the five fields, then the derived ``model_fs``, ``window`` and ``n_tokens``
        (for readers without this class)."""
        return {
            "channels": list(self.channels),
            "cache_fs": self.cache_fs,
            "decimation": self.decimation,
            "token_patch": self.token_patch,
            "window_s": self.window_s,
            "model_fs": self.model_fs,
            "window": self.window,
            "n_tokens": self.n_tokens,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SignalGeometry:
        """The `to_dict` form back; a package written before this form names the cache rate ``fs``."""
        cache_fs = data["cache_fs"] if "cache_fs" in data else data["fs"]
        return cls(tuple(data["channels"]), cache_fs, data["decimation"], data["token_patch"], data["window_s"])
