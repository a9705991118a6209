"""Steps 4 and 6 of the preprocessing chain: decimation and per-channel z-score normalisation,
and the preparation a dataset may ask for before windowing (`SignalPreparation`).

`resample` brings a record at another rate to the corpus rate with the same filter design;
`fill_nonfinite` interpolates missing samples (a dataset's gap filling, `fill_gaps`; phase
providers' too).

Decimation is polyphase FIR resampling (up 1, down 5) with scipy's default design for that
ratio: ``firwin(101, 1/5, window=("kaiser", 5.0))``, i.e. 101 linear-phase taps, cut-off at the
new Nyquist frequency (50 Hz), Kaiser beta = 5.0. `scipy.signal.resample_poly` compensates the
group delay, so output sample n is the filtered input at time n / 100 s, and ``padtype="edge"``
extends the record at both ends by its boundary value, so a non-zero baseline makes no step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = [
    "DECIMATION",
    "KAISER_BETA",
    "SCOPES",
    "NormStatistics",
    "Normalisation",
    "SignalPreparation",
    "cut_windows",
    "decimate",
    "fill_nonfinite",
    "fit_normalisation",
    "highpass",
    "highpass_sos",
    "resample",
    "spread_ratio",
    "standardise",
]

DECIMATION = 5
"""500 Hz -> 100 Hz."""
KAISER_BETA = 5.0
"""Shape parameter of the Kaiser window of the anti-aliasing FIR filter."""


def decimate(x: np.ndarray, factor: int = DECIMATION) -> np.ndarray:
    """Polyphase decimation by ``factor`` along the last axis, float32 out.

    (..., L) -> (..., ceil(L / factor)); e.g. (12, 5000) at 500 Hz -> (12, 1000) at 100 Hz.
    """
    from scipy.signal import resample_poly

    x = np.asarray(x)
    if x.shape[-1] < 2 * factor:
        raise ValueError(f"cannot decimate {x.shape[-1]} samples by {factor}")
    y = resample_poly(x.astype(np.float64), 1, factor, axis=-1, window=("kaiser", KAISER_BETA), padtype="edge")
    return y.astype(np.float32)


MIN_FS, MAX_FS = 0.01, 1e6
"""Sampling rates (Hz) a record may declare; anything outside is refused before any work."""
MAX_RATIO_TERM = 1_000_000
"""Largest up or down factor of a polyphase resampling (its filter has about 20 · factor taps: 160 MB at most)."""


def resampling_ratio(fs: float, fs_out: float) -> Fraction:
    """fs_out / fs as the fraction `resample` uses (each rate to 1/1000 Hz); ValueError for a
    rate outside [`MIN_FS`, `MAX_FS`] or a ratio whose terms exceed `MAX_RATIO_TERM`."""
    for name, rate in (("fs", fs), ("fs_out", fs_out)):
        if not (np.isfinite(rate) and MIN_FS <= rate <= MAX_FS):
            raise ValueError(f"{name} = {rate!r} Hz is outside [{MIN_FS:g}, {MAX_FS:g}] Hz")
    ratio = Fraction(fs_out).limit_denominator(1000) / Fraction(fs).limit_denominator(1000)
    if max(ratio.numerator, ratio.denominator) > MAX_RATIO_TERM:
        raise ValueError(
            f"resampling {fs:g} Hz to {fs_out:g} Hz needs up/down factors {ratio.numerator}/{ratio.denominator} "
            f"(at most {MAX_RATIO_TERM})"
        )
    return ratio


def resample(x: np.ndarray, fs: float, fs_out: float) -> np.ndarray:
    """Polyphase resampling of ``x`` from ``fs`` to ``fs_out`` Hz along the last axis, float32 out.

    The filter design of `decimate` (Kaiser window, beta `KAISER_BETA`, edge padding) for the
    rational ratio ``fs_out / fs`` (each rate to 1/1000 Hz): (..., L) -> (..., ceil(L · fs_out /
    fs)), output sample n at time n / fs_out. Equal rates return ``x`` as float32, unfiltered.
    """
    from scipy.signal import resample_poly

    ratio = resampling_ratio(fs, fs_out)
    x = np.asarray(x)
    if ratio == 1:
        return x.astype(np.float32)
    y = resample_poly(
        x.astype(np.float64),
        ratio.numerator,
        ratio.denominator,
        axis=-1,
        window=("kaiser", KAISER_BETA),
        padtype="edge",
    )
    return y.astype(np.float32)


def cut_windows(x: np.ndarray, window: int) -> np.ndarray:
    """(..., L) -> (W, ..., window): consecutive non-overlapping windows from the first sample.

    The windowing rule of the cache and of `cyclejepa.embed`: W = L // window, a tail shorter
    than ``window`` is dropped; a record shorter than one window raises ValueError.
    """
    x = np.asarray(x)
    count = x.shape[-1] // window
    if count == 0:
        raise ValueError(f"{x.shape[-1]} samples are fewer than one window of {window}")
    return np.stack([x[..., w * window : (w + 1) * window] for w in range(count)])


@dataclass(frozen=True)
class Normalisation:
    """Per-channel z-score statistics: ``mean`` and ``std`` of shape (channels,), in the channels' units.

    ``std`` is the population standard deviation (ddof = 0) over every sample of every
    training-fold record.
    """

    mean: np.ndarray
    std: np.ndarray

    def __post_init__(self):
        if self.mean.shape != self.std.shape or self.mean.ndim != 1:
            raise ValueError(f"mean {self.mean.shape} and std {self.std.shape} must be (channels,)")
        if not np.all(np.isfinite(self.std) & (self.std > 0)):
            raise ValueError(f"normalisation std must be finite and positive, got {self.std}")

    def apply(self, x: np.ndarray) -> np.ndarray:
        """(..., channels, samples) -> z-scored float32, computed in float64."""
        x = np.asarray(x, dtype=np.float64)
        return ((x - self.mean[:, None]) / self.std[:, None]).astype(np.float32)

    def to_dict(self, channels: Sequence[str] | None = None) -> dict:
        """``mean`` and ``std`` as lists, with the channels' names under ``"leads"`` when given
        (the key norm.json and exported packages carry)."""
        out = {"mean": self.mean.tolist(), "std": self.std.tolist()}
        return out if channels is None else {"leads": list(channels), **out}

    @classmethod
    def from_dict(cls, data: dict) -> Normalisation:
        return cls(*(np.asarray(data[key], dtype=np.float64) for key in ("mean", "std")))


@dataclass(frozen=True)
class NormStatistics:
    """Sufficient statistics of a per-channel z-score over a set of windows, in float64:
    ``count`` samples per channel, their ``total`` (C,) and ``m2`` (C,), the sum of squared
    deviations from their own mean ``total / count``.

    `fit` computes them in two passes (the mean, then the squared deviations from it);
    `combine` merges the statistics of disjoint sets (Chan et al.'s parallel update)::

        mean = sum_i total_i / n,   m2 = sum_i [m2_i + n_i (total_i / n_i - mean)^2],   n = sum_i n_i

    which equals the two-pass fit over the union to float64 rounding, and is that fit bit for
    bit when one set holds every window.
    """

    count: int
    total: np.ndarray
    m2: np.ndarray

    @classmethod
    def fit(cls, blocks: Callable[[], Iterable[np.ndarray]], channels: int) -> NormStatistics:
        """The statistics of the (k, C, L) arrays ``blocks()`` yields (called once per pass)."""
        total, count = np.zeros(channels), 0
        for block in blocks():
            block = np.asarray(block, dtype=np.float64)
            total = total + block.sum(axis=(0, 2))
            count += block.shape[0] * block.shape[2]
        if count == 0:
            return cls(0, total, np.zeros(channels))
        mean, m2 = total / count, np.zeros(channels)
        for block in blocks():
            m2 = m2 + ((np.asarray(block, dtype=np.float64) - mean[:, None]) ** 2).sum(axis=(0, 2))
        return cls(count, total, m2)

    @classmethod
    def combine(cls, parts: Sequence[NormStatistics]) -> NormStatistics:
        """The statistics of the union of disjoint sets (Chan's update, see the class); a part
        with no sample counts for nothing."""
        parts = [p for p in parts if p.count > 0]
        if len(parts) <= 1:
            return parts[0] if parts else cls(0, np.zeros(0), np.zeros(0))
        count = sum(p.count for p in parts)
        total = sum((p.total for p in parts[1:]), start=parts[0].total)
        mean = total / count
        m2 = sum(
            (p.m2 + p.count * (p.total / p.count - mean) ** 2 for p in parts[1:]),
            start=parts[0].m2 + parts[0].count * (parts[0].total / parts[0].count - mean) ** 2,
        )
        return cls(count, total, m2)

    def normalisation(self, windows: int, channels: Sequence[str] | None = None) -> Normalisation:
        """mean = total / count, std = sqrt(m2 / count); ValueError naming each channel
        (``channels``, else its position) whose std is zero or not finite over the ``windows``
        training windows: a channel dead across them cannot be z-scored, the remedy is to leave it out."""
        if self.count == 0:
            raise ValueError("no training record to fit the normalisation on")
        mean, std = self.total / self.count, np.sqrt(self.m2 / self.count)
        dead = np.flatnonzero(~(np.isfinite(std) & (std > 0)))
        if dead.size:
            names = list(channels) if channels is not None else [f"channel {c + 1} of {len(std)}" for c in range(len(std))]
            found = ", ".join(f"{names[c]} (std {std[c]:g})" for c in dead)
            raise ValueError(
                f"cannot normalise {found}: constant (or not finite) over all {windows} training records; drop "
                f"{'it' if dead.size == 1 else 'them'} from the dataset's channels (data.options.channels) or fix the recordings"
            )
        return Normalisation(mean, std)

    def to_dict(self) -> dict:
        return {"count": self.count, "total": self.total.tolist(), "m2": self.m2.tolist()}

    @classmethod
    def from_dict(cls, data: dict) -> NormStatistics:
        return cls(int(data["count"]), np.asarray(data["total"], dtype=np.float64), np.asarray(data["m2"], dtype=np.float64))


def fit_normalisation(
    signals: np.ndarray, mask_train: np.ndarray, chunk: int = 512, channels: Sequence[str] | None = None
) -> Normalisation:
    """Per-channel mean and std over the records selected by ``mask_train``.

    ``signals`` is (N, channels, samples) (a memmap is fine: it is read ``chunk`` records at a
    time); ``mask_train`` is a boolean (N,) mask. Two passes in float64 (`NormStatistics.fit`):
    the mean, then the mean squared deviation from it. ValueError naming each channel
    (``channels``, else its position) whose std is zero or not finite: a channel dead across
    the training records cannot be z-scored, and the remedy is to leave it out.
    """
    mask_train = np.asarray(mask_train, dtype=bool)
    if mask_train.shape != (len(signals),):
        raise ValueError(f"mask_train has shape {mask_train.shape}, expected ({len(signals)},)")
    rows = np.flatnonzero(mask_train)
    if rows.size == 0:
        raise ValueError("no training record to fit the normalisation on")
    blocks = [rows[i : i + chunk] for i in range(0, rows.size, chunk)]
    statistics = NormStatistics.fit(lambda: (signals[b] for b in blocks), signals.shape[1])
    return statistics.normalisation(rows.size, channels)


def fill_nonfinite(signal: np.ndarray, channel_names: Sequence[str]) -> np.ndarray:
    """Copy of (channels, samples) ``signal`` with NaN/inf samples linearly interpolated.

    Raises
    ------
    ValueError
        If a channel has no finite sample at all (named in the message).
    """
    finite = np.isfinite(signal)
    if finite.all():
        return signal
    filled = signal.copy()
    samples = np.arange(signal.shape[1])
    for row in np.flatnonzero(~finite.all(axis=1)):
        if not finite[row].any():
            raise ValueError(f"channel {channel_names[int(row)]!r} has no finite sample")
        good = finite[row]
        filled[row, ~good] = np.interp(samples[~good], samples[good], signal[row, good])
    return filled


SCOPES = ("corpus", "record", "window")
"""Normalisation scopes: one z-score per channel fitted on the training folds (``corpus``, the
paper's), each record (``record``) or each window (``window``) z-scored by its own statistics
first."""
HIGHPASS_ORDER = 2
"""Order of the Butterworth high-pass; run forward and backward (`highpass`), its gain is that of order 4."""


@dataclass(frozen=True)
class SignalPreparation:
    """What a record goes through before it is cut into windows (`cyclejepa.data.cache.cut_record`).

    ``drop_s`` leading seconds are dropped (a sensor settling); each channel c with a cut-off
    ``highpass_hz[c]`` (None: none) is high-passed (`highpass`); then with ``scope`` ``record``
    each channel of the record, with ``window`` each channel of each window, is z-scored by its
    own mean and standard deviation, (x - mean) / std. The corpus-wide z-score of the cache
    follows in every scope. The default (no drop, no filter, ``corpus``) changes nothing.
    """

    highpass_hz: tuple[float | None, ...] = ()
    scope: str = "corpus"
    drop_s: float = 0.0

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"normalisation scope {self.scope!r} is not one of {', '.join(SCOPES)}")
        if not (np.isfinite(self.drop_s) and self.drop_s >= 0):
            raise ValueError(f"drop_s must be a finite number of seconds >= 0, got {self.drop_s!r}")
        if any(c is not None and not (np.isfinite(c) and c > 0) for c in self.highpass_hz):
            raise ValueError(f"high-pass cut-offs must be positive (Hz) or None, got {list(self.highpass_hz)}")
        if all(c is None for c in self.highpass_hz):
            object.__setattr__(self, "highpass_hz", ())  # no filter on any channel is one thing

    @property
    def is_default(self) -> bool:
        """True when it changes nothing (equal to `SignalPreparation()`)."""
        return self == SignalPreparation()

    def check_rate(self, fs: float) -> None:
        """ValueError naming the cut-offs at or above the Nyquist frequency of ``fs`` (Hz)."""
        high = [c for c in self.highpass_hz if c is not None and c >= fs / 2]
        if high:
            raise ValueError(f"high-pass cut-offs {high} Hz are not below the Nyquist frequency {fs / 2:g} Hz of the cache rate")

    def to_dict(self) -> dict:
        return {"highpass_hz": list(self.highpass_hz), "scope": self.scope, "drop_s": self.drop_s}

    @classmethod
    def from_dict(cls, data: dict | None) -> SignalPreparation:
        """The preparation written by `to_dict`; None (a manifest without one) is the default."""
        if data is None:
            return cls()
        return cls(tuple(data["highpass_hz"]), str(data["scope"]), float(data["drop_s"]))


def highpass(x: np.ndarray, fs: float, cutoff_hz: float) -> np.ndarray:
    """(..., L) ``x`` high-passed at ``cutoff_hz`` along the last axis, zero phase, float64 out.

    A Butterworth high-pass of order `HIGHPASS_ORDER` run forward and backward
    (``scipy.signal.sosfiltfilt``): no delay, gain |H(f)|^2 = 1 / (1 + (fc / f)^(2n)) with n =
    `HIGHPASS_ORDER` (0.94 at twice the cut-off, 0.5 at it), a constant offset removed exactly.
    The filter starts from the steady state of the first sample (``sosfilt_zi``), so an offset
    makes no transient. ValueError when the cut-off is not below the Nyquist frequency.
    """
    from scipy.signal import sosfiltfilt

    return sosfiltfilt(highpass_sos(fs, cutoff_hz), np.asarray(x, dtype=np.float64), axis=-1)


def highpass_sos(fs: float, cutoff_hz: float) -> np.ndarray:
    """Second-order sections (sections, 6) of the `highpass` filter: ``butter(HIGHPASS_ORDER,
    cutoff_hz, btype="highpass", fs=fs, output="sos")``. ValueError when the cut-off is not below
    the Nyquist frequency."""
    from scipy.signal import butter

    if not 0 < cutoff_hz < fs / 2:
        raise ValueError(f"high-pass cut-off {cutoff_hz:g} Hz is not between 0 and the Nyquist frequency {fs / 2:g} Hz")
    return butter(HIGHPASS_ORDER, cutoff_hz, btype="highpass", fs=fs, output="sos")


def standardise(x: np.ndarray) -> np.ndarray:
    """(..., L) ``x`` minus its mean over the last axis, divided by its standard deviation (ddof 0)."""
    x = np.asarray(x, dtype=np.float64)
    return (x - x.mean(axis=-1, keepdims=True)) / x.std(axis=-1, keepdims=True)


SPREAD_RATIO_MIN = 0.1
"""Below this `spread_ratio` a channel's windows differ mostly by their level (`spread_ratio`)."""


def spread_ratio(windows: np.ndarray, chunk: int = 512) -> np.ndarray:
    """Per channel of (N, C, L) ``windows``: the median over windows of the within-window standard
    deviation, divided by the standard deviation over windows of the window means.

    An affine map of a channel (the corpus z-score) leaves it unchanged. Below
    `SPREAD_RATIO_MIN` the signal inside a window is a tenth of the offsets between windows or
    less: after the corpus z-score the signal the model sees is at most 0.1 while the windows'
    levels spread over ±1, a constant offset per record or a slow drift that the normalisation
    cannot remove. Infinite when the window means do not vary.
    """
    stds, means = [], []
    for start in range(0, len(windows), chunk):
        block = np.asarray(windows[start : start + chunk], dtype=np.float64)
        stds.append(block.std(axis=-1))
        means.append(block.mean(axis=-1))
    between = np.concatenate(means).std(axis=0)
    within = np.median(np.concatenate(stds), axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(between > 0, within / np.where(between > 0, between, 1.0), np.inf)
