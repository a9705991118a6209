"""Phase of WFDB records on disk: the object `cyclejepa phase RECORD` prints."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from cyclejepa.data.samples import read_record
from cyclejepa.phase.ecg.provider import EcgRPeakProvider
from cyclejepa.phase.provider import PhaseProvider, channel_indices
from cyclejepa.phase.track import PhaseTrack, Track, assessed_qc
from cyclejepa.registry import PHASE_PROVIDERS


DEFAULT_PROVIDER = "ecg-rpeak"
"""The provider `phase_record` picks for a record with a channel of its kind (the acceptance
contract's ``cyclejepa phase RECORD`` on an ECG)."""


def channel_readers(channel_names: Sequence[str]) -> dict[str, list[str]]:
    """Registered providers that read channels of the record by name (`PhaseProvider.reads_channel`),
    each with the channels it reads, in registry order."""
    readers = {}
    for name in PHASE_PROVIDERS.names():
        provider = PHASE_PROVIDERS.get(name)
        if isinstance(provider, type) and issubclass(provider, PhaseProvider):
            channels = [channel for channel in channel_names if provider.reads_channel(channel)]
            if channels:
                readers[name] = channels
    return readers


def choose_provider(channel_names: Sequence[str], record: str = "the record") -> str:
    """The provider for a record with these channels: `DEFAULT_PROVIDER` when it reads one of
    them, else the only provider that does.

    Raises
    ------
    KeyError
        When no provider or several read the channels, naming the channels, the choices and
        ``--provider``.
    """
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
    """Events, QC and phase yield of one WFDB record, as a JSON-ready dict.

    Parameters
    ----------
    path
        Record path without extension (e.g. ``"data/100"``).
    lead
        Channel name(s) handed to the provider as ``lead=`` (``"all"`` for every
        channel); None keeps the provider's default (``"ecg-rpeak"``: ``"II"`` when present,
        else the first ECG lead).
    provider
        A registered provider name, a provider instance (then ``lead`` must be None), or None:
        chosen from the channel names (`choose_provider`; of the ``lead`` channels when named).
    options
        Further constructor options of a named provider (e.g. a config's ``phase.options``;
        ``composite``: ``{"coordinates": {...}}``).

    Returns
    -------
    dict
        ``{"record", "fs", "r_peaks", "rates", "qc", "phase_yield"}`` from ``ecg-rpeak``, with
        ``r_peaks`` the R-peak sample indices at the native rate, ``rates`` = ``{"time_s",
        "per_min"}`` one per cycle (`PhaseTrack.rates`) and ``qc`` = ``{"ok", "reasons",
        **metrics}``; plain Python types. Another provider gives ``{"record", "fs", "provider",
        "event", "events", "rates", "qc", "phase_yield"}``: its name, what one event is
        (``"pulse"``, ``"breath"``) and the event sample indices, and where the provider assesses
        its cycles (``pulse``, ``breath``) ``cycle_quality`` (one per cycle, null where not
        assessed) and ``cycle_ok``. A provider of several coordinates (``composite``) gives the
        joint ``qc`` and ``phase_yield`` and, instead of events, ``coordinates`` = ``{name:
        {"events", "rates", "qc", "phase_yield", ...}}``.
    """
    return describe_track(track_record(path, lead, provider, options))


class RecordPhase(NamedTuple):
    """One record's phase (`track_record`): its path, samples, provider (registered name and
    instance) and track."""

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
    """The record read from ``path`` (`cyclejepa.data.samples.read_record`) and its phase track
    (`RecordPhase`; `phase_record` for the arguments)."""
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
        name = next(
            (key for key in PHASE_PROVIDERS.names() if PHASE_PROVIDERS.get(key) is type(provider)), type(provider).__name__
        )
        instance = provider
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
    """``{"rates": {"time_s", "per_min"}}`` of ``track`` (`PhaseTrack.rates`), with
    ``cycle_quality`` (NaN as None) and ``cycle_ok`` where the provider assessed its cycles."""
    rates = track.rates()
    fields: dict = {"rates": {"time_s": rates.time_s.tolist(), "per_min": rates.per_min.tolist()}}
    if track.cycle_quality is not None and track.cycle_ok is not None:
        fields["cycle_quality"] = [None if q != q else float(q) for q in track.cycle_quality.tolist()]
        fields["cycle_ok"] = track.cycle_ok.tolist()
    return fields
