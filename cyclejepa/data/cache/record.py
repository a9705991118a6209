"""One record through the cache's chain: read and conform, cut into windows, decimate, phase-tag.

`record_windows` reads a dataset's record (`Dataset.read`) and `cut_record` picks its channels,
resamples it to the cache rate (`conform`), prepares it as the dataset asks (`SignalPreparation`:
leading seconds dropped, high-pass, per-record or per-window z-score) and cuts it into windows;
`decimate_and_phase` decimates one window to the model rate and runs the phase provider on it at the cache rate.
`cyclejepa embed` runs `cut_record` and `decimate_and_phase` on the records the dataset reads from
files (`Dataset.read_path`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cyclejepa.data.datasets import Dataset, Entry, Record, RecordRejected, check_amplitudes, conform
from cyclejepa.data.preprocess import KAISER_BETA, SignalPreparation, cut_windows, highpass, standardise
from cyclejepa.signal_geometry import SignalGeometry

STAGES = ("read_verify", "decimate", "events", "phase")
"""The per-record stages of `decimate_and_phase` (after reading), as a benchmark times them."""


@dataclass
class RecordOutcome:
    """What one window contributes besides its decimated signal (which goes to the chunk's
    scratch file, row ``slot``): its record's rejection, or its events (one array per phase
    coordinate), token phases and QC; ``coordinates`` names
    the coordinates of a provider with more than one (empty otherwise); ``cycle_quality`` and
    ``cycle_ok`` give each coordinate's cycles (one fewer than its events) their quality and
    verdict (`_cycle_quality`, `_cycle_ok`)."""

    row: int
    rejection: RecordRejected | None = None
    events: tuple[np.ndarray, ...] = ()
    coordinates: tuple[str, ...] = ()
    cycle_quality: tuple[np.ndarray, ...] = ()
    cycle_ok: tuple[np.ndarray, ...] = ()
    phase_centre: np.ndarray | None = None
    phase_causal: np.ndarray | None = None
    qc_ok: bool = True
    qc_reason: str = ""
    phase_yield: float = 0.0
    window: int = 0
    slot: int = -1
    scratch: str = ""


def record_windows(
    dataset: Dataset,
    entry: Entry,
    channels: tuple[str, ...],
    cache_fs: float,
    window: int,
    preparation: SignalPreparation = SignalPreparation(),
    amplitude_limits: Sequence[float] | None = None,
) -> np.ndarray:
    """(W, C, window) float32: ``entry``'s verified record (`Dataset.read`), fast enough for the
    phase provider (`Dataset.check_native_rate`), through `cut_record`; its rejections name it as
    the dataset does (`Dataset.rejection_id`)."""
    record, name = dataset.read(entry), dataset.rejection_id(entry)
    dataset.check_native_rate(name, record.fs)
    return cut_record(
        record, channels, cache_fs, window, record_id=name, preparation=preparation, amplitude_limits=amplitude_limits
    )


def cut_record(
    record: Record,
    channels: Sequence[str],
    cache_fs: float,
    window: int,
    record_id: int | str | None = None,
    preparation: SignalPreparation = SignalPreparation(),
    amplitude_limits: Sequence[float] | None = None,
) -> np.ndarray:
    """(W, C, window) float32: ``record`` conformed to ``channels`` at ``cache_fs`` (`conform`), prepared
    (`prepare_signal`) and cut by `cut_windows`; in the record's units under the default
    preparation. Raises `RecordRejected` naming ``record_id`` (by default the record's id):
    ``extent`` when shorter than one window, ``flat`` when a z-score meets a constant channel,
    ``amplitude`` when a sample in the record's units exceeds its channel's ``amplitude_limits``
    (checked before any preparation, `check_amplitudes`)."""
    record_id = record.id if record_id is None else record_id
    x = conform(record, tuple(channels), cache_fs)
    if amplitude_limits is not None:
        check_amplitudes(record_id, x, channels, amplitude_limits)
    if not preparation.is_default:
        x = prepare_signal(x, cache_fs, channels, preparation, record_id, window)
    try:
        windows = cut_windows(x, window)
    except ValueError:
        raise RecordRejected(
            record_id,
            "extent",
            f"the record lasts {x.shape[-1] / cache_fs:.2f} s, shorter than one {window / cache_fs:g} s window"
            + (f" after dropping its first {preparation.drop_s:g} s" if preparation.drop_s else ""),
        ) from None
    if preparation.scope == "window":
        _check_spread(windows.std(axis=-1), channels, record_id, "a window of")
        windows = standardise(windows).astype(np.float32)
    return windows


def prepare_signal(
    x: np.ndarray, fs: float, channels: Sequence[str], preparation: SignalPreparation, record_id: int | str, window: int
) -> np.ndarray:
    """(C, L) ``x`` at ``fs`` with ``preparation``'s steps before windowing: the first ``drop_s``
    seconds dropped, channel c high-passed at ``highpass_hz[c]`` (`highpass`), and with scope
    ``record`` each channel z-scored (`standardise`); float32. A record left shorter than one
    ``window`` is returned as it is (`cut_record` rejects it)."""
    x = x[:, round(preparation.drop_s * fs) :]
    if x.shape[-1] < window:
        return x
    out = np.asarray(x, dtype=np.float64).copy()
    for row, cutoff in enumerate(preparation.highpass_hz):
        if cutoff is not None:
            out[row] = highpass(out[row], fs, cutoff)
    if preparation.scope == "record":
        _check_spread(out.std(axis=-1)[None], channels, record_id, "the record's")
        out = standardise(out)
    return out.astype(np.float32)


def _check_spread(stds: np.ndarray, channels: Sequence[str], record_id: int | str, where: str) -> None:
    """`RecordRejected` (``flat``) naming the channels whose (W, C) ``stds`` has a zero: a
    constant channel has no z-score."""
    flat = [channels[int(c)] for c in np.flatnonzero((stds <= 0).any(axis=0))]
    if flat:
        raise RecordRejected(record_id, "flat", f"{where} channel {flat} is constant, which cannot be z-scored")


@lru_cache(maxsize=8)
def _decimation_taps(factor: int) -> np.ndarray:
    """The FIR that `decimate` designs on every call: firwin(20 q + 1, 1/q, kaiser 5.0) for q = ``factor``."""
    from scipy.signal import firwin

    return firwin(2 * 10 * factor + 1, 1.0 / factor, window=("kaiser", KAISER_BETA))


def decimate_fast(signal: np.ndarray, factor: int) -> np.ndarray:
    """`decimate` by ``factor`` with its filter designed once per process: the same float32
    output (``factor`` 1: the signal as float32, unfiltered)."""
    from scipy.signal import resample_poly

    if factor == 1:
        return np.asarray(signal, dtype=np.float32).copy()
    y = resample_poly(
        signal.astype(np.float64),
        1,
        factor,
        axis=-1,
        window=_decimation_taps(factor),
        padtype="edge",
    )
    return y.astype(np.float32)


def decimate_and_phase(
    window: np.ndarray, provider, geometry: SignalGeometry, clock=None
) -> tuple[np.ndarray, RecordOutcome, list]:
    """Decimated signal and phase outcome of one verified window (stage times when ``clock``).

    ``window`` is a (C, L) float32 window in physical units at ``geometry.cache_fs``, rows named
    by ``geometry.channels`` (e.g. a (12, 5000) PTB-XL window at 500 Hz); ``provider`` a
    `PhaseProvider`. Returns the (C, L / decimation) float32 decimated signal (not normalised),
    the `RecordOutcome` (events, token phases of ``token_patch`` samples at the model rate in both
    conventions, QC) and the stage times (empty without ``clock``). Stages after reading:
    decimation, events (``provider.phase``: detection and QC), phase (token phases).
    """
    times = []
    start = clock() if clock else 0.0
    for step in range(3):
        if step == 0:
            decimated = decimate_fast(window, geometry.decimation)
        elif step == 1:
            track = provider.phase(window.astype(np.float64), geometry.cache_fs, geometry.channels)
        else:
            outcome = _phase_outcome(0, track, geometry.model_fs, geometry.token_patch)
        if clock:
            now = clock()
            times.append(now - start)
            start = now
    return decimated, outcome, times


def _phase_outcome(row: int, track, model_fs: float, token_patch: int) -> RecordOutcome:
    """Events per coordinate, token phases (both conventions; (T,) for one coordinate, (T, C)
    for several) and QC of a provider's `cyclejepa.phase.Track`."""

    def tokens(convention: str) -> np.ndarray:
        phases = np.asarray(track.at_tokens(patch=token_patch, fs_out=model_fs, convention=convention), dtype=np.float32)
        return phases[:, 0] if len(tracks) == 1 and phases.ndim == 2 else phases  # one coordinate: (T,)

    qc, tracks = track.qc, track.tracks
    return RecordOutcome(
        row,
        events=tuple(np.asarray(t.events, dtype=np.int64) for t in tracks),
        coordinates=tuple(track.names) if len(tracks) > 1 else (),
        cycle_quality=tuple(_cycle_quality(t) for t in tracks),
        cycle_ok=tuple(_cycle_ok(t, True if qc is None else bool(qc.ok)) for t in tracks),
        phase_centre=tokens("centre"),
        phase_causal=tokens("causal"),
        qc_ok=True if qc is None else bool(qc.ok),
        qc_reason="" if qc is None else ";".join(qc.reasons),
        phase_yield=float(track.phase_yield),
    )


def _cycle_quality(track) -> np.ndarray:
    """(max(E - 1, 0),) float64: ``track.cycle_quality``, NaN where the provider judges no cycle."""
    cycles = max(len(track.events) - 1, 0)
    if track.cycle_quality is None:
        return np.full(cycles, np.nan)
    return np.asarray(track.cycle_quality, dtype=np.float64).reshape(cycles)


def _cycle_ok(track, window_ok: bool) -> np.ndarray:
    """(max(E - 1, 0),) bool: ``track.cycle_ok``; where the provider judges no single cycle, the
    window's verdict ``window_ok`` for each of its cycles."""
    cycles = max(len(track.events) - 1, 0)
    if track.cycle_ok is None:
        return np.full(cycles, window_ok)
    return np.asarray(track.cycle_ok, dtype=bool).reshape(cycles)
