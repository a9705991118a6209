"""One figure per record of `cyclejepa phase --plot`: the signal with its events, each cycle's
quality (bad cycles shaded) and the rate over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cyclejepa.phase.provider import channel_row
from cyclejepa.phase.records import RecordPhase
from cyclejepa.phase.track import PhaseTrack

__all__ = ["plot_record", "plot_track"]


def plot_record(phased: RecordPhase, folder: str | Path) -> list[Path]:
    """`plot_track` of a `track_record` into ``folder``: ``NAME.png``, or ``NAME.COORDINATE.png``
    for each of several coordinates."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = Path(phased.path).name
    track = phased.track
    providers = list(getattr(phased.provider, "providers", {}).values()) if track.names else [phased.provider]
    written = []
    for coordinate, provider, part in zip(track.names or ("",), providers, track.tracks, strict=True):
        row = plotted_row(provider, phased.record.names)
        title = f"{stem} ({coordinate})" if coordinate else stem
        path = folder / (f"{stem}.{coordinate}.png" if coordinate else f"{stem}.png")
        channel = phased.record.names[row]
        written.append(
            plot_track(
                phased.record.signal[row], part, path, title, channel=channel, event_name=getattr(provider, "event_name", "event")
            )
        )
    return written


def plotted_row(provider, channel_names) -> int:
    """Row of the channel a provider reads: its ``lead`` (the first of several), else the first
    channel it reads by name (`channel_row`), else row 0."""
    lead = getattr(provider, "lead", None)
    lead = lead[0] if isinstance(lead, list | tuple) and lead else lead
    try:
        return channel_row(provider, lead if isinstance(lead, str) and lead != "all" else None, channel_names)
    except (KeyError, AttributeError):
        return 0


def plot_track(
    wave: np.ndarray, track: PhaseTrack, path: str | Path, title: str, *, channel: str = "", event_name: str = "event"
) -> Path:
    """Write a PNG of ``wave`` (at ``track.fs``) to ``path``: the wave with its events, each
    cycle's quality and rate per minute, bad cycles shaded (pyplot-free: the backend is left alone)."""
    from matplotlib.figure import Figure

    time = np.arange(len(wave)) / track.fs
    rates = track.rates()
    figure = Figure(figsize=(10, 6), layout="constrained")
    signal_axis, quality_axis, rate_axis = figure.subplots(3, 1, sharex=True)
    signal_axis.plot(time, wave, color="0.25", lw=0.6)
    signal_axis.plot(time[track.events], wave[track.events], "o", color="tab:red", ms=2.5, label=f"{event_name}s")
    signal_axis.set_ylabel(channel or "signal")
    signal_axis.legend(loc="upper right", fontsize="small")
    ends = track.events[1:] / track.fs
    if track.cycle_quality is not None:
        quality_axis.step(rates.time_s, track.cycle_quality, where="post", color="tab:blue", lw=0.8)
    quality_axis.set_ylim(-0.05, 1.05)
    quality_axis.set_ylabel("cycle quality")
    rate_axis.plot(rates.time_s, rates.per_min, ".", color="tab:green", ms=2.5)
    rate_axis.set_ylabel(f"{event_name}s / min")
    rate_axis.set_xlabel("time (s)")
    if track.cycle_ok is not None:
        for axis in (signal_axis, quality_axis, rate_axis):
            for start, end in zip(rates.time_s[~track.cycle_ok], ends[~track.cycle_ok], strict=True):
                axis.axvspan(start, end, color="tab:orange", alpha=0.3, lw=0)
    verdict = track.qc.to_dict() if track.qc is not None else {}
    good = f", {np.mean(track.cycle_ok):.0%} of cycles good" if track.cycle_ok is not None and len(track.cycle_ok) else ""
    status = "QC ok" if verdict.get("ok") else f"QC fails: {', '.join(verdict.get('reasons', []))}" if verdict else ""
    figure.suptitle(f"{title}: {len(track.events)} {event_name}s{good}; {status}", fontsize="medium")
    path = Path(path)
    figure.savefig(path, dpi=90)
    return path
