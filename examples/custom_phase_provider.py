"""A phase provider for a new cyclic signal: breath-cycle phase from a respiration channel.

    python examples/custom_phase_provider.py [RECORD]

Subclassing `PhaseProvider` takes one method, `events`, that returns one sample index per
cycle; the base class builds the phase track (phase by linear interpolation between events,
token phases) and applies the shared quality control. Registering a name makes the provider
usable from a config (``phase: {provider: resp-breath, options: {lead: RESP}}``) once this
module is imported; a plugin entry point does that (``[project.entry-points."cyclejepa.plugins"]``
``resp = "custom_phase_provider"``), and then ``cyclejepa phase RECORD --provider resp-breath
--lead RESP`` runs it too. Like every provider it names the channel it reads ``lead``.

RECORD is a WFDB record path (no extension) with a RESP channel; a RECORD that does not exist
is an error. Without RECORD the MIMIC-style sample ``v102s`` in ../shared/data/physionet-samples
is read, and synthetic breathing (said so in the output) when that sample is absent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from cyclejepa.declarations.providers import PhaseQcOptions
from cyclejepa.phase import PhaseProvider, channel_indices, fill_nonfinite
from cyclejepa.registry import PHASE_PROVIDERS

SHARED = Path(os.environ.get("CYCLEJEPA_SHARED", Path(__file__).resolve().parents[2] / "shared"))
DEFAULT_RECORD = SHARED / "data" / "physionet-samples" / "v102s"


class BreathPhaseOptions(PhaseQcOptions):
    """The options a config gives ``resp-breath`` (checked when the config loads): the channel,
    and the QC thresholds of every provider with breathing defaults."""

    lead: str = "RESP"
    interval_range_s: tuple[float, float] = (1.5, 15.0)
    max_interval_ratio: float | None = Field(None, ge=1)


@PHASE_PROVIDERS.register("resp-breath")
class BreathPhase(PhaseProvider):
    """Breath-cycle phase: one event per inspiration peak of a respiration channel.

    The channel is median-filtered (0.4 s, removes electrode spikes), band-passed to
    0.05–0.7 Hz (up to 42 breaths/min, zero phase) and its peaks at least the shortest
    plausible breath apart, with a prominence of a quarter of the 5–95 % range, are breaths.
    Breathing is irregular (sighs, pauses), so the successive-interval ratio check is off.

    Parameters
    ----------
    lead
        The respiration channel's name (case-insensitive).
    **qc
        Quality-control thresholds of `PhaseProvider`, with breathing defaults.
    """

    signal = "resp"
    event_name = "breath"
    cycle_band_hz = (0.1, 0.7)  # 6-42 breaths per minute: datasets derive their rates from it
    too_few_reason = "too_few_breaths"  # the QC reasons in the provider's own words
    interval_reason = "implausible_breath_interval"
    Options = BreathPhaseOptions

    def __init__(
        self,
        lead: str = "RESP",
        *,
        interval_range_s: tuple[float, float] = (1.5, 15.0),
        max_interval_ratio: float | None = None,
        **qc: Any,
    ):
        super().__init__(interval_range_s=interval_range_s, max_interval_ratio=max_interval_ratio, **qc)
        self.lead = lead

    def events(self, signal: np.ndarray, fs: float, channel_names: list[str]) -> np.ndarray:
        from scipy.ndimage import median_filter
        from scipy.signal import butter, find_peaks, sosfiltfilt

        row = channel_indices(channel_names, self.lead)[0]
        resp = fill_nonfinite(signal[[row]], [channel_names[row]])[0]
        resp = median_filter(resp, size=round(0.2 * fs) * 2 + 1, mode="nearest")
        sos = butter(2, [0.05, 0.7], btype="bandpass", fs=fs, output="sos")
        breathing = sosfiltfilt(sos, resp)
        spread = np.subtract(*np.percentile(breathing, [95, 5]))
        shortest = round(self.interval_range_s[0] * fs)
        return find_peaks(breathing, distance=shortest, prominence=0.25 * spread)[0]


def synthetic_breathing(fs: float = 50.0, duration_s: float = 300.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Noisy breathing with known inspiration peaks.

    Each breath lasts 3–5 s: inspiration rises over the first 40 % (half cosine), expiration
    falls over the rest; plus slow drift and white noise. Returns (signal (1, samples), peak
    times in s).
    """
    rng = np.random.default_rng(seed)
    durations = rng.uniform(3.0, 5.0, int(duration_s / 3) + 1)
    onsets = np.concatenate([[0.0], np.cumsum(durations)])
    t = np.arange(round(duration_s * fs)) / fs
    breath = np.searchsorted(onsets, t, side="right") - 1
    u = (t - onsets[breath]) / durations[breath]  # position in the breath, [0, 1)
    inspiration = 0.4
    wave = np.where(
        u < inspiration,
        -np.cos(np.pi * u / inspiration),
        np.cos(np.pi * (u - inspiration) / (1 - inspiration)),
    )
    drift = 0.5 * np.sin(2 * np.pi * t / 97.0)
    signal = wave + drift + 0.1 * rng.standard_normal(len(t))
    peaks = onsets[:-1] + inspiration * durations
    return signal[None], peaks[peaks < t[-1]]


def load(record: Path | None) -> tuple[np.ndarray, float, list[str], str]:
    """(signal, fs, channel names, description) of ``record``; None reads `DEFAULT_RECORD`, or
    synthetic breathing when it is absent. Raises FileNotFoundError for a missing ``record``."""
    if record is None and not DEFAULT_RECORD.with_suffix(".hea").is_file():
        signal, _ = synthetic_breathing()
        return signal, 50.0, ["RESP"], f"synthetic breathing ({DEFAULT_RECORD} not found)"
    record = DEFAULT_RECORD if record is None else record
    if not record.with_suffix(".hea").is_file():
        raise FileNotFoundError(f"record {record} not found: no {record}.hea (give a WFDB record path without extension)")
    from cyclejepa.data.wfdb_format import read_record

    data = read_record(record)  # the library's one sample reader
    return data.signal, float(data.fs), list(data.names), str(record)


def main() -> None:
    try:
        signal, fs, channel_names, source = load(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    except FileNotFoundError as error:
        sys.exit(f"error: {error}")
    track = PHASE_PROVIDERS.build("resp-breath").phase(signal, fs, channel_names)
    qc = track.qc
    print(source)
    print(f"  breaths:        {len(track.events)}")
    print(f"  breathing rate: {qc.metrics['rate_per_min']:.1f} breaths/min (median interval)")
    print(f"  phase yield:    {track.phase_yield:.3f}")
    print(f"  QC:             {'ok' if qc.ok else ', '.join(qc.reasons)}")
    tokens = track.at_tokens(patch=8, fs_out=fs / 10)  # e.g. tokens of 8 samples at fs / 10
    print(f"  token phases:   {np.isfinite(tokens).sum()} of {len(tokens)} defined")


if __name__ == "__main__":
    main()
