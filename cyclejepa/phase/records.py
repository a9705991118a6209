"""Phase of WFDB records on disk: the object `cyclejepa phase RECORD` prints."""

from __future__ import annotations

from pathlib import Path

from cyclejepa.data.wfdb_format import read_record
from cyclejepa.phase.provider import PhaseProvider
from cyclejepa.registry import PHASE_PROVIDERS


def read_wfdb(path: str | Path, reader, *args):
    """``reader(str(path), *args)`` (a wfdb reader such as ``rdann``) with a missing or
    unreadable file named in the error: FileNotFoundError or ValueError (records: `read_record`)."""
    try:
        return reader(str(path), *args)
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"WFDB record {str(path)!r} not found (give the path without extension): {error}"
        ) from error
    except Exception as error:  # wfdb raises assorted types for malformed files
        raise ValueError(f"cannot read WFDB record {str(path)!r}: {error}") from error


def phase_record(
    path: str | Path,
    lead: str | None = None,
    provider: str | PhaseProvider = "ecg-rpeak",
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
        else the first channel).
    provider
        A registered provider name, or a provider instance (then ``lead`` must be None).
    options
        Further constructor options of a named provider (e.g. a config's ``phase.options``;
        ``composite``: ``{"coordinates": {...}}``).

    Returns
    -------
    dict
        ``{"record", "fs", "r_peaks", "qc", "phase_yield"}`` with ``r_peaks`` the event sample
        indices at the native rate and ``qc`` = ``{"ok", "reasons", **metrics}``; plain
        Python types. A provider of several coordinates (``composite``) gives the joint
        ``qc`` and ``phase_yield`` and, instead of ``r_peaks``, ``coordinates`` =
        ``{name: {"events", "qc", "phase_yield"}}``.
    """
    if isinstance(provider, str):
        provider = PHASE_PROVIDERS.build(provider, **(options or {}), **({} if lead is None else {"lead": lead}))
    elif lead is not None or options:
        raise ValueError("pass lead= and options to the provider instance, not to phase_record")
    record = read_record(path)
    track = provider.phase(record.signal, record.fs, record.names)
    fs = float(record.fs)
    result = {"record": str(path), "fs": int(fs) if fs.is_integer() else fs}
    if hasattr(track, "tracks"):  # several coordinates
        coordinates = {
            name: {"events": t.events.tolist(), "qc": t.qc.to_dict(), "phase_yield": t.phase_yield}
            for name, t in zip(track.names, track.tracks)
        }
        return {**result, "coordinates": coordinates, "qc": track.qc.to_dict(), "phase_yield": track.phase_yield}
    return {**result, "r_peaks": track.events.tolist(), "qc": track.qc.to_dict(), "phase_yield": track.phase_yield}
