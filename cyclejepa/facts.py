"""Dataset facts: what a config's data section and phase provider imply (channels, rates,
window, tokens, folds), from their declarations alone (no implementation imported, no disk read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from cyclejepa import registry
from cyclejepa.declarations.options import Options
from cyclejepa.signal_geometry import SignalGeometry


class DataKeys(Protocol):
    """The keys of a data section (`cyclejepa.config.DataConfig`) the facts are derived from."""

    dataset: str
    options: Options
    cache_fs: float | None
    decimation: int | None
    token_patch: int | None
    window_s: float | None


@dataclass(frozen=True)
class DataFacts:
    """What the data implies for a config: the `SignalGeometry` (the dataset's channels, the
    cache's rates and window, the dataset's defaults where ``data`` leaves them out) and the fold
    protocol; ``channels`` ... ``n_tokens`` read the geometry's."""

    geometry: SignalGeometry
    folds: Any

    def __getattr__(self, name: str) -> Any:
        if name in GEOMETRY_FIELDS:
            return getattr(self.geometry, name)
        raise AttributeError(name)


GEOMETRY_FIELDS = ("channels", "cache_fs", "decimation", "token_patch", "window_s", "model_fs", "window", "n_tokens")
"""The `SignalGeometry` quantities a `DataFacts` reads through."""


def declared_provider(dataset: str) -> str | None:
    """The ``phase_provider`` dataset ``dataset`` declares (None for none or an unknown name)."""
    try:
        return getattr(registry.DATASETS.declared(dataset), "phase_provider", None)
    except KeyError:
        return None


def cycle_band(provider: str | None) -> tuple[float, float] | None:
    """The ``cycle_band_hz`` phase provider ``provider`` declares (None for none or an unknown name)."""
    if provider is None:
        return None
    try:
        return getattr(registry.PHASE_PROVIDERS.declared(provider), "cycle_band_hz", None)
    except KeyError:
        return None


def data_facts(data: DataKeys, cycle_band_hz: tuple[float, float] | None = None) -> DataFacts | str:
    """The `DataFacts` of a data section (channels: the ``channels`` option, else the declared
    ones; rates: `DatasetDeclaration.geometry`), or one line saying which key to set."""
    declared = registry.DATASETS.declared(data.dataset)
    is_option = "channels" in type(data.options).model_fields or "channels" in (data.options.model_extra or {})
    channels = getattr(data.options, "channels", None) or getattr(declared, "channels", ())
    if not isinstance(channels, (list, tuple)) or not channels:
        return f"data.dataset: {data.dataset!r} declares no channels (a class attribute `channels` or a `channels` option)"
    units = getattr(declared, "units", ())
    if units and not is_option and len(units) != len(channels):
        return f"data.dataset: {data.dataset!r} declares {len(units)} unit(s) {list(units)} for {len(channels)} channel(s) {list(channels)}"
    try:
        geometry = declared.geometry(channels, data.cache_fs, data.decimation, data.token_patch, data.window_s, cycle_band_hz)
    except ValueError as error:
        key = "data.cache_fs" if "data.cache_fs" in str(error) else "data.window_s"
        return f"{key}: {error}"
    return DataFacts(geometry, declared.folds)
