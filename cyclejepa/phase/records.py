"""Phase of WFDB records on disk: the object `cyclejepa phase RECORD` prints."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from cyclejepa.data.samples import read_record
from cyclejepa.phase.ecg.provider import EcgRPeakProvider
from cyclejepa.phase.provider import PhaseProvider, channel_indices, provider_classes, registered_name
from cyclejepa.phase.track import PhaseTrack, Track, assessed_qc
from cyclejepa.registry import PHASE_PROVIDERS


DEFAULT_PROVIDER = "ecg-rpeak"
"""The provider `phase_record` picks for a record with a channel of its kind."""


def channel_readers(channel_names: Sequence[str]) -> dict[str, list[str]]:
    """``{provider name: channels it reads}`` (`PhaseProvider.reads_channel`), in registry order."""
    readers = {}
    for name, provider in provider_classes():
        channels = [channel for channel in channel_names if provider.reads_channel(channel)]
        if channels:
            readers[name] = channels
    return readers


def choose_provider(channel_names: Sequence[str], record: str = "the record") -> str:
    """`DEFAULT_PROVIDER` when it reads one of the channels, else the only provider that does;
    KeyError naming the channels and choices when none or several do."""
    readers = channel_readers(channel_names)
    if DEFAULT_PROVIDER in readers or len(readers) == 1:
        return DEFAULT_PROVIDER if DEFAULT_PROVIDER in readers else next(iter(readers))
    if not readers:
        raise KeyError(
            f"{record}: no registered phase provider reads its channels {list(channel_names)} by name; "
            f"name one with --provider ({', '.join(PHASE_PROVIDERS.names())}) and its channel with --lead"
        )
    choices = "; ".join(f"{name} reads {', '.join(channels)}" for name, channels in readers.items())
    raise KeyError(f"{record}: several phase providers read its channels ({choices}); choose one with --provider")


def phase_record(
    path: str | Path,
    lead: str | Sequence[str] | None = None,
    provider: str | PhaseProvider | None = None,
    options: dict | None = None,
) -> dict:
    """Events, QC and phase yield of the WFDB record ``path`` (no extension), JSON-ready.

    ``lead``: channel name(s) passed as ``lead=`` (``"all"``: every channel); ``provider``: a
    registered name, an instance (then no ``lead`` or ``options``), or None (`choose_provider`);
    ``options``: a named provider's constructor options (a config's ``phase.options``).

    ``ecg-rpeak`` gives ``{"record", "fs", "r_peaks", "rates", "qc", "phase_yield"}`` (``rates``
    = ``{"time_s", "per_min"}`` per cycle, ``qc`` = ``{"ok", "reasons", **metrics}``); another
    provider ``"provider"``, ``"event"`` (its word) and ``"events"`` in place of ``r_peaks``, with
    ``cycle_quality`` (null: not assessed) and ``cycle_ok`` where it assesses cycles; a
    ``composite`` the joint ``qc`` and ``phase_yield`` and ``coordinates`` = ``{name: {"events",
    "rates", "qc", "phase_yield", ...}}``.
    """
    return describe_track(track_record(path, lead, provider, options))


class RecordPhase(NamedTuple):
    """One record's phase (`track_record`): path, samples, provider name and instance, track."""

    path: str
    record: Any
    name: str
    provider: PhaseProvider
    track: Track


def track_record(
    path: str | Path,
    lead: str | Sequence[str] | None = None,
    provider: str | PhaseProvider | None = None,
    options: dict | None = None,
) -> RecordPhase:
    """The record at ``path`` (`read_record`) and its track (`phase_record` for the arguments)."""
    if provider is not None and not isinstance(provider, str) and (lead is not None or options):
        raise ValueError("pass lead= and options to the provider instance, not to phase_record")
    record = read_record(path)
    if provider is None:
        named = (
            record.names if lead is None or lead == "all" else [record.names[row] for row in channel_indices(record.names, lead)]
        )
        provider = choose_provider(named, str(path))
    if isinstance(provider, str):
        name = provider
        instance: PhaseProvider = PHASE_PROVIDERS.build(provider, **(options or {}), **({} if lead is None else {"lead": lead}))
    else:
        name, instance = registered_name(provider), provider
    return RecordPhase(str(path), record, name, instance, instance.phase(record.signal, record.fs, record.names))


def describe_track(phased: RecordPhase) -> dict:
    """The JSON-ready object of `phase_record` from a `track_record`."""
    path, record, name, instance, track = phased
    fs = float(record.fs)
    result = {"record": path, "fs": int(fs) if fs.is_integer() else fs}
    source = f"phase provider {name!r}"
    verdict = {"qc": assessed_qc(track, source).to_dict(), "phase_yield": track.phase_yield}
    if track.names:  # named coordinates (composite)
        coordinates = {
            coordinate: {
                "events": t.events.tolist(),
                **cycle_fields(t),
                "qc": assessed_qc(t, f"{source} ({coordinate})").to_dict(),
                "phase_yield": t.phase_yield,
            }
            for coordinate, t in zip(track.names, track.tracks, strict=True)
        }
        return {**result, "coordinates": coordinates, **verdict}
    (single,) = track.tracks
    if isinstance(instance, EcgRPeakProvider):
        return {**result, "r_peaks": single.events.tolist(), **cycle_fields(single), **verdict}
    events = {"provider": name, "event": instance.event_name, "events": single.events.tolist()}
    return {**result, **events, **cycle_fields(single), **verdict}


def cycle_fields(track: PhaseTrack) -> dict:
    """``{"rates": {"time_s", "per_min"}}``, with ``cycle_quality`` (NaN as None) and ``cycle_ok``
    where the cycles were assessed."""
    rates = track.rates()
    fields: dict = {"rates": {"time_s": rates.time_s.tolist(), "per_min": rates.per_min.tolist()}}
    if track.cycle_quality is not None and track.cycle_ok is not None:
        fields["cycle_quality"] = [None if q != q else float(q) for q in track.cycle_quality.tolist()]
        fields["cycle_ok"] = track.cycle_ok.tolist()
    return fields
