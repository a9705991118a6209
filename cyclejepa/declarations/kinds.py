"""What each kind of component declares of itself, torch-free: the facts a config needs when it
loads. A built-in's implementation inherits its declaration; a plugin's class is its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cyclejepa.declarations.options import Declaration
from cyclejepa.signal_geometry import SignalGeometry

__all__ = ["MODEL_RATES", "DatasetDeclaration", "FoldProtocol", "ProviderDeclaration", "band_rates"]


@dataclass(frozen=True)
class FoldProtocol:
    """A dataset's folds, 1..``count`` (ValueError for one outside): the default training and
    evaluation folds, the ``sealed`` ones (read only after an audited unseal), and the
    ``eligible`` development fold where a probe counts a class's positives.
    """

    train: tuple[int, ...] = tuple(range(1, 10))
    evaluation: tuple[int, ...] = (10,)
    sealed: tuple[int, ...] = (10,)
    eligible: int = 9
    count: int = 10

    def __post_init__(self) -> None:
        named = {"train": self.train, "evaluation": self.evaluation, "sealed": self.sealed, "eligible": (self.eligible,)}
        outside = {key: [f for f in folds if not 1 <= f <= self.count] for key, folds in named.items()}
        if self.count < 1 or any(outside.values()):
            raise ValueError(f"FoldProtocol: folds { ({k: v for k, v in outside.items() if v}) } outside 1..{self.count} (count)")

    def to_dict(self) -> dict[str, Any]:
        """The protocol as a cache manifest records it (``count`` only when not ten: same bytes as before)."""
        extra = {"count": self.count} if self.count != FoldProtocol.count else {}
        return {
            "train": list(self.train),
            "evaluation": list(self.evaluation),
            "sealed": list(self.sealed),
            "eligible": self.eligible,
            **extra,
        }

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> FoldProtocol:
        """The protocol `to_dict` wrote."""
        return cls(
            tuple(value["train"]),
            tuple(value["evaluation"]),
            tuple(value["sealed"]),
            value["eligible"],
            value.get("count", cls.count),
        )

    @property
    def all_folds(self) -> range:
        """Every fold: 1..``count``."""
        return range(1, self.count + 1)


class DatasetDeclaration(Declaration):
    """The facts a dataset declares as class attributes (a config may override the rates and the
    window) and its options model (``Options``); `cyclejepa.data.datasets.Dataset` documents each."""

    channels: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    """Each channel's unit; empty means mV throughout."""
    fs: float | None = None
    cache_fs: float | None = None
    decimation: int = 1
    token_patch: int = 8
    window_s: float = 10.0
    folds: FoldProtocol = FoldProtocol()
    phase_provider: str | None = None

    @classmethod
    def geometry(
        cls,
        channels: Sequence[str],
        cache_fs: float | None = None,
        decimation: int | None = None,
        token_patch: int | None = None,
        window_s: float | None = None,
        cycle_band_hz: tuple[float, float] | None = None,
    ) -> SignalGeometry:
        """The `SignalGeometry` of ``channels``: each rate or shape given, else the dataset's default.

        A dataset with no rate of its own (no ``cache_fs``, no fixed ``fs``) takes every value
        left out from the phase provider's ``cycle_band_hz`` (`band_rates`). Raises ValueError
        when no cache rate is known ("set data.cache_fs") or the window is not a whole number of
        tokens (`check_window`).
        """
        own = cls.cache_fs or cls.fs
        band = band_rates(*cycle_band_hz) if not own and cycle_band_hz else {}
        rate = cache_fs or own or band.get("cache_fs")
        if not rate:
            raise ValueError(
                f"dataset {cls.__name__.removesuffix('Declaration')} has no fixed sampling rate and the phase provider declares no cycle "
                f"band to derive one from; set data.cache_fs (the cache rate in Hz)"
            )
        return SignalGeometry(
            tuple(channels),
            rate,
            decimation or band.get("decimation", cls.decimation),
            token_patch or band.get("token_patch", cls.token_patch),
            window_s or band.get("window_s", cls.window_s),
        )


class ProviderDeclaration(Declaration):
    """The facts a phase provider declares (`cyclejepa.phase.provider.PhaseProvider` documents
    each): its ``signal``, ``event_name``, ``cycle_band_hz`` (Hz; `band_rates`) and the channels it
    reads, in words and as a pattern of their names."""

    signal: str = "any"
    event_name: str = "event"
    cycle_band_hz: tuple[float, float] | None = None
    channel_kinds: tuple[str, ...] = ()
    channel_pattern: str | None = None


MODEL_RATES = (1.0, 2.0, 5.0, 10.0, 20.0, 25.0, 50.0, 100.0, 200.0, 250.0, 500.0, 1000.0)
"""Model rates (Hz) `band_rates` chooses from."""


def band_rates(low_hz: float, high_hz: float) -> dict[str, Any]:
    """Cache and token rates for a cycle between ``low_hz`` and ``high_hz`` (a provider's
    ``cycle_band_hz``).

    - model rate: the first of `MODEL_RATES` at least 6 · high_hz, so that the third harmonic
      of the fastest cycle lies below the model's Nyquist frequency;
    - decimation 5, cache rate 5 x the model rate (events timed to 1 / (30 · high_hz) or better);
    - token: floor(model rate / (3 · high_hz)) samples (at least 1), three or more per fastest cycle;
    - window: the fewest whole tokens lasting max(10, 5 / low_hz) s (five of the slowest cycles,
      for the phase QC's four events).

    A heartbeat (0.5, 3.5) Hz gives 125 Hz, 25 Hz, tokens of 2 samples (80 ms), 10 s windows;
    breathing (0.1, 0.7) Hz gives 25 Hz, 5 Hz, tokens of 2 samples (0.4 s), 50 s windows.

    >>> band_rates(0.5, 3.5)
    {'cache_fs': 125.0, 'decimation': 5, 'token_patch': 2, 'window_s': 10.0}
    """
    if not (0 < low_hz < high_hz and math.isfinite(high_hz)):
        raise ValueError(f"a cycle band needs 0 < low < high Hz, got ({low_hz}, {high_hz})")
    model_fs = next((rate for rate in MODEL_RATES if rate >= 6 * high_hz), None)
    if model_fs is None:
        raise ValueError(f"a cycle of up to {high_hz:g} Hz needs a model rate above {MODEL_RATES[-1]:g} Hz; set data.cache_fs")
    patch = max(1, int(model_fs // (3 * high_hz)))
    tokens = math.ceil(max(10.0, 5.0 / low_hz) * model_fs / patch - 1e-9)
    return {"cache_fs": 5 * model_fs, "decimation": 5, "token_patch": patch, "window_s": tokens * patch / model_fs}
